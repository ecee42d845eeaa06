"""CosmoFlow on-disk formats, defined once (DESIGN.md rule 5) with numpy only.

* ``tfrecord`` — the reference format, read as is from the real 1.7 TB dataset: one
  gzip-compressed TFRecord per sample under ``<dir>/train`` and ``<dir>/validation``,
  features ``x`` (raw little-endian int16 bytes, shape 128³×4) and ``y`` (4 floats).
* ``npy`` — the fast format: ``<name>.data.npy`` (int16, channels-last) beside
  ``<name>.label.npy`` (float32, 4), uncompressed, read with one memcpy.

Framework loaders call :func:`list_samples` and :func:`read_sample`; no second definition
of either format exists anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sciperf.data import npy, tfrecord
from sciperf.data.layout import SampleLayout
from sciperf.data.layout import label_path as label_path  # the format's API, re-exported
from sciperf.data.layout import sample_files as sample_files
from sciperf.errors import SciperfError
from sciperf.workloads import cosmoflow as spec

SUFFIX = {"tfrecord": ".tfrecord", "npy": ".data.npy"}
LAYOUT = SampleLayout(SUFFIX, spec.SPLITS)
split_dir, list_samples = LAYOUT.split_dir, LAYOUT.list_samples


def read_sample(path: Path, fmt: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One sample as (int16 array of `shape`, float32 (4,)); bad files raise naming the file."""
    LAYOUT.check_format(fmt)
    if fmt == "tfrecord":
        try:
            return tfrecord.read_cosmoflow_sample(path, tuple(shape))
        except (tfrecord.TFRecordError, OSError) as exc:
            raise SciperfError(str(exc)) from exc
    x = _load_npy(path, np.int16, tuple(shape))
    y = _load_npy(label_path(path), np.float32, (spec.TARGET_SIZE,))
    return x, y


def _load_npy(path: Path, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    """np.load with the checks a corrupt or foreign file needs."""
    try:
        arr = npy.load(path)  # thread-safe header parse (loader threads)
    except (OSError, ValueError, EOFError) as exc:
        raise SciperfError(f"cannot read {path}: {exc}") from exc
    if arr.dtype != dtype or arr.shape != shape:
        raise SciperfError(
            f"{path}: expected {np.dtype(dtype).name} {shape}, found {arr.dtype} {arr.shape}"
        )
    return arr


def write_sample(folder: Path, name: str, fmt: str, x: np.ndarray, y: np.ndarray) -> Path:
    """Write one sample atomically (temp file + rename); returns the data file path."""
    if fmt == "tfrecord":
        path = folder / f"{name}{SUFFIX['tfrecord']}"
        tfrecord.write_cosmoflow_sample(path, x.astype("<i2"), y.astype(np.float32))
        return path
    path = folder / f"{name}{SUFFIX['npy']}"
    _save_npy(label_path(path), y.astype(np.float32))
    _save_npy(path, x.astype(np.int16))
    return path


def _save_npy(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, arr)
    os.replace(tmp, path)


def transform(x: np.ndarray) -> np.ndarray:
    """Reference input transform log(1 + x) to float32 (numpy reference for the loaders)."""
    return np.log1p(x.astype(np.float32))
