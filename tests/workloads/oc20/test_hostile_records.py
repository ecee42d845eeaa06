"""OC20 inputs built to break the reader and the config: reference records whose indices
are floats (cut to other atoms, then a TypeError in np.bincount naming no record) or whose
counts are infinite (a bare OverflowError), an LMDB `length` key claiming 10^8 records (a
listing that ate the machine's memory), and synthetic-generator keys that only failed
after `sciperf prepare` had created data.dir. Each is one line naming the file and key
(or the config key and value), exit 2 on the command line.

Files are tiny: two-atom structures written by the format's own writer, one record then
rewritten in place with the lmdb package."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciperf.config import compose
from sciperf.data import pickles
from sciperf.errors import SciperfError
from sciperf.tools.prepare import prepare
from sciperf.workloads.oc20 import data

CUTOFF = 6.0
RECORDS = 8
KEY = 7  # the rewritten record: the last one, after seven good ones


def _structure() -> dict[str, Any]:
    """Two atoms 1 Å apart, one free, joined by an edge each way."""
    return {"atomic_numbers": np.array([1, 8], np.uint8),
            "pos": np.array([[0, 0, 0], [1, 0, 0]], np.float32),
            "cell": np.eye(3, dtype=np.float32) * 10,
            "edge_index": np.array([[0, 1], [1, 0]], np.int32),
            "cell_offsets": np.zeros((2, 3), np.int8),
            "force": np.zeros((2, 3), np.float32), "fixed": np.array([0, 1], np.uint8),
            "tags": np.zeros(2, np.int8), "energy": 1.0}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Both splits, one reference LMDB of 8 good records each (a fresh file per test:
    the process keeps one environment per LMDB inode)."""
    for split in ("train", "validation"):
        (tmp_path / split).mkdir()
        data.write_lmdb(tmp_path / split / data.CONTAINER["lmdb"].format(0),
                        [_structure() for _ in range(RECORDS)])
    return tmp_path


def _container(root: Path) -> Path:
    return root / "train" / data.CONTAINER["lmdb"].format(0)


def _rewrite(container: Path, key: bytes, value: bytes) -> None:
    """Replace one value of an LMDB file (before this process reads it)."""
    import lmdb

    env = lmdb.open(str(container), subdir=False, map_size=1 << 26)
    with env.begin(write=True) as txn:
        txn.put(key, value)
    env.close()
    Path(f"{container}-lock").unlink(missing_ok=True)


def _rewrite_record(container: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Record KEY as the reference pickles it, with `change` applied to its fields."""
    fields = data.to_reference(_structure())
    change(fields)
    _rewrite(container, str(KEY).encode(), pickles.dumps(fields, data.RECORD_CLASS))


def _read_all(root: Path) -> list[dict[str, Any]]:
    reader = data.StructureReader("lmdb", CUTOFF)
    try:
        return [reader(p) for p in data.list_samples(root, "train", "lmdb")]
    finally:
        reader.close()


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda fields: fields.update({key: value})


def _as_float(key: str, shift: float) -> Callable[[dict[str, Any]], None]:
    return lambda fields: fields.update({key: fields[key].astype(np.float32) + shift})


BAD_RECORDS = {  # case → (change to record KEY, the error after "<lmdb> key 7 ")
    "fractional-edge-index": (_as_float("edge_index", 0.5), "edge_index: not whole numbers"),
    "nan-edge-index": (_set("edge_index", np.full((2, 2), np.nan, np.float32)),
                       "edge_index: not whole numbers"),
    "fractional-cell-offsets": (_as_float("cell_offsets", 0.5),
                                "cell_offsets: not whole numbers"),
    "infinite-natoms": (_set("natoms", float("inf")), "natoms: not whole numbers"),
    "infinite-sid": (_set("sid", float("inf")), "sid: not whole numbers"),
    "fractional-sid": (_set("sid", 3.7), "sid: not whole numbers"),  # was cut to 3
    "huge-fid": (_set("fid", 1e30), "fid: 1e+30 does not fit int64"),
    "two-natoms": (_set("natoms", np.array([2, 2])), "natoms: 2 values where one number belongs"),
}


@pytest.mark.parametrize("case", BAD_RECORDS)
def test_a_record_with_bad_numbers_is_one_line(root: Path, case: str) -> None:
    change, words = BAD_RECORDS[case]
    _rewrite_record(_container(root), change)
    with pytest.raises(SciperfError) as err:
        _read_all(root)
    assert str(err.value) == f"{_container(root)} key {KEY} {words}"


def test_whole_float_edges_are_read_as_integers(root: Path) -> None:
    """Indices PyG stored as float tensors are fine when whole: converted, not refused,
    so the FLOP count's np.bincount and the models get int64."""
    _rewrite_record(_container(root), _as_float("edge_index", 0.0))
    s = _read_all(root)[KEY]
    assert s["edge_index"].dtype == np.int64
    np.testing.assert_array_equal(s["edge_index"], _structure()["edge_index"])
    assert s["sid"] == 0 and isinstance(s["natoms"], int)


@pytest.mark.parametrize("key", ["edge_index", "cell_offsets"])
def test_structure_check_refuses_float_indices(key: str) -> None:
    """The check itself (what any format's reader ends with) wants integer indices."""
    s = _structure()
    s[key] = s[key].astype(np.float64)
    with pytest.raises(SciperfError) as err:
        data.check_structure(s, "src key 3", CUTOFF)
    assert str(err.value) == f"src key 3: {key} has dtype float64, which is not an integer type"


def test_a_length_beyond_the_records_is_refused_before_listing(root: Path) -> None:
    """10^8 claimed in a file of 8: one line, no 10^8-path list in memory."""
    import pickle

    _rewrite(_container(root), data.LENGTH_KEY, pickle.dumps(10**8))
    with pytest.raises(SciperfError) as err:
        data.list_samples(root, "train", "lmdb")
    assert str(err.value) == (f"{_container(root)} key length: 100000000 records claimed, "
                              f"the file holds {RECORDS}")


def test_a_boolean_length_is_not_a_count(root: Path) -> None:
    import pickle

    _rewrite(_container(root), data.LENGTH_KEY, pickle.dumps(True))
    with pytest.raises(SciperfError, match=r"key length: True is not a record count$"):
        data.record_count(_container(root), "lmdb")


def test_a_length_below_the_records_is_read(root: Path) -> None:
    """Fewer claimed than held is the file's choice (extra keys are never listed)."""
    import pickle

    _rewrite(_container(root), data.LENGTH_KEY, pickle.dumps(3))
    assert len(data.list_samples(root, "train", "lmdb")) == 3


def test_cli_refuses_fractional_edges_in_one_line(root: Path, sciperf_cmd: list[str]) -> None:
    """`sciperf prepare data.source=existing` on the file: exit 2, one line, no traceback
    (exit 0 before, then a np.bincount traceback in `sciperf train`)."""
    _rewrite_record(_container(root), _as_float("edge_index", 0.5))
    proc = subprocess.run([*sciperf_cmd, "prepare", "workload=oc20", "data.source=existing",
                           "data.format=lmdb", f"data.dir={root}", f"model.cutoff={CUTOFF}",
                           f"data.train_samples={RECORDS}", f"data.eval_samples={RECORDS}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert errors == [f"sciperf prepare: error: {_container(root)} key {KEY} edge_index: "
                      "not whole numbers"], proc.stderr


# ------------------------------------------------------------------ generator keys

GENERATOR_KEYS = {  # override → the whole message
    "data.slab=[3,3]": "data.slab=[3, 3]: three positive sizes (cells a, b, layers) with "
                       "more than 2 layers (the bottom 2 are fixed)",
    "data.metals=[Xx]": "data.metals=[Xx]: EMT slabs support Cu, Ag, Au, Ni, Pd, Pt",
    "data.max_neighbours=0": "data.max_neighbours=0 must be >= 1",
    "data.structures_per_container=0": "data.structures_per_container=0 must be >= 1",
    "data.adsorbate_probability=2": "data.adsorbate_probability=2.0 must be in [0, 1]",
    "data.rattle=-0.1": "data.rattle=-0.1 must be >= 0 (Å)",
}


@pytest.mark.parametrize("override", GENERATOR_KEYS)
def test_generator_keys_are_refused_when_the_config_is_composed(override: str) -> None:
    """What `sciperf show`, `train` and `prepare` compose: one key and value per message."""
    with pytest.raises(SciperfError) as err:
        compose(["workload=oc20", "experiment=mini", override])
    assert str(err.value) == GENERATOR_KEYS[override]


def test_a_refused_request_creates_no_data_dir(tmp_path: Path) -> None:
    """Synthetic counts pass the config check (0 means 'all' for existing data) but not
    the generator: refused before data.dir is made, not after."""
    target = tmp_path / "nested" / "data"
    cfg = compose(["workload=oc20", "experiment=mini", f"data.dir={target}",
                   "data.train_samples=0", "data.eval_samples=4"])
    with pytest.raises(SciperfError, match="at least one structure per split"):
        prepare(cfg)
    assert not (tmp_path / "nested").exists()
