"""NVIDIA DALI input pipeline over the fast CosmoFlow npy format (``data.loader=dali``).

DALI is optional and this package imports no framework, so ``nvidia.dali`` is imported
only inside the functions that build a pipeline. The framework adapters
(``sciperf_pytorch.dali``, ``sciperf_tensorflow.dali``) wrap the pipeline built here.

One pipeline reads one epoch of one shard:

* two ``fn.readers.numpy`` — ``<name>.data.npy`` and the ``<name>.label.npy`` beside it —
  over lists of equal length with identical shard/shuffle arguments, so DALI draws the
  same permutation for both and every x stays paired with its y;
* ``shard_id``/``num_shards`` = rank/world. DALI shards contiguously; :func:`dali_order`
  interleaves the list first so that shard ``r`` holds exactly the files of
  ``sciperf.data.sharding.shard(files, r, world)`` (strided, like the native loader);
* training: ``shuffle_after_epoch=True``, an exact permutation of the whole list (every
  sample once per epoch, over all shards together) drawn from
  ``shuffle_after_epoch_seed`` = :func:`epoch_seed` (seed, epoch). A fresh pipeline per
  epoch makes an epoch's batches a function of (files, seed, epoch) alone, as with the
  native loader — but DALI's permutation is its own, not ``loader.epoch_order``;
* evaluation: no shuffle, ``stick_to_shard=True`` (file order, the same shard every epoch);
* int16 → float32 log1p inside the pipeline, on the GPU when ``device_id`` is given (the
  reader itself stays on the CPU, so int16 crosses the bus), CPU-only when ``device_id``
  is None.

DALI has no log1p, and its CPU ``math.log`` is scalar (5× slower here than a table). The
counts are int16, so log1p is a 32,768-entry lookup table (:func:`log1p_table`): correctly
rounded float32, within 1 ulp of torch.log1p and 2 ulp of tf.math.log1p. A negative count
(not a valid file) becomes NaN.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import cosmoflow as cf_data
from sciperf.errors import SciperfError
from sciperf.workloads import cosmoflow as spec

MISSING = "data.loader=dali needs nvidia-dali-cuda120 (install with containers/install.sh --dali)"
NOT_NPY = "DALI reads the fast npy format; convert with sciperf prepare data.format=npy"
READER = "data"  # name of the data reader (iterators size epochs by it)
OUTPUTS = ("x", "y")


def check_format(fmt: str) -> None:
    """DALI reads only the npy format; anything else is a one-line user error."""
    if fmt != "npy":
        raise SciperfError(f"data.format={fmt}: {NOT_NPY}")


def available() -> bool:
    """True when nvidia.dali imports (the GPU wheel also runs CPU-only pipelines)."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def require(fmt: str = "npy") -> Any:
    """Check the format, then import and return ``nvidia.dali`` (SciperfError if absent)."""
    check_format(fmt)
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

    @property
    def samples(self) -> int:
        """Samples this rank reads per epoch."""
        return len(self.files) // self.world

    @property
    def steps(self) -> int:
        """Batches this rank reads per epoch."""
        return self.samples // self.batch


def plan(files: Sequence[Path], batch: int, seed: int, shuffle: bool, rank: int = 0,
         world: int = 1, device_id: int | None = None, *, fmt: str = "npy",
         prefetch: int = 2, threads: int = 0,
         shape: tuple[int, ...] | None = None) -> DaliPlan:
    """Check the format, the files, DALI and the divisibility; returns the plan.

    The sample shape comes from the first file's npy header (all files must share it) and
    must equal `shape` when given (the model's input).
    """
    check_format(fmt)
    files = tuple(Path(f) for f in files)
    if not files:
        raise SciperfError("data.loader=dali got no sample files")
    foreign = [f for f in files if not f.name.endswith(cf_data.SUFFIX["npy"])]
    if foreign:
        raise SciperfError(f"{foreign[0]}: {NOT_NPY}")
    require(fmt)
    if world < 1 or not 0 <= rank < world:
        raise SciperfError(f"invalid shard {rank} of {world}")
    if batch < 1 or len(files) % (world * batch):
        raise ValueError(f"{len(files)} files do not divide into {world} shards of batches "
                         f"of {batch}")
    found = _header_shape(files[0], np.int16, ndim=4,
                          shape=None if shape is None else tuple(int(s) for s in shape))
    _header_shape(cf_data.label_path(files[0]), np.float32, shape=(spec.TARGET_SIZE,))
    return DaliPlan(files, int(batch), int(seed), bool(shuffle), int(rank), int(world),
                    device_id, found, max(int(prefetch), 1), threads or default_threads())


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


def build_pipeline(p: DaliPlan, epoch: int) -> Any:
    """The (unbuilt) DALI pipeline of one epoch: outputs ``x`` log1p float32
    (batch, D, H, W, C) and ``y`` float32 (batch, 4), on the GPU when ``p.device_id`` is set.
    """
    dali = require()
    from nvidia.dali import fn, types

    data = [str(f) for f in dali_order(p.files, p.world)]
    labels = [str(cf_data.label_path(Path(f))) for f in data]
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
        table = log1p_table()
        x = fn.lookup_table(x, keys=list(range(len(table))), values=list(table),
                            default_value=float("nan"), dtype=types.FLOAT)
        pipe.set_outputs(x, y)
    return pipe
