"""A DeepCAM HDF5 sample stored through a filter HDF5 does not build in is refused.

HDF5 loads a filter it does not know from its plugin path as a shared library: the data
file would choose code to run. The readers take the built-in filters only (gzip, shuffle,
fletcher32, szip, nbit, scaleoffset and h5py's lzf), before a byte is read.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from sciperf.workloads.deepcam import data as dc
from testkit import refused

SHAPE = (4, 6, 16)
BLOSC = 32001  # a registered filter id whose plugin HDF5 would search for


def _sample(folder: Path, key: str, **storage: object) -> Path:
    """A valid hdf5 sample whose dataset `key` is rewritten with `storage` (h5py's
    create_dataset options)."""
    path = dc.write_sample(folder, "s", "hdf5", np.ones(SHAPE, np.float32),
                           np.ones(SHAPE[:2], np.uint8))
    with h5py.File(path, "r+") as fh:
        values = fh[key][...]
        del fh[key]
        fh.create_dataset(key, data=values, chunks=values.shape, **storage)
    return path


@pytest.mark.parametrize("key", [dc.DATA_KEY, dc.LABEL_KEY])
def test_a_plugin_filter_is_refused_naming_file_dataset_and_filter(tmp_path: Path,
                                                                   key: str) -> None:
    path = _sample(tmp_path, key, compression=BLOSC, allow_unknown_filter=True)
    text = refused(dc.read_raw, path, "hdf5", None)
    assert text.startswith(f"{path}: {key} is stored through HDF5 filter {BLOSC}, which HDF5 "
                           "would load as a plugin"), text


@pytest.mark.parametrize("storage", [{"compression": "gzip", "shuffle": True},
                                     {"compression": "lzf", "fletcher32": True},
                                     {"scaleoffset": 0}], ids=["gzip", "lzf", "scaleoffset"])
def test_built_in_filters_are_read(tmp_path: Path, storage: dict) -> None:
    path = _sample(tmp_path, dc.LABEL_KEY, **storage)
    _, label = dc.read_raw(path, "hdf5", None)
    assert np.array_equal(label, np.ones(SHAPE[:2], np.uint8))
