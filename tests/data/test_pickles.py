"""Torch-pickled records read without torch and without executing the file: real pickles
made by torch decode to the same numbers; anything outside the allow-list (a command, eval,
a nested storage blob that carries code) is refused with nothing run."""

from __future__ import annotations

import collections
import os
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from sciperf.data import pickles
from sciperf.errors import SciperfError

torch = pytest.importorskip("torch")


class Stub:
    """What a caller allows in place of a record class: attributes land in __dict__."""


def _fake_pyg(monkeypatch: pytest.MonkeyPatch) -> type:
    """A class pickled under PyG 1.x's path, as the reference's records are."""
    module = types.ModuleType("torch_geometric.data.data")

    class Data:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    Data.__module__ = module.__name__
    Data.__qualname__ = "Data"
    module.Data = Data
    for name in ("torch_geometric", "torch_geometric.data", "torch_geometric.data.data"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return Data


def test_tensors_of_every_kind_decode_exactly() -> None:
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    record = {
        "pos": torch.randn(5, 3, generator=torch.Generator().manual_seed(0)),
        "edge_index": torch.tensor([[0, 1, 2], [1, 2, 0]], dtype=torch.int64),
        "transposed": base.t(),  # non-contiguous strides
        "sliced": base[1:3, 2:5],  # a storage offset
        "scalar": torch.tensor(7.5),
        "mask": torch.tensor([True, False, True]),
        "half": torch.tensor([1.5, -2.0], dtype=torch.float16),
        "empty": torch.zeros(0, 3),
        "natoms": 5, "y": -1.25,
        "ordered": collections.OrderedDict(a=torch.tensor([1, 2], dtype=torch.int32)),
    }
    got = pickles.loads(pickle.dumps(record, protocol=-1), "rec.lmdb:0")
    for key, value in record.items():
        if isinstance(value, torch.Tensor):
            assert isinstance(got[key], np.ndarray) and got[key].dtype == value.numpy().dtype
            np.testing.assert_array_equal(got[key], value.numpy())
    assert (got["natoms"], got["y"]) == (5, -1.25)
    assert isinstance(got["ordered"], collections.OrderedDict)
    np.testing.assert_array_equal(got["ordered"]["a"], [1, 2])


def test_a_record_class_becomes_the_callers_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    data_cls = _fake_pyg(monkeypatch)
    rec = data_cls(pos=torch.ones(2, 3), atomic_numbers=torch.tensor([29.0, 8.0]), sid=7)
    blob = pickle.dumps(rec, protocol=-1)
    with pytest.raises(pickles.UnsafePickleError, match="torch_geometric.data.data.Data"):
        pickles.loads(blob, "data.0000.lmdb key 0")  # not allowed unless the caller says so
    got = pickles.loads(blob, "data.0000.lmdb key 0",
                        {("torch_geometric.data.data", "Data"): Stub})
    assert isinstance(got, Stub) and got.sid == 7
    np.testing.assert_array_equal(got.pos, np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(got.atomic_numbers, [29.0, 8.0])


class _Command:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _Eval:
    def __reduce__(self):
        return eval, ("__import__('os').system('true')",)


def test_malicious_pickles_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    command = pickle.dumps({"pos": _Command(marker)}, protocol=-1)
    assert pickle.loads(command) is not None and marker.exists()  # the payload is real
    marker.unlink()
    with pytest.raises(pickles.UnsafePickleError) as info:
        pickles.loads(command, "data.0003.lmdb key 12")
    assert str(info.value).startswith("data.0003.lmdb key 12: refused to unpickle ")
    assert "system" in str(info.value) and "\n" not in str(info.value)
    assert not marker.exists()
    with pytest.raises(pickles.UnsafePickleError, match="builtins.eval"):
        pickles.loads(pickle.dumps(_Eval()), "x")


class _NestedBlob:
    """A 'storage' whose nested legacy blob carries a command instead of tensor bytes."""

    def __init__(self, marker: Path):
        self.blob = pickle.dumps(_Command(marker), protocol=2)

    def __reduce__(self):
        return torch.storage._load_from_bytes, (self.blob,)


def test_code_inside_a_storage_blob_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(pickles.UnsafePickleError, match="system"):
        pickles.loads(pickle.dumps(_NestedBlob(marker), protocol=-1), "rec")
    assert not marker.exists()


def test_corrupt_records_are_one_line_naming_the_source() -> None:
    good = pickle.dumps({"pos": torch.ones(4, 3)}, protocol=-1)
    for bad in (good[: len(good) // 2], b"not a pickle", good[:-30] + good[-1:]):
        with pytest.raises(SciperfError) as info:
            pickles.loads(bad, "data.0001.lmdb key 5")
        assert str(info.value).startswith("data.0001.lmdb key 5: ")
        assert "\n" not in str(info.value)


def test_storage_blobs_are_checked() -> None:
    import pickletools

    blob = next(arg for op, arg, _ in pickletools.genops(
        pickle.dumps(torch.arange(6, dtype=torch.float32), protocol=-1))
        if op.name in ("BINBYTES", "SHORT_BINBYTES"))
    np.testing.assert_array_equal(pickles.storage_from_bytes(blob, "rec"), np.arange(6.0))
    with pytest.raises(SciperfError, match="^rec: a tensor storage is truncated"):
        pickles.storage_from_bytes(blob[:-4], "rec")
    with pytest.raises(SciperfError, match="^rec: "):
        pickles.storage_from_bytes(b"\x80\x02K\x01.", "rec")  # no legacy magic number


# ------------------------------------------------------------------ the torch-free writer

PYG_DATA = ("torch_geometric.data.data", "Data")


def _writer_record() -> dict:
    """Every storage dtype, 0-d, empty and non-contiguous arrays, and plain values."""
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    return {
        "pos": np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32),
        "edge_index": np.array([[0, 1, 2], [1, 2, 0]], np.int64),
        "transposed": base.T, "sliced": base[1:3, 2:5], "strided": base[::2, ::3],
        "scalar": np.array(7.5), "scalar_int": np.array(3, np.int64),
        "empty": np.zeros((0, 3), np.float32), "empty_edges": np.zeros((2, 0), np.int64),
        "mask": np.array([True, False, True]), "half": np.array([1.5, -2.0], np.float16),
        "int32": np.array([-(2**31), 2**31 - 1], np.int32), "int16": np.array([-7], np.int16),
        "int8": np.array([-128, 127], np.int8), "uint8": np.array([0, 255], np.uint8),
        "big_endian": np.array([1.25, -3.5], ">f8"),
        "natoms": 5, "y": -1.25, "name": "slab", "nothing": None, "flag": True,
    }


def test_written_records_are_read_by_real_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """pickle.loads with torch installed (the test trusts its own bytes) rebuilds torch
    tensors with the same values, dtypes and shapes, as PyG 1.x's Data."""
    data_cls = _fake_pyg(monkeypatch)
    record = _writer_record()
    got = pickle.loads(pickles.dumps(record, PYG_DATA))
    assert type(got) is data_cls and set(vars(got)) == set(record)
    for key, value in record.items():
        if isinstance(value, np.ndarray):
            tensor = getattr(got, key)
            assert isinstance(tensor, torch.Tensor), key
            want = value.astype(value.dtype.newbyteorder("="))
            assert tensor.numpy().dtype == want.dtype and tuple(tensor.shape) == want.shape
            assert tensor.is_contiguous()
            np.testing.assert_array_equal(tensor.numpy(), want, err_msg=key)
        else:
            assert getattr(got, key) == value and type(getattr(got, key)) is type(value)


def test_written_records_round_trip_through_the_restricted_reader() -> None:
    record = _writer_record()
    got = pickles.loads(pickles.dumps(record, PYG_DATA), "rec", {PYG_DATA: Stub})
    assert isinstance(got, Stub)
    for key, value in record.items():
        if isinstance(value, np.ndarray):
            assert got.__dict__[key].shape == value.shape
            np.testing.assert_array_equal(got.__dict__[key], value, err_msg=key)
        else:
            assert got.__dict__[key] == value


def test_written_tensors_equal_what_torch_pickles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch's own pickle of the same record decodes to the same arrays as ours."""
    data_cls = _fake_pyg(monkeypatch)
    record = {k: v for k, v in _writer_record().items() if k != "big_endian"}
    theirs = pickle.dumps(data_cls(**{k: torch.from_numpy(np.require(v, requirements="C"))
                                      if isinstance(v, np.ndarray) else v
                                      for k, v in record.items()}), protocol=-1)
    a = pickles.loads(theirs, "torch", {PYG_DATA: Stub}).__dict__
    b = pickles.loads(pickles.dumps(record, PYG_DATA), "ours", {PYG_DATA: Stub}).__dict__
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key]


def test_writer_refuses_what_no_tensor_or_plain_value_holds() -> None:
    for bad in ({"x": np.array(["a"])}, {"x": np.array([1 + 2j])}, {"x": [1, 2]},
                {"x": {"nested": 1}}, {"x": np.array([None], object)}):
        with pytest.raises(TypeError):
            pickles.dumps(bad, PYG_DATA)


def test_a_tensor_larger_than_its_storage_is_refused_not_allocated() -> None:
    """A record's tensor of size (10**7, 10**7) over a one-element storage with zero
    strides (what torch pickles for an expanded tensor) was copied out: numpy's
    "Unable to allocate 364. TiB" traceback, and smaller sizes really took the memory."""
    bomb = pickle.dumps({"pos": torch.ones(1).expand(10**7, 10**7)}, protocol=-1)
    with pytest.raises(SciperfError, match=r"^data\.0000\.lmdb key 0: .*holds more elements "
                                           r"than its storage of 1"):
        pickles.loads(bomb, "data.0000.lmdb key 0")
