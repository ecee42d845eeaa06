"""Finite values far outside what a format holds are refused where NaN/Inf already are.

A CosmoFlow target of 3e38 or an OC20 force of 3e38 is finite, passed every reader, and
training stopped at `loss is inf` naming no file, while `prepare data.source=existing`
passed the file. Each reader now bounds the values (the bounds and their reasons:
docs/workloads/<name>.md) and names the file; `existing`, which reads every sample through
the same reader, exits 2 with one line. Values at the edges of the published data still
read. Datasets are tiny, written by the workloads' own generators, poisoned with the
formats' own writers (npy, the TFRecord codec, h5py, the OC20 LMDB/shard writers).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from sciperf.data import npy
from sciperf.data.tfrecord import encode_example, write_records
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import data as cf
from sciperf.workloads.cosmoflow import tfrecord as cf_codec
from sciperf.workloads.deepcam import data as dc
from sciperf.workloads.oc20 import data as oc
from sciperf.workloads.oc20 import synthetic as oc_synthetic
from testkit import cli, one_error_line

HUGE = 3e38  # finite in float32 (max 3.4e38)
VICTIM = 0  # the poisoned train sample: the first read, so no progress line precedes
# the error and rule 10's one line is the whole of stderr

CF = ("experiment=mini", "model.input_size=16", "data.train_samples=16",
      "data.eval_samples=16")
CF_SHAPE = (16, 16, 16, 4)
DC = ("workload=deepcam", "experiment=mini", "model.height=32", "model.width=48",
      "data.train_samples=4", "data.eval_samples=2")
DC_SHAPE = (32, 48, 16)
OC_CUTOFF = 4.0
OC = ("workload=oc20", "data.train_samples=6", "data.eval_samples=2",
      f"model.cutoff={OC_CUTOFF}")


def _prepared(factory: pytest.TempPathFactory, name: str, *args: str) -> Path:
    root = factory.mktemp(name)
    made = cli("prepare", *args, f"data.dir={root}")
    assert made.returncode == 0, made.stderr[-2000:]
    return root


def _copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / "data"))


def _existing(*args: str) -> str:
    """`sciperf prepare … data.source=existing`: rule 10's one line, returned."""
    return one_error_line(cli("prepare", *args, "data.source=existing"), "prepare")


def _existing_passes(*args: str) -> None:
    proc = cli("prepare", *args, "data.source=existing")
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- CosmoFlow: targets are normalised cosmology parameters in [-1, 1] ----------------------
@pytest.fixture(scope="module")
def cf_sets(tmp_path_factory) -> dict[str, Path]:
    return {fmt: _prepared(tmp_path_factory, f"cf-{fmt}", *CF, f"data.format={fmt}")
            for fmt in ("npy", "tfrecord")}


def _cf_targets(path: Path, fmt: str, change: Callable[[np.ndarray], None]) -> Path:
    """Change a sample's targets with its format's writer; returns the file holding them."""
    if fmt == "npy":
        y = np.load(cf.label_path(path))
        change(y)
        npy.save(cf.label_path(path), y)
        return cf.label_path(path)
    x, y = cf_codec.read_sample(path, CF_SHAPE)
    change(y)
    payload = encode_example({"x": np.ascontiguousarray(x, "<i2").tobytes(), "y": y})
    write_records(path, [payload], compression="gzip")
    return path


@pytest.mark.parametrize("fmt", ["npy", "tfrecord"])
def test_cosmoflow_target_far_outside_the_range_names_the_file(cf_sets, tmp_path: Path,
                                                               fmt: str) -> None:
    root = _copy(cf_sets[fmt], tmp_path)
    victim = cf.list_samples(root, "train", fmt)[VICTIM]
    named = _cf_targets(victim, fmt, lambda y: y.__setitem__(2, HUGE))
    want = "lie beyond ±10 (CosmoFlow's targets are normalised cosmology parameters in [-1, 1])"
    with pytest.raises(SciperfError) as err:
        cf.SampleReader(fmt, CF_SHAPE)(victim)
    text = str(err.value)
    assert text.startswith(f"{named}: targets y [") and text.endswith(want), text
    assert "3e+38" in text, text
    line = _existing(*CF, f"data.format={fmt}", f"data.dir={root}")
    assert f"{named}: targets y [" in line and line.endswith(want), line


@pytest.mark.parametrize("fmt", ["npy", "tfrecord"])
def test_cosmoflow_targets_at_the_models_reach_still_read(cf_sets, tmp_path: Path,
                                                          fmt: str) -> None:
    """±1 (the published range) and ±1.2 (tanh × 1.2, the most the model outputs)."""
    root = _copy(cf_sets[fmt], tmp_path)
    victim = cf.list_samples(root, "train", fmt)[VICTIM]
    edges = np.array([-1.0, 1.0, 1.2, -1.2], np.float32)
    _cf_targets(victim, fmt, lambda y: y.__setitem__(slice(None), edges))
    assert cf.SampleReader(fmt, CF_SHAPE)(victim)[1].tolist() == edges.tolist()
    _existing_passes(*CF, f"data.format={fmt}", f"data.dir={root}")


# --- DeepCAM: raw CAM5 fields (largest: surface pressure ≈ 1.1e5 Pa) and stats.h5 ----------
@pytest.fixture(scope="module")
def dc_sets(tmp_path_factory) -> dict[str, Path]:
    return {fmt: _prepared(tmp_path_factory, f"dc-{fmt}", *DC, f"data.format={fmt}")
            for fmt in ("npy", "hdf5")}


def _dc_data(path: Path, fmt: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    """Rewrite a sample's data through `change` (npy save, or h5py for the reference)."""
    if fmt == "npy":
        npy.save(path, change(np.load(path)))
        return
    with h5py.File(path, "r+") as fh:
        x = change(fh[dc.DATA_KEY][...])
        del fh[dc.DATA_KEY]
        fh.create_dataset(dc.DATA_KEY, data=x)


def _set(index: tuple[int, ...], value: float, dtype: str = "f4"
         ) -> Callable[[np.ndarray], np.ndarray]:
    def change(x: np.ndarray) -> np.ndarray:
        x = x.astype(dtype)
        x[index] = value
        return x
    return change


@pytest.mark.parametrize(("value", "dtype", "shown"), [
    (HUGE, "f4", "3e+38 in channel 3 UBOT"), (-1e20, "f8", "-1e+20 in channel 3 UBOT"),
], ids=["float32-3e38", "float64-1e20"])
@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_deepcam_data_far_outside_any_field_names_the_file(dc_sets, tmp_path: Path, fmt: str,
                                                           value: float, dtype: str,
                                                           shown: str) -> None:
    root = _copy(dc_sets[fmt], tmp_path)
    victim = dc.list_samples(root, "train", fmt)[VICTIM]
    _dc_data(victim, fmt, _set((4, 5, 3), value, dtype))
    want = (f"{victim}: data holds 1 value(s) beyond ±1e+09 (first {shown}); the climate fields "
            "are at most ~1.1e5 (surface pressure in Pa)")
    with pytest.raises(SciperfError) as err:
        dc.make_reader(root, fmt, DC_SHAPE)(victim)
    assert str(err.value) == want
    assert _existing(*DC, f"data.format={fmt}", f"data.dir={root}").endswith(want)


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_deepcam_stats_over_such_data_are_refused(dc_sets, tmp_path: Path, fmt: str) -> None:
    """`data.source=stats` reads through the same check: no stats.h5 of maxval 3e38."""
    root = _copy(dc_sets[fmt], tmp_path)
    dc.stats_path(root).unlink()
    victim = dc.list_samples(root, "train", fmt)[VICTIM]
    _dc_data(victim, fmt, _set((0, 0, 6), HUGE))
    line = one_error_line(cli("prepare", *DC, f"data.format={fmt}", "data.source=stats",
                              f"data.dir={root}"), "prepare")
    assert f"{victim}: data holds 1 value(s) beyond ±1e+09 (first 3e+38 in channel 6 PS)" \
        in line, line
    assert not list(root.glob("*stats*"))


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_deepcam_values_up_to_the_bound_still_read(dc_sets, tmp_path: Path, fmt: str) -> None:
    """Real magnitudes (the generator's PSL ≈ 1.01e5 Pa: the clean set passes `existing`)
    and the bound itself, in both signs."""
    src = dc_sets[fmt]
    _existing_passes(*DC, f"data.format={fmt}", f"data.dir={src}")
    root = _copy(src, tmp_path)
    victim = dc.list_samples(root, "train", fmt)[VICTIM]
    _dc_data(victim, fmt, _set((0, 0, 6), dc.DATA_BOUND))
    _dc_data(victim, fmt, _set((0, 1, 6), -dc.DATA_BOUND))
    x, _ = dc.read_raw(victim, fmt, DC_SHAPE)
    assert x[0, 0, 6] == dc.DATA_BOUND and x[0, 1, 6] == -dc.DATA_BOUND


@pytest.mark.parametrize(("key", "value", "words"), [
    ("maxval", HUGE, "maxval holds 3e+38, beyond ±1e+09 (channel 3 UBOT"),
    ("sqmean", 1e30, "sqmean holds 1e+30, beyond ±1e+18 (channel 3 UBOT"),
], ids=["maxval", "sqmean"])
def test_deepcam_stats_far_outside_any_field_name_the_file(dc_sets, tmp_path: Path, key: str,
                                                           value: float, words: str) -> None:
    """Read (the reader, `existing`) and never written (`data.source=stats`'s writer)."""
    root = _copy(dc_sets["npy"], tmp_path)
    path = dc.stats_path(root)
    with h5py.File(path, "r+") as fh:
        fh[f"climate/{key}"][3] = value
    with pytest.raises(SciperfError) as err:
        dc.read_stats(path)
    assert str(err.value).startswith(f"{path}: {words}"), str(err.value)
    line = _existing(*DC, f"data.dir={root}")
    assert f"{path}: {words}" in line, line
    stats = {k: np.ones(16) for k in dc.STATS_KEYS}
    stats[key] = np.where(np.arange(16) == 3, value, 1.0)
    with pytest.raises(SciperfError) as err:
        dc.write_stats(tmp_path / "again.h5", stats)
    assert str(err.value).startswith(f"{tmp_path / 'again.h5'} not written: {words}")
    assert not (tmp_path / "again.h5").exists()


def test_deepcam_stats_too_narrow_to_normalise_by_are_refused(tmp_path: Path) -> None:
    """maxval − minval of 1e-30: 1 / span is finite, but a value the reader admits
    (±1e9) would normalise to Inf."""
    stats = {k: np.ones(16) for k in dc.STATS_KEYS}
    stats["minval"], stats["maxval"] = np.zeros(16), np.where(np.arange(16) == 10, 1e-30, 1.0)
    path = dc.write_stats(tmp_path / dc.STATS_FILE, stats)
    with pytest.raises(SciperfError) as err:
        dc.normalisation(path)
    assert str(err.value) == (f"{path}: channel 10 PRECT has maxval - minval = 1e-30, too "
                              "narrow to normalise by (values would overflow float32); the "
                              "statistics are unusable")


# --- OC20: positions/cell in Å, forces in eV/Å, referenced energies in eV -------------------
@pytest.fixture(scope="module")
def oc_set(tmp_path_factory) -> Path:
    """12 small EMT slabs in both formats, by the workload's generator."""
    root = tmp_path_factory.mktemp("oc20")
    request = oc_synthetic.GenerateRequest(
        root=str(root), train_samples=6, eval_samples=2, seed=5, cutoff=OC_CUTOFF,
        max_neighbours=12, slab=(2, 2, 3), metals=("Cu",), rattle=0.05,
        adsorbate_probability=0.0, per_container=3)
    oc_synthetic.generate(request, workers=1, show_progress=False)
    return root


def _oc_rewrite(container: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """The container with structure 0 changed, written by its format's own writer."""
    fmt = "lmdb" if container.suffix == ".lmdb" else "npy"
    reader = oc.StructureReader(fmt, OC_CUTOFF)
    structures = [reader(container / str(i)) for i in range(oc.record_count(container, fmt))]
    change(structures[0])
    (oc.write_lmdb if fmt == "lmdb" else oc.write_shard)(container, structures)


def _oc_set(key: str, value: float) -> Callable[[dict[str, Any]], None]:
    def change(s: dict[str, Any]) -> None:
        if key == "energy":
            s[key] = value
            return
        s[key] = np.array(s[key], copy=True)
        s[key].reshape(-1)[1] = value
    return change


@pytest.mark.parametrize(("fmt", "key", "value", "words"), [
    ("lmdb", "force", HUGE, "force holds 3e+38 eV/Å, beyond ±1e+06 eV/Å"),
    ("npy", "force", -HUGE, "force holds -3e+38 eV/Å, beyond ±1e+06 eV/Å"),
    ("npy", "energy", 1e30, "energy holds 1e+30 eV, beyond ±1e+06 eV"),
    ("lmdb", "cell", 1e12, "cell holds 1e+12 Å, beyond ±1e+06 Å"),
], ids=["lmdb-force", "npy-force", "npy-energy", "lmdb-cell"])
def test_oc20_values_far_outside_the_dataset_name_the_file(oc_set: Path, tmp_path: Path,
                                                           fmt: str, key: str, value: float,
                                                           words: str) -> None:
    root = _copy(oc_set, tmp_path)
    container = root / "train" / oc.CONTAINER[fmt].format(0)  # its key 0: read first
    _oc_rewrite(container, _oc_set(key, value))
    want = f"{container} key 0: {words} (no OC20 structure comes near it)"
    reader = oc.StructureReader(fmt, OC_CUTOFF)
    with pytest.raises(SciperfError) as err:
        reader(container / "0")
    assert str(err.value) == want
    assert _existing(*OC, f"data.format={fmt}", f"data.dir={root}").endswith(want)


def test_oc20_strong_but_real_values_still_read(oc_set: Path, tmp_path: Path) -> None:
    """A 50 eV/Å force (EMT's H-adsorbate spikes; spec/oc20.md §7) and an unreferenced
    total energy of -2,000 eV (the largest slabs' DFT energies) read."""
    root = _copy(oc_set, tmp_path)
    container = root / "train" / oc.CONTAINER["npy"].format(0)

    def strong(s: dict[str, Any]) -> None:
        _oc_set("force", 50.0)(s)
        _oc_set("energy", -2e3)(s)

    _oc_rewrite(container, strong)
    s = oc.StructureReader("npy", OC_CUTOFF)(container / "0")
    assert s["force"].reshape(-1)[1] == 50.0 and s["energy"] == -2e3
    _existing_passes(*OC, "data.format=npy", f"data.dir={root}")
