"""sciperf's packed npy shard format for OC20: plain arrays, a structure is a slice.

``shard.%04d/`` directories of plain ``.npy`` arrays (no pickles: numpy's loader refuses
object arrays): per-structure ``natoms``/``nedges``/``cell``/``energy``/``sid``, per-atom
and per-edge arrays concatenated; offsets are cumulative sums of the counts, so a
structure is a slice and a batch a concatenation — no Python loop per atom or edge.

This module owns the shard's arrays (:data:`SHARD_ARRAYS`: name, compact dtype, what the
first axis counts), opening a shard checked (dtypes that can hold the values, shapes that
agree with the counts), one structure as a copy of its slices, and the atomic writer that
narrows values to the compact dtypes or refuses them. Sample paths, the checks every
structure passes and the reader the loaders call are :mod:`sciperf.workloads.oc20.data`'s,
shared with the reference LMDB format.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import atomic, npy
from sciperf.errors import SciperfError

__all__ = ["NUMERIC_KINDS", "SHARD_ARRAYS", "write_shard"]

# the npy shard's arrays: name → (dtype, unit the first axis counts)
SHARD_ARRAYS: dict[str, tuple[str, str]] = {
    "natoms": ("int32", "structure"), "nedges": ("int32", "structure"),
    "cell": ("float32", "structure"), "energy": ("float64", "structure"),
    "sid": ("int64", "structure"), "fid": ("int64", "structure"),
    "pos": ("float32", "atom"), "atomic_numbers": ("uint8", "atom"),
    "force": ("float32", "atom"), "fixed": ("uint8", "atom"), "tags": ("int8", "atom"),
    "edge_index": ("int32", "edge"), "cell_offsets": ("int8", "edge"),
}
NUMERIC_KINDS = "biuf"  # numpy dtype kinds of numbers (not complex, text, records)


# ------------------------------------------------------------------------------- reading

def _mapped(path: Path) -> np.ndarray:
    """A shard array, memory-mapped; one line naming the file when it is unusable."""
    try:
        return npy.mapped(path)
    except (OSError, ValueError) as exc:
        raise SciperfError(f"{path}: unreadable npy array ({exc})") from None


def _check_shard_dtype(path: Path, dtype: np.dtype, want: str) -> None:
    """One line naming the array file whose dtype cannot hold its values: text would fail
    later in numpy ufuncs naming no file, floats cannot index atoms or edges. Other widths
    of the right kind (float64 positions, int64 counts) are read as they are."""
    integral = np.dtype(want).kind in "iu"
    if dtype.kind not in ("biu" if integral else NUMERIC_KINDS):
        what = "an integer" if integral else "a numeric"
        raise SciperfError(f"{path}: dtype {dtype} is not {what} type (the shard format "
                           f"stores {want})")


class _Shard:
    """An open npy shard: memory-mapped arrays and the structure → atom/edge offsets."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.arrays = {name: _mapped(folder / f"{name}.npy") for name in SHARD_ARRAYS}
        for name, arr in self.arrays.items():
            _check_shard_dtype(folder / f"{name}.npy", arr.dtype, SHARD_ARRAYS[name][0])
        counts = {"structure": len(self.arrays["natoms"])}
        self.atom_ptr = np.r_[0, np.cumsum(self.arrays["natoms"], dtype=np.int64)]
        self.edge_ptr = np.r_[0, np.cumsum(self.arrays["nedges"], dtype=np.int64)]
        counts.update(atom=int(self.atom_ptr[-1]), edge=int(self.edge_ptr[-1]))
        for name, (_, unit) in SHARD_ARRAYS.items():
            arr = self.arrays[name]
            axis = 1 if name == "edge_index" else 0
            if arr.ndim <= axis or arr.shape[axis] != counts[unit]:
                raise SciperfError(f"{folder / name}.npy: shape {arr.shape} does not hold "
                                   f"{counts[unit]} {unit}s")

    def structure(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self.arrays["natoms"]):
            raise SciperfError(f"{self.folder}: no structure {index}")
        a0, a1 = self.atom_ptr[index], self.atom_ptr[index + 1]
        e0, e1 = self.edge_ptr[index], self.edge_ptr[index + 1]
        a = self.arrays
        out: dict[str, Any] = {k: np.array(a[k][a0:a1])
                               for k in ("pos", "atomic_numbers", "force", "fixed", "tags")}
        out.update(cell=np.array(a["cell"][index]), energy=float(a["energy"][index]),
                   sid=int(a["sid"][index]), fid=int(a["fid"][index]),
                   edge_index=np.array(a["edge_index"][:, e0:e1]),
                   cell_offsets=np.array(a["cell_offsets"][e0:e1]))
        return out


# ------------------------------------------------------------------------------- writing

def write_shard(folder: Path, structures: Sequence[Mapping[str, Any]]) -> None:
    """One npy shard, atomically: the arrays go to a dot-directory renamed into place."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    atomic.remove(tmp)
    try:
        tmp.mkdir(parents=True)
        _write_arrays(tmp, folder, structures)
        atomic.remove(folder)
        os.replace(tmp, folder)
    except OSError as exc:
        raise SciperfError(f"{folder}: cannot be written ({atomic.why(exc)})") from None
    finally:  # a failure before the rename (a value too wide for its dtype) leaves nothing
        atomic.remove(tmp)


def _write_arrays(tmp: Path, folder: Path, structures: Sequence[Mapping[str, Any]]) -> None:
    """The shard's arrays into `tmp` (errors name the final `folder`)."""
    cat = {
        "natoms": [len(s["atomic_numbers"]) for s in structures],
        "nedges": [s["edge_index"].shape[1] for s in structures],
        "cell": [np.asarray(s["cell"]).reshape(3, 3) for s in structures],
        "energy": [s["energy"] for s in structures],
        "sid": [s.get("sid", 0) for s in structures], "fid": [s.get("fid", 0) for s in structures],
    }
    for name, (dtype, unit) in SHARD_ARRAYS.items():
        if unit == "structure":
            arr = np.asarray(cat[name], dtype)
        else:
            axis = 1 if name == "edge_index" else 0
            arr = np.concatenate([np.asarray(s[name]) for s in structures], axis=axis)
            arr = _narrow(arr, dtype, f"{folder}/{name}")
        np.save(tmp / f"{name}.npy", arr, allow_pickle=False)


def _narrow(arr: np.ndarray, dtype: str, what: str) -> np.ndarray:
    """Cast to the shard's compact dtype, refusing values it cannot hold."""
    want = np.dtype(dtype)
    if want.kind in "iu" and arr.size:
        info = np.iinfo(want)
        if arr.min() < info.min or arr.max() > info.max:
            raise SciperfError(f"{what}: values {arr.min()}..{arr.max()} do not fit {dtype}")
    return arr.astype(want)
