"""The record of the files `sciperf data` put in a data directory: size and SHA-256 of each,
where it came from and when.

``<data.dir>/sciperf_files.json`` (strict JSON) maps each file's path relative to the data
directory to ``{"size", "sha256", "source", "date"}``. `download` adds a file the moment it
is complete and checked, `subset` one per file it writes, so a later `verify` knows what
the directory should hold even after a killed download. The record is rewritten aside and
renamed on every addition: a reader finds the old one or the new one. Downloads run in
one process (connections are threads), so one writer updates it at a time.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import threading
from pathlib import Path, PurePosixPath
from typing import Any

from sciperf import jsondata
from sciperf.data import atomic
from sciperf.errors import SciperfError

MANIFEST = "sciperf_files.json"
VERSION = "sciperf-files/1"
CHUNK = 1 << 20
_lock = threading.Lock()


def sha256_of(path: Path, chunk: int = CHUNK) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def relative_name(name: str) -> str:
    """A manifest key: a relative POSIX path inside the data directory, or ValueError
    (an absolute path or a `..` would let a record name a file outside it)."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise ValueError(f"{name!r} is not a relative path inside the data directory")
    return str(path)


def read(root: str | Path) -> dict[str, dict[str, Any]]:
    """The recorded files ({} when there is no record); a record that is not ours or is
    malformed is one line naming it."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = jsondata.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SciperfError(f"{path}: unreadable file manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != VERSION or \
            not isinstance(data.get("files"), dict):
        raise SciperfError(f"{path}: not a sciperf file manifest ({VERSION})")
    files = data["files"]
    for name, entry in files.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int)
                and isinstance(entry.get("sha256"), str)):
            raise SciperfError(f"{path}: entry {name!r} lacks an integer size or a sha256")
    return files


def entry(size: int, sha256: str, source: str) -> dict[str, Any]:
    """One file's record, dated now (UTC)."""
    return {"size": int(size), "sha256": sha256, "source": source,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def add(root: str | Path, name: str, record: dict[str, Any]) -> None:
    """Record one finished file (replacing its older record)."""
    add_many(root, {name: record})


def add_many(root: str | Path, records: dict[str, dict[str, Any]]) -> None:
    """Record finished files in one rewrite of the manifest."""
    root = Path(root)
    with _lock:
        files = read(root)
        files.update({relative_name(k): v for k, v in records.items()})
        atomic.write_text(root / MANIFEST, json.dumps(
            {"format": VERSION, "files": dict(sorted(files.items()))}, indent=1))


def record_file(root: str | Path, path: Path, source: str) -> dict[str, Any]:
    """Hash `path` (inside `root`) and record it; returns the record."""
    root = Path(root)
    rec = entry(path.stat().st_size, sha256_of(path), source)
    add(root, path.relative_to(root).as_posix(), rec)
    return rec
