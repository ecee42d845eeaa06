"""``chains.csv``: one row per author chain (REF ``scripts/preprocess_pdb_mmcif.py``).

The file is pandas' ``to_csv(index=False)``: ``mmcif_chain_ids`` is a ``;``-join of every
mmCIF chain mapped to the author chain (non-protein ones too), ``pdb_cluster_id`` is −1
without a PDB40 cluster, a NaN resolution is an empty field. The reference reads it with
``na_values="", keep_default_na=False``: only empty fields are NaN (a chain named ``NA`` stays
a string); here every text column stays a string and only ``resolution`` may be NaN.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf.workloads.openfold.layout.paths import CHAINS_CSV, LayoutError, is_date, write_atomic

CHAIN_COLUMNS = ("pdb_chain_id", "pdb_id", "author_chain_id", "mmcif_chain_ids", "release_date",
                 "resolution", "pdb_cluster_id", "sequence_length", "sequence")
NO_CLUSTER = -1


@dataclass(frozen=True)
class ChainRow:
    """One row of ``chains.csv``: an author chain of a PDB entry."""

    pdb_chain_id: str  # "<pdb_id>_<author_chain_id>"
    pdb_id: str
    author_chain_id: str
    mmcif_chain_ids: tuple[str, ...]  # every mmCIF chain mapped to this author chain
    release_date: str  # YYYY-MM-DD
    resolution: float  # Å, NaN when the entry has none
    pdb_cluster_id: int  # PDB40 cluster, NO_CLUSTER when none
    sequence_length: int
    sequence: str

    def values(self) -> tuple[str, ...]:
        """The csv fields as pandas writes them (a NaN float is an empty field)."""
        resolution = "" if math.isnan(self.resolution) else repr(float(self.resolution))
        return (self.pdb_chain_id, self.pdb_id, self.author_chain_id,
                ";".join(self.mmcif_chain_ids), self.release_date, resolution,
                str(int(self.pdb_cluster_id)), str(int(self.sequence_length)), self.sequence)


def read_chains(root: str | Path) -> list[ChainRow]:
    """Every row of ``chains.csv``, in file order."""
    path = Path(root) / CHAINS_CSV
    try:
        with open(path, newline="", encoding="utf-8") as f:
            lines = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LayoutError(f"{path}: cannot read the chain table ({exc})") from None
    if not lines or tuple(lines[0]) != CHAIN_COLUMNS:
        raise LayoutError(f"{path}: columns {lines[0] if lines else []} are not "
                          f"{list(CHAIN_COLUMNS)}")
    return [_row(fields, path, number) for number, fields in enumerate(lines[1:], start=2)]


def _row(fields: list[str], path: Path, number: int) -> ChainRow:
    if len(fields) != len(CHAIN_COLUMNS):
        raise LayoutError(f"{path}: line {number} has {len(fields)} fields, expected "
                          f"{len(CHAIN_COLUMNS)}")
    row = dict(zip(CHAIN_COLUMNS, fields, strict=True))
    try:
        resolution = float(row["resolution"]) if row["resolution"] else math.nan
        cluster, length = int(row["pdb_cluster_id"]), int(row["sequence_length"])
    except ValueError:
        raise LayoutError(f"{path}: line {number}: resolution {row['resolution']!r}, "
                          f"pdb_cluster_id {row['pdb_cluster_id']!r} or sequence_length "
                          f"{row['sequence_length']!r} is not a number") from None
    if not is_date(row["release_date"]):
        raise LayoutError(f"{path}: line {number}: chain {row['pdb_chain_id']}: release_date "
                          f"{row['release_date']!r} is not a YYYY-MM-DD date")
    if length != len(row["sequence"]):
        raise LayoutError(f"{path}: line {number}: sequence_length {length} but the sequence "
                          f"has {len(row['sequence'])} residues")
    ids = tuple(row["mmcif_chain_ids"].split(";")) if row["mmcif_chain_ids"] else ()
    return ChainRow(row["pdb_chain_id"], row["pdb_id"], row["author_chain_id"], ids,
                    row["release_date"], resolution, cluster, length, row["sequence"])


def write_chains(root: str | Path, rows: Iterable[ChainRow]) -> Path:
    """``chains.csv`` exactly as the reference's ``DataFrame.to_csv(index=False)`` writes it."""
    path = Path(root) / CHAINS_CSV
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CHAIN_COLUMNS)
    writer.writerows(row.values() for row in rows)
    write_atomic(path, out.getvalue().encode("utf-8"))
    return path


def read_entity_clusters(path: str | Path) -> dict[str, int]:
    """``clusters-by-entity-40.txt`` (one cluster of ``PDBID_ENTITY`` names per line) →
    {"PDBID_ENTITY" upper-case: cluster number = line number from 0}, as the preprocessing."""
    try:
        lines = Path(path).read_text().strip().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{path}: cannot read the PDB cluster list ({exc})") from None
    return {name.upper(): number for number, line in enumerate(lines) for name in line.split()}


def chain_rows(entry: Mapping[str, Any], entity_clusters: Mapping[str, int]) -> list[ChainRow]:
    """The ``chains.csv`` rows of one ``dicts`` entry (REF ``create_mmcif_chains``): one per
    author chain, its mmCIF chains in mapping order, its cluster that of its entities (the
    most common when they disagree, −1 when none is clustered)."""
    pdb_id = entry["pdb_id"]
    mmcif_of: dict[str, list[str]] = {}
    entities_of: dict[str, set[str]] = {}
    for mmcif_chain, author_chain in entry["mmcif_chain_id_to_author_chain_id"].items():
        mmcif_of.setdefault(author_chain, []).append(mmcif_chain)
        for entity, members in entry["entity_id_to_mmcif_chain_ids"].items():
            if mmcif_chain in members:
                entities_of.setdefault(author_chain, set()).add(entity)
    rows = []
    for author_chain in entry["author_chain_ids"]:
        # sorted: the reference iterates a set here, so its tie-break is not reproducible
        clusters = [entity_clusters[key] for key in
                    (f"{pdb_id}_{e}".upper() for e in sorted(entities_of.get(author_chain, ())))
                    if key in entity_clusters]
        cluster = Counter(clusters).most_common(1)[0][0] if clusters else NO_CLUSTER
        sequence = entry["sequences"][author_chain]
        rows.append(ChainRow(f"{pdb_id}_{author_chain}", pdb_id, author_chain,
                             tuple(mmcif_of.get(author_chain, ())), entry["release_date"],
                             float(entry["resolution"]), cluster, len(sequence), sequence))
    return rows
