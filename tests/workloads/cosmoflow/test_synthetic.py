"""The spec's synthetic CosmoFlow generator: deterministic, realistic-looking, learnable.

The learnability tests are the important ones: a target a generator
erases (e.g. divides out) cannot be learnt. Each of the four targets must be visible in a
simple statistic of log(1 + counts) that a small CNN can compute.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from sciperf.config import compose
from sciperf.data.manifest import MANIFEST
from sciperf.errors import SciperfError
from sciperf.tools.prepare import prepare
from sciperf.workloads.cosmoflow import data as cf
from sciperf.workloads.cosmoflow import synthetic
from sciperf.workloads.cosmoflow.synthetic import GenerateRequest, UniverseParams, make_universe

SIZE = 16


def test_deterministic_bytes() -> None:
    x1, y1 = make_universe(7, "train", 3, SIZE)
    x2, y2 = make_universe(7, "train", 3, SIZE)
    assert x1.tobytes() == x2.tobytes()
    assert y1.tobytes() == y2.tobytes()


@pytest.mark.parametrize(("seed", "split", "index"), [
    (7, "train", 4),        # another index
    (8, "train", 3),        # another seed
    (7, "validation", 3),   # another split
])
def test_other_arguments_give_other_universes(seed: int, split: str, index: int) -> None:
    x0, y0 = make_universe(7, "train", 3, SIZE)
    x, y = make_universe(seed, split, index, SIZE)
    assert not np.array_equal(x, x0)
    assert not np.array_equal(y, y0)


@pytest.mark.parametrize("size", [8, 16, 32])
def test_dtype_shape_range(size: int) -> None:
    x, y = make_universe(0, "train", 0, size)
    assert x.dtype == np.int16
    assert x.shape == (size, size, size, 4)
    assert x.min() >= 0
    assert x.max() > 0
    assert y.dtype == np.float32 and y.shape == (4,)
    assert np.all(np.abs(y) <= 1.0)


def test_not_uniform_noise() -> None:
    """Spatially correlated, over-dispersed counts (a density field, not i.i.d. noise)."""
    x, _ = make_universe(0, "train", 1, 32)
    logc = np.log1p(x[..., 0].astype(np.float64))
    centred = logc - logc.mean()
    lag1 = np.mean([(centred * np.roll(centred, 1, axis)).mean() for axis in range(3)])
    assert lag1 / centred.var() > 0.3  # i.i.d. noise gives ≈ 0
    counts = x[..., 0].astype(np.float64)
    assert counts.var() > 1.5 * counts.mean()  # pure Poisson noise gives var ≈ mean
    # Channels share the same structure (one universe seen at 4 redshifts).
    other = np.log1p(x[..., 3].astype(np.float64))
    assert np.corrcoef(logc.ravel(), other.ravel())[0, 1] > 0.5


def test_params_are_monotone_in_the_targets() -> None:
    lo = UniverseParams.from_targets(np.full(4, -1.0))
    mid = UniverseParams.from_targets(np.zeros(4))
    hi = UniverseParams.from_targets(np.full(4, 1.0))
    for field in ("mean_count", "sigma", "k_cut", "growth"):
        assert getattr(lo, field) < getattr(mid, field) < getattr(hi, field), field
    assert lo.mean_count > 0 and lo.sigma > 0 and lo.k_cut > 0 and lo.growth >= 0


# --- learnability ------------------------------------------------------------------------

N_LEARN = 64


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


def _lag_cov(c: np.ndarray, lag: int) -> float:
    return float(np.mean([(c * np.roll(c, lag, axis)).mean() for axis in range(3)]))


def _statistics(x: np.ndarray) -> list[float]:
    """One simple statistic per target, computed from log(1 + counts)."""
    logc = np.log1p(x.astype(np.float64))
    mean_all = logc.mean()                                  # y0: overall density
    std0 = logc[..., 0].std()                               # y1: fluctuation amplitude
    summed = logc.mean(axis=-1)
    summed -= summed.mean()
    # y2: correlation length. Covariance at lags ≥ 1 is free of the (white) shot noise, so
    # the lag-2 / lag-1 ratio measures the field's smoothness alone (larger k_cut → rougher).
    shape = _lag_cov(summed, 2) / _lag_cov(summed, 1)
    growth = logc[..., 3].std() / logc[..., 0].std()        # y3: amplitude growth over channels
    return [mean_all, std0, shape, growth]


@pytest.fixture(scope="module")
def learn_set() -> tuple[np.ndarray, np.ndarray]:
    stats, targets = [], []
    for i in range(N_LEARN):
        x, y = make_universe(11, "train", i, SIZE)
        stats.append(_statistics(x))
        targets.append(y)
    return np.array(stats), np.array(targets)


# Under independence Spearman's ρ over n = 64 samples has standard deviation ≈ 1/√63 ≈ 0.13,
# so |ρ| ≥ 0.8 is > 6σ away from "not learnable"; the generator gives 0.9–0.98 here.
THRESHOLD = 0.8


@pytest.mark.parametrize(("target", "name", "sign"), [
    (0, "mean log1p count", +1),
    (1, "std of log counts, channel 0", +1),
    (2, "lag-2/lag-1 spatial covariance (smoothness)", -1),
    (3, "std ratio channel 3 / channel 0", +1),
])
def test_each_target_is_learnable(learn_set, target: int, name: str, sign: int) -> None:
    stats, targets = learn_set
    rho = [_spearman(stats[:, target], targets[:, j]) for j in range(4)]
    assert sign * rho[target] >= THRESHOLD, (name, rho)
    # The statistic tracks its own target far more than any other (no confounding).
    others = [abs(r) for j, r in enumerate(rho) if j != target]
    assert abs(rho[target]) > max(others) + 0.25, (name, rho)


def test_targets_cover_their_range(learn_set) -> None:
    _, targets = learn_set
    assert targets.min(axis=0).max() < -0.6
    assert targets.max(axis=0).min() > 0.6


def test_generator_uses_no_deprecated_numpy_api() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        make_universe(0, "train", 0, 8)


# --- generate() / dataset_complete() / prepare ----------------------------------------

def _req(root: Path, **kw) -> GenerateRequest:
    base = {"root": str(root), "fmt": "npy", "train_samples": 4, "eval_samples": 2,
            "size": 8, "seed": 5}
    return GenerateRequest(**(base | kw))


@pytest.mark.parametrize("fmt", ["npy", "tfrecord"])
def test_generate_writes_a_complete_dataset(tmp_path: Path, fmt: str) -> None:
    req = _req(tmp_path / "ds", fmt=fmt)
    assert not synthetic.dataset_complete(req)
    synthetic.generate(req, show_progress=False)
    assert synthetic.dataset_complete(req)
    for split, n in (("train", 4), ("validation", 2)):
        files = cf.list_samples(req.root, split, fmt)
        assert len(files) == n
        for i, path in enumerate(files):
            x, y = cf.read_sample(path, fmt, (8, 8, 8, 4))
            x_ref, y_ref = make_universe(5, split, i, 8)
            np.testing.assert_array_equal(x, x_ref)
            np.testing.assert_array_equal(y, y_ref)
    manifest = json.loads((tmp_path / "ds" / MANIFEST).read_text())
    assert manifest[fmt]["seed"] == 5 and manifest[fmt]["size"] == 8
    assert not [p for p in (tmp_path / "ds").rglob(".*")]  # no temporary files left


def test_dataset_complete_only_for_identical_settings(tmp_path: Path) -> None:
    req = _req(tmp_path / "ds")
    synthetic.generate(req, show_progress=False)
    assert synthetic.dataset_complete(req)
    assert synthetic.dataset_complete(_req(tmp_path / "ds"))
    for change in ({"seed": 6}, {"size": 16}, {"train_samples": 8}, {"eval_samples": 4},
                   {"fmt": "tfrecord"}):
        assert not synthetic.dataset_complete(_req(tmp_path / "ds", **change)), change


def test_both_formats_share_one_root(tmp_path: Path) -> None:
    npy, tfr = _req(tmp_path / "ds"), _req(tmp_path / "ds", fmt="tfrecord")
    synthetic.generate(npy, show_progress=False)
    synthetic.generate(tfr, show_progress=False)
    assert synthetic.dataset_complete(npy) and synthetic.dataset_complete(tfr)


def test_manifest_missing_or_corrupt_means_incomplete(tmp_path: Path) -> None:
    req = _req(tmp_path / "ds")
    synthetic.generate(req, show_progress=False)
    manifest = tmp_path / "ds" / MANIFEST
    manifest.write_text("{not json")
    assert not synthetic.dataset_complete(req)
    manifest.unlink()
    assert not synthetic.dataset_complete(req)


def test_generate_refuses_empty_sets(tmp_path: Path) -> None:
    with pytest.raises(SciperfError, match="train_samples"):
        synthetic.generate(_req(tmp_path / "ds", train_samples=0), show_progress=False)
    assert not (tmp_path / "ds" / MANIFEST).exists()


def test_progress_output(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    synthetic.generate(_req(tmp_path / "a"), show_progress=True)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "generating npy universes: 6/6 samples (100.0%)" in last
    assert "ETA" in last
    synthetic.generate(_req(tmp_path / "b"), show_progress=False)
    assert capsys.readouterr().err == ""


def _cfg(root: Path, *extra: str):
    return compose(["experiment=mini", f"data.dir={root}", "data.train_samples=4",
                    "data.eval_samples=2", "model.input_size=16", "seed=3", *extra])


def _mtimes(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_prepare_rerun_is_a_no_op(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "data"
    prepare(_cfg(root))
    first = _mtimes(root)
    assert len(first) == 2 * 6 + 1  # data + label per sample, and the manifest
    capsys.readouterr()
    prepare(_cfg(root))
    assert "dataset ready" in capsys.readouterr().out
    assert _mtimes(root) == first


def test_prepare_existing_verifies(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "data"
    prepare(_cfg(root))
    capsys.readouterr()
    prepare(_cfg(root, "data.source=existing"))
    out = capsys.readouterr().out
    assert "4 npy samples" in out and "2 npy samples" in out
    with pytest.raises(SciperfError, match="5 were requested"):
        prepare(_cfg(root, "data.source=existing", "data.train_samples=5"))


def test_regenerating_with_another_seed_reads_the_new_universes(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    synthetic.generate(_req(root, seed=0), show_progress=False)
    new = _req(root, seed=1)
    synthetic.generate(new, show_progress=False)
    assert synthetic.dataset_complete(new)
    files = cf.list_samples(root, "train", "npy", new.train_samples)
    x, _ = cf.read_sample(files[0], "npy", (8, 8, 8, 4))
    np.testing.assert_array_equal(x, make_universe(1, "train", 0, 8)[0])
