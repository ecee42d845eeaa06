"""The thread-safe .npy reader every loader thread uses (sciperf.data.npy)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sciperf.data import npy


@pytest.mark.parametrize("arr", [
    np.arange(24, dtype=np.int16).reshape(2, 3, 4),
    np.asfortranarray(np.arange(15, dtype=np.float32).reshape(3, 5)),
    np.ones((), np.float64),
    np.zeros((0, 4), np.float32),
])
def test_load_equals_numpy(arr, tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, arr)
    got = npy.load(path)
    ref = np.load(path)
    assert got.dtype == ref.dtype and got.shape == ref.shape and np.array_equal(got, ref)
    assert got.flags.writeable


def test_truncated_and_object_files_are_value_errors(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.arange(100))
    with open(path, "r+b") as fh:
        fh.truncate(200)
    with pytest.raises(ValueError, match="truncated"):
        npy.load(path)
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="object arrays"):
        npy.load(path)


@pytest.mark.parametrize("reader", [npy.load, npy.mapped,
                                    lambda p: npy.load_checked(p, lambda a: True)[0]])
def test_bytes_after_the_array_are_value_errors(reader, tmp_path):
    """A header describing less than the file holds (two arrays concatenated) is not read
    as the first array alone."""
    path = tmp_path / "two.npy"
    np.save(path, np.arange(10, dtype=np.int16))
    data = path.read_bytes()
    path.write_bytes(data + data)
    with pytest.raises(ValueError, match="after a header describing 20 bytes"):
        reader(path)
    path.write_bytes(data)
    assert np.array_equal(reader(path), np.arange(10))


def test_a_header_claiming_more_than_the_file_is_refused_before_allocating(tmp_path):
    """A header saying (2**40,) int16 over a 64-byte file was a 2 TiB MemoryError."""
    path = tmp_path / "huge.npy"
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<i2", "fortran_order": False, "shape": (1 << 40,)})
        fh.write(bytes(64))
    for reader in (npy.load, npy.mapped, lambda p: npy.load_checked(p, lambda a: True)):
        with pytest.raises(ValueError, match=f"truncated .npy data: 64 of {2 << 40} bytes"):
            reader(path)


def test_many_threads_read_at_once(tmp_path):
    """The loaders read from thread pools; every read must succeed and be exact."""
    paths = []
    for i in range(8):
        paths.append(tmp_path / f"{i}.npy")
        np.save(paths[-1], np.full((64, 4), i, np.int16))
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda k: npy.load(paths[k % 8]), range(4000)))
    assert all(int(r[0, 0]) == k % 8 for k, r in enumerate(results))
