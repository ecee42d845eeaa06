"""DeepCAM's data, defined once (docs/architecture.md, rule 5) with numpy and h5py only.

The formats and their checks are :mod:`.samples` (``hdf5``, the reference's, and ``npy``,
the fast one optimized submissions convert to) and the normalisation statistics
:mod:`.stats` (``stats.h5``); their public names are re-exported here, where callers and
the workload contract take them (``data.X``). This module owns the jobs over a whole
dataset directory, which need both: computing ``stats.h5`` over the train split (threads,
then ranks), the normalising reader the loaders call, and converting hdf5 → npy.

Samples are min-max normalised per channel as the reference does,
x' = (x − minval) · (1 / (maxval − minval)) in float32, and stay channels-last (HWC);
framework adapters turn them into NCHW-with-channels-last-memory or NHWC tensors.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sciperf.data import conversion
from sciperf.data.conversion import Conversion, Job, npy_pair_jobs, remove_orphan_pairs
from sciperf.data.layout import label_path as label_path  # the format's API, re-exported
from sciperf.data.layout import sample_files as sample_files
from sciperf.data.partials import files_digest, gather, write_part
from sciperf.data.sharding import shard
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads.deepcam import spec as spec
from sciperf.workloads.deepcam.samples import (
    DATA_BOUND,
    DATA_KEY,
    H5_WRITE_ERRORS,
    LABEL_KEY,
    LAYOUT,
    MAX_SAMPLE_FACTOR,
    MAX_SAMPLE_VALUES,
    NUMERIC_KINDS,
    SUFFIX,
    _check_format,
    list_samples,
    read_raw,
    split_dir,
    write_sample,
)
from sciperf.workloads.deepcam.stats import (
    STATS_FILE,
    STATS_KEYS,
    StatsAccumulator,
    normalisation,
    read_stats,
    stats_path,
    write_stats,
)

__all__ = [
    "CONVERSION",
    "DATA_BOUND",
    "DATA_KEY",
    "H5_WRITE_ERRORS",
    "LABEL_KEY",
    "LAYOUT",
    "MAX_SAMPLE_FACTOR",
    "MAX_SAMPLE_VALUES",
    "NUMERIC_KINDS",
    "STATS_FILE",
    "STATS_KEYS",
    "SUFFIX",
    "SampleReader",
    "StatsAccumulator",
    "accumulate",
    "compute_stats",
    "convert",
    "label_path",
    "list_samples",
    "make_reader",
    "model_reader",
    "normalisation",
    "parallel_stats",
    "payload_bytes",
    "read_raw",
    "read_stats",
    "sample_files",
    "split_dir",
    "stats_path",
    "write_sample",
    "write_stats",
]


# --- normalisation statistics over the train split ------------------------------------------
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


# --- the normalising reader -----------------------------------------------------------------
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


# --- hdf5 → npy -----------------------------------------------------------------------------
def _convert_sample(job: Job) -> int:
    """One hdf5 sample as the npy pair beside it, read with every check (no model shape)."""
    x, y = read_raw(job.source, "hdf5")
    data = job.outputs[-1]
    write_sample(data.parent, data.name[: -len(SUFFIX["npy"])], "npy", x, y)
    return 1


# hdf5 → npy beside each sample; npy samples whose hdf5 is gone are removed first (a run
# would train on them beside the converted ones)
CONVERSION = Conversion(source="hdf5", target="npy",
                        jobs=functools.partial(npy_pair_jobs, LAYOUT, fmt="hdf5"),
                        convert=_convert_sample,
                        before=functools.partial(remove_orphan_pairs, LAYOUT, fmt="hdf5"))


def convert(root: str | Path, show_progress: bool = True, force: bool = False) -> int:
    """hdf5 → npy beside each sample (:data:`CONVERSION`, this launch's share of it);
    returns how many samples this rank handled. Samples already converted (npy not older
    than the hdf5) are skipped unless `force`."""
    result = conversion.run(CONVERSION, root, force=force, show_progress=show_progress,
                            summary=False)
    return result.converted + result.skipped
