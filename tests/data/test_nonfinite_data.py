"""NaN/Inf and negative counts in CosmoFlow and DeepCAM data are found where they are read.

Real datasets written by `sciperf prepare`, one sample poisoned with the format's own
writer (npy save, the TFRecord codec, h5py), then: the reader raises SciperfError naming
the file, and the real CLI (`prepare data.source=existing`, which reads every sample, and
`train`) exits 2 with one `sciperf …` line naming it — never `loss nan` naming nothing.
DeepCAM's stats.h5 is checked when read and refused when a computation would write NaN.

Every command runs the verb's main in this process (testkit.cli), the datasets' prepare too:
a refused `train` stops at the poisoned sample's first read, before its first step.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from sciperf.data import npy
from sciperf.data.tfrecord import encode_example, write_records
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import data as cf
from sciperf.workloads.cosmoflow import tfrecord as cf_codec
from sciperf.workloads.deepcam import data as dc
from testkit import cli

CF_SIZE = 16
CF_ARGS = ["experiment=mini", f"model.input_size={CF_SIZE}", "data.train_samples=16",
           "data.eval_samples=16"]
CF_SHAPE = (CF_SIZE, CF_SIZE, CF_SIZE, 4)
DC_ARGS = ["workload=deepcam", "experiment=mini", "model.height=32", "model.width=48",
           "data.train_samples=8", "data.eval_samples=8"]
DC_SHAPE = (32, 48, 16)
VICTIM = 1  # the poisoned train sample


def _one_line(proc: subprocess.CompletedProcess, verb: str, path: Path, what: str) -> str:
    """Exit 2, exactly one `sciperf <verb>: error:` line (progress lines may surround it),
    naming `path` and `what`; no traceback."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"sciperf {verb}: error: "), proc.stderr
    assert str(path) in lines[0] and what in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def _prepared(tmp_path_factory: pytest.TempPathFactory, name: str, args: list[str]) -> Path:
    root = tmp_path_factory.mktemp(name)
    proc = cli("prepare", *args, f"data.dir={root}")
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture(scope="module")
def cf_npy(tmp_path_factory) -> Path:
    return _prepared(tmp_path_factory, "cf-npy", CF_ARGS)


@pytest.fixture(scope="module")
def cf_tfrecord(tmp_path_factory) -> Path:
    return _prepared(tmp_path_factory, "cf-tfr", [*CF_ARGS, "data.format=tfrecord"])


@pytest.fixture(scope="module")
def dc_npy(tmp_path_factory) -> Path:
    return _prepared(tmp_path_factory, "dc-npy", DC_ARGS)


@pytest.fixture(scope="module")
def dc_hdf5(tmp_path_factory) -> Path:
    return _prepared(tmp_path_factory, "dc-h5", [*DC_ARGS, "data.format=hdf5"])


def _copy(src: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(src, root)
    return root


# --- CosmoFlow: int16 counts (no NaN possible; negative → log1p NaN) and float targets ----
def _cf_npy_poison(path: Path, poison: str) -> Path:
    """Poison the npy pair with npy.save (the format's writer); returns the file named."""
    if poison == "negative count":
        x = np.load(path)
        x[1, 2, 3, 0] = -3
        npy.save(path, x)
        return path
    y = np.load(cf.label_path(path))
    y[2] = np.nan if poison == "NaN label" else np.inf
    npy.save(cf.label_path(path), y)
    return cf.label_path(path)


def _cf_tfrecord_poison(path: Path, poison: str, compression: str) -> Path:
    """Poison through the TFRecord codec, gzip (as prepared) or uncompressed."""
    x, y = cf_codec.read_sample(path, CF_SHAPE)
    if poison == "negative count":
        x[1, 2, 3, 0] = -3
    else:
        y[2] = np.nan if poison == "NaN label" else np.inf
    payload = encode_example({"x": np.ascontiguousarray(x, "<i2").tobytes(), "y": y})
    write_records(path, [payload], compression=compression)
    return path


CF_FORMATS = {"npy": ("npy", _cf_npy_poison),
              "tfrecord-gzip": ("tfrecord", lambda p, k: _cf_tfrecord_poison(p, k, "gzip")),
              "tfrecord-raw": ("tfrecord", lambda p, k: _cf_tfrecord_poison(p, k, "none"))}
CF_POISON = {"negative count": "counts hold negative values (min -3); CosmoFlow counts are ≥ 0",
             "NaN label": "targets y hold NaN or Inf", "Inf label": "targets y hold NaN or Inf"}


@pytest.mark.parametrize("poison", list(CF_POISON))
@pytest.mark.parametrize("layout", list(CF_FORMATS))
def test_cosmoflow_reader_and_prepare_name_the_file(request, layout: str, poison: str,
                                                    tmp_path: Path) -> None:
    fmt, write = CF_FORMATS[layout]
    root = _copy(request.getfixturevalue("cf_npy" if fmt == "npy" else "cf_tfrecord"),
                 tmp_path)
    victim = cf.list_samples(root, "train", fmt)[VICTIM]
    named = write(victim, poison)
    with pytest.raises(SciperfError, match=CF_POISON[poison].replace("(", r"\(")
                       .replace(")", r"\)")) as err:
        cf.SampleReader(fmt, CF_SHAPE)(victim)
    assert str(err.value).startswith(f"{named}: ")
    _one_line(cli("prepare", *CF_ARGS, f"data.format={fmt}", "data.source=existing",
                  f"data.dir={root}"), "prepare", named, CF_POISON[poison])


def test_cosmoflow_train_stops_naming_the_file(cf_npy: Path, tmp_path: Path) -> None:
    root = _copy(cf_npy, tmp_path)
    victim = _cf_npy_poison(cf.list_samples(root, "train", "npy")[VICTIM], "negative count")
    proc = cli("train", *CF_ARGS, "train.max_epochs=1", f"data.dir={root}",
               f"output_dir={tmp_path / 'out'}")
    _one_line(proc, "train", victim, "counts hold negative values")


# --- DeepCAM: float32 fields, class maps, stats.h5 ------------------------------------------
def _dc_npy_poison(path: Path, poison: str) -> Path:
    if poison == "NaN label":  # a float label file (the reader accepts float class maps)
        y = np.load(dc.label_path(path)).astype(np.float32)
        y[4, 5] = np.nan
        npy.save(dc.label_path(path), y)
        return dc.label_path(path)
    x = np.load(path)
    x[4, 5, 3] = np.nan if poison == "NaN data" else np.inf
    npy.save(path, x)
    return path


def _dc_hdf5_poison(path: Path, poison: str) -> Path:
    """Rewrite the reference layout with h5py (labels as float32 to hold a NaN)."""
    with h5py.File(path, "r") as fh:
        x, y = fh[dc.DATA_KEY][...], fh[dc.LABEL_KEY][...].astype(np.float32)
    if poison == "NaN label":
        y[4, 5] = np.nan
    else:
        x[4, 5, 3] = np.nan if poison == "NaN data" else np.inf
    with h5py.File(path, "w") as fh:
        fh.create_dataset(dc.DATA_KEY, data=x)
        fh.create_dataset(dc.LABEL_KEY, data=y)
    return path


DC_FORMATS: dict[str, Callable[[Path, str], Path]] = {"npy": _dc_npy_poison,
                                                     "hdf5": _dc_hdf5_poison}
DC_POISON = {"NaN data": "data holds NaN or Inf (1 NaN, 0 Inf values; first in channel 3",
             "Inf data": "data holds NaN or Inf (0 NaN, 1 Inf values; first in channel 3",
             "NaN label": "label value nan is out of range"}


@pytest.mark.parametrize("poison", list(DC_POISON))
@pytest.mark.parametrize("fmt", list(DC_FORMATS))
def test_deepcam_reader_and_prepare_name_the_file(request, fmt: str, poison: str,
                                                  tmp_path: Path) -> None:
    root = _copy(request.getfixturevalue(f"dc_{fmt}"), tmp_path)
    victim = dc.list_samples(root, "train", fmt)[VICTIM]
    named = DC_FORMATS[fmt](victim, poison)
    with pytest.raises(SciperfError) as err:
        dc.make_reader(root, fmt, DC_SHAPE)(victim)
    assert str(err.value).startswith(f"{named}: ") and DC_POISON[poison] in str(err.value)
    _one_line(cli("prepare", *DC_ARGS, f"data.format={fmt}", "data.source=existing",
                  f"data.dir={root}"), "prepare", named, DC_POISON[poison])


def test_deepcam_train_stops_naming_the_file(dc_npy: Path, tmp_path: Path) -> None:
    root = _copy(dc_npy, tmp_path)
    victim = _dc_npy_poison(dc.list_samples(root, "train", "npy")[VICTIM], "Inf data")
    proc = cli("train", *DC_ARGS, "train.max_epochs=1", f"data.dir={root}",
               f"output_dir={tmp_path / 'out'}")
    _one_line(proc, "train", victim, "data holds NaN or Inf")


@pytest.mark.parametrize("key", ["mean", "minval"])
def test_nan_in_stats_is_one_line(dc_npy: Path, tmp_path: Path, key: str) -> None:
    root = _copy(dc_npy, tmp_path)
    path = dc.stats_path(root)
    with h5py.File(path, "r+") as fh:
        fh[f"climate/{key}"][3] = np.nan
    with pytest.raises(SciperfError, match=f"{key} holds NaN \\(channel 3 UBOT\\)") as err:
        dc.make_reader(root, "npy", DC_SHAPE)
    assert str(err.value).startswith(f"{path}: ")
    _one_line(cli("prepare", *DC_ARGS, "data.source=existing", f"data.dir={root}"),
              "prepare", path, f"{key} holds NaN")


def test_stats_over_poisoned_data_are_refused_and_not_written(dc_npy: Path,
                                                             tmp_path: Path) -> None:
    root = _copy(dc_npy, tmp_path)
    dc.stats_path(root).unlink()
    victim = _dc_npy_poison(dc.list_samples(root, "train", "npy")[VICTIM], "NaN data")
    proc = cli("prepare", *DC_ARGS, "data.source=stats", f"data.dir={root}")
    _one_line(proc, "prepare", victim, "data holds NaN or Inf")
    assert not list(root.glob("*stats*"))  # no stats.h5, no temporary left


def test_non_finite_statistics_are_never_written(tmp_path: Path) -> None:
    good = {k: np.ones(16) for k in dc.STATS_KEYS}
    path = tmp_path / "stats.h5"
    for value, word in ((np.nan, "NaN"), (np.inf, "Inf")):
        bad = {**good, "sqmean": np.where(np.arange(16) == 5, value, 1.0)}
        with pytest.raises(SciperfError, match=f"not written: sqmean holds {word} "
                                               r"\(channel 5 QREFHT\)"):
            dc.write_stats(path, bad)
        assert not list(tmp_path.iterdir())
    dc.write_stats(path, good)
    assert dc.read_stats(path)["sqmean"].tolist() == [1.0] * 16


def test_float64_data_beyond_float32_is_inf_once_cast(dc_npy: Path, tmp_path: Path) -> None:
    """The piecewise check runs on the stored dtype; float64 is checked again after the
    cast (1e39 is finite in float64, Inf in float32)."""
    root = _copy(dc_npy, tmp_path)
    victim = dc.list_samples(root, "train", "npy")[VICTIM]
    x = np.load(victim).astype(np.float64)
    x[0, 0, 0] = 1e39
    npy.save(victim, x)
    with pytest.raises(SciperfError, match="0 NaN, 1 Inf values; first in channel 0 TMQ"):
        dc.read_raw(victim, "npy", DC_SHAPE)


# --- the piecewise npy check ------------------------------------------------------------------
def test_load_checked_sees_every_piece_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(npy, "CHECK_PIECE", 64)  # 16 float32 a piece
    arr = np.arange(100, dtype=np.float32).reshape(4, 25)
    path = tmp_path / "a.npy"
    np.save(path, arr)
    pieces: list[np.ndarray] = []
    got, ok = npy.load_checked(path, lambda p: pieces.append(p.copy()) or True)
    assert ok and np.array_equal(got, arr) and [len(p) for p in pieces] == [16] * 6 + [4]
    assert np.array_equal(np.concatenate(pieces), arr.reshape(-1))
    arr[3, 20] = np.nan
    np.save(path, arr)
    got, ok = npy.load_checked(path, lambda p: bool(np.isfinite(p).all()))
    assert not ok and np.isnan(got[3, 20])  # the whole array still comes back
    with open(path, "r+b") as fh:
        fh.truncate(300)
    with pytest.raises(ValueError, match="truncated .npy data"):
        npy.load_checked(path, lambda p: True)
