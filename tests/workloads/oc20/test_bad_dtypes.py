"""OC20 arrays whose dtype cannot hold what they store (text in an npy shard, floats where
atoms are counted, text in a reference record): one line naming the file or record and the
array, never a numpy TypeError from deep inside the structure checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.oc20 import data

CUTOFF = 6.0


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
def shard(tmp_path: Path) -> Path:
    """A one-structure npy shard written by the format's own writer (and readable)."""
    folder = tmp_path / "train" / data.CONTAINER["npy"].format(0)
    data.write_shard(folder, [_structure()])
    return folder


def _read(shard: Path) -> dict[str, Any]:
    reader = data.StructureReader("npy", CUTOFF)
    try:
        return reader(shard / "0")
    finally:
        reader.close()


@pytest.mark.parametrize(("name", "dtype", "words"), [
    ("pos", str, "is not a numeric type (the shard format stores float32)"),
    ("force", "S8", "is not a numeric type"),
    ("natoms", np.float64, "is not an integer type (the shard format stores int32)"),
    ("edge_index", np.float32, "is not an integer type"),
])
def test_shard_array_of_the_wrong_dtype_names_the_file(shard: Path, name: str, dtype: Any,
                                                       words: str) -> None:
    path = shard / f"{name}.npy"
    np.save(path, np.load(path).astype(dtype))
    with pytest.raises(SciperfError) as err:
        _read(shard)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}: dtype {np.load(path).dtype} "), text
    assert words in text, text


def test_other_widths_of_the_right_kind_are_read(shard: Path) -> None:
    """float64 positions and int64 counts (a converter's choice) are still fine; a string
    shard array beside them is still refused."""
    for name, dtype in (("pos", np.float64), ("natoms", np.int64)):
        np.save(shard / f"{name}.npy", np.load(shard / f"{name}.npy").astype(dtype))
    np.testing.assert_array_equal(_read(shard)["pos"], _structure()["pos"])
    np.save(shard / "cell.npy", np.load(shard / "cell.npy").astype(str))
    with pytest.raises(SciperfError, match="cell.npy: dtype <U32 is not a numeric type"):
        _read(shard)


@pytest.mark.parametrize("key", ["edge_index", "pos", "fixed"])
def test_a_record_with_text_arrays_is_one_line(key: str) -> None:
    """A reference record is a pickle: its fields may hold text, read as such (the LMDB
    path converts only some of them)."""
    s = _structure()
    s[key] = s[key].astype(str)
    with pytest.raises(SciperfError) as err:
        data.check_structure(s, "train/data.0000.lmdb key 3", CUTOFF)
    assert str(err.value) == (f"train/data.0000.lmdb key 3: {key} has dtype {s[key].dtype}, "
                              "which is not numeric")
