"""Tar archives unpacked into a data directory, safely: aside, then moved into place.

Members with absolute paths, ``..``, links leading out of the folder or device files are
refused (tarfile's ``data`` filter and a check of sciperf's own); a member that would replace
a different file the user has is refused unless forced; a marker beside the archive records
the unpacking, so a rerun skips it even when the archive was deleted to save the space.
"""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from sciperf.data import atomic
from sciperf.errors import SciperfError, first_line

CORRUPT = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)


class BadArchiveError(SciperfError):
    """The archive itself cannot be unpacked (corrupt, or a member that is not safe)."""


def unpacked_marker(archive: Path) -> Path:
    """The record that `archive` was unpacked, beside it (a dot-file: never a sample)."""
    return archive.with_name(f".{archive.name}.unpacked.json")


def _safe(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter (no links out of `dest`, no devices, no setuid bits),
    stricter: a member named by an absolute path or through ``..`` is refused, never
    rewritten."""
    parts = PurePosixPath(member.name).parts
    if member.name.startswith(("/", "\\")):
        raise tarfile.AbsolutePathError(member)
    if ".." in parts:
        raise tarfile.OutsideDestinationError(member, os.path.join(dest, member.name))
    return tarfile.data_filter(member, dest)


def unpack(archive: Path, root: Path, *, force: bool = False,
           named: Path | None = None) -> list[str]:
    """Unpack the tar `archive` (plain, gzip, bzip2 or xz) into `root`; return the names
    it put at the top of `root`.

    Members are unpacked into a hidden folder in `root` and moved into place once all are
    out, so a corrupt or unsafe archive (a member outside `root`, a link leading out, a
    device: BadArchiveError) leaves nothing unpacked. A member that would replace an
    existing file with different content is refused unless `force`. Errors are one line
    naming the archive (`named`: its name, when `archive` is still its ``.part``)."""
    name = named or archive
    aside = root / f".{name.name}.unpacking"
    with atomic.failing_as(root):
        atomic.remove(aside)
        aside.mkdir(parents=True)
    try:
        try:
            with tarfile.open(archive, "r:*") as tar:
                tar.errorlevel = 2
                tar.extractall(aside, filter=_safe)
        except tarfile.FilterError as exc:
            raise BadArchiveError(f"{name}: unsafe member ({first_line(exc)}); nothing "
                                  "unpacked") from None
        except OSError as exc:
            if isinstance(exc, gzip.BadGzipFile) or exc.errno is None:
                raise BadArchiveError(f"{name}: corrupt archive ({first_line(exc)}); "
                                      "nothing unpacked") from None
            raise SciperfError(f"{root}: cannot unpack {name.name} ({atomic.why(exc)}); "
                               "nothing unpacked") from None
        except CORRUPT as exc:
            raise BadArchiveError(f"{name}: corrupt archive ({first_line(exc).rstrip(':')}); "
                                  "nothing unpacked") from None
        top = sorted(os.listdir(aside))
        clashes = [dst for src, dst in _clashes(aside, root) if not _same(src, dst)]
        if clashes and not force:
            raise SciperfError(f"{name}: unpacking would replace {len(clashes)} existing "
                               f"file(s) that differ, e.g. {clashes[0]}; move them away or "
                               "pass --force")
        with atomic.failing_as(root):
            _merge(aside, root)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return top


def _clashes(src: Path, dst: Path) -> list[tuple[Path, Path]]:
    """(unpacked, existing) pairs where moving `src`'s tree into `dst` meets a file."""
    found = []
    for entry in os.scandir(src):
        target = dst / entry.name
        if _real_dir(Path(entry.path)) and _real_dir(target):
            found += _clashes(Path(entry.path), target)
        elif target.exists() or target.is_symlink():
            found.append((Path(entry.path), target))
    return found


def _merge(src: Path, dst: Path) -> None:
    """Move `src`'s tree into `dst`, folder into folder, replacing what clashes."""
    for entry in os.scandir(src):
        target = dst / entry.name
        if _real_dir(Path(entry.path)) and _real_dir(target):
            _merge(Path(entry.path), target)
            continue
        if target.exists() or target.is_symlink():
            atomic.remove(target)
        os.rename(entry.path, target)


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _same(a: Path, b: Path) -> bool:
    """Two entries with the same content (files) or target (links)."""
    import filecmp

    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    return a.is_file() and b.is_file() and filecmp.cmp(a, b, shallow=False)
