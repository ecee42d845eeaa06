"""Tests for sciperf.weights: the framework-neutral .npz weight file and the generic mapper.

Framework-free (numpy only), so they run in any install of `common`.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from sciperf import weights
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow.spec import ModelSpec

MINI = ModelSpec(input_size=32, conv_filters=[8, 16, 32, 64], dense_sizes=[64, 32])


def _canonical(spec: ModelSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Distinct random arrays for every canonical entry of `spec`."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32)
            for name, shape in weights.expected_arrays(spec.layer_shapes()).items()}


def test_expected_arrays_cover_every_parameter():
    want = weights.expected_arrays(MINI.layer_shapes())
    assert want["conv0/kernel"] == (3, 3, 3, 4, 8)
    assert want["conv0/bias"] == (8,)
    assert want["dense2/kernel"] == (32, 4)
    assert sum(int(np.prod(s)) for s in want.values()) == MINI.parameter_count()
    full = weights.expected_arrays(ModelSpec().layer_shapes())
    assert sum(int(np.prod(s)) for s in full.values()) == 8_907_556


def test_npz_round_trip(tmp_path):
    arrays = _canonical(MINI)
    path = weights.save_npz(tmp_path / "sub" / "mini.npz", arrays)
    assert path.is_file()
    assert not list(path.parent.glob(".*.tmp"))  # the temp file was renamed away
    back = weights.load_npz(path, MINI.layer_shapes())
    assert sorted(back) == sorted(arrays)
    for name, arr in arrays.items():
        assert back[name].dtype == arr.dtype
        np.testing.assert_array_equal(back[name], arr)


def test_load_names_missing_extra_and_misshaped(tmp_path):
    arrays = _canonical(MINI)
    del arrays["conv1/bias"]
    arrays["conv9/kernel"] = np.zeros((3, 3, 3, 1, 1), np.float32)
    arrays["dense0/kernel"] = np.zeros((5, 64), np.float32)
    path = weights.save_npz(tmp_path / "bad.npz", arrays)
    with pytest.raises(SciperfError) as err:
        weights.load_npz(path, MINI.layer_shapes())
    msg = str(err.value)
    assert str(path) in msg
    assert "missing conv1/bias" in msg
    assert "unexpected conv9/kernel" in msg
    assert "dense0/kernel has shape (5, 64), expected (512, 64)" in msg
    assert "\n" not in msg  # one line (docs/architecture.md, rule 10)


def test_load_without_expectation_and_bad_files(tmp_path):
    path = weights.save_npz(tmp_path / "w.npz", {"conv0/kernel": np.ones((3, 3, 3, 4, 8))})
    assert set(weights.load_npz(path)) == {"conv0/kernel"}
    with pytest.raises(SciperfError, match="does not exist"):
        weights.load_npz(tmp_path / "absent.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip archive")
    with pytest.raises(SciperfError, match="cannot read weight file"):
        weights.load_npz(junk)
    for name, content in {"random": os.urandom(3000), "pickle": pickle.dumps({"a": 1})}.items():
        odd = tmp_path / f"{name}.npz"  # numpy takes both for pickles: no advice to unpickle
        odd.write_bytes(content)
        with pytest.raises(SciperfError, match="cannot read weight file") as info:
            weights.load_npz(odd)
        assert "allow_pickle" not in str(info.value) and "unsafe" not in str(info.value)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, weight=np.ones(3))
    with pytest.raises(SciperfError, match="'weight' is not '<layer>/kernel'"):
        weights.load_npz(foreign)


def test_save_rejects_bad_names_dtypes_and_suffix(tmp_path):
    with pytest.raises(SciperfError, match="conv0.weight"):
        weights.save_npz(tmp_path / "a.npz", {"conv0.weight": np.ones(2)})
    with pytest.raises(SciperfError, match="floating point"):
        weights.save_npz(tmp_path / "a.npz", {"conv0/bias": np.ones(2, np.int64)})
    with pytest.raises(SciperfError, match=r"\.npz"):
        weights.save_npz(tmp_path / "a.npy", {"conv0/bias": np.ones(2)})
    assert not list(tmp_path.iterdir())


def test_torch_mapper_transposes_by_kind():
    rng = np.random.default_rng(1)
    conv_t = rng.standard_normal((8, 4, 3, 2, 5)).astype(np.float32)  # (out, in, kd, kh, kw)
    conv_k = weights.to_canonical("conv0/kernel", conv_t, "conv", "torch")
    assert conv_k.shape == (3, 2, 5, 4, 8)
    assert conv_k[2, 1, 4, 3, 7] == conv_t[7, 3, 2, 1, 4]
    assert conv_k.flags.c_contiguous
    dense_t = rng.standard_normal((6, 10)).astype(np.float32)  # (out, in)
    dense_k = weights.to_canonical("dense0/kernel", dense_t, "dense", "torch")
    np.testing.assert_array_equal(dense_k, dense_t.T)
    bias = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_array_equal(weights.to_canonical("conv0/bias", bias, "conv", "torch"), bias)


@pytest.mark.parametrize("kind, shape", [("conv", (8, 4, 3, 3, 3)), ("conv", (5, 2, 3, 3)),
                                         ("dense", (6, 10))])
def test_mapper_is_invertible(kind, shape):
    arr = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    name = f"{kind}0/kernel"
    for layout in weights.LAYOUTS:
        canon = weights.to_canonical(name, arr, kind, layout)
        np.testing.assert_array_equal(weights.from_canonical(name, canon, kind, layout), arr)
    # and the other direction: canonical → torch → canonical
    canon = weights.to_canonical(name, arr, kind, "torch")
    torch_again = weights.from_canonical(name, canon, kind, "torch")
    np.testing.assert_array_equal(weights.to_canonical(name, torch_again, kind, "torch"), canon)


def test_keras_layout_is_canonical():
    arr = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(weights.to_canonical("conv0/kernel", arr, "conv", "keras"), arr)


def test_canonical_names_and_errors():
    assert weights.canonical_name("conv3", "weight", "torch") == "conv3/kernel"
    assert weights.canonical_name("dense0", "bias", "torch") == "dense0/bias"
    assert weights.canonical_name("dense0", "kernel", "keras") == "dense0/kernel"
    with pytest.raises(SciperfError, match="not a torch parameter"):
        weights.canonical_name("bn0", "running_mean", "torch")
    with pytest.raises(SciperfError, match="layer kind"):
        weights.to_canonical("conv0/kernel", np.ones((2, 2)), "lstm")
    with pytest.raises(SciperfError, match="layout"):
        weights.to_canonical("conv0/kernel", np.ones((2, 2)), "dense", "jax")
    with pytest.raises(SciperfError, match="cannot have 2 dimensions"):
        weights.to_canonical("conv0/kernel", np.ones((2, 2)), "conv", "torch")


def test_canonical_shape_matches_mapped_array():
    for name, kind, shape in [("conv0/kernel", "conv", (8, 4, 3, 3, 3)),
                              ("dense0/kernel", "dense", (6, 10)), ("dense0/bias", "dense", (6,))]:
        mapped = weights.to_canonical(name, np.empty(shape, np.float32), kind, "torch")
        assert weights.canonical_shape(name, shape, kind, "torch") == mapped.shape
        assert weights.canonical_shape(name, shape, kind, "keras") == shape


def test_a_refused_write_names_the_weights_file(tmp_path):
    """Under a file-size limit numpy's OSError named no file ("a write failed")."""
    import resource
    import signal
    path = tmp_path / "w.npz"
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(SciperfError, match=rf"^{path}: cannot be written \(File too "
                                               r"large; is the disk full\?\)$"):
            weights.save_npz(path, {"dense/kernel": np.zeros((64, 64), np.float32)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert list(tmp_path.iterdir()) == []
