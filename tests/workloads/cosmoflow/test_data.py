"""CosmoFlow on-disk formats (npy, tfrecord): round trips, listing, and one-line errors."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import data as cf
from sciperf.workloads.cosmoflow.synthetic import make_universe

SIZE = 16
SHAPE = (SIZE, SIZE, SIZE, 4)
FORMATS = ("npy", "tfrecord")


@pytest.fixture(scope="module")
def universe() -> tuple[np.ndarray, np.ndarray]:
    return make_universe(3, "train", 5, SIZE)


@pytest.fixture
def train_dir(tmp_path: Path) -> Path:
    folder = cf.split_dir(tmp_path, "train")
    folder.mkdir(parents=True)
    return folder


def test_split_dir(tmp_path: Path) -> None:
    assert cf.split_dir(tmp_path, "train") == tmp_path / "train"
    assert cf.split_dir(tmp_path, "validation") == tmp_path / "validation"
    with pytest.raises(SciperfError, match="test"):
        cf.split_dir(tmp_path, "test")


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip(train_dir: Path, universe, fmt: str) -> None:
    x, y = universe
    path = cf.write_sample(train_dir, "univ_a", fmt, x, y)
    assert path.parent == train_dir
    assert path.name == "univ_a" + cf.SUFFIX[fmt]
    xr, yr = cf.read_sample(path, fmt, SHAPE)
    assert xr.dtype == np.int16 and xr.shape == SHAPE
    assert yr.dtype == np.float32 and yr.shape == (4,)
    np.testing.assert_array_equal(xr, x)
    np.testing.assert_array_equal(yr, y)
    # Atomic writes leave no temporary files behind.
    assert not [p for p in train_dir.iterdir() if p.name.startswith(".")]


def test_npy_layout(train_dir: Path, universe) -> None:
    """The fast format: <name>.data.npy (int16) beside <name>.label.npy (float32)."""
    x, y = universe
    path = cf.write_sample(train_dir, "univ_b", "npy", x, y)
    assert cf.label_path(path) == train_dir / "univ_b.label.npy"
    assert np.load(path).dtype == np.int16
    assert np.load(cf.label_path(path)).dtype == np.float32


def test_same_sample_identical_in_both_formats(train_dir: Path, universe) -> None:
    x, y = universe
    arrays = {}
    for fmt in FORMATS:
        path = cf.write_sample(train_dir, "univ_same", fmt, x, y)
        arrays[fmt] = cf.read_sample(path, fmt, SHAPE)
    np.testing.assert_array_equal(arrays["npy"][0], arrays["tfrecord"][0])
    np.testing.assert_array_equal(arrays["npy"][1], arrays["tfrecord"][1])
    assert arrays["npy"][0].dtype == arrays["tfrecord"][0].dtype == np.int16
    assert arrays["npy"][1].dtype == arrays["tfrecord"][1].dtype == np.float32


@pytest.mark.parametrize("fmt", FORMATS)
def test_list_samples_sorted_and_first_n(tmp_path: Path, fmt: str) -> None:
    folder = cf.split_dir(tmp_path, "train")
    folder.mkdir(parents=True)
    names = [f"univ_{i:03d}" for i in range(6)]
    shuffled = names[:]
    random.Random(1).shuffle(shuffled)
    for i, name in enumerate(shuffled):
        x, y = make_universe(0, "train", i, 8)
        cf.write_sample(folder, name, fmt, x, y)
    # Files of the other format and stray files are not samples of this format.
    other = "tfrecord" if fmt == "npy" else "npy"
    x, y = make_universe(0, "train", 99, 8)
    cf.write_sample(folder, "univ_000_other", other, x, y)
    (folder / "README.txt").write_text("not a sample")

    files = cf.list_samples(tmp_path, "train", fmt)
    assert [p.name for p in files] == [n + cf.SUFFIX[fmt] for n in names]
    assert cf.list_samples(tmp_path, "train", fmt, 0) == files
    assert cf.list_samples(tmp_path, "train", fmt, 4) == files[:4]
    assert cf.list_samples(tmp_path, "train", fmt, 6) == files


def test_list_samples_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(SciperfError) as info:
        cf.list_samples(tmp_path / "nowhere", "train", "npy")
    assert str(tmp_path / "nowhere" / "train") in str(info.value)


def test_list_samples_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "validation").mkdir()
    with pytest.raises(SciperfError) as info:
        cf.list_samples(tmp_path, "validation", "tfrecord")
    assert str(tmp_path / "validation") in str(info.value)
    assert ".tfrecord" in str(info.value)


def test_list_samples_fewer_than_requested(train_dir: Path, universe) -> None:
    for i in range(2):
        cf.write_sample(train_dir, f"u{i}", "npy", *universe)
    with pytest.raises(SciperfError) as info:
        cf.list_samples(train_dir.parent, "train", "npy", 3)
    message = str(info.value)
    assert str(train_dir) in message
    assert "2" in message and "3" in message


def test_list_samples_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(SciperfError, match="hdf5"):
        cf.list_samples(tmp_path, "train", "hdf5")


# --- corrupt or foreign files: SciperfError naming the file ---------------------------

def _raises_naming(path: Path, call, *more: str) -> str:
    with pytest.raises(SciperfError) as info:
        call()
    message = str(info.value)
    assert str(path) in message, message
    assert "\n" not in message
    for text in more:
        assert text in message, message
    return message


@pytest.fixture
def npy_sample(train_dir: Path, universe) -> Path:
    return cf.write_sample(train_dir, "univ_c", "npy", *universe)


@pytest.fixture
def tfr_sample(train_dir: Path, universe) -> Path:
    return cf.write_sample(train_dir, "univ_c", "tfrecord", *universe)


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_truncated_npy(npy_sample: Path, keep: float) -> None:
    raw = npy_sample.read_bytes()
    npy_sample.write_bytes(raw[: int(len(raw) * keep)])
    _raises_naming(npy_sample, lambda: cf.read_sample(npy_sample, "npy", SHAPE))


def test_truncated_npy_header(npy_sample: Path) -> None:
    npy_sample.write_bytes(npy_sample.read_bytes()[:40])
    _raises_naming(npy_sample, lambda: cf.read_sample(npy_sample, "npy", SHAPE))


def test_wrong_shape_npy(npy_sample: Path, universe) -> None:
    np.save(npy_sample, universe[0][:8])
    _raises_naming(npy_sample, lambda: cf.read_sample(npy_sample, "npy", SHAPE),
                   "(8, 16, 16, 4)", str(SHAPE))


def test_wrong_dtype_npy(npy_sample: Path, universe) -> None:
    np.save(npy_sample, universe[0].astype(np.float32))
    _raises_naming(npy_sample, lambda: cf.read_sample(npy_sample, "npy", SHAPE),
                   "float32", "int16")


def test_wrong_dtype_label(npy_sample: Path, universe) -> None:
    label = cf.label_path(npy_sample)
    np.save(label, universe[1].astype(np.float64))
    _raises_naming(label, lambda: cf.read_sample(npy_sample, "npy", SHAPE), "float64")


def test_pickled_npy_is_refused(npy_sample: Path) -> None:
    np.save(npy_sample, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _raises_naming(npy_sample, lambda: cf.read_sample(npy_sample, "npy", SHAPE))


def test_missing_label_file(npy_sample: Path) -> None:
    label = cf.label_path(npy_sample)
    os.remove(label)
    _raises_naming(label, lambda: cf.read_sample(npy_sample, "npy", SHAPE))


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_sample_file(train_dir: Path, fmt: str) -> None:
    path = train_dir / f"gone{cf.SUFFIX[fmt]}"
    _raises_naming(path, lambda: cf.read_sample(path, fmt, SHAPE))


@pytest.mark.parametrize("cut", [10, 0.5, -4])
def test_truncated_tfrecord(tfr_sample: Path, cut: float) -> None:
    raw = tfr_sample.read_bytes()
    end = int(len(raw) * cut) if isinstance(cut, float) else cut
    tfr_sample.write_bytes(raw[:end])
    _raises_naming(tfr_sample, lambda: cf.read_sample(tfr_sample, "tfrecord", SHAPE))


def test_corrupt_tfrecord(tfr_sample: Path) -> None:
    raw = bytearray(tfr_sample.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    tfr_sample.write_bytes(bytes(raw))
    _raises_naming(tfr_sample, lambda: cf.read_sample(tfr_sample, "tfrecord", SHAPE))


def test_garbage_and_empty_tfrecord(tfr_sample: Path) -> None:
    tfr_sample.write_bytes(b"not a tfrecord at all" * 4)
    _raises_naming(tfr_sample, lambda: cf.read_sample(tfr_sample, "tfrecord", SHAPE))
    tfr_sample.write_bytes(b"")
    _raises_naming(tfr_sample, lambda: cf.read_sample(tfr_sample, "tfrecord", SHAPE))


def test_tfrecord_of_another_shape(tfr_sample: Path) -> None:
    _raises_naming(tfr_sample, lambda: cf.read_sample(tfr_sample, "tfrecord", (8, 16, 16, 4)))


# --- transform ------------------------------------------------------------------------

def test_transform_is_log1p_float32(universe) -> None:
    x, _ = universe
    t = cf.transform(x)
    assert t.dtype == np.float32
    assert t.shape == x.shape
    np.testing.assert_allclose(t, np.log1p(x.astype(np.float64)), rtol=1e-6)
    assert float(t[x == 0].max(initial=0.0)) == 0.0
    assert x.max() > 0 and float(t.max()) == pytest.approx(np.log1p(float(x.max())), rel=1e-6)
