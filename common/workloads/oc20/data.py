"""OC20 structures on disk: the reference's LMDB format and sciperf's packed npy shards.

A *sample* is one structure, a record inside a container file, named by a path
``<container>/<index>`` (``train/data.0003.lmdb/17``, ``train/shard.0003/17``): sharding,
staging and the loaders handle it as any sample path, and :func:`sample_files` names the
container's files (docs/architecture.md, "The workload contract").

* ``lmdb`` — the reference (spec/oc20.md §2): ``data.%04d.lmdb`` files (subdir=False) per
  split, keys ``b"0"…`` plus ``b"length"``, each value ``pickle.dumps`` of a PyG 1.x ``Data``
  of torch tensors. Read with :mod:`sciperf.data.pickles` — an allow-list unpickler that
  never runs code from the file — and written by it without torch.
* ``npy`` — ``shard.%04d/`` directories of plain ``.npy`` arrays (no pickles: numpy's loader
  refuses object arrays): per-structure ``natoms``/``nedges``/``cell``/``energy``/``sid``,
  per-atom and per-edge arrays concatenated; offsets are cumulative sums of the counts, so a
  structure is a slice and a batch a concatenation — no Python loop per atom or edge.

Every structure is checked as it is read (the reader touches every byte anyway): fields
present with numeric dtypes and consistent shapes, finite positions/forces/cell, at least
one free atom, edge indices in range, every edge within the model's cutoff (the
reference's unmasked envelope is only right inside it). A failure is one line naming the
file and the key.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import atomic, npy, pickles
from sciperf.errors import SciperfError
from sciperf.workloads.oc20 import spec

FORMATS = ("lmdb", "npy")
RECORD_CLASS = ("torch_geometric.data.data", "Data")  # PyG 1.x, as the reference pickles
LENGTH_KEY = b"length"
CONTAINER = {"lmdb": "data.{:04d}.lmdb", "npy": "shard.{:04d}"}
# the npy shard's arrays: name → (dtype, unit the first axis counts)
SHARD_ARRAYS: dict[str, tuple[str, str]] = {
    "natoms": ("int32", "structure"), "nedges": ("int32", "structure"),
    "cell": ("float32", "structure"), "energy": ("float64", "structure"),
    "sid": ("int64", "structure"), "fid": ("int64", "structure"),
    "pos": ("float32", "atom"), "atomic_numbers": ("uint8", "atom"),
    "force": ("float32", "atom"), "fixed": ("uint8", "atom"), "tags": ("int8", "atom"),
    "edge_index": ("int32", "edge"), "cell_offsets": ("int8", "edge"),
}
REFERENCE_FIELDS = ("pos", "cell", "atomic_numbers", "natoms", "edge_index", "cell_offsets",
                    "y", "force", "fixed", "tags", "sid", "fid")
NUMERIC_KINDS = "biuf"  # numpy dtype kinds of numbers (not complex, text, records)
CUTOFF_SLACK = 1e-4  # Å: float32 positions of an edge found at exactly the cutoff


class Record:
    """What a reference record unpickles into (attributes land in ``__dict__``): a plain
    class standing in for PyG's ``Data``, allowed by name, never PyG itself."""


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


def _lmdb_entries(container: Path) -> int:
    """Keys in an LMDB file (its B-tree's count: no record is read)."""
    import lmdb

    try:
        return int(shared_lmdb(container).stat()["entries"])
    except lmdb.Error as exc:
        raise SciperfError(f"{container}: corrupt LMDB file ({exc})") from None


def _mapped(path: Path) -> np.ndarray:
    """A shard array, memory-mapped; one line naming the file when it is unusable."""
    try:
        return npy.mapped(path)
    except (OSError, ValueError) as exc:
        raise SciperfError(f"{path}: unreadable npy array ({exc})") from None


def sample_files(path: Path, fmt: str) -> list[Path]:
    """The files holding sample `path` (its whole container; staging copies each once)."""
    container = path.parent
    if fmt == "lmdb":
        return [container]
    return [container / f"{name}.npy" for name in SHARD_ARRAYS]


def split_sample(path: Path) -> tuple[Path, int]:
    """``<container>/<index>`` → (container, index); one line for anything else."""
    try:
        return path.parent, int(path.name)
    except ValueError:
        raise SciperfError(f"{path}: not an OC20 sample (<container>/<index>)") from None


# ----------------------------------------------------------------------------- reading

def _open_lmdb(path: Path):  # noqa: ANN202 - lmdb.Environment
    """Read-only, as the reference opens them (no lock file, no readahead)."""
    import lmdb

    if not path.is_file():
        raise SciperfError(f"{path}: no such LMDB file")
    try:
        env = lmdb.open(str(path), subdir=False, readonly=True, lock=False, readahead=False,
                        meminit=False, max_readers=64)
    except lmdb.Error as exc:
        raise SciperfError(f"{path}: not a readable LMDB file ({exc})") from None
    # A truncated copy (an interrupted transfer) opens fine, but touching a page mapped past
    # the end of the file kills the process with SIGBUS: compare with the pages in use.
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    size = path.stat().st_size
    if size < needed:
        env.close()
        raise SciperfError(f"{path}: truncated LMDB file ({size} of {needed} bytes)")
    return env


_ENVS: dict[tuple[int, int], tuple[str, Any]] = {}  # (st_dev, st_ino) → (path, environment)
_ENVS_LOCK = threading.Lock()


def shared_lmdb(path: Path) -> Any:
    """This process's one read-only environment of LMDB file `path`.

    py-lmdb refuses to open a file already open in the process (LMDB's rule: its locks
    belong to the process), so the listing, every reader, a reader's unpickled copy and a
    forked loader child (which may use its parent's read-only environment, and may not
    reopen it) share one per file, kept open for the process's life. Keyed by inode: a
    file replaced under the same name (a regeneration) gets a fresh environment."""
    try:
        st = path.stat()
    except OSError:
        raise SciperfError(f"{path}: no such LMDB file") from None
    key = (st.st_dev, st.st_ino)
    with _ENVS_LOCK:
        if key not in _ENVS:
            for stale in [k for k, (name, _) in _ENVS.items() if name == str(path)]:
                del _ENVS[stale]  # the replaced file's environment closes with its last user
            _ENVS[key] = (str(path), _open_lmdb(path))
        return _ENVS[key][1]


def _lmdb_get(env: Any, key: bytes, path: Path) -> bytes | None:
    """One value (a copy); a damaged page is one line naming the file and key."""
    import lmdb

    try:
        with env.begin() as txn:
            return txn.get(key)
    except lmdb.Error as exc:
        raise SciperfError(f"{path} key {key.decode()}: corrupt LMDB file ({exc})") from None


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


def from_reference(rec: Any, source: str) -> dict[str, Any]:
    """A reference record (``Record`` with the preprocessing's fields) → a structure."""
    state = getattr(rec, "__dict__", None)
    if not isinstance(state, dict):
        raise SciperfError(f"{source}: not an OC20 graph record ({type(rec).__name__})")
    missing = [f for f in REFERENCE_FIELDS if f not in state]
    if missing:
        raise SciperfError(f"{source}: record lacks field(s) {', '.join(missing)}")
    arr = {k: state[k] for k in REFERENCE_FIELDS}
    try:
        return {"pos": np.asarray(arr["pos"], np.float32),
                "atomic_numbers": _integral(arr["atomic_numbers"], f"{source} atomic_numbers"),
                "force": np.asarray(arr["force"], np.float32),
                "fixed": np.asarray(arr["fixed"]), "tags": np.asarray(arr["tags"]),
                "cell": np.asarray(arr["cell"], np.float32).reshape(3, 3),
                "energy": float(arr["y"]),
                **{key: _whole_number(arr[key], f"{source} {key}")
                   for key in ("sid", "fid", "natoms")},
                **{key: _integral(arr[key], f"{source} {key}")
                   for key in ("edge_index", "cell_offsets")}}
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(1e400)
        raise SciperfError(f"{source}: malformed record ({exc})") from None


def _whole_number(value: Any, what: str) -> int:
    """One integer (a Python int, a float PyG kept, a one-element tensor): ``int()`` alone
    would truncate 3.7 to 3 and raise a bare OverflowError for inf."""
    arr = _integral(value, what)
    if arr.size != 1:
        raise SciperfError(f"{what}: {arr.size} values where one number belongs")
    return int(arr.reshape(-1)[0])


def _integral(values: Any, what: str) -> np.ndarray:
    """Integers stored as floats (PyG keeps atomic numbers as float tensors) → int64;
    a fractional, non-finite or int64-overflowing value is refused rather than truncated
    to another element, atom or image (a fractional edge index passed every check, then
    failed in np.bincount naming no record)."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise SciperfError(f"{what}: not whole numbers")
        if arr.size and np.abs(arr).max() >= 2.0**63:
            raise SciperfError(f"{what}: {np.abs(arr).max():g} does not fit int64")
    elif arr.dtype.kind not in "iub":
        raise SciperfError(f"{what}: dtype {arr.dtype} is not numeric")
    return arr.astype(np.int64)


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
    if not np.any(np.asarray(s["fixed"]) == 0):
        raise SciperfError(f"{source}: no free atom (every atom is fixed: nothing to train on)")
    if n == 0 or s["atomic_numbers"].min() < 1 or s["atomic_numbers"].max() >= spec.NUM_ELEMENTS:
        raise SciperfError(f"{source}: atomic numbers outside 1..{spec.NUM_ELEMENTS - 1}")
    _check_edges(s, source, n, cutoff)


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


# ----------------------------------------------------------------------------- batching

def collate(structures: Sequence[Mapping[str, Any]]) -> tuple[dict[str, np.ndarray],
                                                                dict[str, np.ndarray]]:
    """Structures → (model inputs, labels) of one batch, vectorised.

    Inputs: ``atomic_numbers`` int64 [N], ``pos`` float32 [N,3], ``cell`` float32 [B,3,3],
    ``batch`` int64 [N] (graph of each atom), ``edge_index`` int64 [2,E] (neighbour j,
    centre i; batch-global atom indices), ``cell_offsets`` float32 [E,3]. Labels: ``force``
    float32 [N,3], ``fixed`` float32 [N], ``energy`` float32 [B]."""
    natoms = np.array([len(s["atomic_numbers"]) for s in structures], np.int64)
    nedges = np.array([s["edge_index"].shape[1] for s in structures], np.int64)
    first = np.cumsum(natoms) - natoms
    edges = np.concatenate([s["edge_index"] for s in structures], axis=1).astype(np.int64)
    edges += np.repeat(first, nedges)[None, :]
    inputs = {
        "atomic_numbers": np.concatenate([s["atomic_numbers"] for s in structures]
                                         ).astype(np.int64),
        "pos": np.concatenate([s["pos"] for s in structures]).astype(np.float32, copy=False),
        "cell": np.stack([s["cell"] for s in structures]).astype(np.float32, copy=False),
        "batch": np.repeat(np.arange(len(structures), dtype=np.int64), natoms),
        "edge_index": edges,
        "cell_offsets": np.concatenate([s["cell_offsets"] for s in structures]).astype(np.float32),
    }
    labels = {
        "force": np.concatenate([s["force"] for s in structures]).astype(np.float32, copy=False),
        "fixed": np.concatenate([s["fixed"] for s in structures]).astype(np.float32),
        "energy": np.array([s["energy"] for s in structures], np.float32),
    }
    return inputs, labels


# ----------------------------------------------------------------------------- writing

def to_reference(s: Mapping[str, Any]) -> dict[str, Any]:
    """A structure → the reference record's fields and dtypes (spec/oc20.md §2)."""
    n = len(s["atomic_numbers"])
    return {"pos": np.asarray(s["pos"], np.float32),
            "cell": np.asarray(s["cell"], np.float32).reshape(1, 3, 3),
            "atomic_numbers": np.asarray(s["atomic_numbers"], np.float32), "natoms": n,
            "edge_index": np.asarray(s["edge_index"], np.int64),
            "cell_offsets": np.asarray(s["cell_offsets"], np.int64),
            "y": float(s["energy"]), "force": np.asarray(s["force"], np.float32),
            "fixed": np.asarray(s["fixed"], np.float32), "tags": np.asarray(s["tags"], np.int64),
            "sid": int(s.get("sid", 0)), "fid": int(s.get("fid", 0))}


def write_lmdb(path: Path, structures: Sequence[Mapping[str, Any]]) -> None:
    """One reference container, atomically: written beside as a dot-file, then renamed."""
    import lmdb

    tmp = path.with_name(f".{path.name}.tmp")
    lock = tmp.with_name(tmp.name + "-lock")
    atomic.remove(tmp)
    atomic.remove(lock)
    try:
        env = lmdb.open(str(tmp), subdir=False, map_size=1 << 36, meminit=False,
                        map_async=True)
        try:
            with env.begin(write=True) as txn:
                for i, s in enumerate(structures):
                    txn.put(str(i).encode("ascii"),
                            pickles.dumps(to_reference(s), RECORD_CLASS))
                txn.put(LENGTH_KEY,
                        pickle.dumps(len(structures), protocol=pickle.HIGHEST_PROTOCOL))
            env.sync(True)
        finally:
            env.close()
        os.replace(tmp, path)
    except (OSError, lmdb.Error) as exc:  # a full disk: lmdb's "Input/output error"
        reason = atomic.why(exc).replace(f"{tmp}: ", "")  # lmdb names its temporary
        raise SciperfError(f"{path}: cannot be written ({reason})") from None
    finally:  # a failure before the rename leaves no dot-file behind
        atomic.remove(lock)
        atomic.remove(tmp)


def write_shard(folder: Path, structures: Sequence[Mapping[str, Any]]) -> None:
    """One npy shard, atomically: the arrays go to a dot-directory renamed into place."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    atomic.remove(tmp)
    tmp.mkdir(parents=True)
    try:
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
