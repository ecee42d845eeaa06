"""Where each file of the processed layout lives under its root, and what every reader and
writer of them shares: :class:`LayoutError`, the atomic write, the release-date check."""

from __future__ import annotations

import datetime
from pathlib import Path

from sciperf.data import atomic
from sciperf.errors import SciperfError

FORMAT = "processed"  # the manifest's name for this layout (sciperf.data.manifest)
PDB_DIR = Path("pdb_mmcif", "processed")
CHAINS_CSV = PDB_DIR / "chains.csv"
DICTS_DIR = PDB_DIR / "dicts"
OBSOLETE_DAT = PDB_DIR / "obsolete.dat"
ALIGNMENTS_DIR = Path("open_protein_set", "processed", "pdb_alignments")
SUPER_INDEX = ALIGNMENTS_DIR / "super.index"
VALIDATION_TARGETS = Path("validation_targets.txt")


class LayoutError(SciperfError):
    """A file of the processed layout is missing, truncated or malformed (the line names it)."""


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a dot-named temporary beside `path`, so no reader sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(path) as tmp:
        tmp.write_bytes(data)


def is_date(text: object) -> bool:
    """Whether `text` is a YYYY-MM-DD date: the split rules compare release dates as strings
    and the template search parses them, so anything else is refused where it is read."""
    try:
        return isinstance(text, str) and datetime.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False
