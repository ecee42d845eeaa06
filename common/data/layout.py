"""Where a workload's samples live: one file (or data + label pair) per sample per split.

Workloads with one file per sample share the layout — ``<dir>/{train,validation}/<name><suffix>``,
the fast npy format as ``<name>.data.npy`` beside ``<name>.label.npy`` — and differ only
in their format suffixes, so the listing rules (sorted, the first n as the reference takes
them, hidden temp files skipped, one clear line when something is missing) exist once.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sciperf.errors import SciperfError

NPY_SUFFIX, LABEL_SUFFIX = ".data.npy", ".label.npy"


@dataclass(frozen=True)
class SampleLayout:
    """A workload's formats (name → data-file suffix) and splits."""

    suffix: dict[str, str]
    splits: Sequence[str]

    def check_format(self, fmt: str) -> None:
        if fmt not in self.suffix:
            raise SciperfError(f"data.format={fmt} is not one of {', '.join(self.suffix)}")

    def split_dir(self, root: str | Path, split: str) -> Path:
        """`<root>/train` or `<root>/validation`."""
        if split not in self.splits:
            raise SciperfError(f"unknown split {split}; valid: {', '.join(self.splits)}")
        return Path(root) / split

    def list_samples(self, root: str | Path, split: str, fmt: str, n: int = 0) -> list[Path]:
        """Sorted sample files of a split, the first `n` if n > 0 (as the reference takes
        them); dot-files (a writer's temporaries) are not samples."""
        self.check_format(fmt)
        folder = self.split_dir(root, split)
        if not folder.is_dir():
            raise SciperfError(f"data directory {folder} does not exist (run `sciperf prepare`?)")
        end = self.suffix[fmt]
        files = sorted(p for p in folder.iterdir()
                       if p.name.endswith(end) and not p.name.startswith("."))
        if not files:
            raise SciperfError(f"no {fmt} samples (*{end}) in {folder}")
        if n > len(files):
            raise SciperfError(f"{folder} holds {len(files)} {fmt} samples but {n} were "
                               "requested")
        return files[:n] if n > 0 else files


def label_path(data_path: Path) -> Path:
    """The .label.npy beside a .data.npy."""
    return data_path.with_name(data_path.name[: -len(NPY_SUFFIX)] + LABEL_SUFFIX)


def sample_files(path: Path, fmt: str) -> list[Path]:
    """Every file one sample consists of (npy: data + label), e.g. for staging."""
    return [path, label_path(path)] if fmt == "npy" else [path]


def check_writable(root: Path) -> None:
    """A data directory can be created or written (its nearest existing ancestor decides)."""
    if not os.access(_existing_ancestor(root), os.W_OK):
        raise SciperfError(f"data.dir={root} is not writable")


def _existing_ancestor(path: Path) -> Path:
    """The directory that decides whether `path` can be created (its nearest existing one)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_dir(path: Path, what: str = "--out", *, aside: bool = False) -> None:
    """An output folder can be made here, checked before any work so that a bad --out is
    one line naming the path, not a traceback after minutes of work or a half-written tree.

    `aside`: the output is built in a sibling temporary folder and renamed into place, so
    the folder that must take writes is the parent, even when `path` exists. Writability is
    probed by making (and removing) a directory, because os.access says yes to root under
    /proc and in mode-0555 folders."""
    path = Path(path)
    what = what if what.endswith("=") else f"{what} "  # `--out PATH` or `output_dir=PATH`
    try:
        if path.exists() and not path.is_dir():
            raise SciperfError(f"{what}{path} is a file, not a directory")
        base = _existing_ancestor(path.absolute().parent if aside else path)
    except OSError as exc:  # e.g. a folder on the way that may not be searched
        raise SciperfError(f"{what}{path} cannot be used ({exc.strerror or exc})") from None
    if not base.is_dir():
        raise SciperfError(f"{what}{path} cannot be created: {base} is a file, not a "
                           "directory")
    try:
        probe = tempfile.mkdtemp(prefix=".sciperf-write-test.", dir=base)
    except OSError as exc:
        raise SciperfError(f"{what}{path} cannot be written (making a folder in {base} "
                           f"failed: {exc.strerror or exc})") from None
    os.rmdir(probe)


@contextlib.contextmanager
def new_parents(dest: Path) -> Iterator[None]:
    """`dest`'s missing parent folders, made for the body and removed again (innermost
    first, while empty) when it fails: a refused report or package leaves no bare folders
    behind (`--out a/b/report` left a/b)."""
    with unmade_on_failure(dest.parent):
        dest.parent.mkdir(parents=True, exist_ok=True)
        yield


@contextlib.contextmanager
def unmade_on_failure(folder: Path) -> Iterator[None]:
    """`folder` and those of its parents missing now, as far as the body makes them,
    removed again (innermost first, while empty) when the body fails. A path that cannot
    be looked at is the body's to refuse."""
    missing = []
    with contextlib.suppress(OSError):
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
    try:
        yield
    except BaseException:
        for made in missing:
            try:
                made.rmdir()
            except OSError:
                break
        raise


def aside_dir(dest: Path) -> Path:
    """An empty sibling folder to build `dest` in before renaming it into place, with the
    mode a plain mkdir would give (mkdtemp makes 0700: a report or submission tree others
    on a shared system must read would stay private)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    mask = os.umask(0)
    os.umask(mask)
    tmp.chmod(0o777 & ~mask)
    return tmp
