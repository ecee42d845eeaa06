"""CosmoFlow on-disk formats, defined once (docs/architecture.md, rule 5) with numpy only.

* ``tfrecord`` — the reference format, read as is from the real 1.7 TB dataset: one
  gzip-compressed TFRecord per sample under ``<dir>/train`` and ``<dir>/validation``,
  features ``x`` (raw little-endian int16 bytes, shape 128³×4) and ``y`` (4 floats).
* ``npy`` — the fast format: ``<name>.data.npy`` (int16, channels-last) beside
  ``<name>.label.npy`` (float32, 4), uncompressed, read with one memcpy.

Framework loaders call :func:`list_samples` and :func:`read_sample`; no second definition
of either format exists anywhere. Every read also checks the values (counts ≥ 0, finite
targets within ±TARGET_BOUND) at the cost of one vectorised min over data the read already
holds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sciperf.data import npy
from sciperf.data.conversion import Conversion, Job, npy_pair_jobs, remove_orphan_pairs
from sciperf.data.layout import SampleLayout
from sciperf.data.layout import label_path as label_path  # the format's API, re-exported
from sciperf.data.layout import sample_files as sample_files
from sciperf.data.tfrecord import TFRecordError
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import spec as spec
from sciperf.workloads.cosmoflow import tfrecord

SUFFIX = {"tfrecord": ".tfrecord", "npy": ".data.npy"}
# |target| a sample may hold. The targets are the reference's normalised cosmology
# parameters (the simulations' `unitPar`, each in [-1, 1]) and the model's output,
# tanh × 1.2, reaches at most 1.2: 10 is 8× beyond anything it can learn, far below what
# overflows the squared error (a target of 3e38 trains at `loss inf`, naming no file).
TARGET_BOUND = 10.0
LAYOUT = SampleLayout(SUFFIX, spec.SPLITS)
split_dir, list_samples = LAYOUT.split_dir, LAYOUT.list_samples


def read_sample(path: Path, fmt: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One sample as (int16 array of `shape`, float32 (4,)); bad files raise naming the file.

    Bad values too (:func:`check_values`): a negative count or a NaN target would
    otherwise train at `loss nan` with nothing pointing at the file.
    """
    LAYOUT.check_format(fmt)
    if fmt == "tfrecord":
        try:
            x, y = tfrecord.read_sample(path, tuple(shape))
        except (TFRecordError, OSError) as exc:
            raise SciperfError(str(exc)) from exc
        check_values(path, x, non_negative(x), path, y)
        return x, y
    # npy: the sign check runs on each piece as it is read (cache-hot, sciperf.data.npy)
    x, counts_ok = _load_npy(path, np.dtype(spec.SAMPLE_DTYPE), tuple(shape), non_negative)
    y, _ = _load_npy(label_path(path), np.float32, (spec.TARGET_SIZE,))
    check_values(path, x, counts_ok, label_path(path), y)
    return x, y


def non_negative(counts: np.ndarray) -> bool:
    """Whether every count is ≥ 0 (one vectorised min): the input transform is log1p, so
    a count of −1 becomes −Inf and anything lower NaN. Other dtypes pass here and fail the
    dtype check after the load."""
    return counts.dtype.kind not in "iuf" or counts.size == 0 or bool(counts.min() >= 0)


def check_values(path: Path, x: np.ndarray, counts_ok: bool, labels: Path,
                 y: np.ndarray) -> None:
    """One line naming the file for negative counts in `x` (`counts_ok` is
    :func:`non_negative` of it, already computed) or NaN/Inf or values beyond
    ±TARGET_BOUND in the targets `y` (read from `labels`: the npy label file, or the
    TFRecord itself). Counts need no upper bound: int16 holds at most 32767 (log1p ≈ 10.4)."""
    if not counts_ok:
        raise SciperfError(f"{path}: counts hold negative values (min {int(x.min())}); "
                           "CosmoFlow counts are ≥ 0")
    if not np.isfinite(y).all():
        raise SciperfError(f"{labels}: targets y hold NaN or Inf {y.tolist()}")
    if np.abs(y).max() > TARGET_BOUND:
        shown = ", ".join(f"{v:.6g}" for v in y.tolist())
        raise SciperfError(f"{labels}: targets y [{shown}] lie beyond ±{TARGET_BOUND:g} "
                           "(CosmoFlow's targets are normalised cosmology parameters in "
                           "[-1, 1])")


def _load_npy(path: Path, dtype: type, shape: tuple[int, ...],
              check: Callable[[np.ndarray], bool] | None = None) -> tuple[np.ndarray, bool]:
    """np.load with the checks a corrupt or foreign file needs; (array, whether `check`
    held on every piece of it, see ``sciperf.data.npy.load_checked``)."""
    try:
        arr, ok = npy.load_checked(path, check)  # thread-safe header parse (loader threads)
    except (OSError, ValueError, EOFError) as exc:
        raise SciperfError(f"cannot read {path}: {exc}") from exc
    if arr.dtype != dtype or arr.shape != shape:
        raise SciperfError(
            f"{path}: expected {np.dtype(dtype).name} {shape}, found {arr.dtype} {arr.shape}"
        )
    return arr, ok


def write_sample(folder: Path, name: str, fmt: str, x: np.ndarray, y: np.ndarray) -> Path:
    """Write one sample atomically (temp file + rename); returns the data file path."""
    if fmt == "tfrecord":
        path = folder / f"{name}{SUFFIX['tfrecord']}"
        tfrecord.write_sample(path, x.astype("<i2"), y.astype(np.float32))
        return path
    return npy.write_pair(folder, name, x.astype(np.int16), y.astype(np.float32))


def _convert_sample(job: Job) -> int:
    """One TFRecord sample as the npy pair beside it, checked as every read checks it; its
    cube size is read from the file (no model config says it)."""
    try:
        x, y = tfrecord.read_cube(job.source, spec.SAMPLE_SHAPE[-1])
    except (TFRecordError, OSError) as exc:
        raise SciperfError(str(exc)) from exc
    check_values(job.source, x, non_negative(x), job.source, y)
    data = job.outputs[-1]
    write_sample(data.parent, data.name[: -len(SUFFIX["npy"])], "npy", x, y)
    return 1


# tfrecord → npy beside each sample; npy samples whose TFRecord is gone are removed first
CONVERSION = Conversion(source="tfrecord", target="npy",
                        jobs=functools.partial(npy_pair_jobs, LAYOUT, fmt="tfrecord"),
                        convert=_convert_sample,
                        before=functools.partial(remove_orphan_pairs, LAYOUT, fmt="tfrecord"))


def transform(x: np.ndarray) -> np.ndarray:
    """Reference input transform log(1 + x) to float32 (numpy reference for the loaders)."""
    return np.log1p(x.astype(np.float32))


@dataclass(frozen=True)
class SampleReader:
    """The loaders' read function for one format and input size (picklable, no state)."""

    fmt: str
    x_shape: tuple[int, ...]
    x_dtype: np.dtype = np.dtype(spec.SAMPLE_DTYPE)
    y_shape: tuple[int, ...] = (spec.TARGET_SIZE,)
    y_dtype: np.dtype = np.dtype(np.float32)

    def __call__(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        return read_sample(Path(path), self.fmt, self.x_shape)


def make_reader(root: str | Path, fmt: str, model: spec.ModelSpec) -> SampleReader:
    """The reader of a dataset in `fmt` for `model`'s input (int16 counts, channels-last)."""
    LAYOUT.check_format(fmt)
    return SampleReader(fmt, (model.input_size,) * 3 + (model.in_channels,))


def payload_bytes(model: spec.ModelSpec) -> int:
    """One sample uncompressed: the int16 cube and the float32 regression targets."""
    return int(model.input_size) ** 3 * int(model.in_channels) * 2 + spec.TARGET_SIZE * 4
