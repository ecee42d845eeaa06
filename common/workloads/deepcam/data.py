"""DeepCAM on-disk formats, defined once (docs/architecture.md, rule 5) with numpy and h5py only.

* ``hdf5`` — the reference format, read as is from the real 8.8 TB dataset: one file per
  sample under ``<dir>/train`` and ``<dir>/validation`` holding ``climate/data``
  (H, W, 16) float32 and ``climate/labels_0`` (H, W) with values {0, 1, 2}; plus
  ``<dir>/stats.h5`` with per-channel ``climate/minval``, ``maxval``, ``mean``, ``sqmean``
  and ``count`` over the training split.
* ``npy`` — the fast format optimized submissions convert to: ``<name>.data.npy``
  (float32, H×W×16, raw values) beside ``<name>.label.npy`` (uint8, H×W), read with one
  memcpy each; normalised with the same ``stats.h5``.

Every read checks the values: data of a numeric dtype and finite (one vectorised
``np.isfinite`` over what the read holds; npy: piece by piece as it arrives,
``sciperf.data.npy.load_checked``), labels in {0, 1, 2}, stats.h5 numeric and finite — a
NaN would otherwise train at `loss nan` naming no file.

Samples are min-max normalised per channel as the reference does,
x' = (x − minval) · (1 / (maxval − minval)) in float32, and stay channels-last (HWC);
framework adapters turn them into NCHW-with-channels-last-memory or NHWC tensors.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from sciperf.data import atomic, npy
from sciperf.data.layout import SampleLayout
from sciperf.data.layout import label_path as label_path  # the format's API, re-exported
from sciperf.data.layout import sample_files as sample_files
from sciperf.data.partials import files_digest, gather, write_part
from sciperf.data.sharding import shard
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads.deepcam import spec as spec

SUFFIX = {"hdf5": ".h5", "npy": ".data.npy"}
LAYOUT = SampleLayout(SUFFIX, spec.SPLITS)
split_dir, list_samples, _check_format = LAYOUT.split_dir, LAYOUT.list_samples, LAYOUT.check_format
STATS_FILE = "stats.h5"
DATA_KEY, LABEL_KEY = "climate/data", "climate/labels_0"
STATS_KEYS = ("minval", "maxval", "mean", "sqmean", "count")
NUMERIC_KINDS = "iuf"  # numpy dtype kinds read as numbers (not bool, complex, text, records)
# A sample read without a model shape (stats, convert) may hold at most this many values:
# a declared (200000, 200000, 16) in a 1 MB chunked file would otherwise be allocated.
MAX_SAMPLE_FACTOR = 4
MAX_SAMPLE_VALUES = MAX_SAMPLE_FACTOR * math.prod(spec.SAMPLE_SHAPE)


# --- normalisation statistics --------------------------------------------------------------
def stats_path(root: str | Path) -> Path:
    """`<root>/stats.h5` (beside train/ and validation/, where the reference keeps it)."""
    return Path(root) / STATS_FILE


def read_stats(path: str | Path) -> dict[str, np.ndarray]:
    """Every ``climate/<key>`` array of a stats file; a bad file is one line naming it."""
    path = Path(path)
    if not path.is_file():
        raise SciperfError(f"normalisation statistics {path} do not exist "
                           "(`sciperf prepare` computes them over the train split)")
    try:
        with h5py.File(path, "r") as fh:
            raw = {k: _stats_dataset(fh, path, k)[...] for k in STATS_KEYS}
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise SciperfError(f"cannot read statistics {path}: {_reason(exc)}") from exc
    out = {k: _stats_array(path, k, value) for k, value in raw.items()}
    problem = _non_finite_stats(out)
    if problem:
        raise SciperfError(f"{path}: {problem}; recompute it with `sciperf prepare "
                           "workload=deepcam data.source=stats`")
    return out


def _stats_dataset(fh: h5py.File, path: Path, key: str) -> h5py.Dataset:
    """``climate/<key>``, checked before it is read: a dataset (a group fails inside h5py
    naming no file), numeric, and per channel — minval/maxval (C,), the others at most C
    values (a declared huge shape would be allocated by the read)."""
    ds = _h5_dataset(fh, path, f"climate/{key}")
    _check_stats_dtype(path, key, ds.dtype)
    shape, channels = _h5_shape(ds), spec.SAMPLE_SHAPE[2]
    if key in ("minval", "maxval") and shape != (channels,):
        raise SciperfError(f"{path}: climate/{key} has shape {shape}, expected ({channels},)")
    if len(shape) > 1 or math.prod(shape) > channels:
        raise SciperfError(f"{path}: climate/{key} has shape {shape}, expected at most "
                           f"({channels},) (one value per channel)")
    return ds


def _check_stats_dtype(path: Path, key: str, dtype: np.dtype) -> None:
    """A dataset of strings or bytes (a foreign or hand-edited file) is one line naming the
    file and dataset, not numpy's "could not convert"."""
    if dtype.kind not in NUMERIC_KINDS:
        raise SciperfError(f"{path}: climate/{key} has dtype {dtype}, which is not "
                           "numeric; recompute it with `sciperf prepare workload=deepcam "
                           "data.source=stats`")


def _stats_array(path: Path, key: str, value: object) -> np.ndarray:
    """One statistic as float64 (its dtype checked again: the value may come from code)."""
    arr = np.asarray(value)
    _check_stats_dtype(path, key, arr.dtype)
    return arr.astype(np.float64)


def _non_finite_stats(stats: dict[str, np.ndarray]) -> str | None:
    """What is not finite in a set of statistics ("mean holds NaN (channel 3 UBOT)"), or
    None: a NaN min or max makes every normalised sample NaN."""
    for key in STATS_KEYS:
        arr = np.asarray(stats[key], np.float64).reshape(-1)
        if not np.isfinite(arr).all():
            what = "NaN" if np.isnan(arr).any() else "Inf"
            return f"{key} holds {what} ({_channel(int(np.argmin(np.isfinite(arr))))})"
    return None


def _channel(index: int) -> str:
    """'channel 3 UBOT' (the reference's name where the index has one)."""
    name = f" {spec.CHANNELS[index]}" if index < len(spec.CHANNELS) else ""
    return f"channel {index}{name}"


def normalisation(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(shift, scale) float32 (C,) for x' = (x − shift)·scale, computed as the reference
    does: scale = 1 / (maxval − minval) in float64, then cast."""
    stats = read_stats(path)
    span = stats["maxval"] - stats["minval"]
    if np.any(span <= 0):
        bad = int(np.argmax(span <= 0))
        raise SciperfError(f"{path}: channel {bad} ({spec.CHANNELS[bad]}) has maxval <= "
                           "minval; the statistics are unusable")
    return stats["minval"].astype(np.float32), (1.0 / span).astype(np.float32)


@dataclass
class StatsAccumulator:
    """Per-channel running min/max/sum/sum of squares; mergeable across workers/ranks."""

    minval: np.ndarray | None = None
    maxval: np.ndarray | None = None
    total: np.ndarray | None = None
    squares: np.ndarray | None = None
    count: int = 0

    def add(self, x: np.ndarray) -> None:
        """Fold one (H, W, C) sample in (float64 sums: 10^11 values stay exact enough)."""
        flat = x.reshape(-1, x.shape[-1]).astype(np.float64)
        parts = (flat.min(0), flat.max(0), flat.sum(0), np.square(flat).sum(0), len(flat))
        self.merge(StatsAccumulator(*parts))

    def merge(self, other: StatsAccumulator) -> None:
        """Combine with another accumulator (e.g. another rank's)."""
        if other.count == 0:
            return
        if self.count == 0:
            self.minval, self.maxval = other.minval.copy(), other.maxval.copy()
            self.total, self.squares = other.total.copy(), other.squares.copy()
        else:
            self.minval = np.minimum(self.minval, other.minval)
            self.maxval = np.maximum(self.maxval, other.maxval)
            self.total, self.squares = self.total + other.total, self.squares + other.squares
        self.count += other.count

    def result(self) -> dict[str, np.ndarray]:
        """The stats.h5 arrays (count = pixels per channel)."""
        n = float(self.count)
        return {"minval": self.minval, "maxval": self.maxval, "mean": self.total / n,
                "sqmean": self.squares / n, "count": np.full_like(self.total, n)}

    def arrays(self) -> dict[str, np.ndarray]:
        """The state as arrays (a rank's part for `from_arrays` on rank 0)."""
        if self.count == 0:
            return {"count": np.array(0)}
        return {"minval": self.minval, "maxval": self.maxval, "total": self.total,
                "squares": self.squares, "count": np.array(self.count)}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> StatsAccumulator:
        """Inverse of `arrays`."""
        if int(a["count"]) == 0:
            return cls()
        return cls(a["minval"], a["maxval"], a["total"], a["squares"], int(a["count"]))


def accumulate(files: Sequence[Path], fmt: str, workers: int = 4,
               bar: Progress | None = None) -> StatsAccumulator:
    """Statistics of raw samples, `workers` files read at a time (numpy reads release the
    GIL), folded in file order so the sums do not depend on thread timing. At most
    2 × workers samples are in memory (a full-size sample is 57 MB)."""
    acc, workers = StatsAccumulator(), max(1, workers)
    pending: deque[Future] = deque()

    def fold_oldest() -> None:
        acc.add(pending.popleft().result()[0])
        if bar is not None:
            bar.update()

    with ThreadPoolExecutor(workers, thread_name_prefix="sciperf-stats") as pool:
        for path in files:
            pending.append(pool.submit(read_raw, path, fmt))
            if len(pending) >= 2 * workers:
                fold_oldest()
        while pending:
            fold_oldest()
    return acc


def compute_stats(files: Iterable[Path], fmt: str, total: int | None = None,
                  show_progress: bool = True, workers: int = 4) -> dict[str, np.ndarray]:
    """Statistics of raw (unnormalised) data over `files` (the train split)."""
    files = list(files)
    bar = Progress(total or len(files), "computing stats.h5", enabled=show_progress)
    acc = accumulate(files, fmt, workers, bar)
    if acc.count == 0:
        raise SciperfError("no training samples to compute statistics from")
    return acc.result()


def parallel_stats(root: str | Path, fmt: str, n: int, rank: int, world: int,
                   workers: int = 4, timeout_s: float = 3600.0,
                   show_progress: bool = True) -> Path | None:
    """stats.h5 over the train split with every rank reading its strided share; rank 0
    merges the parts (through the data directory) and writes the file, others return None.
    One rank writes it at once, so a launched job gives the single-process result. Rank 0
    waits for the others as long as its own equal share took, plus `timeout_s`."""
    root = Path(root)
    files = list_samples(root, "train", fmt, n)
    mine = shard(files, rank, world)
    bar = Progress(len(mine), f"computing stats.h5 (rank {rank}/{world})",
                   enabled=show_progress and rank == 0)
    start = time.monotonic()
    acc = accumulate(mine, fmt, workers, bar)
    timeout_s += time.monotonic() - start
    if world > 1:
        folder = root / ".stats-parts"
        write_part(folder, rank, world, acc.arrays(), files_digest(mine))
        if rank != 0:
            return None
        parts = gather(folder, world, lambda r: files_digest(shard(files, r, world)),
                       timeout_s, "computing stats.h5")
        acc = StatsAccumulator()
        for part in parts:
            acc.merge(StatsAccumulator.from_arrays(part))
    if acc.count == 0:
        raise SciperfError("no training samples to compute statistics from")
    return write_stats(stats_path(root), acc.result())


def write_stats(path: str | Path, stats: dict[str, np.ndarray]) -> Path:
    """Write stats.h5 atomically (temp file + rename); non-finite statistics are refused
    before anything is written (every read of the file would refuse them)."""
    path = Path(path)
    problem = _non_finite_stats(stats)
    if problem:
        raise SciperfError(f"{path} not written: {problem}")
    with atomic.replacing(path, H5_WRITE_ERRORS) as tmp, h5py.File(tmp, "w") as fh:
        for key in STATS_KEYS:
            fh.create_dataset(f"climate/{key}", data=np.asarray(stats[key], np.float64))
    return path


# h5py reports a write that failed on close (a full disk) as RuntimeError ("Can't decrement
# id ref count (unable to extend file properly, … 'File too large')")
H5_WRITE_ERRORS = (OSError, RuntimeError)


# --- samples ---------------------------------------------------------------------------------
def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_raw(path: Path, fmt: str,
             shape: tuple[int, int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One sample as stored: (float32 (H, W, C), uint8 (H, W)); bad files name the file.

    `shape` (H, W, C) is what the model expects; a mismatch is reported, not reshaped.
    """
    _check_format(fmt)
    labels = path if fmt == "hdf5" else label_path(path)  # the file the labels come from
    if fmt == "hdf5":  # checked as declared, before the read
        (x, y), checked = _read_hdf5(path, shape), False
    else:
        (x, checked), y = _load_npy_data(path), _load_npy(labels, "label")
        _check_numeric(path, x)
        _check_declared(path, x.shape, y.shape, shape)
    with np.errstate(over="ignore"):  # an overflow is reported as Inf just below
        x32 = np.asarray(x, np.float32)
    if not checked or x.dtype.itemsize > 4:  # float64 beyond float32's range becomes Inf
        _check_finite(path, x32)
    return x32, _labels(labels, y)


def _check_numeric(path: Path, x: np.ndarray | h5py.Dataset) -> None:
    """One line naming the file for data that is not numbers (strings, bytes): the float32
    cast would fail with numpy's "could not convert string to float", naming no file, or
    silently turn text such as "1" into values."""
    if x.dtype.kind not in NUMERIC_KINDS:
        raise SciperfError(f"{path}: data dtype {x.dtype} is not numeric (the climate "
                           "fields must be float32 numbers)")


def _finite(x: np.ndarray) -> bool:
    """Whether `x` holds no NaN/Inf (integers always pass; non-numeric dtypes are refused
    after the read by `_check_numeric`)."""
    return x.dtype.kind not in "fc" or bool(np.isfinite(x).all())


def _check_finite(path: Path, x: np.ndarray) -> None:
    """One line naming the file for NaN/Inf in the (H, W, C) data; the counts and the
    first bad channel are only looked for once the cheap test has failed."""
    if _finite(x):
        return
    bad = ~np.isfinite(x)
    nan = int(np.isnan(x).sum())
    first = _channel(int(np.argwhere(bad)[0][-1]))
    raise SciperfError(f"{path}: data holds NaN or Inf ({nan} NaN, {int(bad.sum()) - nan} "
                       f"Inf values; first in {first})")


def _read_hdf5(path: Path, shape: tuple[int, int, int] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Data and labels of an hdf5 sample, their declarations checked before anything is
    read: a chunked dataset may declare terabytes in a 1 MB file (unwritten chunks read as
    zeros), and a group where a dataset belongs fails inside h5py naming no file."""
    try:
        with h5py.File(path, "r") as fh:
            x, y = _h5_dataset(fh, path, DATA_KEY), _h5_dataset(fh, path, LABEL_KEY)
            _check_numeric(path, x)
            _check_label_dtype(path, y.dtype)
            _check_declared(path, _h5_shape(x), _h5_shape(y), shape)
            return x[...], y[...]
    except KeyError as exc:
        raise SciperfError(f"{path}: missing dataset {DATA_KEY} or {LABEL_KEY}") from exc
    except (OSError, ValueError, TypeError) as exc:
        raise SciperfError(f"cannot read {path}: {_reason(exc)}") from exc


def _h5_dataset(fh: h5py.File, path: Path, key: str) -> h5py.Dataset:
    """`key` of an open file, which must be a dataset (not a group or a link to one)."""
    obj = fh[key]
    if not isinstance(obj, h5py.Dataset):
        raise SciperfError(f"{path}: {key} is a {type(obj).__name__.lower()}, not a dataset")
    return obj


def _h5_shape(ds: h5py.Dataset) -> tuple[int, ...]:
    """A dataset's declared shape (an empty dataspace, whose shape is None: ())."""
    return tuple(ds.shape or ())


def _check_declared(path: Path, x: tuple[int, ...], y: tuple[int, ...],
                    shape: tuple[int, int, int] | None) -> None:
    """Data (H, W, C) and labels (H, W) of the model's `shape`, or, with no model (stats,
    convert), at most MAX_SAMPLE_VALUES values: the shapes of what is about to be read."""
    if len(x) != 3 or y != x[:2]:
        raise SciperfError(f"{path}: data {x} and labels {y} do not fit "
                           "(expected (H, W, C) data and (H, W) labels)")
    if shape is not None and x != tuple(shape):
        raise SciperfError(f"{path}: sample shape {x} does not match the model's "
                           f"input {tuple(shape)} (model.height/width/in_channels)")
    if shape is None and math.prod(x) > MAX_SAMPLE_VALUES:
        raise SciperfError(f"{path}: {DATA_KEY} declares shape {x} ({math.prod(x) * 4 / 2**30:.1f}"
                           f" GiB as float32), over {MAX_SAMPLE_FACTOR}× the reference's "
                           f"{spec.SAMPLE_SHAPE}: not a DeepCAM sample")


def _load_npy(path: Path, what: str) -> np.ndarray:
    try:
        return npy.load(path)  # thread-safe header parse (loader threads)
    except (OSError, ValueError, EOFError) as exc:
        raise SciperfError(f"cannot read {what} file {path}: {_reason(exc)}") from exc


def _load_npy_data(path: Path) -> tuple[np.ndarray, bool]:
    """The data file and whether it is finite, checked piece by piece as it is read (while
    each piece is in the CPU cache: cheaper than a pass over the whole array after it)."""
    try:
        return npy.load_checked(path, _finite)
    except (OSError, ValueError, EOFError) as exc:
        raise SciperfError(f"cannot read data file {path}: {_reason(exc)}") from exc


def _labels(path: Path, y: np.ndarray) -> np.ndarray:
    """Labels as uint8; values outside {0, 1, 2} are a corrupt or foreign file. `path` is
    the file holding the labels (npy: the .label.npy), so the message points at it."""
    classes = f"classes 0..{spec.NUM_CLASSES - 1}"
    _check_label_dtype(path, y.dtype)
    bad = _first_bad_label(y)
    if bad is not None:
        raise SciperfError(f"{path}: label value {bad} is out of range; labels must be "
                           f"{classes} (dtype {y.dtype})")
    return y.astype(np.uint8)


def _check_label_dtype(path: Path, dtype: np.dtype) -> None:
    """Labels are numbers (text or records cannot be classes)."""
    if dtype.kind not in "iuf":
        raise SciperfError(f"{path}: labels must be classes 0..{spec.NUM_CLASSES - 1}, found "
                           f"dtype {dtype}")


def _first_bad_label(y: np.ndarray) -> int | float | None:
    """The first value outside [0, NUM_CLASSES) (NaN included) or, in a float file, not a
    whole number (1.5 was floored to class 1), or None; the min/max pass decides for a good
    integer file, the search for the culprit runs only for a bad one."""
    whole = y.dtype.kind != "f" or bool((y == np.floor(y)).all())
    if y.size == 0 or (whole and y.min() >= 0 and y.max() < spec.NUM_CLASSES):
        return None
    bad = ~((y >= 0) & (y < spec.NUM_CLASSES))
    if y.dtype.kind == "f":
        bad |= y != np.floor(y)
    return y[bad].flat[0].item()


@dataclass(frozen=True)
class SampleReader:
    """Reads and normalises one sample; the loaders' read function (picklable, no state)."""

    fmt: str
    shape: tuple[int, int, int]
    shift: np.ndarray
    scale: np.ndarray

    x_dtype = np.dtype(np.float32)
    y_dtype = np.dtype(np.uint8)

    @property
    def x_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of one sample."""
        return self.shape

    @property
    def y_shape(self) -> tuple[int, int]:
        """(H, W) class map of one sample."""
        return self.shape[:2]

    def __call__(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        x, y = read_raw(Path(path), self.fmt, self.shape)
        # In place on the fresh array read_raw returns: the same two float32 ops in the
        # same order (bit-identical to DALI's), without two new 57 MB arrays per full-size
        # sample (their page faults cost more than the read and its NaN/Inf check).
        np.subtract(x, self.shift[: x.shape[-1]], out=x)
        np.multiply(x, self.scale[: x.shape[-1]], out=x)
        return x, y


def make_reader(root: str | Path, fmt: str, shape: tuple[int, int, int]) -> SampleReader:
    """The reader of a dataset directory (its stats.h5 fixes the normalisation)."""
    _check_format(fmt)
    shift, scale = normalisation(stats_path(root))
    return SampleReader(fmt, tuple(int(s) for s in shape), shift, scale)


def model_reader(root: str | Path, fmt: str, model: spec.ModelSpec) -> SampleReader:
    """The reader for `model`'s input size (the contract's ``Dataset.reader``)."""
    return make_reader(root, fmt, (model.height, model.width, model.in_channels))


def payload_bytes(model: spec.ModelSpec) -> int:
    """One sample uncompressed: float32 H×W×C climate fields and uint8 H×W labels."""
    pixels = int(model.height) * int(model.width)
    return pixels * int(model.in_channels) * 4 + pixels


def write_sample(folder: Path, name: str, fmt: str, x: np.ndarray, y: np.ndarray) -> Path:
    """Write one sample atomically (temp file + rename); returns the data file path."""
    _check_format(fmt)
    if fmt == "hdf5":
        path = folder / f"{name}{SUFFIX['hdf5']}"
        with atomic.replacing(path, H5_WRITE_ERRORS) as tmp, h5py.File(tmp, "w") as fh:
            fh.create_dataset(DATA_KEY, data=np.asarray(x, np.float32))
            fh.create_dataset(LABEL_KEY, data=np.asarray(y, np.uint8))
        return path
    return npy.write_pair(folder, name, np.asarray(x, np.float32), np.asarray(y, np.uint8))


def _remove_orphans(folder: Path, stems: set[str]) -> None:
    """The npy samples (data + label) of `folder` whose hdf5 source is not in `stems`."""
    for path in sorted(folder.glob(f"*{SUFFIX['npy']}")):
        if path.name[: -len(SUFFIX["npy"])] not in stems:
            path.unlink(missing_ok=True)
            label_path(path).unlink(missing_ok=True)


def convert(root: str | Path, show_progress: bool = True, rank: int = 0,
            world: int = 1, force: bool = False) -> int:
    """hdf5 → npy beside each sample (`sciperf prepare data.source=convert`); returns how
    many this rank handled (its strided share when launched as `world` ranks). Files
    already converted (npy newer than the hdf5) are skipped unless `force`; npy samples
    whose hdf5 is gone are removed (they were trained on: 16 npy beside 15 hdf5)."""
    root = Path(root)
    pairs = []
    for split in spec.SPLITS:
        sources = list_samples(root, split, "hdf5")
        for src in sources:
            dst = src.with_name(src.name[: -len(SUFFIX["hdf5"])] + SUFFIX["npy"])
            pairs.append((src, dst))
        if rank == 0:
            _remove_orphans(root / split, {src.name[: -len(SUFFIX["hdf5"])] for src in sources})
    pairs = shard(pairs, rank, world)
    bar = Progress(len(pairs), "converting hdf5 → npy", enabled=show_progress and rank == 0)
    for src, dst in pairs:
        if force or not (dst.is_file() and label_path(dst).is_file()
                         and dst.stat().st_mtime >= src.stat().st_mtime):
            x, y = read_raw(src, "hdf5")
            name = dst.name[: -len(SUFFIX["npy"])]
            write_sample(dst.parent, name, "npy", x, y)
        bar.update()
    return len(pairs)
