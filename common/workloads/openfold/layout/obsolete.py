"""``obsolete.dat``: the PDB's list of obsolete ids and their successors (the template search
reads it; REF ``openfold/data/templates.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sciperf.workloads.openfold.layout.paths import LayoutError, write_atomic


@dataclass(frozen=True)
class ObsoleteEntry:
    """An ``OBSLTE`` line: `old` was replaced by `new` on `date` (PDB's ``31-JUL-94``)."""

    date: str
    old: str
    new: str


def read_obsolete(path: str | Path) -> dict[str, str]:
    """{obsolete pdb_id: successor} (lower case) from ``OBSLTE`` lines longer than 30
    characters, ids at columns 20–23 and 29–32 of the stripped line (REF templates.py)."""
    try:
        lines = Path(path).read_text().strip().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{path}: cannot read the obsolete list ({exc})") from None
    mapping = {}
    for line in (raw.strip() for raw in lines):
        if line.startswith("OBSLTE") and len(line) > 30:
            mapping[line[20:24].lower()] = line[29:33].lower()
    return mapping


def write_obsolete(path: str | Path, entries: Iterable[ObsoleteEntry]) -> Path:
    """``obsolete.dat`` in the PDB's fixed columns (a header line, then ``OBSLTE`` lines)."""
    lines = [" LIST OF OBSOLETE COORDINATE ENTRIES AND SUCCESSORS"]
    lines += [f"OBSLTE    {e.date:<9} {e.old.upper():<4}     {e.new.upper():<4}"
              for e in entries]
    write_atomic(Path(path), ("\n".join(lines) + "\n").encode())
    return Path(path)
