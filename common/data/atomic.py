"""Files written aside and renamed into place, with write failures as one line.

Every dataset writer (a sample, stats.h5, an LMDB container, an alignment file) writes a
hidden temporary beside its file and renames it when whole, so no reader sees half a
file. A disk that fills up (or a quota, a file-size limit, a read-only mount) used to end
`sciperf prepare` in a traceback from numpy, h5py or lmdb, leaving the temporary behind;
here it is one line naming the file the write was for, and the temporary goes.

The result verbs write through the same helpers: `package` and `report` build their whole
folder aside (:func:`folder_aside`), each file in it written aside too and named, when a
write fails, at the place it would have had; `characterize` replaces its pair of files
together (:func:`replace_together`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from sciperf.data.layout import aside_dir, new_parents
from sciperf.errors import SciperfError

# what a full or limited disk says (numpy's short write carries no errno: its message)
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def temporary(path: Path) -> Path:
    """The hidden name a file is written under before it is renamed to `path`."""
    return path.with_name(f".{path.name}.tmp")


def remove(path: Path) -> None:
    """A file, link or folder, gone (nothing when absent)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def why(exc: BaseException) -> str:
    """A write error in a few words."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if getattr(exc, "errno", None) in FULL or any(
            sign in str(exc) for sign in ("requested and", *map(os.strerror, FULL))):
        text += "; is the disk full?"
    return text


@contextlib.contextmanager
def failing_as(path: Path, errors: tuple[type[BaseException], ...] = (OSError,)
               ) -> Iterator[None]:
    """An error of `errors` in the body (a write, a mkdir, a rename) as one line naming
    `path`. The body should only write: a read error inside it would be called a write
    error."""
    try:
        yield
    except errors as exc:
        raise SciperfError(f"{path}: cannot be written ({why(exc)})") from None


@contextlib.contextmanager
def replacing(path: Path, errors: tuple[type[BaseException], ...] = (OSError,), *,
              named: Path | None = None) -> Iterator[Path]:
    """Yield the temporary to write; rename it to `path` when the body succeeds. On
    failure the temporary is removed, and an error of `errors` (OSError; a writer may add
    its library's own, lmdb.Error) becomes one line naming `path` — or `named`, the place
    the file will have once the folder being built aside (:func:`folder_aside`) is renamed
    into place. The body should only write (see :func:`failing_as`)."""
    tmp = temporary(path)
    try:
        with failing_as(path if named is None else named, errors):
            yield tmp
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the write's error is the one to tell
            remove(tmp)
        raise


def write_text(path: Path, text: str, *, named: Path | None = None) -> None:
    """`text` as the file `path`, written aside (:func:`replacing`)."""
    with replacing(path, named=named) as tmp:
        tmp.write_text(text)


def save_figure(figure: Any, path: Path, *, named: Path | None = None) -> None:
    """A figure (matplotlib's: anything with `savefig(file, format=…)`) as `path`, written
    aside; its format is `path`'s suffix (the temporary's `.tmp` would not say it)."""
    with replacing(path, named=named) as tmp:
        figure.savefig(tmp, format=path.suffix.lstrip(".") or None)


def replace_together(writers: Mapping[Path, Callable[[Path], Any]]) -> None:
    """Files that belong together, each written by its function to its temporary, and
    renamed into place only once every one is whole: a failed write (one line naming its
    file) leaves every file of the set as it was, never a new one beside an old one."""
    temps = {path: temporary(path) for path in writers}
    try:
        for path, write in writers.items():
            with failing_as(path):
                write(temps[path])
        for path, tmp in temps.items():
            with failing_as(path):
                os.replace(tmp, path)
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                remove(tmp)


@contextlib.contextmanager
def folder_aside(dest: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield an empty sibling folder to build `dest` in; it takes `dest`'s place when the
    body succeeds (`replace`: an existing `dest` is renamed away first and removed after,
    so a reader finds the old folder or the new one, whole, never a mix). On any failure
    the folder goes, and so do the parents made for it: nothing half-built is left, and an
    existing `dest` is as it was. A failure of its own (making the folders, the renames)
    is one line naming `dest`; the body's writes name their files themselves (`named=`
    their place under `dest`)."""
    with contextlib.ExitStack() as made:
        with failing_as(dest):
            made.enter_context(new_parents(dest))
            tmp = aside_dir(dest)
        try:
            yield tmp
            with failing_as(dest):
                _into_place(tmp, dest, replace)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@contextlib.contextmanager
def folder_for(dest: Path) -> Iterator[Path]:
    """`dest`, made with its missing parents for the body (a failed mkdir is one line
    naming `dest`); when the body fails, the folders it made go again while empty."""
    new = not dest.exists()
    with contextlib.ExitStack() as made:
        with failing_as(dest):
            made.enter_context(new_parents(dest))
            dest.mkdir(exist_ok=True)
        try:
            yield dest
        except BaseException:
            if new:
                with contextlib.suppress(OSError):
                    dest.rmdir()
            raise


def _into_place(tmp: Path, dest: Path, replace: bool) -> None:
    """Rename the folder `tmp` to `dest`; with `replace`, an existing `dest` is moved aside
    first, put back when the rename fails, and removed once `tmp` is in its place."""
    if not (replace and dest.exists()):
        os.rename(tmp, dest)
        return
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)
