"""NVIDIA DALI input pipeline over the fast npy formats (``data.loader=dali``).

DALI is optional and this package imports no framework, so ``nvidia.dali`` is imported
only inside the functions that build a pipeline. The framework adapters
(``sciperf_pytorch.dali``, ``sciperf_tensorflow.dali``) wrap the pipeline built here. One
pipeline definition serves every workload with an npy pair per sample; what differs — the
files' dtypes and shapes, the label file's name, the per-sample transform — is the
workload's ``DaliFormat`` (``Workload.dali``, in its own folder).

One pipeline reads one epoch of one shard:

* two ``fn.readers.numpy`` — ``<name>.data.npy`` and the label file beside it — over lists
  of equal length with identical shard/shuffle arguments, so DALI draws the same
  permutation for both and every x stays paired with its y;
* ``shard_id``/``num_shards`` = rank/world. DALI shards contiguously; :func:`dali_order`
  interleaves the list first so that shard ``r`` holds exactly the files of
  ``sciperf.data.sharding.shard(files, r, world)`` (strided, like the native loader). Uneven
  batches (``sharding="uneven"`` workloads) are only planned over this rank's own files
  (world 1): DALI's uneven contiguous shards could not match the driver's strided ones;
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

DALI reads the files itself, so the value checks of the workloads' readers (NaN/Inf data,
negative CosmoFlow counts, NaN targets, labels out of range) do not run here, and none is
added: the pipeline stays as fast as it was. This path relies on `sciperf prepare
data.source=existing`, which reads every sample through those checks once (and on
`prepare` checking what it converts); stats.h5 is checked when the transform reads it.
A bad value that still gets in stops the run at the first non-finite epoch loss, without
naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data.loader import batch_sizes
from sciperf.errors import SciperfError
from sciperf.workloads import DEFAULT

MISSING = "data.loader=dali needs nvidia-dali-cuda120 (install with containers/install.sh --dali)"
NPY_ONLY = "DALI reads the fast npy format"
READER = "data"  # name of the data reader (iterators size epochs by it)
OUTPUTS = ("x", "y")


def sample_format(workload: str) -> Any:
    """The npy pair DALI reads for `workload` (its contract's ``DaliFormat``)."""
    from sciperf.workloads import REGISTRY, get

    form = get(workload).dali if workload in REGISTRY else None
    if form is None:
        have = ", ".join(w for w in REGISTRY if get(w).dali is not None)
        raise SciperfError(f"data.loader=dali does not support workload={workload} "
                           f"(supported: {have})")
    return form


def check_format(fmt: str, workload: str) -> None:
    """DALI reads only the npy format; anything else is a one-line user error."""
    if fmt != "npy":
        raise SciperfError(f"data.format={fmt}: {sample_format(workload).not_npy}")


def available() -> bool:
    """True when nvidia.dali imports (the GPU wheel also runs CPU-only pipelines)."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def require(fmt: str = "npy", workload: str = DEFAULT) -> Any:
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
    """One line for a DALI failure: the assertion or error line, not DALI's traceback
    (nor a line that only announces what follows, "Critical error in pipeline:")."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("Assert on") and "failed: " in ln:
            return f"DALI input pipeline failed: {ln.split('failed: ', 1)[1]}"
    for ln in lines:
        if (ln.startswith(("Error", "Critical")) or "Error:" in ln) and not ln.endswith(":"):
            return f"DALI input pipeline failed: {ln}"
    return f"DALI input pipeline failed: {lines[0] if lines else 'unknown error'}"


def failure(p: DaliPlan, text: str) -> str:
    """The one line for a failed pipeline of plan `p`: :func:`error_message`, led by the
    sample file at fault when DALI's words name none (a batch of unequal shapes, a dtype
    its reader refuses: DALI reports the batch, not the file). Found by checking every
    file's npy headers against the plan — only on this failure path."""
    names = {str(f) for f in p.files}
    named = [ln.strip() for ln in text.splitlines() if any(n in ln for n in names)]
    if named:  # an assertion's reason (error_message keeps it), else DALI's "… File: PATH"
        return error_message(text) if "Assert on" in named[0] else \
            f"DALI input pipeline failed: {named[0]}"
    message = error_message(text)
    culprit = _first_bad_file(p)
    return f"{culprit} ({message})" if culprit else message


def _first_bad_file(p: DaliPlan) -> str | None:
    """What is wrong with the first of `p`'s sample pairs whose headers do not match the
    plan (its dtype and shape), or None."""
    form = sample_format(p.workload)
    for path in p.files:
        try:
            _header_shape(path, form.x_dtype, ndim=form.ndim, shape=p.sample_shape)
            _header_shape(form.label_path(path), form.label_dtype,
                          shape=p.label_shape)
        except SciperfError as exc:
            return str(exc)
    return None


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
    workload: str = DEFAULT
    transform: Any = None  # the workload's in-pipeline transform (an object with apply(x))
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
         workload: str = DEFAULT, root: str | Path | None = None,
         remainder: str = "error") -> DaliPlan:
    """Check the format, the files, DALI and the batch rule; returns the plan.

    The sample shape comes from the first file's npy header (all files must share it) and
    must equal `shape` when given (the model's input). `root` is the dataset directory the
    workload's transform may need (e.g. its normalisation statistics).
    """
    form = sample_format(workload)
    check_format(fmt, workload)
    files = tuple(Path(f) for f in files)
    if not files and remainder == "error":
        raise SciperfError("data.loader=dali got no sample files")
    foreign = [f for f in files if not f.name.endswith(form.suffix)]
    if foreign:
        raise SciperfError(f"{foreign[0]}: {form.not_npy}")
    require(fmt, workload)
    _check_batches(len(files), batch, rank, world, remainder)
    found = _sample_shape(files, form, shape)
    return DaliPlan(files, int(batch), int(seed), bool(shuffle), int(rank), int(world),
                    device_id, found, max(int(prefetch), 1), threads or default_threads(),
                    workload, form.transform(root, found), remainder)


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


def _sample_shape(files: tuple[Path, ...], form: Any,
                  shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The first sample pair's data shape, both headers checked against `form` (and the
    data against `shape`). No files (a rank whose uneven validation shard is empty, or too
    few for a full training batch: no batch, no pipeline) → `shape` as given."""
    want = None if shape is None else tuple(int(s) for s in shape)
    if not files:
        return want or ()
    found = _header_shape(files[0], form.x_dtype, ndim=form.ndim, shape=want)
    _header_shape(form.label_path(files[0]), form.label_dtype, shape=form.label_shape(found))
    return found


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


def own_shard_loader(make: Callable[..., Any], device_id: int | None, files: Sequence[Path],
                     reader: Any, workload: str, root: str, batch: int, seed: int,
                     shuffle: bool, prefetch: int, remainder: str) -> Any:
    """A framework's DALI loader through its `make` (``make_dali_loader``) with the native
    loader's arguments: this rank's own files (the driver's shard, so DALI does not shard
    again), the reader's sample shape, the workload's transform of `root`, `remainder` as
    the native loader's."""
    return make(files, batch, seed, shuffle, 0, 1, device_id, fmt=reader.fmt,
                prefetch=prefetch, shape=tuple(reader.x_shape), workload=workload, root=root,
                remainder=remainder)


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
