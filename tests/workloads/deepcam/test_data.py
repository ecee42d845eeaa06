"""DeepCAM data (framework-free): formats, stats.h5, converter, synthetic climate, errors.

`sciperf prepare` runs its main in this process (testkit.cli): its exit status and lines
are what is tested, not the console script's own exit."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import data as dc
from sciperf.workloads.deepcam import spec as spec
from sciperf.workloads.deepcam import synthetic as climate
from testkit import cli

H, W = 32, 48
SHAPE = (H, W, 16)


def _generate(root: Path, fmt: str, n_train: int = 6, n_eval: int = 2,
              seed: int = 1) -> dict[str, float]:
    return climate.generate(climate.GenerateRequest(str(root), fmt, n_train, n_eval, H, W, seed),
                            show_progress=False)


@pytest.fixture(scope="module")
def hdf5_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("deepcam_hdf5")
    _generate(root, "hdf5")
    return root


def test_reference_layout_and_reader(hdf5_root: Path) -> None:
    files = dc.list_samples(hdf5_root, "train", "hdf5")
    assert len(files) == 6 and files == sorted(files)
    with h5py.File(files[0], "r") as fh:
        assert fh["climate/data"].shape == SHAPE and fh["climate/data"].dtype == np.float32
        assert fh["climate/labels_0"].shape == (H, W)
    x_raw, y = dc.read_raw(files[0], "hdf5", SHAPE)
    x, y2 = dc.make_reader(hdf5_root, "hdf5", SHAPE)(files[0])
    shift, scale = dc.normalisation(dc.stats_path(hdf5_root))
    np.testing.assert_array_equal(x, (x_raw - shift) * scale)  # the reference's formula
    np.testing.assert_array_equal(y, y2)
    assert x.dtype == np.float32 and y.dtype == np.uint8 and set(np.unique(y)) <= {0, 1, 2}


def test_stats_cover_the_train_split_only(hdf5_root: Path) -> None:
    stats = dc.read_stats(dc.stats_path(hdf5_root))
    train = np.stack([dc.read_raw(p, "hdf5")[0]
                      for p in dc.list_samples(hdf5_root, "train", "hdf5")]).astype(np.float64)
    flat = train.reshape(-1, 16)
    np.testing.assert_allclose(stats["minval"], flat.min(0))
    np.testing.assert_allclose(stats["maxval"], flat.max(0))
    np.testing.assert_allclose(stats["mean"], flat.mean(0), rtol=1e-10)
    np.testing.assert_allclose(stats["sqmean"], (flat**2).mean(0), rtol=1e-10)
    assert stats["count"][0] == len(flat)
    # normalised training data spans [0, 1] per channel
    x = np.stack([dc.make_reader(hdf5_root, "hdf5", SHAPE)(p)[0]
                  for p in dc.list_samples(hdf5_root, "train", "hdf5")])
    assert x.min() == pytest.approx(0.0, abs=1e-6) and x.max() == pytest.approx(1.0, abs=1e-5)


def test_accumulators_merge_like_one_pass() -> None:
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((4, 5, 16)) for _ in range(3)]
    one, merged = dc.StatsAccumulator(), dc.StatsAccumulator()
    for p in parts:
        one.add(p)
    for p in parts:
        acc = dc.StatsAccumulator()
        acc.add(p)
        merged.merge(acc)
    for key, value in one.result().items():
        np.testing.assert_allclose(merged.result()[key], value)


def test_convert_hdf5_to_npy_is_identical(hdf5_root: Path) -> None:
    assert dc.convert(hdf5_root, show_progress=False) == 8
    for split in spec.SPLITS:
        for h5, npy in zip(dc.list_samples(hdf5_root, split, "hdf5"),
                           dc.list_samples(hdf5_root, split, "npy"), strict=True):
            a, b = dc.read_raw(h5, "hdf5"), dc.read_raw(npy, "npy")
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])


def test_convert_force_redoes_every_sample_and_orphans_go(hdf5_root: Path, tmp_path) -> None:
    """An hdf5 replaced by an older-dated file kept its stale npy even with --force, and an
    npy whose hdf5 was deleted stayed and was trained on (16 npy beside 15 hdf5)."""
    import os
    import shutil
    root = Path(shutil.copytree(hdf5_root, tmp_path / "copy"))
    dc.convert(root, show_progress=False)
    first, second = dc.list_samples(root, "train", "hdf5")[:2]
    shutil.copy(second, first)
    os.utime(first, (0, 0))  # older than its npy: the mtime rule alone skips it
    dc.convert(root, show_progress=False)
    npy = dc.list_samples(root, "train", "npy")[0]
    assert not np.array_equal(dc.read_raw(npy, "npy")[0], dc.read_raw(first, "hdf5")[0])
    dc.convert(root, show_progress=False, force=True)
    np.testing.assert_array_equal(dc.read_raw(npy, "npy")[0], dc.read_raw(first, "hdf5")[0])
    second.unlink()
    dc.convert(root, show_progress=False)
    assert len(dc.list_samples(root, "train", "npy")) == len(dc.list_samples(root, "train",
                                                                            "hdf5"))
    assert not list((root / "train").glob(second.name.replace(".h5", ".label.npy")))


def test_synthetic_is_deterministic_and_learnable_shaped() -> None:
    x1, y1 = climate.make_sample(3, "train", 5, 96, 144)
    x2, y2 = climate.make_sample(3, "train", 5, 96, 144)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    x3, _ = climate.make_sample(4, "train", 5, 96, 144)
    assert not np.array_equal(x1, x3)
    assert x1.shape == (96, 144, 16) and np.isfinite(x1).all()
    tmq = x1[..., spec.CHANNELS.index("TMQ")]
    psl = x1[..., spec.CHANNELS.index("PSL")]
    assert tmq.min() >= 0 and tmq.max() < 120  # kg m⁻²
    assert psl.min() > 90_000 and psl.max() < 106_000  # Pa


def test_objects_are_visible_in_the_fields() -> None:
    """Cyclones are moist lows, rivers moist filaments: what makes the labels learnable."""
    tmq_i, psl_i = spec.CHANNELS.index("TMQ"), spec.CHANNELS.index("PSL")
    moist = {0: [], 1: [], 2: []}
    psl = {0: [], 1: []}
    for i in range(30):
        x, y = climate.make_sample(0, "train", i, 96, 144)
        for c in moist:
            moist[c].extend(x[..., tmq_i][y == c].tolist())
        for c in psl:
            psl[c].extend(x[..., psl_i][y == c].tolist())
    assert len(moist[1]) and len(moist[2])
    assert np.mean(moist[1]) > np.mean(moist[0]) + 15
    assert np.mean(moist[2]) > np.mean(moist[0]) + 6
    assert np.mean(psl[1]) < np.mean(psl[0]) - 1_000


def test_full_size_class_frequencies_near_the_reference() -> None:
    counts = np.zeros(3)
    for i in range(12):
        counts += np.bincount(climate.make_sample(0, "train", i, 768, 1152)[1].ravel(),
                              minlength=3)
    freq = counts / counts.sum()
    ref = np.array(spec.CLASS_FREQUENCIES)
    assert abs(freq[0] - ref[0]) < 0.005
    assert 0.3 * ref[1] < freq[1] < 3 * ref[1]
    assert 0.5 * ref[2] < freq[2] < 2 * ref[2]


# --- bad input: one clear line naming the file ---------------------------------------------
@pytest.fixture()
def npy_root(tmp_path: Path) -> Path:
    _generate(tmp_path / "npy", "npy", n_train=4, n_eval=2)
    return tmp_path / "npy"


def test_truncated_hdf5_names_the_file(hdf5_root: Path, tmp_path: Path) -> None:
    bad = tmp_path / "data-bad.h5"
    bad.write_bytes(dc.list_samples(hdf5_root, "train", "hdf5")[0].read_bytes()[:2000])
    with pytest.raises(SciperfError, match=f"cannot read {bad}"):
        dc.read_raw(bad, "hdf5")


def test_hdf5_without_the_datasets_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "data-x.h5"
    with h5py.File(bad, "w") as fh:
        fh.create_dataset("climate/other", data=np.zeros(3))
    with pytest.raises(SciperfError, match=f"{bad}: missing dataset climate/data"):
        dc.read_raw(bad, "hdf5")


def test_mismatched_shapes_and_labels_are_rejected(tmp_path: Path) -> None:
    path = dc.write_sample(tmp_path, "s", "hdf5", np.zeros((32, 48, 16), np.float32),
                           np.zeros((32, 48), np.uint8))
    with pytest.raises(SciperfError, match=r"does not match the model's input \(96, 144, 16\)"):
        dc.read_raw(path, "hdf5", (96, 144, 16))
    with h5py.File(path, "r+") as fh:
        fh["climate/labels_0"][0, 0] = 7
    with pytest.raises(SciperfError, match=f"{path}: label value 7 is out of range; "
                                           "labels must be classes 0..2"):
        dc.read_raw(path, "hdf5")
    other = dc.write_sample(tmp_path, "t", "hdf5", np.zeros((32, 48, 16), np.float32),
                            np.zeros((16, 48), np.uint8))
    with pytest.raises(SciperfError, match="do not fit"):
        dc.read_raw(other, "hdf5")


@pytest.mark.parametrize(("dtype", "bad"), [(np.int16, -1), (np.float32, np.nan),
                                          (np.float32, 1.5)])  # 1.5 was floored to class 1
def test_bad_npy_label_names_the_label_file_and_value(tmp_path: Path, dtype: type,
                                                      bad: float) -> None:
    """The npy format's labels live in the .label.npy: that file and the value are named
    (a NaN too, which min/max comparisons alone would let through)."""
    path = dc.write_sample(tmp_path, "s", "npy", np.zeros((32, 48, 16), np.float32),
                           np.zeros((32, 48), np.uint8))
    labels = np.zeros((32, 48), dtype)
    labels[4, 9] = bad
    np.save(dc.label_path(path), labels)
    with pytest.raises(SciperfError, match=f"{dc.label_path(path)}: label value {bad} ") as err:
        dc.read_raw(path, "npy")
    assert str(path) not in str(err.value)


def test_missing_or_broken_stats(npy_root: Path) -> None:
    dc.stats_path(npy_root).write_bytes(b"not hdf5")
    with pytest.raises(SciperfError, match="cannot read statistics"):
        dc.make_reader(npy_root, "npy", (H, W, 16))
    dc.stats_path(npy_root).unlink()
    with pytest.raises(SciperfError, match="stats.h5 do not exist"):
        dc.make_reader(npy_root, "npy", (H, W, 16))


def test_cli_prepare_and_corrupt_sample_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "d"
    proc = cli("prepare", "workload=deepcam", "experiment=mini", f"data.dir={root}",
               "data.train_samples=8", "data.eval_samples=4", "data.format=hdf5")
    assert proc.returncode == 0, proc.stderr
    assert "stats.h5" in proc.stdout and "tropical_cyclone" in proc.stdout
    assert "generating hdf5 climate" in proc.stderr  # progress line
    proc = cli("prepare", "workload=deepcam", "experiment=mini", f"data.dir={root}",
               "data.source=convert")
    assert proc.returncode == 0 and "converted 12 hdf5 samples" in proc.stdout
    victim = dc.list_samples(root, "train", "hdf5")[2]
    victim.write_bytes(b"\x89HDF garbage")
    proc = cli("prepare", "workload=deepcam", "experiment=mini", f"data.dir={root}",
               "data.source=convert", "--force")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "converting" not in ln]
    assert len(lines) == 1 and str(victim) in lines[0], proc.stderr


def test_one_stats_file_serves_only_the_formats_made_with_it(tmp_path: Path) -> None:
    """npy (seed 0), then hdf5 (seed 7) in the same folder, then npy again: "dataset
    ready", but stats.h5 was seed 7's — the npy samples normalised with another set's."""
    base = ["prepare", "workload=deepcam", "experiment=mini", f"data.dir={tmp_path}",
            "data.train_samples=4", "data.eval_samples=2"]

    def prepare(*extra: str) -> str:
        proc = cli(*base, *extra)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def mean() -> np.ndarray:
        import h5py
        with h5py.File(tmp_path / "stats.h5", "r") as fh:
            return fh["climate/mean"][...]

    prepare("data.format=npy")
    seed0 = mean()
    prepare("data.format=hdf5", "seed=7")
    assert not np.array_equal(mean(), seed0)
    assert "dataset ready" not in prepare("data.format=npy")  # remade, stats.h5 with it
    np.testing.assert_array_equal(mean(), seed0)
    assert "dataset ready" in prepare("data.format=npy")
