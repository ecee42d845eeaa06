"""DeepCAM files whose values are not numbers (text or bytes where float32 climate fields or
float64 statistics belong): one line naming the file (and the dataset), never numpy's
"could not convert string to float" naming none."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import data as dc

SHAPE = (4, 6, 16)  # tiny (H, W, C): the checks do not depend on the size


def _sample(folder: Path, fmt: str) -> Path:
    """A valid zero sample in `fmt`, written by the format's own writer."""
    return dc.write_sample(folder, "s", fmt, np.zeros(SHAPE, np.float32),
                           np.zeros(SHAPE[:2], np.uint8))


def _bytes_data(path: Path) -> None:
    """Replace an hdf5 sample's climate/data with bytes of the same shape."""
    with h5py.File(path, "r+") as fh:
        del fh[dc.DATA_KEY]
        fh.create_dataset(dc.DATA_KEY, data=np.full(SHAPE, b"x"))


def _assert_one_line(err: pytest.ExceptionInfo, *words: str) -> None:
    text = str(err.value)
    assert "\n" not in text, text
    for word in words:
        assert word in text, (word, text)


def test_hdf5_data_of_bytes_names_the_file_and_dtype(tmp_path: Path) -> None:
    path = _sample(tmp_path, "hdf5")
    _bytes_data(path)
    with pytest.raises(SciperfError) as err:
        dc.read_raw(path, "hdf5")
    _assert_one_line(err, str(path), "dtype |S1 is not numeric")


@pytest.mark.parametrize("text", ["x", "1"], ids=["letters", "digits"])
def test_npy_data_of_text_names_the_data_file(tmp_path: Path, text: str) -> None:
    """Digits are refused too: text is not what the format stores, not a number to parse."""
    path = _sample(tmp_path, "npy")
    np.save(path, np.full(SHAPE, text))
    with pytest.raises(SciperfError) as err:
        dc.read_raw(path, "npy", SHAPE)
    _assert_one_line(err, str(path), "dtype <U1 is not numeric")
    assert str(dc.label_path(path)) not in str(err.value)


def test_convert_refuses_a_non_numeric_sample_and_writes_nothing(tmp_path: Path) -> None:
    """`prepare data.source=convert`: the sample is named, no npy appears beside it."""
    folders = [tmp_path / split for split in ("train", "validation")]
    for folder in folders:
        folder.mkdir()
    path = _sample(folders[0], "hdf5")
    _sample(folders[1], "hdf5")
    _bytes_data(path)
    with pytest.raises(SciperfError) as err:
        dc.convert(tmp_path, show_progress=False)
    _assert_one_line(err, str(path), "is not numeric")
    assert sorted(p.name for p in folders[0].iterdir()) == [path.name]


def _stats(path: Path, mean: np.ndarray) -> Path:
    """A stats.h5 with sensible values except `mean` as given."""
    with h5py.File(path, "w") as fh:
        for key in dc.STATS_KEYS:
            fh.create_dataset(f"climate/{key}", data=mean if key == "mean" else
                              np.arange(16, dtype=np.float64) + (key == "maxval"))
    return path


@pytest.mark.parametrize("mean", [np.full(16, b"ab"), np.full(16, "ab", object)],
                         ids=["bytes", "str"])
def test_stats_with_a_non_numeric_dataset_name_file_and_dataset(tmp_path: Path,
                                                                 mean: np.ndarray) -> None:
    path = _stats(tmp_path / dc.STATS_FILE, np.linspace(0.0, 1.0, 16))
    np.testing.assert_array_equal(dc.read_stats(path)["mean"], np.linspace(0.0, 1.0, 16))
    _stats(path, mean if mean.dtype.kind == "S" else mean.astype(h5py.string_dtype()))
    with pytest.raises(SciperfError) as err:
        dc.read_stats(path)
    _assert_one_line(err, str(path), "climate/mean", "not numeric")
    with pytest.raises(SciperfError, match="climate/mean"):
        dc.make_reader(tmp_path, "npy", SHAPE)
