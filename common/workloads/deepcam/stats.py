"""DeepCAM's normalisation statistics: ``stats.h5``, read checked, written atomically.

``<dir>/stats.h5`` (beside ``train/`` and ``validation/``, where the reference keeps it)
holds per-channel ``climate/minval``, ``maxval``, ``mean``, ``sqmean`` and ``count`` over
the training split; both sample formats are normalised with it. Samples are min-max
normalised per channel as the reference does, x' = (x − minval) · (1 / (maxval − minval))
in float32: :func:`normalisation` gives that (shift, scale).

This module owns the file (its datasets checked before they are read: stored in the file
itself, numeric, one value per channel, finite and within what samples may hold — a NaN min
or max makes every normalised sample NaN) and the
mergeable per-channel accumulator the statistics are computed with. Folding the train
split's samples into it (threads, ranks) is :mod:`.data`'s, beside the reader that
applies the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from sciperf.data import atomic
from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import spec as spec
from sciperf.workloads.deepcam.samples import (
    DATA_BOUND,
    H5_WRITE_ERRORS,
    NUMERIC_KINDS,
    _channel,
    _h5_dataset,
    _h5_shape,
    _reason,
)

__all__ = [
    "STATS_FILE",
    "STATS_KEYS",
    "StatsAccumulator",
    "normalisation",
    "read_stats",
    "stats_path",
    "write_stats",
]

STATS_FILE = "stats.h5"
STATS_KEYS = ("minval", "maxval", "mean", "sqmean", "count")
# |statistic| of samples whose values are within ±DATA_BOUND (count is not bounded)
STATS_BOUNDS = {"minval": DATA_BOUND, "maxval": DATA_BOUND, "mean": DATA_BOUND,
                "sqmean": DATA_BOUND**2}
FLOAT32_MAX = float(np.finfo(np.float32).max)


def stats_path(root: str | Path) -> Path:
    """`<root>/stats.h5` (beside train/ and validation/, where the reference keeps it)."""
    return Path(root) / STATS_FILE


def read_stats(path: str | Path) -> dict[str, np.ndarray]:
    """Every ``climate/<key>`` array of a stats file; a bad file is one line naming it."""
    path = Path(path)
    if not path.is_file():
        raise SciperfError(f"normalisation statistics {path} do not exist (`sciperf prepare "
                           "workload=deepcam data.source=stats` computes them over the "
                           "train split)")
    try:
        with h5py.File(path, "r") as fh:
            raw = {k: _stats_dataset(fh, path, k)[...] for k in STATS_KEYS}
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise SciperfError(f"cannot read statistics {path}: {_reason(exc)}") from exc
    out = {k: _stats_array(path, k, value) for k, value in raw.items()}
    problem = _bad_stats(out)
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


def _bad_stats(stats: dict[str, np.ndarray]) -> str | None:
    """What is not finite, or beyond what samples within ±DATA_BOUND give, in a set of
    statistics ("mean holds NaN (channel 3 UBOT)"), or None: a NaN min or max makes every
    normalised sample NaN, a maxval of 3e38 (from a sample no reader admits) squeezes every
    real value of its channel to 0."""
    for key in STATS_KEYS:
        arr = np.asarray(stats[key], np.float64).reshape(-1)
        if not np.isfinite(arr).all():
            what = "NaN" if np.isnan(arr).any() else "Inf"
            return f"{key} holds {what} ({_channel(int(np.argmin(np.isfinite(arr))))})"
        bound = STATS_BOUNDS.get(key)
        if bound is not None and arr.size and np.abs(arr).max() > bound:
            bad = int(np.argmax(np.abs(arr) > bound))
            return (f"{key} holds {arr[bad]:g}, beyond ±{bound:g} ({_channel(bad)}; samples "
                    f"hold values within ±{DATA_BOUND:g})")
    return None


def normalisation(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(shift, scale) float32 (C,) for x' = (x − shift)·scale, computed as the reference
    does: scale = 1 / (maxval − minval) in float64, then cast."""
    stats = read_stats(path)
    span = stats["maxval"] - stats["minval"]
    if np.any(span <= 0):
        bad = int(np.argmax(span <= 0))
        raise SciperfError(f"{path}: channel {bad} ({spec.CHANNELS[bad]}) has maxval <= "
                           "minval; the statistics are unusable")
    # Every value a reader admits (±DATA_BOUND) must normalise to a finite float32.
    narrow = 2 * DATA_BOUND / span > FLOAT32_MAX
    if np.any(narrow):
        bad = int(np.argmax(narrow))
        raise SciperfError(f"{path}: {_channel(bad)} has maxval - minval = {span[bad]:g}, too "
                           "narrow to normalise by (values would overflow float32); the "
                           "statistics are unusable")
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


def write_stats(path: str | Path, stats: dict[str, np.ndarray]) -> Path:
    """Write stats.h5 atomically (temp file + rename); non-finite statistics are refused
    before anything is written (every read of the file would refuse them)."""
    path = Path(path)
    problem = _bad_stats(stats)
    if problem:
        raise SciperfError(f"{path} not written: {problem}")
    with atomic.replacing(path, H5_WRITE_ERRORS) as tmp, h5py.File(tmp, "w") as fh:
        for key in STATS_KEYS:
            fh.create_dataset(f"climate/{key}", data=np.asarray(stats[key], np.float64))
    return path
