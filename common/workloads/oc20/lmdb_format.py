"""OC20's reference format: LMDB files of pickled PyG graph records, read without running code.

spec/oc20.md §2: ``data.%04d.lmdb`` files (subdir=False) per split, keys ``b"0"…`` plus
``b"length"``, each value ``pickle.dumps`` of a PyG 1.x ``Data`` of torch tensors. Records
are read with :mod:`sciperf.data.pickles` — an allow-list unpickler that never runs code
from the file — and written by it without torch.

This module owns the files and the records: one read-only environment per file and
process (py-lmdb's rule), a truncated or corrupt file as one line naming it, a record →
sciperf's structure dict (:func:`from_reference`) and back (:func:`to_reference`), and the
atomic writer. Sample paths, the checks every structure passes and the reader the loaders
call are :mod:`sciperf.workloads.oc20.data`'s, shared with the npy shards.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import atomic, pickles
from sciperf.errors import SciperfError

__all__ = [
    "LENGTH_KEY",
    "RECORD_CLASS",
    "REFERENCE_FIELDS",
    "Record",
    "from_reference",
    "shared_lmdb",
    "to_reference",
    "write_lmdb",
]

RECORD_CLASS = ("torch_geometric.data.data", "Data")  # PyG 1.x, as the reference pickles
LENGTH_KEY = b"length"
REFERENCE_FIELDS = ("pos", "cell", "atomic_numbers", "natoms", "edge_index", "cell_offsets",
                    "y", "force", "fixed", "tags", "sid", "fid")


class Record:
    """What a reference record unpickles into (attributes land in ``__dict__``): a plain
    class standing in for PyG's ``Data``, allowed by name, never PyG itself."""


# -------------------------------------------------------------------------- environments

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


def _lmdb_entries(container: Path) -> int:
    """Keys in an LMDB file (its B-tree's count: no record is read)."""
    import lmdb

    try:
        return int(shared_lmdb(container).stat()["entries"])
    except lmdb.Error as exc:
        raise SciperfError(f"{container}: corrupt LMDB file ({exc})") from None


# ------------------------------------------------------------------------------- records

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


# ------------------------------------------------------------------------------- writing

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
