"""The template search's view of the layout (:class:`.templates.TemplateDatabase`): release
dates and chains from ``chains.csv``, obsolete ids from ``obsolete.dat``, entries from
``dicts``."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sciperf.workloads.openfold.layout.chains import ChainRow, read_chains
from sciperf.workloads.openfold.layout.dicts import load_entry
from sciperf.workloads.openfold.layout.obsolete import read_obsolete
from sciperf.workloads.openfold.layout.paths import OBSOLETE_DAT

if TYPE_CHECKING:
    from sciperf.workloads.openfold.templates import TemplateDatabase, TemplateEntry


def release_dates(rows: Iterable[ChainRow]) -> dict[str, datetime.date]:
    """{pdb_id: release date} (REF ``_get_pdb_release_dates``, over all of chains.csv)."""
    return {row.pdb_id: datetime.date.fromisoformat(row.release_date) for row in rows}


def template_database(root: str | Path, rows: Sequence[ChainRow] | None = None,
                      kalign: str = "kalign") -> TemplateDatabase:
    """The template search's view of this layout (:class:`.templates.TemplateDatabase`):
    every chain of ``chains.csv`` may be a template, obsolete ids from ``obsolete.dat``,
    entries loaded from ``dicts`` (picklable, for loader workers)."""
    from sciperf.workloads.openfold.templates import TemplateDatabase

    rows = read_chains(root) if rows is None else rows
    obsolete_path = Path(root) / OBSOLETE_DAT
    obsolete = read_obsolete(obsolete_path) if obsolete_path.is_file() else {}
    return TemplateDatabase(release_dates=release_dates(rows),
                            chain_ids=frozenset(row.pdb_chain_id for row in rows),
                            obsolete=obsolete, load_entry=functools.partial(_template_entry,
                                                                            str(root)),
                            kalign=kalign)


def _template_entry(root: str, pdb_id: str) -> TemplateEntry:
    from sciperf.workloads.openfold.templates import TemplateEntry

    entry = load_entry(root, pdb_id)
    return TemplateEntry(pdb_id=pdb_id,
                         release_date=datetime.date.fromisoformat(entry["release_date"]),
                         sequences=dict(entry["sequences"]),
                         atoms={chain: (a["all_atom_positions"], a["all_atom_mask"])
                                for chain, a in entry["atoms"].items()})
