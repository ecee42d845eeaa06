"""A download's ``.part`` and the record of its byte ranges, ``.part.json``.

The ranges tile the file; each says how much of it is on disk from its start. The record
is saved before the first byte lands out of order and only ever behind the bytes written,
so a killed download resumes every range where it stopped.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from sciperf import jsondata


def part_of(dest: Path) -> Path:
    """The name `dest` is written under until it is complete and checked."""
    return dest.with_name(dest.name + ".part")


def state_of(dest: Path) -> Path:
    """A split fetch's ranges and their progress, beside its ``.part``."""
    return dest.with_name(dest.name + ".part.json")


def held(dest: Path) -> int:
    """Bytes of `dest` already on disk that a resumed fetch does not download again."""
    part = part_of(dest)
    if not part.is_file():
        return 0
    ranges = read_state(dest, None)
    if ranges is not None:
        return sum(r.done for r in ranges)
    return part.stat().st_size if not state_of(dest).exists() else 0


@dataclass
class Range:
    """Bytes [start, end) of the file; `done` of them are on disk from `start` on
    (end None: up to the end of the file, its length not known yet)."""

    start: int
    end: int | None
    done: int = 0

    @property
    def pos(self) -> int:
        return self.start + self.done

    @property
    def complete(self) -> bool:
        return self.end is not None and self.pos >= self.end


def read_state(dest: Path, size: int | None) -> list[Range] | None:
    """A split fetch's ranges from ``dest.part.json`` when they describe this file and its
    ``.part`` (they tile [0, size), none is done past its end, the ``.part`` reaches as far
    as they say), else None."""
    path = state_of(dest)
    if not (path.is_file() and part_of(dest).is_file()):
        return None
    try:
        record = jsondata.loads(path.read_text())
        total = record["size"]
        ranges = [Range(int(s), int(e), int(d)) for s, e, d in record["ranges"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(total, int) or (size is not None and total != size) or not ranges:
        return None
    edge = 0
    for r in ranges:
        if r.start != edge or r.end is None or not 0 <= r.done <= r.end - r.start:
            return None
        edge = r.end
    reach = max((r.pos for r in ranges if r.done), default=0)
    return ranges if edge == total and part_of(dest).stat().st_size >= reach else None


def mismatch(part: Path, total: int | None, size: int | None, md5: str | None,
             sha256: str | None, digests: dict[str, str]) -> str:
    """What is wrong with a complete `.part` ("" when it is the published file)."""
    got = part.stat().st_size
    if size is not None and got != size:
        return f"{got} bytes received, {size} published"
    if total is not None and got != total:
        return f"{got} bytes received, the server announced {total}"
    for name, want in (("md5", md5), ("sha256", sha256)):
        if want is not None and digests[name] != want.lower():
            return f"{name} {digests[name]} does not match the published {want}"
    return ""


def discard(dest: Path) -> None:
    """A complete but unusable ``.part`` and its state gone."""
    for path in (part_of(dest), state_of(dest)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
