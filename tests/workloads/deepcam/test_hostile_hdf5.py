"""DeepCAM hdf5 files built to break the reader: a group where `climate/data`, the labels
or a statistic belongs (a TypeError inside h5py, naming no file), and a chunked dataset
declaring (200000, 200000, 16) in a file of kilobytes (unwritten chunks read as zeros:
numpy tried to allocate 2.3 TiB). Every declaration is checked before the read; each case
is one line naming the file and the dataset, exit 2 on the command line."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import data as dc
from testkit import cli, refused

SHAPE = (4, 6, 16)  # tiny (H, W, C): the checks do not depend on the size
HUGE = (200_000, 200_000, 16)


def _sample(folder: Path) -> Path:
    """A valid zero hdf5 sample, written by the format's own writer."""
    return dc.write_sample(folder, "s", "hdf5", np.zeros(SHAPE, np.float32),
                           np.zeros(SHAPE[:2], np.uint8))


def _replace(path: Path, key: str, *, group: bool = False,
             shape: tuple[int, ...] = (), dtype: str = "f4") -> None:
    """Dataset `key` of an hdf5 file → a group, or a chunked dataset of `shape` with no
    chunk written (declared, never stored)."""
    with h5py.File(path, "r+") as fh:
        del fh[key]
        if group:
            fh.create_group(key)
        else:
            fh.create_dataset(key, shape=shape, dtype=dtype,
                              chunks=tuple(min(64, n) for n in shape))


@pytest.mark.parametrize("key", [dc.DATA_KEY, dc.LABEL_KEY])
@pytest.mark.parametrize("shape", [None, SHAPE], ids=["no-model", "model"])
def test_a_group_instead_of_a_dataset_names_file_and_dataset(tmp_path: Path, key: str,
                                                             shape: tuple | None) -> None:
    path = _sample(tmp_path)
    _replace(path, key, group=True)
    text = refused(dc.read_raw, path, "hdf5", shape)
    assert text == f"{path}: {key} is a group, not a dataset"


def test_a_huge_declared_sample_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Data and labels agree with each other, so only the declared size can tell: with a
    model the shape must be its input, without one (stats, convert) it is bounded."""
    path = _sample(tmp_path)
    _replace(path, dc.DATA_KEY, shape=HUGE)
    _replace(path, dc.LABEL_KEY, shape=HUGE[:2], dtype="u1")
    assert path.stat().st_size < 1 << 20  # declared, never stored
    text = refused(dc.read_raw, path, "hdf5", SHAPE)
    assert text == (f"{path}: sample shape {HUGE} does not match the model's "
                    f"input {SHAPE} (model.height/width/in_channels)")
    text = refused(dc.read_raw, path, "hdf5", None)
    assert text.startswith(f"{path}: {dc.DATA_KEY} declares shape {HUGE} (2384.2 GiB"), text
    assert text.endswith("not a DeepCAM sample"), text


def test_huge_data_beside_small_labels_does_not_fit(tmp_path: Path) -> None:
    path = _sample(tmp_path)
    _replace(path, dc.DATA_KEY, shape=HUGE)
    text = refused(dc.read_raw, path, "hdf5", None)
    assert text == (f"{path}: data {HUGE} and labels {SHAPE[:2]} do not fit "
                    "(expected (H, W, C) data and (H, W) labels)")


def test_text_labels_are_refused_before_the_read(tmp_path: Path) -> None:
    path = _sample(tmp_path)
    with h5py.File(path, "r+") as fh:
        del fh[dc.LABEL_KEY]
        fh.create_dataset(dc.LABEL_KEY, data=np.full(SHAPE[:2], b"a"))
    text = refused(dc.read_raw, path, "hdf5", SHAPE)
    assert text == f"{path}: labels must be classes 0..2, found dtype |S1"


def test_a_sample_within_the_bound_is_still_read(tmp_path: Path) -> None:
    """Chunked, unwritten (zeros) and small: a legitimate file, read as before."""
    path = _sample(tmp_path)
    _replace(path, dc.DATA_KEY, shape=SHAPE)
    x, y = dc.read_raw(path, "hdf5")
    assert x.shape == SHAPE and not x.any() and y.shape == SHAPE[:2]


def _stats(path: Path) -> Path:
    return dc.write_stats(path, {k: np.arange(16.0) + (k == "maxval") for k in dc.STATS_KEYS})


@pytest.mark.parametrize("key", dc.STATS_KEYS)
def test_stats_with_a_group_names_file_and_dataset(tmp_path: Path, key: str) -> None:
    path = _stats(tmp_path / dc.STATS_FILE)
    _replace(path, f"climate/{key}", group=True)
    with pytest.raises(SciperfError) as err:
        dc.read_stats(path)
    assert str(err.value) == f"{path}: climate/{key} is a group, not a dataset"


@pytest.mark.parametrize(("key", "shape", "expected"), [
    ("minval", HUGE, "(16,)"), ("mean", HUGE, "at most (16,)"), ("count", (17,), "at most"),
])
def test_stats_of_a_huge_declared_shape_are_refused_unread(tmp_path: Path, key: str,
                                                           shape: tuple[int, ...],
                                                           expected: str) -> None:
    path = _stats(tmp_path / dc.STATS_FILE)
    _replace(path, f"climate/{key}", shape=shape, dtype="f8")
    with pytest.raises(SciperfError) as err:
        dc.read_stats(path)
    text = str(err.value)
    assert text.startswith(f"{path}: climate/{key} has shape {shape}, expected "), text
    assert expected in text, text


def test_cli_convert_names_the_group_in_one_line(tmp_path: Path) -> None:
    """`sciperf prepare data.source=convert` reads samples with no model shape: exit 2,
    one line, no TypeError traceback."""
    for split in ("train", "validation"):
        (tmp_path / split).mkdir()
        _sample(tmp_path / split)
    victim = tmp_path / "train" / "s.h5"
    _replace(victim, dc.DATA_KEY, group=True)
    proc = cli("prepare", "workload=deepcam", "experiment=mini", f"data.dir={tmp_path}",
               "data.source=convert")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert errors == [f"sciperf prepare: error: {victim}: {dc.DATA_KEY} is a group, "
                      "not a dataset"], proc.stderr
    assert not list(tmp_path.glob("*/*.npy"))  # refused before anything was written
