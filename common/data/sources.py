"""Where a workload's real datasets come from: the declaration each workload folder makes
(``common/workloads/<name>/sources.py``, ``SOURCES``) and `sciperf data` reads.

A dataset is split into *parts* a user downloads on their own (`part=`): the training
set, the validation set, a starting checkpoint, a small set. A part is reachable by HTTPS
(files with their published sizes and checksums, archives unpacked after they verify) or
by Globus only (an endpoint and a path: `sciperf data download` prints the `globus
transfer` command). Every number here is a published fact with its source
(``reference``); a fact nobody published is None, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHECKSUMS = ("md5", "sha256")  # what a published checksum may be


@dataclass(frozen=True)
class RemoteFile:
    """One file of a part on an HTTPS server, saved as ``name`` under ``data.dir``."""

    url: str
    name: str  # relative path under data.dir (POSIX, no "..")
    size: int | None = None  # bytes, when published
    md5: str | None = None  # hex, when published
    sha256: str | None = None  # hex, when published
    unpack: bool = False  # a tar archive: unpacked into data.dir once it verifies


@dataclass(frozen=True)
class GlobusPath:
    """A Globus collection (endpoint UUID) and the path of the part on it."""

    endpoint: str
    path: str
    name: str  # where the transfer lands under data.dir
    recursive: bool = True


@dataclass(frozen=True)
class DataPart:
    """A piece of a dataset a user fetches on its own (`part=NAME`)."""

    name: str
    description: str
    fmt: str  # the format as sciperf names it (a workload's data.format) or "checkpoint"
    size_bytes: int | None = None  # published total size
    files: int | None = None  # published file count
    samples: dict[str, int] = field(default_factory=dict)  # split → samples it holds
    https: tuple[RemoteFile, ...] = ()
    globus: GlobusPath | None = None
    closed: str = ""  # what the closed division requires of this part
    mini: str = ""  # what the mini needs of it (usually nothing: it runs on synthetic data)
    reference: str = ""  # where these facts are published

    def record(self) -> dict[str, Any]:
        """The part as `sciperf data list --json` prints it."""
        return {"name": self.name, "description": self.description, "format": self.fmt,
                "size_bytes": self.size_bytes, "files": self.files,
                "samples": dict(self.samples),
                "https": [vars(f).copy() for f in self.https],
                "globus": vars(self.globus).copy() if self.globus else None,
                "closed": self.closed, "mini": self.mini, "reference": self.reference}


@dataclass(frozen=True)
class DataSources:
    """A workload's datasets: its parts and the reference's sample counts per split (what
    `sciperf data verify` holds a full set to)."""

    parts: tuple[DataPart, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # split → reference samples

    def part(self, name: str) -> DataPart:
        """The part called `name`, or ValueError listing the ones there are."""
        for p in self.parts:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.parts) or "none"
        raise ValueError(f"part={name} is not a part of this dataset (parts: {known})")
