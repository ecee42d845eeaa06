"""OC20 structures on disk: the reference's LMDB format and sciperf's packed npy shards.

A *sample* is one structure, a record inside a container file, named by a path
``<container>/<index>`` (``train/data.0003.lmdb/17``, ``train/shard.0003/17``): sharding,
staging and the loaders handle it as any sample path, and :func:`sample_files` names the
container's files (docs/architecture.md, "The workload contract").

* ``lmdb`` — the reference (spec/oc20.md §2): ``data.%04d.lmdb`` files of pickled PyG 1.x
  graph records, read without running code from the file (:mod:`.lmdb_format`).
* ``npy`` — sciperf's ``shard.%04d/`` directories of plain ``.npy`` arrays, per-atom and
  per-edge arrays concatenated so a structure is a slice (:mod:`.npy_format`).

Every structure is checked as it is read (the reader touches every byte anyway): fields
present with numeric dtypes and consistent shapes, finite positions/forces/cell/energy
within :data:`BOUNDS` (a force of 3e38 eV/Å is finite and trains at `loss inf`), at least
one free atom, edge indices in range, every edge within the model's cutoff (the
reference's unmasked envelope is only right inside it). A failure is one line naming the
file and the key.

Each format is its own module and the graph batching is :mod:`.batching` (``collate``);
their public names are re-exported here, where callers and the workload contract take
them (``data.X``). This module owns what the formats share: sample paths and listing, the
checks above, and the reader the loaders call.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import atomic, pickles
from sciperf.errors import SciperfError
from sciperf.workloads.oc20 import spec
from sciperf.workloads.oc20.batching import collate
from sciperf.workloads.oc20.lmdb_format import (
    LENGTH_KEY,
    RECORD_CLASS,
    REFERENCE_FIELDS,
    Record,
    _lmdb_entries,
    _lmdb_get,
    from_reference,
    shared_lmdb,
    to_reference,
    write_lmdb,
)
from sciperf.workloads.oc20.npy_format import (
    NUMERIC_KINDS,
    SHARD_ARRAYS,
    _mapped,
    _Shard,
    write_shard,
)

__all__ = [
    "BOUNDS",
    "CONTAINER",
    "CUTOFF_SLACK",
    "FORMATS",
    "LENGTH_KEY",
    "NUMERIC_KINDS",
    "RECORD_CLASS",
    "REFERENCE_FIELDS",
    "SHARD_ARRAYS",
    "Record",
    "StructureReader",
    "check_structure",
    "collate",
    "containers",
    "format_containers",
    "from_reference",
    "list_samples",
    "model_reader",
    "payload_bytes",
    "record_count",
    "remove_format",
    "sample_files",
    "shared_lmdb",
    "split_sample",
    "to_reference",
    "write_lmdb",
    "write_shard",
]

FORMATS = ("lmdb", "npy")
CONTAINER = {"lmdb": "data.{:04d}.lmdb", "npy": "shard.{:04d}"}
CUTOFF_SLACK = 1e-4  # Å: float32 positions of an edge found at exactly the cutoff
# |value| a structure may hold, per field: (bound, unit). OC20's structures are slabs of
# 20–200 atoms in cells of a few tens of Å; its DFT forces are O(1–10) eV/Å (the
# reference's force normaliser: std 2.887 eV/Å) and its referenced energies O(1–10) eV
# (mean -0.755, std 2.887 eV; spec/oc20.md §2–3) — even an unreferenced total energy of
# the largest slab is ~1e3 eV. Each bound is at least 10^3 beyond what the dataset holds
# and far below what float32 sums of the loss overflow.
BOUNDS = {"pos": (1e6, "Å"), "cell": (1e6, "Å"), "force": (1e6, "eV/Å"),
          "energy": (1e6, "eV")}


# ----------------------------------------------------------------------------- listing

def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise SciperfError(f"data.format={fmt} is not one of {', '.join(FORMATS)} for oc20")


def containers(root: str | Path, split: str, fmt: str) -> list[Path]:
    """Sorted container files of a split (dot-named temporaries skipped)."""
    _check_format(fmt)
    if split not in spec.SPLITS:
        raise SciperfError(f"unknown split {split}; valid: {', '.join(spec.SPLITS)}")
    folder = Path(root) / split
    if not folder.is_dir():
        raise SciperfError(f"data directory {folder} does not exist (run `sciperf prepare`?)")
    suffix = ".lmdb" if fmt == "lmdb" else ""
    found = sorted(p for p in folder.iterdir() if not p.name.startswith(".")
                   and p.name.startswith("data." if fmt == "lmdb" else "shard.")
                   and p.name.endswith(suffix) and (p.is_dir() == (fmt == "npy")))
    if not found:
        raise SciperfError(f"no {fmt} containers ({CONTAINER[fmt].format(0)}…) in {folder}")
    return found


def list_samples(root: str | Path, split: str, fmt: str, n: int = 0) -> list[Path]:
    """``<container>/<index>`` of every structure of a split in the reference's global order
    (containers sorted, records in key order), the first `n` if n > 0."""
    out: list[Path] = []
    for container in containers(root, split, fmt):
        count = record_count(container, fmt)
        out.extend(container / str(i) for i in range(count))
        if 0 < n <= len(out):
            return out[:n]
    if n > len(out):
        raise SciperfError(f"{Path(root) / split} holds {len(out)} {fmt} structures but {n} "
                           "were requested")
    if not out:
        raise SciperfError(f"{Path(root) / split}: the {fmt} containers hold no structures")
    return out


def record_count(container: Path, fmt: str) -> int:
    """Structures in one container: the LMDB ``length`` key or the shard's ``natoms`` rows."""
    if fmt == "lmdb":
        raw = _lmdb_get(shared_lmdb(container), LENGTH_KEY, container)
        if raw is None:
            raise SciperfError(f"{container}: no '{LENGTH_KEY.decode()}' key (not an OC20 LMDB)")
        length = pickles.loads(raw, f"{container} key length")
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise SciperfError(f"{container} key length: {length!r} is not a record count")
        held = _lmdb_entries(container) - 1  # every key but `length` itself
        if length > held:  # a split of 10^8 phantom paths would exhaust memory listing it
            raise SciperfError(f"{container} key length: {length} records claimed, the file "
                               f"holds {held}")
        return length
    return int(_mapped(container / "natoms.npy").shape[0])


def sample_files(path: Path, fmt: str) -> list[Path]:
    """The files holding sample `path` (its whole container; staging copies each once)."""
    container = path.parent
    if fmt == "lmdb":
        return [container]
    return [container / f"{name}.npy" for name in SHARD_ARRAYS]


def pack(folder: Path, number: int, fmt: str, structures: Sequence[Mapping[str, Any]]
         ) -> list[Path]:
    """Structures as the reader returned them, written as container `number` of a split
    folder (`sciperf data subset`); returns the container's files."""
    path = folder / CONTAINER[fmt].format(number)
    (write_lmdb if fmt == "lmdb" else write_shard)(path, structures)
    return sample_files(path / "0", fmt)


def split_sample(path: Path) -> tuple[Path, int]:
    """``<container>/<index>`` → (container, index); one line for anything else."""
    try:
        return path.parent, int(path.name)
    except ValueError:
        raise SciperfError(f"{path}: not an OC20 sample (<container>/<index>)") from None


# ----------------------------------------------------------------------------- reading
def check_structure(s: Mapping[str, Any], source: str, cutoff: float) -> None:
    """The promises a batch relies on; one line naming `source` for the first broken one."""
    n = len(s["atomic_numbers"])
    e = s["edge_index"].shape[-1] if s["edge_index"].ndim == 2 else -1
    shapes = {"pos": (n, 3), "force": (n, 3), "fixed": (n,), "edge_index": (2, e),
              "cell_offsets": (e, 3), "cell": (3, 3)}
    for key, want in shapes.items():
        if tuple(s[key].shape) != want:
            raise SciperfError(f"{source}: {key} has shape {tuple(s[key].shape)}, expected "
                               f"{want} for {n} atoms and {max(e, 0)} edges")
    for key in (*shapes, "atomic_numbers"):  # text in a record: one line, not a numpy error
        if s[key].dtype.kind not in NUMERIC_KINDS:
            raise SciperfError(f"{source}: {key} has dtype {s[key].dtype}, which is not numeric")
    for key in ("edge_index", "cell_offsets", "atomic_numbers"):  # indices: a float is cut
        if s[key].dtype.kind not in "biu":  # to another atom (the reader converts whole ones)
            raise SciperfError(f"{source}: {key} has dtype {s[key].dtype}, which is not an "
                               "integer type")
    if "natoms" in s and int(s["natoms"]) != n:
        raise SciperfError(f"{source}: natoms={s['natoms']} but {n} atoms")
    for key in ("pos", "force", "cell"):
        if not np.all(np.isfinite(s[key])):
            raise SciperfError(f"{source}: {key} holds NaN or Inf")
    if not np.isfinite(s["energy"]):
        raise SciperfError(f"{source}: energy is {s['energy']}")
    _check_bounds(s, source)
    if not np.any(np.asarray(s["fixed"]) == 0):
        raise SciperfError(f"{source}: no free atom (every atom is fixed: nothing to train on)")
    if n == 0 or s["atomic_numbers"].min() < 1 or s["atomic_numbers"].max() >= spec.NUM_ELEMENTS:
        raise SciperfError(f"{source}: atomic numbers outside 1..{spec.NUM_ELEMENTS - 1}")
    _check_edges(s, source, n, cutoff)


def _check_bounds(s: Mapping[str, Any], source: str) -> None:
    """Finite values beyond :data:`BOUNDS`: one line naming the field and the value."""
    for key, (bound, unit) in BOUNDS.items():
        arr = np.abs(np.asarray(s[key], np.float64))
        if arr.size and arr.max() > bound:
            peak = float(np.asarray(s[key], np.float64).reshape(-1)[int(np.argmax(arr))])
            raise SciperfError(f"{source}: {key} holds {peak:g} {unit}, beyond ±{bound:g} "
                               f"{unit} (no OC20 structure comes near it)")


def _check_edges(s: Mapping[str, Any], source: str, n: int, cutoff: float) -> None:
    """Indices in range, every edge within the cutoff."""
    ei = np.asarray(s["edge_index"], np.int64)
    if ei.size == 0:
        return
    if ei.min() < 0 or ei.max() >= n:
        raise SciperfError(f"{source}: edge_index refers to atoms outside 0..{n - 1}")
    pos, cell = s["pos"].astype(np.float64), s["cell"].astype(np.float64)
    vec = pos[ei[0]] - pos[ei[1]] + np.asarray(s["cell_offsets"], np.float64) @ cell
    longest = float(np.sqrt((vec * vec).sum(axis=1).max()))
    if longest > cutoff + CUTOFF_SLACK:
        raise SciperfError(f"{source}: an edge of {longest:.3f} Å exceeds model.cutoff="
                           f"{cutoff} Å (the graph was built with a larger radius)")


class StructureReader:
    """Reads one structure by sample path, checked (the contract's SampleReader).

    Containers open lazily once per process and thread-safely; the reader pickles without
    them (loader processes reopen). Shapes vary per structure, so ``x_shape`` is empty:
    graph batches are made by :func:`collate`, not stacked."""

    x_shape: tuple[int, ...] = ()
    x_dtype = np.dtype(np.float32)
    y_shape: tuple[int, ...] = ()
    y_dtype = np.dtype(np.float32)

    def __init__(self, fmt: str, cutoff: float):
        _check_format(fmt)
        self.fmt, self.cutoff = fmt, float(cutoff)
        self._open: dict[Path, Any] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"fmt": self.fmt, "cutoff": self.cutoff}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fmt"], state["cutoff"])

    def _container(self, path: Path) -> Any:
        with self._lock:
            if path not in self._open:
                self._open[path] = shared_lmdb(path) if self.fmt == "lmdb" else _Shard(path)
            return self._open[path]

    def __call__(self, path: Path) -> dict[str, Any]:
        container, index = split_sample(Path(path))
        source = f"{container} key {index}"
        if self.fmt == "lmdb":
            raw = _lmdb_get(self._container(container), str(index).encode("ascii"), container)
            if raw is None:
                raise SciperfError(f"{source}: no such record")
            s = from_reference(pickles.loads(raw, source, {RECORD_CLASS: Record}), source)
        else:
            s = self._container(container).structure(index)
        check_structure(s, source, self.cutoff)
        return s

    def close(self) -> None:
        """Drop this reader's containers: shards are memory maps freed with the arrays;
        LMDB environments are the process's (:func:`shared_lmdb`) and stay open for others."""
        with self._lock:
            self._open.clear()


def model_reader(root: str | Path, fmt: str, model: spec.ModelSpec) -> StructureReader:
    """The contract's ``Dataset.reader``: edges are checked against the model's cutoff."""
    return StructureReader(fmt, float(model.cutoff))


def payload_bytes(model: spec.ModelSpec) -> int:
    """A typical OC20 structure in the npy format: ~73 atoms and up to 50 edges each
    (spec/oc20.md §2: 2M structures of 20–200 atoms; float32 positions and forces)."""
    atoms = 73
    edges = atoms * spec.MAX_NEIGHBOURS
    return atoms * (12 + 12 + 1 + 1 + 1) + edges * (8 + 3) + 9 * 4 + 8 * 3 + 8


# ---------------------------------------------------------------- containers of a format

def format_containers(root: Path, fmt: str) -> list[Path]:
    """A format's containers in every split (hidden temporaries of a write too)."""
    stem = "data." if fmt == "lmdb" else "shard."
    return [path for split in spec.SPLITS if (root / split).is_dir()
            for path in sorted((root / split).iterdir())
            if path.name.startswith((stem, "." + stem))]


def remove_format(root: Path, fmt: str) -> None:
    """Delete a format's containers from every split (before a regeneration)."""
    for path in format_containers(root, fmt):
        atomic.remove(path)
