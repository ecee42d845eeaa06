"""The reference's processed OpenFold data layout: read it, and write it byte for byte.

What people download (spec §7, REF ``scripts/preprocess_pdb_mmcif.py``,
``scripts/preprocess_open_protein_set.py``, ``openfold/data/mmcif.py``,
``data/alignments.py``, ``datasets.py``) and what :mod:`.synthetic` writes, under one root::

    pdb_mmcif/processed/chains.csv        one row per author chain (CHAIN_COLUMNS, in order)
    pdb_mmcif/processed/dicts/<id[1:3]>   pickle {pdb_id: entry} of builtin values only
    pdb_mmcif/processed/obsolete.dat      the PDB's obsolete-id list (templates read it)
    open_protein_set/processed/pdb_alignments/{0..9}.db   alignment files concatenated
    open_protein_set/processed/pdb_alignments/super.index JSON {pdb_chain_id: {db, files}}
    validation_targets.txt                (sciperf's synthetic sets only) the validation chains

Facts kept because the reference's readers and preprocessing depend on them:

* ``chains.csv`` is pandas' ``to_csv(index=False)``: ``mmcif_chain_ids`` is a ``;``-join of
  every mmCIF chain mapped to the author chain (non-protein ones too), ``pdb_cluster_id`` is
  −1 without a PDB40 cluster, a NaN resolution is an empty field. The reference reads it with
  ``na_values="", keep_default_na=False``: only empty fields are NaN (a chain named ``NA``
  stays a string); here every text column stays a string and only ``resolution`` may be NaN.
* a ``dicts`` entry holds ``atoms`` per author chain as ``(zlib(bytes), shape)`` of float32
  [L, 37, 3] positions and bool [L, 37] masks, and nothing but builtin types, so it is read
  through :func:`sciperf.data.pickles.loads_builtins`, which resolves no class at all.
* an alignment shard is ``sha256(chain dir name)[:8]`` little-endian mod 10; a chain's files
  (sorted by ``a3m/…``, ``hhr/…`` path) follow each other with no separator; ``super.index``
  maps every chain of a duplicate line to the same ``{"db": "<n>.db", "files": [[basename,
  offset, size], …]}``, shard by shard, chains in name order within a shard.
* the training and validation chains are both selected from ``chains.csv`` (:func:`split_chains`).

Every malformed input (a missing or truncated shard, an offset beyond a file, a chain absent
from ``super.index``, corrupt zlib, a csv with other columns or a release date that is not
YYYY-MM-DD, a pickle that names a class, a dicts value of the wrong type) is a
:class:`LayoutError` whose one line names the file.
"""

from __future__ import annotations

import csv
import datetime
import functools
import hashlib
import io
import json
import math
import os
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from sciperf.data import atomic, pickles
from sciperf.errors import SciperfError
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold import spec

if TYPE_CHECKING:
    from sciperf.workloads.openfold.templates import TemplateDatabase, TemplateEntry

FORMAT = "processed"  # the manifest's name for this layout (sciperf.data.manifest)
PDB_DIR = Path("pdb_mmcif", "processed")
CHAINS_CSV = PDB_DIR / "chains.csv"
DICTS_DIR = PDB_DIR / "dicts"
OBSOLETE_DAT = PDB_DIR / "obsolete.dat"
ALIGNMENTS_DIR = Path("open_protein_set", "processed", "pdb_alignments")
SUPER_INDEX = ALIGNMENTS_DIR / "super.index"
VALIDATION_TARGETS = Path("validation_targets.txt")
NUM_SHARDS = 10
CHAIN_COLUMNS = ("pdb_chain_id", "pdb_id", "author_chain_id", "mmcif_chain_ids", "release_date",
                 "resolution", "pdb_cluster_id", "sequence_length", "sequence")
NO_CLUSTER = -1
# The files of one OpenProteinSet chain directory (the names the feature pipeline asks for).
A3M_FILES = ("uniref90_hits.a3m", "bfd_uniclust_hits.a3m", "mgnify_hits.a3m")  # merge order
HHR_FILE = "pdb70_hits.hhr"
SPLITS = ("train", "validation")

# CAMEO targets by submission date (REF data/cameo_targets.py, transcribed as data from
# cameo3d.org's 3-month list to 2021-12-11): "pdb_id [mmcif_chain_id]", occasionally an author
# chain id instead.
_CAMEO_TABLE = """
2021-09-18 7bgg:A 7bly:A 7cz9:B 7d2w:A 7e6g:A 7jta:A 7jua:A 7ksn:A 7lm0:A 7m1w:A 7o86:A 7rih:B
           7rij:A 7s3u:A 7s5n:B
2021-09-25 7ba4:A 7czo:A 7dg7:A 7dg9:A 7dlw:B 7du6:A 7du7:A 7dvr:A 7dxs:C 7dxv:B 7dxw:A 7e24:D
           7e57:C 7k3s:A 7ltc:A 7mbf:A 7mj0:C
2021-10-02 7a59:B 7a73:A 7aao:A 7agj:A 7aj6:L 7bmu:A 7bsx:A 7d3y:A 7d50:B 7e4m:A 7jyp:A 7n79:A
           7ny0:A 7og3:A 7p01:A 7sbc:C
2021-10-09 7d6l:A 7d8r:A 7d8s:A 7jrk:A 7p2f:A 7pmu:A 7r65:A 7rk1:C 7rk2:C 7s6e:B
2021-10-16 7amc:A 7da9:A 7dah:E 7dnm:B 7eea:A 7eft:B 7kgc:A 7nmb:A 7o62:B 7p1b:C 7p1v:A 7rrm:C
           7s13:C 7s13:L 7sh3:A
2021-10-23 7dck:A 7f17:B 7msj:A 7nwz:D 7nx0:B 7nx0:E 7og0:B 7pkx:A 7plq:B 7s6g:A 7siq:A
2021-10-30 7ar0:B 7cjs:B 7dcm:A 7ef6:A 7et8:A 7lc5:A 7ndr:A 7nl4:A 7o49:F 7s6b:A 7sir:A 7v1v:A
           7vmu:A
2021-11-06 6wmk:A 6wqc:A 7au7:A 7b3a:A 7bcz:A 7bhy:A 7dru:C 7eqx:A 7eqx:C 7esx:A 7f7n:A 7fbp:B
           7fe3:A 7lew:B 7mfw:B 7obm:A 7ool:A 7r84:A 7rwk:A
2021-11-13 6xqj:A 6z01:A 7atr:A 7dfe:A 7dtp:A 7kik:A 7kos:A 7ouq:A 7p82:C 7pbk:A 7q47:A 7re4:A
           7re6:A
2021-11-20 6tf4:A 7awk:A 7bcj:A 7djy:A 7dk9:A 7dvn:A 7kqv:D 7ls0:B 7ny6:A 7plb:B 7rbw:A 7vnb:A
2021-11-27 7b0d:A 7e2v:A 7f6e:B 7fbh:A 7fh3:A 7kiu:A 7kua:A 7l6j:A 7l6y:A 7lxc:A 7swh:A 7swk:B
2021-12-04 7b1k:B 7b1w:F 7b26:C 7b28:F 7b29:A 7b2a:A 7b2o:A 7bny:B 7dkk:A 7dko:A 7dmf:A 7dms:A
           7lbu:A 7ljh:A 7poh:B 7ppp:A 7q03:A
2021-12-11 7b4q:A 7dnu:A 7e37:A 7kuw:A 7kzh:A 7mfi:A 7p3t:B 7q1b:A 7sf6:A 7sy9:A 7t24:A 7v5y:B
           7vdy:A
"""


def _parse_cameo(table: str) -> dict[str, tuple[str, ...]]:
    targets: dict[str, list[str]] = {}
    date = ""
    for line in table.strip().splitlines():
        words = line.split()
        if not line.startswith(" "):
            date, words = words[0], words[1:]
        pairs = (word.split(":") for word in words)
        targets.setdefault(date, []).extend(f"{pdb} [{chain}]" for pdb, chain in pairs)
    return {d: tuple(v) for d, v in targets.items()}


CAMEO_TARGETS: Mapping[str, tuple[str, ...]] = _parse_cameo(_CAMEO_TABLE)  # 183 on 13 dates


class LayoutError(SciperfError):
    """A file of the processed layout is missing, truncated or malformed (the line names it)."""


@dataclass(frozen=True)
class SplitRules:
    """Which chains of ``chains.csv`` train and validate (REF datasets.py, train.py defaults;
    AF2 supplement 1.2.5 and 1.11.7). The MLLOG-logged dates and length are the spec's."""

    min_release_date: str = "1900-01-01"
    max_release_date: str = spec.TRAIN_MAX_PDB_RELEASE_DATE
    max_resolution: float = 9.0  # Å, strictly below (NaN resolutions are kept)
    max_aa_frequency: float = 0.8  # of the most common residue letter, at most
    cameo_min_date: str = spec.VAL_MIN_CAMEO_SUBMISSION_DATE
    cameo_max_date: str = spec.VAL_MAX_CAMEO_SUBMISSION_DATE
    max_validation_length: int = spec.VAL_MAX_SEQUENCE_LENGTH


# The training sampler's length term (AF2 supplement 1.2.5): max(min(L, 512), 256) / 512.
SAMPLER_LENGTH_CAP = 512
SAMPLER_LENGTH_FLOOR = 256


# ---------------------------------------------------------------------------------------------
# chains.csv
# ---------------------------------------------------------------------------------------------

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
    if not _is_date(row["release_date"]):
        raise LayoutError(f"{path}: line {number}: chain {row['pdb_chain_id']}: release_date "
                          f"{row['release_date']!r} is not a YYYY-MM-DD date")
    if length != len(row["sequence"]):
        raise LayoutError(f"{path}: line {number}: sequence_length {length} but the sequence "
                          f"has {len(row['sequence'])} residues")
    ids = tuple(row["mmcif_chain_ids"].split(";")) if row["mmcif_chain_ids"] else ()
    return ChainRow(row["pdb_chain_id"], row["pdb_id"], row["author_chain_id"], ids,
                    row["release_date"], resolution, cluster, length, row["sequence"])


def _is_date(text: object) -> bool:
    """Whether `text` is a YYYY-MM-DD date: the split rules compare release dates as strings
    and the template search parses them, so anything else is refused where it is read."""
    try:
        return isinstance(text, str) and datetime.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False


def write_chains(root: str | Path, rows: Iterable[ChainRow]) -> Path:
    """``chains.csv`` exactly as the reference's ``DataFrame.to_csv(index=False)`` writes it."""
    path = Path(root) / CHAINS_CSV
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CHAIN_COLUMNS)
    writer.writerows(row.values() for row in rows)
    _write_atomic(path, out.getvalue().encode("utf-8"))
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


# ---------------------------------------------------------------------------------------------
# dicts/<pdb_id[1:3]>
# ---------------------------------------------------------------------------------------------

class ChainAtoms(TypedDict):
    """A chain's atoms: float32 [L, 37, 3] positions, bool [L, 37] mask (decompressed)."""

    all_atom_positions: np.ndarray
    all_atom_mask: np.ndarray


class DictsEntry(TypedDict):
    """One PDB entry as the preprocessing stores it (REF ``parse_mmcif_string``)."""

    pdb_id: str
    exptl_method: str
    release_date: str
    resolution: float
    author_chain_ids: list[str]
    entity_id_to_mmcif_chain_ids: dict[str, list[str]]
    mmcif_chain_id_to_author_chain_id: dict[str, str]
    sequences: dict[str, str]
    atoms: dict[str, ChainAtoms]


_ENTRY_KEYS = frozenset(DictsEntry.__annotations__)
_ATOM_ARRAYS = {"all_atom_positions": (np.float32, (rc.ATOM_TYPE_NUM, 3)),
                "all_atom_mask": (np.bool_, (rc.ATOM_TYPE_NUM,))}


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def _is_dict_of(value: Any, ok: Callable[[Any], bool]) -> bool:
    """Whether `value` is a dict whose every value passes `ok` (keys are not checked: a
    foreign key just never matches a chain)."""
    return isinstance(value, dict) and all(ok(v) for v in value.values())


def _dict_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return functools.partial(_is_dict_of, ok=ok)


# What the readers rely on in each entry: key -> (check, what the message says it must be).
_ENTRY_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pdb_id": (_is_str, "a string"),
    "exptl_method": (_is_str, "a string"),
    "release_date": (_is_date, "a YYYY-MM-DD date"),
    "resolution": (_is_number, "a number"),
    "author_chain_ids": (_is_str_list, "a list of chain ids"),
    "entity_id_to_mmcif_chain_ids": (_dict_of(_is_str_list), "a dict of chain id lists"),
    "mmcif_chain_id_to_author_chain_id": (_dict_of(_is_str), "a dict of chain ids"),
    "sequences": (_dict_of(_is_str), "a dict of sequences"),
    "atoms": (_dict_of(lambda arrays: isinstance(arrays, dict)),
              "a dict of {chain: {array name: (zlib bytes, shape)}}"),
}


def dicts_file(root: str | Path, pdb_id: str) -> Path:
    """The pickle holding ``pdb_id``: named by its 2nd and 3rd characters (PDB's divided
    layout)."""
    return Path(root) / DICTS_DIR / pdb_id[1:3]


def compress_atoms(atoms: Mapping[str, ChainAtoms]) -> dict[str, dict[str, tuple]]:
    """Each array as ``(zlib.compress(array.tobytes()), shape)`` (float32 / bool checked)."""
    out: dict[str, dict[str, tuple]] = {}
    for chain, arrays in atoms.items():
        out[str(chain)] = {}
        for name, (dtype, tail) in _ATOM_ARRAYS.items():
            array = np.asarray(arrays[name])
            if array.dtype != dtype or array.shape[1:] != tail:
                raise TypeError(f"chain {chain}: {name} must be {np.dtype(dtype)} [L, "
                                f"{', '.join(map(str, tail))}], got {array.dtype} {array.shape}")
            blob = zlib.compress(np.ascontiguousarray(array).tobytes())
            out[str(chain)][name] = (blob, tuple(int(n) for n in array.shape))
    return out


def decompress_atoms(atoms: Mapping[str, Any], source: str) -> dict[str, ChainAtoms]:
    """The inverse of :func:`compress_atoms`; corrupt or mis-sized data names `source`."""
    out: dict[str, ChainAtoms] = {}
    for chain, arrays in atoms.items():
        decoded = {}
        for name, (dtype, tail) in _ATOM_ARRAYS.items():
            try:
                blob, shape = arrays[name]
                shape = tuple(int(n) for n in shape)
                raw = zlib.decompress(blob)
            except (KeyError, TypeError, ValueError) as exc:
                raise LayoutError(f"{source}: chain {chain}: {name} is not (zlib bytes, shape) "
                                  f"({type(exc).__name__}: {exc})") from None
            except zlib.error as exc:
                raise LayoutError(f"{source}: chain {chain}: {name} is corrupt zlib "
                                  f"({exc})") from None
            if shape[1:] != tail or len(raw) != math.prod(shape) * np.dtype(dtype).itemsize:
                raise LayoutError(f"{source}: chain {chain}: {name} holds {len(raw)} bytes, "
                                  f"not {np.dtype(dtype)} of shape {shape} with trailing {tail}")
            decoded[name] = np.frombuffer(raw, dtype).reshape(shape).copy()
        out[chain] = ChainAtoms(**decoded)  # type: ignore[typeddict-item]
    return out


def write_dicts(root: str | Path, entries: Iterable[DictsEntry]) -> list[Path]:
    """Group `entries` (atoms as arrays) into ``dicts/<pdb_id[1:3]>`` pickles, each a dict
    ordered by pdb_id (the preprocessing reads a sorted directory), builtin values only."""
    groups: dict[str, dict[str, dict]] = {}
    for entry in entries:
        pdb_id = entry["pdb_id"]
        stored = {key: entry[key] for key in DictsEntry.__annotations__}  # type: ignore[literal-required]
        stored["atoms"] = compress_atoms(entry["atoms"])
        group = groups.setdefault(pdb_id[1:3], {})
        if pdb_id in group:
            raise ValueError(f"entry {pdb_id} given twice")
        group[pdb_id] = stored
    paths = []
    for name, group in sorted(groups.items()):
        path = Path(root) / DICTS_DIR / name
        _write_atomic(path, pickles.dumps_builtins({k: group[k] for k in sorted(group)}))
        paths.append(path)
    return paths


def read_dicts_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """A ``dicts`` pickle as stored ({pdb_id: entry}, atoms still compressed), read without
    resolving any class."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LayoutError(f"{path}: cannot read the mmCIF dicts ({exc.strerror})") from None
    try:
        entries = pickles.loads_builtins(data, str(path))
    except SciperfError as exc:
        raise LayoutError(str(exc)) from None
    if not isinstance(entries, dict) or not all(
            isinstance(v, dict) and v.keys() >= _ENTRY_KEYS for v in entries.values()):
        raise LayoutError(f"{path}: not a dict of mmCIF entries with keys "
                          f"{sorted(_ENTRY_KEYS)}")
    return entries


def _check_entry_types(path: Path, pdb_id: str, entry: dict[str, Any]) -> None:
    """One line naming the file, entry and key whose value has the wrong type (``'atoms':
    'oops'``): :func:`read_dicts_file` checks only that the keys are there, which let such
    a value through to an AttributeError in a reader."""
    for key, (ok, what) in _ENTRY_TYPES.items():
        if not ok(entry[key]):
            raise LayoutError(f"{path}: entry {pdb_id!r}: {key} is not {what} (got "
                              f"{type(entry[key]).__name__} {_short(entry[key])})")


def _short(value: Any, limit: int = 40) -> str:
    """`value`'s repr cut to `limit` characters (an error line quotes it, never a blob)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_entry(root: str | Path, pdb_id: str) -> DictsEntry:
    """One entry with its atoms decompressed (REF ``load_mmcif_dict``)."""
    path = dicts_file(root, pdb_id)
    entries = read_dicts_file(path)
    if pdb_id not in entries:
        raise LayoutError(f"{path}: has no entry {pdb_id!r}")
    _check_entry_types(path, pdb_id, entries[pdb_id])  # the one used (~10 µs, not the file's)
    entry = dict(entries[pdb_id])
    entry["atoms"] = decompress_atoms(entry["atoms"], f"{path} [{pdb_id}]")
    return DictsEntry(**entry)  # type: ignore[typeddict-item]


@dataclass(frozen=True)
class LoadedChain:
    """What a sample needs of one chain's entry (REF ``create_mmcif_features`` inputs)."""

    pdb_chain_id: str
    sequence: str  # one-letter residue types, X for unknown
    all_atom_positions: np.ndarray  # float32 [L, 37, 3]
    all_atom_mask: np.ndarray  # bool [L, 37]
    resolution: float  # Å, NaN when unknown
    release_date: str  # YYYY-MM-DD
    exptl_method: str


def split_chain_id(pdb_chain_id: str) -> tuple[str, str]:
    """"1abc_A" → ("1abc", "A")."""
    pdb_id, sep, chain = pdb_chain_id.partition("_")
    if not sep or not pdb_id or not chain:
        raise LayoutError(f"chain id {pdb_chain_id!r} is not <pdb_id>_<author_chain_id>")
    return pdb_id, chain


def load_chain(root: str | Path, pdb_chain_id: str) -> LoadedChain:
    """A chain's sequence, atoms, resolution and release date from its ``dicts`` entry."""
    pdb_id, chain = split_chain_id(pdb_chain_id)
    entry = load_entry(root, pdb_id)
    if chain not in entry["sequences"] or chain not in entry["atoms"]:
        raise LayoutError(f"{dicts_file(root, pdb_id)}: entry {pdb_id} has no chain {chain!r} "
                          f"(has {', '.join(entry['author_chain_ids'])})")
    atoms, sequence = entry["atoms"][chain], entry["sequences"][chain]
    if atoms["all_atom_positions"].shape[0] != len(sequence) or \
            atoms["all_atom_mask"].shape[0] != len(sequence):
        raise LayoutError(f"{dicts_file(root, pdb_id)}: chain {pdb_chain_id} has "
                          f"{len(sequence)} residues but atoms for "
                          f"{atoms['all_atom_positions'].shape[0]}")
    return LoadedChain(pdb_chain_id, sequence, atoms["all_atom_positions"],
                       atoms["all_atom_mask"], float(entry["resolution"]),
                       entry["release_date"], entry["exptl_method"])


# ---------------------------------------------------------------------------------------------
# obsolete.dat
# ---------------------------------------------------------------------------------------------

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
    _write_atomic(Path(path), ("\n".join(lines) + "\n").encode())
    return Path(path)


# ---------------------------------------------------------------------------------------------
# Alignment shards
# ---------------------------------------------------------------------------------------------

def shard_of(chain_dir: str, shards: int = NUM_SHARDS) -> int:
    """The shard of an OpenProteinSet chain directory: the first 8 bytes of its name's
    SHA-256 as a little-endian integer, mod `shards` (REF helpers.hash_string_into_number)."""
    digest = hashlib.sha256(chain_dir.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % shards


class AlignmentWriter:
    """Writes ``{0..9}.db`` and ``super.index`` as the reference's packer does.

    Add chain directories in name order (the reference walks a sorted directory), each with
    its files as (path inside the directory, bytes); they are sorted by that path, appended
    to the directory's shard, and every chain of its duplicate group gets the same entry.
    :meth:`close` writes ``super.index`` (shard by shard, in the order chains were added).
    """

    def __init__(self, root: str | Path, shards: int = NUM_SHARDS) -> None:
        self.folder = Path(root) / ALIGNMENTS_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self.shards = shards
        self._tmp = [self.folder / f".{n}.db.tmp" for n in range(shards)]
        self._files = [open(p, "wb") for p in self._tmp]  # noqa: SIM115 (closed in close())
        self._offsets = [0] * shards
        self._index: list[dict[str, dict]] = [{} for _ in range(shards)]
        self._seen: set[str] = set()

    def add(self, chain_dir: str, files: Iterable[tuple[str, bytes]],
            duplicates: Sequence[str] = ()) -> None:
        """One chain directory; `duplicates` is its line of ``duplicate_pdb_chains.txt``
        (the chains sharing its alignments, itself included; default: itself only)."""
        shard = shard_of(chain_dir, self.shards)
        entry: dict[str, Any] = {"db": f"{shard}.db", "files": []}
        for relpath, data in sorted(files, key=lambda item: item[0]):
            self._files[shard].write(data)
            entry["files"].append([Path(relpath).name, self._offsets[shard], len(data)])
            self._offsets[shard] += len(data)
        for name in duplicates or (chain_dir,):
            if name in self._seen:
                raise ValueError(f"chain {name} given alignments twice")
            self._seen.add(name)
            self._index[shard][name] = entry

    def close(self) -> Path:
        """Finish the shards and write ``super.index`` (atomically, last)."""
        for tmp, f in zip(self._tmp, self._files, strict=True):
            f.close()
            tmp.replace(self.folder / tmp.name[1:-len(".tmp")])
        index = {name: entry for shard in self._index for name, entry in shard.items()}
        path = self.folder / SUPER_INDEX.name
        _write_atomic(path, json.dumps(index).encode("utf-8"))
        return path

    def __enter__(self) -> AlignmentWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            for tmp, f in zip(self._tmp, self._files, strict=True):
                f.close()
                tmp.unlink(missing_ok=True)


def pack_open_protein_set(pdb_dir: str | Path, duplicates_file: str | Path,
                          root: str | Path) -> Path:
    """OpenProteinSet's ``pdb/<chain>/{a3m,hhr}/*`` and ``duplicate_pdb_chains.txt`` → the
    processed shards under `root` (REF preprocess_open_protein_set.py, one process)."""
    groups: dict[str, list[str]] = {}
    try:
        for line in Path(duplicates_file).read_text().strip().split("\n"):
            for name in line.split():
                groups[name] = line.split()
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{duplicates_file}: cannot read the duplicate chains ({exc})") \
            from None
    with AlignmentWriter(root) as writer:
        for chain_dir in sorted(p for p in Path(pdb_dir).iterdir() if p.is_dir()):
            if chain_dir.name not in groups:
                raise LayoutError(f"{duplicates_file}: has no line for chain {chain_dir.name}")
            files = [(str(p.relative_to(chain_dir)), p.read_bytes())
                     for p in chain_dir.glob("*/*") if p.is_file()]
            writer.add(chain_dir.name, files, groups[chain_dir.name])
    return Path(root) / SUPER_INDEX


class AlignmentIndex:
    """``super.index``, loaded once: which shard, offsets and sizes hold a chain's files."""

    def __init__(self, root: str | Path) -> None:
        self.folder = Path(root) / ALIGNMENTS_DIR
        self.path = self.folder / SUPER_INDEX.name
        try:
            self._index = json.loads(self.path.read_bytes())
        except OSError as exc:
            raise LayoutError(f"{self.path}: cannot read the alignment index "
                              f"({exc.strerror})") from None
        except ValueError as exc:
            raise LayoutError(f"{self.path}: not valid JSON ({exc})") from None
        if not isinstance(self._index, dict):
            raise LayoutError(f"{self.path}: not a JSON object of chains")

    def __contains__(self, pdb_chain_id: object) -> bool:
        return pdb_chain_id in self._index

    def __len__(self) -> int:
        return len(self._index)

    def files(self, pdb_chain_id: str) -> tuple[str, list[tuple[str, int, int]]]:
        """(shard file name, [(basename, offset, size), …]) of a chain, checked."""
        entry = self._index.get(pdb_chain_id)
        if entry is None:
            raise LayoutError(f"{self.path}: no alignments for chain {pdb_chain_id}")
        try:
            db, files = entry["db"], [(str(n), int(o), int(s)) for n, o, s in entry["files"]]
        except (KeyError, TypeError, ValueError):
            raise LayoutError(f"{self.path}: entry of {pdb_chain_id} is not "
                              '{"db": name, "files": [[basename, offset, size], ...]}') from None
        if not isinstance(db, str) or Path(db).name != db or not db:
            raise LayoutError(f"{self.path}: entry of {pdb_chain_id} names shard {db!r}")
        return db, files

    def read(self, pdb_chain_id: str) -> dict[str, str]:
        """{basename: text} of the chain's a3m/hhr files (seek, read, UTF-8)."""
        db, files = self.files(pdb_chain_id)
        shard = self.folder / db
        out: dict[str, str] = {}
        try:
            with open(shard, "rb") as f:
                end = os.fstat(f.fileno()).st_size
                for name, offset, size in files:
                    if offset < 0 or size < 0 or offset + size > end:
                        raise LayoutError(f"{shard}: truncated: {pdb_chain_id}'s {name} needs "
                                          f"bytes {offset}..{offset + size}, the file has {end}")
                    f.seek(offset)
                    out[name] = f.read(size).decode("utf-8")
        except OSError as exc:
            raise LayoutError(f"{shard}: cannot read alignments of {pdb_chain_id} "
                              f"({exc.strerror})") from None
        except UnicodeDecodeError:
            raise LayoutError(f"{shard}: {pdb_chain_id}'s {name} is not UTF-8 text") from None
        return out


def alignments(root: str | Path, pdb_chain_id: str) -> dict[str, str]:
    """{basename: text} of one chain's alignment files (loads ``super.index``: for many
    chains keep an :class:`AlignmentIndex`)."""
    return AlignmentIndex(root).read(pdb_chain_id)


# ---------------------------------------------------------------------------------------------
# Training and validation chains
# ---------------------------------------------------------------------------------------------

def write_validation_targets(root: str | Path, targets: Iterable[tuple[str, str]]) -> Path:
    """``validation_targets.txt``: one ``pdb_id [mmcif_chain_id]`` line per target (the CAMEO
    list's form), which :func:`split_chains` then uses instead of the CAMEO list."""
    path = Path(root) / VALIDATION_TARGETS
    _write_atomic(path, "".join(f"{pdb} [{chain}]\n" for pdb, chain in targets).encode())
    return path


def read_validation_targets(root: str | Path) -> list[str] | None:
    """The targets of ``validation_targets.txt`` (blank and ``#`` lines skipped), or None
    when the dataset has no such file (the benchmark: CAMEO)."""
    path = Path(root) / VALIDATION_TARGETS
    if not path.is_file():
        return None
    try:
        lines = [line.strip() for line in path.read_text().splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{path}: cannot read the validation targets ({exc})") from None
    targets = [line for line in lines if line and not line.startswith("#")]
    for line in targets:
        if len(line.split()) != 2:
            raise LayoutError(f"{path}: {line!r} is not 'pdb_id mmcif_chain_id'")
    return targets


def cameo_targets(rules: SplitRules = SplitRules()) -> list[str]:
    """The CAMEO targets submitted inside the rules' date window, in list order."""
    return [target for date, targets in CAMEO_TARGETS.items()
            if rules.cameo_min_date <= date <= rules.cameo_max_date for target in targets]


def split_chains(root: str | Path, split: str, rules: SplitRules = SplitRules(), *,
                 rows: Sequence[ChainRow] | None = None, index: AlignmentIndex | None = None,
                 filter_by_alignments: bool = False,
                 only: Collection[str] | None = None) -> list[ChainRow]:
    """The chains of a split, in ``chains.csv`` order (REF InitialTrainingDataset,
    ValidationDataset).

    train: released in [min, max] date, resolution below the maximum or unknown, no residue
    letter above the frequency cap, in a PDB40 cluster. validation: the targets of
    ``validation_targets.txt`` if the dataset has one, else the CAMEO targets of the date
    window; each mapped to its author chain through ``mmcif_chain_ids`` (or taken as an author
    chain), the first target of an author chain kept, then at most the length cap.
    `only` keeps just those pdb_chain_ids; every chain left must have alignments unless
    `filter_by_alignments` drops those without.
    """
    if split not in SPLITS:
        raise SciperfError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    rows = read_chains(root) if rows is None else rows
    chosen = _training_rows(rows, rules) if split == "train" else \
        _validation_rows(root, rows, rules)
    if only is not None:
        keep = set(only)
        chosen = [row for row in chosen if row.pdb_chain_id in keep]
    index = AlignmentIndex(root) if index is None else index
    missing = [row.pdb_chain_id for row in chosen if row.pdb_chain_id not in index]
    if filter_by_alignments:
        gone = set(missing)
        return [row for row in chosen if row.pdb_chain_id not in gone]
    if missing:
        raise LayoutError(f"{index.path}: {len(missing)} {split} chains have no alignments "
                          f"(e.g. {', '.join(missing[:3])}); filter_by_alignments drops them")
    return chosen


def _training_rows(rows: Sequence[ChainRow], rules: SplitRules) -> list[ChainRow]:
    return [row for row in rows
            if rules.min_release_date <= row.release_date <= rules.max_release_date
            and (math.isnan(row.resolution) or row.resolution < rules.max_resolution)
            and top_residue_frequency(row.sequence) <= rules.max_aa_frequency
            and row.pdb_cluster_id != NO_CLUSTER]


def top_residue_frequency(sequence: str) -> float:
    """The share of the most common letter (an empty sequence: above every cap)."""
    if not sequence:
        return math.inf
    return Counter(sequence).most_common(1)[0][1] / len(sequence)


def _validation_rows(root: str | Path, rows: Sequence[ChainRow], rules: SplitRules
                     ) -> list[ChainRow]:
    targets = read_validation_targets(root)
    targets = cameo_targets(rules) if targets is None else targets
    to_author = _mmcif_to_author(rows, Path(root) / CHAINS_CSV)
    selected: set[str] = set()
    for target in targets:
        pdb_id, mmcif_chain = target.split()
        author = to_author.get(f"{pdb_id.lower()}_{mmcif_chain.strip('[]')}")
        if author is not None:
            selected.add(author)  # a later target of the same author chain adds nothing
    return [row for row in rows if row.pdb_chain_id in selected
            and row.sequence_length <= rules.max_validation_length]


def _mmcif_to_author(rows: Sequence[ChainRow], source: Path) -> dict[str, str]:
    """"<pdb_id>_<mmcif chain>" → "<pdb_id>_<author chain>", plus every author chain as
    itself where no mmCIF chain has its name (CAMEO sometimes names author chains)."""
    mapping: dict[str, str] = {}
    for row in rows:
        for mmcif_chain in row.mmcif_chain_ids:
            key = f"{row.pdb_id}_{mmcif_chain}"
            if key in mapping:
                raise LayoutError(f"{source}: mmCIF chain {key} belongs to two author chains "
                                  f"({mapping[key]}, {row.pdb_chain_id})")
            mapping[key] = row.pdb_chain_id
    for row in rows:
        mapping.setdefault(row.pdb_chain_id, row.pdb_chain_id)
    return mapping


def sampler_weight(sequence_length: int, cluster_size: int) -> float:
    """A training chain's sampling weight (AF2 supplement 1.2.5, REF ``_get_weight``):
    max(min(L, 512), 256)/512 × 1/√(cluster size); a chain without cluster counts 1."""
    length = max(min(sequence_length, SAMPLER_LENGTH_CAP), SAMPLER_LENGTH_FLOOR)
    cluster = 1.0 / math.sqrt(cluster_size) if cluster_size > 0 else 1.0
    return length / SAMPLER_LENGTH_CAP * cluster


def training_weights(rows: Sequence[ChainRow]) -> np.ndarray:
    """float64 weights of the training chains, cluster sizes counted among `rows` (the
    training set, as the reference counts them after filtering)."""
    sizes = Counter(row.pdb_cluster_id for row in rows if row.pdb_cluster_id != NO_CLUSTER)
    return np.array([sampler_weight(row.sequence_length, sizes.get(row.pdb_cluster_id, 0))
                     for row in rows], np.float64)


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


# ---------------------------------------------------------------------------------------------

def _write_atomic(path: Path, data: bytes) -> None:
    """Write via a dot-named temporary beside `path`, so no reader sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(path) as tmp:
        tmp.write_bytes(data)
