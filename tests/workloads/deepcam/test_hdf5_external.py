"""DeepCAM hdf5 files whose data lives outside them: a dataset declared as external raw
storage (any host file, read as climate data), a virtual dataset (VDS: other HDF5 files),
an external link to another file, a soft link that leads to one. Each is refused before a
byte is read, in one line naming the file and the dataset — in the sample reader (train,
stats, convert, `existing`), in stats.h5, and on the command line; soft links that stay
inside the file are still followed."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import data as dc
from testkit import cli, one_error_line, refused

SHAPE = (4, 6, 16)  # tiny (H, W, C): the checks do not depend on the size
SECRET = 7.0  # what the host file holds: read as climate data before the fix
OUTSIDE = "sciperf reads only data stored in the file itself"
DEEPCAM = ("workload=deepcam", "experiment=mini", "model.height=32", "model.width=48",
           "data.train_samples=4", "data.eval_samples=2", "data.format=hdf5")


def _sample(folder: Path, name: str = "s") -> Path:
    """A valid hdf5 sample, written by the format's own writer."""
    return dc.write_sample(folder, name, "hdf5", np.ones(SHAPE, np.float32),
                           np.ones(SHAPE[:2], np.uint8))


def _host_file(folder: Path, dtype: str, count: int) -> Path:
    """A file outside the dataset holding `count` values of SECRET (or 1 as labels) as raw
    bytes: exactly what external storage of that dtype reads as valid data."""
    path = folder / f"host-{dtype}.bin"
    value = SECRET if dtype == "f4" else 1
    np.full(count, value, dtype).tofile(path)
    return path


def _external_storage(path: Path, key: str, host: Path) -> None:
    """Dataset `key` → the same shape and dtype, stored as external raw storage in `host`
    (h5py's ``external=``: the file stores only the host path)."""
    with h5py.File(path, "r+") as fh:
        shape, dtype = fh[key].shape, fh[key].dtype
        del fh[key]
        fh.create_dataset(key, shape=shape, dtype=dtype,
                          external=[(str(host), 0, h5py.h5f.UNLIMITED)])


def _other_file(folder: Path) -> Path:
    """Another HDF5 file holding a complete sample's datasets (SECRET data)."""
    return dc.write_sample(folder, "other", "hdf5", np.full(SHAPE, SECRET, np.float32),
                           np.ones(SHAPE[:2], np.uint8))


@pytest.mark.parametrize("key", [dc.DATA_KEY, dc.LABEL_KEY])
@pytest.mark.parametrize("shape", [None, SHAPE], ids=["no-model", "model"])
def test_external_raw_storage_is_refused_naming_file_and_dataset(tmp_path: Path, key: str,
                                                                 shape: tuple | None) -> None:
    """Without a model shape (stats, convert) and with one (train, `existing`)."""
    path = _sample(tmp_path)
    count = int(np.prod(SHAPE if key == dc.DATA_KEY else SHAPE[:2]))
    host = _host_file(tmp_path, "f4" if key == dc.DATA_KEY else "u1", count)
    _external_storage(path, key, host)
    text = refused(dc.read_raw, path, "hdf5", shape)
    assert text == (f"{path}: {key} has external raw storage ({str(host)!r}); "
                    f"{OUTSIDE}")


def test_external_storage_of_a_system_file_is_refused(tmp_path: Path) -> None:
    """The issue's case: `/etc/hostname` (any host file) declared as the climate data."""
    path = _sample(tmp_path)
    with h5py.File(path, "r+") as fh:
        del fh[dc.DATA_KEY]
        fh.create_dataset(dc.DATA_KEY, shape=SHAPE, dtype="u1",
                          external=[("/etc/hostname", 0, h5py.h5f.UNLIMITED)])
    text = refused(dc.read_raw, path, "hdf5", None)
    assert text == f"{path}: {dc.DATA_KEY} has external raw storage ('/etc/hostname'); {OUTSIDE}"


def test_a_virtual_dataset_is_refused(tmp_path: Path) -> None:
    path, other = _sample(tmp_path), _other_file(tmp_path)
    layout = h5py.VirtualLayout(shape=SHAPE, dtype="f4")
    layout[...] = h5py.VirtualSource(str(other), dc.DATA_KEY, shape=SHAPE)
    with h5py.File(path, "r+") as fh:
        del fh[dc.DATA_KEY]
        fh.create_virtual_dataset(dc.DATA_KEY, layout)
    text = refused(dc.read_raw, path, "hdf5", SHAPE)
    assert text == (f"{path}: {dc.DATA_KEY} is a virtual dataset (its data would be "
                    f"read from other files); {OUTSIDE}")


@pytest.mark.parametrize("linked", ["dataset", "group"])
def test_an_external_link_is_refused(tmp_path: Path, linked: str) -> None:
    """`climate/data` itself, or the `climate` group above it, links to another file."""
    path, other = _sample(tmp_path), _other_file(tmp_path)
    name = "/" + (dc.DATA_KEY if linked == "dataset" else "climate")
    with h5py.File(path, "r+") as fh:
        del fh[name]
        fh[name] = h5py.ExternalLink(str(other), name)
    text = refused(dc.read_raw, path, "hdf5", SHAPE)
    assert text == (f"{path}: {dc.DATA_KEY} leads out of the file ({name} is an "
                    f"external link to {other}:{name}); {OUTSIDE}")


def test_a_soft_link_to_an_external_link_is_refused(tmp_path: Path) -> None:
    path, other = _sample(tmp_path), _other_file(tmp_path)
    with h5py.File(path, "r+") as fh:
        fh["elsewhere"] = h5py.ExternalLink(str(other), "/" + dc.LABEL_KEY)
        del fh[dc.LABEL_KEY]
        fh[dc.LABEL_KEY] = h5py.SoftLink("/elsewhere")
    text = refused(dc.read_raw, path, "hdf5", SHAPE)
    assert text == (f"{path}: {dc.LABEL_KEY} leads out of the file (/elsewhere is an "
                    f"external link to {other}:/{dc.LABEL_KEY}); {OUTSIDE}")


def test_soft_links_inside_the_file_are_followed(tmp_path: Path) -> None:
    """A legitimate layout: the datasets stored under another name, linked absolutely and
    relatively (through a soft-linked group too)."""
    path = _sample(tmp_path)
    with h5py.File(path, "r+") as fh:
        fh.move(dc.DATA_KEY, "/store/fields")
        fh.move(dc.LABEL_KEY, "/store/classes")
        fh["alias"] = h5py.SoftLink("/store")
        fh[dc.DATA_KEY] = h5py.SoftLink("/alias/fields")
        fh[dc.LABEL_KEY] = h5py.SoftLink("classes")  # relative: /climate/classes
        fh["climate/classes"] = h5py.SoftLink("/store/./classes")
    x, y = dc.read_raw(path, "hdf5", SHAPE)
    assert x.shape == SHAPE and (x == 1).all() and (y == 1).all()


def test_a_soft_link_loop_is_one_line(tmp_path: Path) -> None:
    path = _sample(tmp_path)
    with h5py.File(path, "r+") as fh:
        del fh[dc.DATA_KEY]
        fh[dc.DATA_KEY] = h5py.SoftLink("/loop")
        fh["loop"] = h5py.SoftLink("/" + dc.DATA_KEY)
    text = refused(dc.read_raw, path, "hdf5", SHAPE)
    assert text == f"{path}: {dc.DATA_KEY} passes more than 16 soft links (a loop)"


def test_stats_with_external_storage_are_refused(tmp_path: Path) -> None:
    path = dc.write_stats(tmp_path / dc.STATS_FILE,
                          {k: np.arange(16.0) + (k == "maxval") for k in dc.STATS_KEYS})
    host = tmp_path / "host.bin"
    np.arange(16.0).tofile(host)
    _external_storage(path, "climate/minval", host)
    with pytest.raises(SciperfError) as err:
        dc.read_stats(path)
    assert str(err.value) == (f"{path}: climate/minval has external raw storage "
                              f"({str(host)!r}); {OUTSIDE}")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny hdf5 DeepCAM set with its stats.h5, by the project's own generator."""
    root = tmp_path_factory.mktemp("dc-h5")
    made = cli("prepare", *DEEPCAM, f"data.dir={root}")
    assert made.returncode == 0, made.stderr[-2000:]
    return root


def _damaged(prepared: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the set whose first train sample (read first: no progress line before
    the error) stores its data in a host file."""
    root = Path(shutil.copytree(prepared, tmp_path / "data"))
    victim = dc.list_samples(root, "train", "hdf5")[0]
    host = _host_file(tmp_path, "f4", 32 * 48 * 16)
    _external_storage(victim, dc.DATA_KEY, host)
    return root, victim


def test_cli_existing_refuses_external_storage(prepared: Path, tmp_path: Path) -> None:
    root, victim = _damaged(prepared, tmp_path)
    line = one_error_line(cli("prepare", *DEEPCAM, "data.source=existing",
                              f"data.dir={root}"), "prepare")
    assert line.endswith(f"{victim}: {dc.DATA_KEY} has external raw storage "
                         f"({str(tmp_path / 'host-f4.bin')!r}); {OUTSIDE}"), line


def test_cli_convert_and_stats_refuse_external_storage(prepared: Path, tmp_path: Path) -> None:
    """`convert` writes no npy sample, `stats` no stats.h5."""
    root, victim = _damaged(prepared, tmp_path)
    line = one_error_line(cli("prepare", *DEEPCAM, "data.source=convert",
                              f"data.dir={root}"), "prepare")
    assert f"{victim}: {dc.DATA_KEY} has external raw storage" in line, line
    assert not [p for p in root.rglob("*.npy") if p.name.startswith(victim.stem)]
    dc.stats_path(root).unlink()
    line = one_error_line(cli("prepare", *DEEPCAM, "data.source=stats",
                              f"data.dir={root}"), "prepare")
    assert f"{victim}: {dc.DATA_KEY} has external raw storage" in line, line
    assert not list(root.glob("*stats*"))
