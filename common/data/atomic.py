"""Files written aside and renamed into place, with write failures as one line.

Every dataset writer (a sample, stats.h5, an LMDB container, an alignment file) writes a
hidden temporary beside its file and renames it when whole, so no reader sees half a
file. A disk that fills up (or a quota, a file-size limit, a read-only mount) used to end
`sciperf prepare` in a traceback from numpy, h5py or lmdb, leaving the temporary behind;
here it is one line naming the file the write was for, and the temporary goes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

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
def replacing(path: Path, errors: tuple[type[BaseException], ...] = (OSError,)
              ) -> Iterator[Path]:
    """Yield the temporary to write; rename it to `path` when the body succeeds. On
    failure the temporary is removed, and an error of `errors` (OSError; a writer may add
    its library's own, lmdb.Error) becomes one line naming `path`. The body should only
    write: a read error inside it would be called a write error."""
    tmp = temporary(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except errors as exc:
        with contextlib.suppress(OSError):  # the write's error is the one to tell
            remove(tmp)
        raise SciperfError(f"{path}: cannot be written ({why(exc)})") from None
    except BaseException:
        with contextlib.suppress(OSError):
            remove(tmp)
        raise
