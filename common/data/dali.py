"""NVIDIA DALI input pipeline over the fast npy formats (``data.loader=dali``).

DALI is optional and this package imports no framework, so ``nvidia.dali`` is imported
only inside the functions that build a pipeline. The framework adapters
(``sciperf_pytorch.dali``, ``sciperf_tensorflow.dali``) wrap the pipeline built here. One
pipeline definition serves every workload with an npy pair per sample; what differs — the
files' dtypes and shapes, the label file's name, the per-sample transform — is a
:class:`SampleFormat` (``FORMATS``) and a transform (:class:`Log1p`, :class:`MinMax`).

One pipeline reads one epoch of one shard:

* two ``fn.readers.numpy`` — ``<name>.data.npy`` and the label file beside it — over lists
  of equal length with identical shard/shuffle arguments, so DALI draws the same
  permutation for both and every x stays paired with its y;
* ``shard_id``/``num_shards`` = rank/world. DALI shards contiguously; :func:`dali_order`
  interleaves the list first so that shard ``r`` holds exactly the files of
  ``sciperf.data.sharding.shard(files, r, world)`` (strided, like the native loader). Uneven
  batches (DeepCAM) are only planned over this rank's own files (world 1): DALI's uneven
  contiguous shards could not match the driver's strided ones;
* training: ``shuffle_after_epoch=True``, an exact permutation of the whole list (every
  sample once per epoch, over all shards together) drawn from
  ``shuffle_after_epoch_seed`` = :func:`epoch_seed` (seed, epoch). A fresh pipeline per
  epoch makes an epoch's batches a function of (files, seed, epoch) alone, as with the
  native loader — but DALI's permutation is its own, not ``loader.epoch_order``;
* evaluation: no shuffle, ``stick_to_shard=True`` (file order, the same shard every epoch);
* ``pad_last_batch=True``: a last partial batch is filled with copies of the last sample;
  the adapters cut every batch to ``DaliPlan.sizes`` (the native loader's
  ``batch_sizes``), so a `drop` remainder never reaches the model and a `keep` remainder
  arrives as a smaller last batch — every sample exactly once, none twice;
* the transform runs inside the pipeline, on the GPU when ``device_id`` is given (the
  reader itself stays on the CPU, so the stored dtype crosses the bus), CPU-only when
  ``device_id`` is None. Labels leave the pipeline in their stored dtype (the adapters give
  class maps the framework's index dtype on the device: a quarter or an eighth of the bytes
  to move).

CosmoFlow (:class:`Log1p`): DALI has no log1p, and its CPU ``math.log`` is scalar (5×
slower here than a table). The counts are int16, so log1p is a 32,768-entry lookup table
(:func:`log1p_table`): correctly rounded float32, within 1 ulp of torch.log1p and 2 ulp of
tf.math.log1p. A negative count (not a valid file) becomes NaN.

DeepCAM (:class:`MinMax`): x' = (x − shift)·scale per channel with the float32 (shift,
scale) of ``sciperf.data.deepcam.normalisation`` — the native reader's two float32 ops in
the same order, so the values are bit-identical to it (no fused multiply-add can form:
the subtraction comes first).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import cosmoflow as cf_data
from sciperf.data import deepcam as dc_data
from sciperf.data.loader import batch_sizes
from sciperf.errors import SciperfError
from sciperf.workloads import cosmoflow as cf_spec

MISSING = "data.loader=dali needs nvidia-dali-cuda120 (install with containers/install.sh --dali)"
NPY_ONLY = "DALI reads the fast npy format"
NOT_NPY = f"{NPY_ONLY}; convert with sciperf prepare data.format=npy"
DEEPCAM_NOT_NPY = (f"{NPY_ONLY}; convert with sciperf prepare workload=deepcam "
                   "data.source=convert")
READER = "data"  # name of the data reader (iterators size epochs by it)
OUTPUTS = ("x", "y")


@dataclass(frozen=True)
class SampleFormat:
    """What one workload's npy sample pair holds, checked from the headers before a run."""

    suffix: str  # data file name ending
    label_path: Callable[[Path], Path]
    data_dtype: type
    data_ndim: int
    label_dtype: type
    label_shape: Callable[[tuple[int, ...]], tuple[int, ...]]  # from the data shape
    hint: str  # the one-line error for a non-npy format: how to get npy

    def check_format(self, fmt: str) -> None:
        """DALI reads only the npy format; anything else is a one-line user error."""
        if fmt != "npy":
            raise SciperfError(f"data.format={fmt}: {self.hint}")


FORMATS = {
    "cosmoflow": SampleFormat(cf_data.SUFFIX["npy"], cf_data.label_path, np.int16, 4,
                              np.float32, lambda _: (cf_spec.TARGET_SIZE,), NOT_NPY),
    "deepcam": SampleFormat(dc_data.SUFFIX["npy"], dc_data.label_path, np.float32, 3,
                            np.uint8, lambda data: data[:2], DEEPCAM_NOT_NPY),
}


def sample_format(workload: str) -> SampleFormat:
    """The npy pair DALI reads for `workload`."""
    try:
        return FORMATS[workload]
    except KeyError:
        raise SciperfError(f"data.loader=dali does not support workload={workload} "
                           f"(supported: {', '.join(FORMATS)})") from None


def check_format(fmt: str, workload: str = "cosmoflow") -> None:
    """DALI reads only the npy format; anything else is a one-line user error."""
    sample_format(workload).check_format(fmt)


def available() -> bool:
    """True when nvidia.dali imports (the GPU wheel also runs CPU-only pipelines)."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def require(fmt: str = "npy", workload: str = "cosmoflow") -> Any:
    """Check the format, then import and return ``nvidia.dali`` (SciperfError if absent)."""
    check_format(fmt, workload)
    try:
        import nvidia.dali as dali
    except ImportError as exc:
        raise SciperfError(MISSING) from exc
    return dali


def dali_order(files: Sequence[Path], world: int) -> list[Path]:
    """Reorder so DALI's contiguous shard r equals the strided ``files[r::world]``."""
    return [f for r in range(world) for f in files[r::world]]


def epoch_seed(seed: int, epoch: int) -> int:
    """DALI shuffle seed of one epoch; a function of (seed, epoch) only, same on all ranks."""
    return int(np.random.default_rng([seed, epoch, 0xDA11]).integers(0, 2**31 - 1))


def error_message(text: str) -> str:
    """One line for a DALI failure: the assertion or error line, not DALI's traceback."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("Assert on") and "failed: " in ln:
            return f"DALI input pipeline failed: {ln.split('failed: ', 1)[1]}"
    for ln in lines:
        if ln.startswith(("Error", "Critical")) or "Error:" in ln:
            return f"DALI input pipeline failed: {ln}"
    return f"DALI input pipeline failed: {lines[0] if lines else 'unknown error'}"


@functools.lru_cache(maxsize=1)
def log1p_table() -> tuple[float, ...]:
    """log1p of every non-negative int16, computed in float64, rounded once to float32."""
    counts = np.arange(np.iinfo(np.int16).max + 1, dtype=np.float64)
    return tuple(np.log1p(counts).astype(np.float32).tolist())


@dataclass(frozen=True)
class Log1p:
    """CosmoFlow's transform: int16 counts → correctly rounded float32 log1p (a table)."""

    def apply(self, x: Any) -> Any:
        """The DALI ops on the data node `x` (inside a pipeline definition)."""
        from nvidia.dali import fn, types

        table = log1p_table()
        return fn.lookup_table(x, keys=list(range(len(table))), values=list(table),
                               default_value=float("nan"), dtype=types.FLOAT)


@dataclass(frozen=True)
class MinMax:
    """DeepCAM's transform: per-channel (x − shift)·scale in float32, as the native reader."""

    shift: tuple[float, ...]
    scale: tuple[float, ...]

    @classmethod
    def from_stats(cls, root: str | Path, channels: int) -> MinMax:
        """The normalisation of `root`/stats.h5 for the first `channels` channels (float32
        values kept exactly: a Python float holds every float32)."""
        shift, scale = dc_data.normalisation(dc_data.stats_path(root))
        return cls(tuple(shift[:channels].tolist()), tuple(scale[:channels].tolist()))

    def apply(self, x: Any) -> Any:
        """The DALI ops on the data node `x`; the (C,) constants broadcast over H, W."""
        from nvidia.dali import types

        shift = types.Constant(np.asarray(self.shift, np.float32))
        scale = types.Constant(np.asarray(self.scale, np.float32))
        return (x - shift) * scale


def default_threads() -> int:
    """CPU threads of the pipeline: the cores this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


@dataclass(frozen=True)
class DaliPlan:
    """Everything that fixes one rank's DALI input: checked once, reused every epoch.

    ``files`` is the list DALI shards over ``world`` ranks: the whole split with this
    rank's ``rank`` (a global permutation each epoch when shuffling), or this rank's own
    shard with rank=0, world=1 (fixed shards, as the native loader, node-local staging).
    ``remainder`` is the native loader's rule for a last partial batch (``batch_sizes``).
    """

    files: tuple[Path, ...]
    batch: int
    seed: int
    shuffle: bool
    rank: int
    world: int
    device_id: int | None
    sample_shape: tuple[int, ...]
    prefetch: int
    threads: int
    workload: str = "cosmoflow"
    transform: Log1p | MinMax = Log1p()
    remainder: str = "error"

    @property
    def label_shape(self) -> tuple[int, ...]:
        """Shape of one sample's labels."""
        return tuple(sample_format(self.workload).label_shape(self.sample_shape))

    @property
    def label_dtype(self) -> str:
        """numpy name of the labels' dtype as stored (and as the pipeline outputs them)."""
        return np.dtype(sample_format(self.workload).label_dtype).name

    @property
    def sizes(self) -> list[int]:
        """Samples of each batch of an epoch (the native loader's ``batch_sizes``)."""
        return batch_sizes(len(self.files) // self.world, self.batch, self.remainder)

    @property
    def samples(self) -> int:
        """Samples this rank reads per epoch."""
        return sum(self.sizes)

    @property
    def steps(self) -> int:
        """Batches this rank reads per epoch."""
        return len(self.sizes)


def plan(files: Sequence[Path], batch: int, seed: int, shuffle: bool, rank: int = 0,
         world: int = 1, device_id: int | None = None, *, fmt: str = "npy",
         prefetch: int = 2, threads: int = 0, shape: tuple[int, ...] | None = None,
         workload: str = "cosmoflow", root: str | Path | None = None,
         remainder: str = "error") -> DaliPlan:
    """Check the format, the files, DALI and the batch rule; returns the plan.

    The sample shape comes from the first file's npy header (all files must share it) and
    must equal `shape` when given (the model's input). DeepCAM needs `root` (its stats.h5
    fixes the normalisation).
    """
    form = sample_format(workload)
    form.check_format(fmt)
    files = tuple(Path(f) for f in files)
    if not files and remainder == "error":
        raise SciperfError("data.loader=dali got no sample files")
    foreign = [f for f in files if not f.name.endswith(form.suffix)]
    if foreign:
        raise SciperfError(f"{foreign[0]}: {form.hint}")
    require(fmt, workload)
    _check_batches(len(files), batch, rank, world, remainder)
    found = _sample_shape(files, form, shape)
    return DaliPlan(files, int(batch), int(seed), bool(shuffle), int(rank), int(world),
                    device_id, found, max(int(prefetch), 1), threads or default_threads(),
                    workload, _transform(workload, root, found), remainder)


def _check_batches(n: int, batch: int, rank: int, world: int, remainder: str) -> None:
    """The shard is valid and `n` files make batches under `remainder` (ValueError if not:
    the driver checks divisibility first, so this is a caller's mistake). `drop`/`keep`
    accept any count, as the native loader: even none (no batch)."""
    if world < 1 or not 0 <= rank < world:
        raise SciperfError(f"invalid shard {rank} of {world}")
    if batch < 1:
        raise ValueError(f"batch size {batch} < 1")
    if remainder == "error":
        if n % (world * batch):
            raise ValueError(f"{n} files do not divide into {world} shards of batches "
                             f"of {batch}")
        return
    batch_sizes(n, batch, remainder)  # an unknown remainder is a ValueError
    if world != 1:
        raise ValueError(f"remainder={remainder!r} needs this rank's own files (world=1): "
                         "DALI's uneven shards are not the driver's")


def _sample_shape(files: tuple[Path, ...], form: SampleFormat,
                  shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The first sample pair's data shape, both headers checked against `form` (and the
    data against `shape`). No files (a rank whose uneven validation shard is empty, or too
    few for a full training batch: no batch, no pipeline) → `shape` as given."""
    want = None if shape is None else tuple(int(s) for s in shape)
    if not files:
        return want or ()
    found = _header_shape(files[0], form.data_dtype, ndim=form.data_ndim, shape=want)
    _header_shape(form.label_path(files[0]), form.label_dtype, shape=form.label_shape(found))
    return found


def _transform(workload: str, root: str | Path | None,
               shape: tuple[int, ...]) -> Log1p | MinMax:
    """The in-pipeline transform of a workload (DeepCAM's from `root`/stats.h5)."""
    if workload == "cosmoflow":
        return Log1p()
    if root is None:
        raise ValueError("DeepCAM's DALI plan needs the dataset root (stats.h5)")
    return MinMax.from_stats(root, shape[-1])


def _header_shape(path: Path, dtype: type, ndim: int | None = None,
                  shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """dtype/shape from an npy header (memory-mapped, nothing read), checked."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise SciperfError(f"cannot read {path}: {exc}") from exc
    if arr.dtype != dtype or (ndim is not None and arr.ndim != ndim) or (
            shape is not None and arr.shape != shape):
        want = shape if shape is not None else f"{ndim}-d"
        raise SciperfError(f"{path}: expected {np.dtype(dtype).name} {want}, found "
                           f"{arr.dtype} {arr.shape}")
    return tuple(int(s) for s in arr.shape)


def deepcam_loader(make: Callable[..., Any], device_id: int | None, files: Sequence[Path],
                   root: str, fmt: str, model: Any, batch: int, seed: int, shuffle: bool,
                   prefetch: int, remainder: str) -> Any:
    """A framework's DALI loader for DeepCAM through its `make` (``make_dali_loader``),
    with the native ``make_loader``'s arguments: this rank's own files (the driver's uneven
    shard, so DALI does not shard again), normalised by `root`/stats.h5, `remainder` as the
    native loader's."""
    shape = (model.height, model.width, model.in_channels)
    return make(files, batch, seed, shuffle, 0, 1, device_id, fmt=fmt, prefetch=prefetch,
                shape=shape, workload="deepcam", root=root, remainder=remainder)


def build_pipeline(p: DaliPlan, epoch: int) -> Any:
    """The (unbuilt) DALI pipeline of one epoch: outputs ``x`` float32 (batch, *sample
    shape) after the plan's transform and ``y`` (batch, *label shape) as stored, on the GPU
    when ``p.device_id`` is set. Every batch is full (see the module doc for the last one).
    """
    dali = require(workload=p.workload)
    from nvidia.dali import fn

    form = sample_format(p.workload)
    data = [str(f) for f in dali_order(p.files, p.world)]
    labels = [str(form.label_path(Path(f))) for f in data]
    reader = dict(shard_id=p.rank, num_shards=p.world, pad_last_batch=True)
    if p.shuffle:
        reader.update(shuffle_after_epoch=True,
                      shuffle_after_epoch_seed=epoch_seed(p.seed, epoch))
    else:
        reader.update(stick_to_shard=True)
    pipe = dali.Pipeline(batch_size=p.batch, num_threads=p.threads, device_id=p.device_id,
                         prefetch_queue_depth=p.prefetch, seed=epoch_seed(p.seed, epoch))
    with pipe:
        x = fn.readers.numpy(files=data, name=READER, **reader)
        y = fn.readers.numpy(files=labels, name="label", **reader)
        if p.device_id is not None:
            x, y = x.gpu(), y.gpu()
        pipe.set_outputs(p.transform.apply(x), y)
    return pipe
