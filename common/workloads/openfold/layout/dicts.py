"""``dicts/<pdb_id[1:3]>``: pickles of {pdb_id: entry}, one per 2nd-and-3rd-character group
(REF ``scripts/preprocess_pdb_mmcif.py``, ``openfold/data/mmcif.py``).

An entry holds ``atoms`` per author chain as ``(zlib(bytes), shape)`` of float32 [L, 37, 3]
positions and bool [L, 37] masks, and nothing but builtin types, so it is read through
:func:`sciperf.data.pickles.loads_builtins`, which resolves no class at all. A pickle that
names a class, corrupt zlib or a value of the wrong type is a :class:`LayoutError` naming
the file and entry.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from sciperf.data import pickles
from sciperf.errors import SciperfError
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.layout.paths import DICTS_DIR, LayoutError, is_date, write_atomic


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
    "release_date": (is_date, "a YYYY-MM-DD date"),
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
        write_atomic(path, pickles.dumps_builtins({k: group[k] for k in sorted(group)}))
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
