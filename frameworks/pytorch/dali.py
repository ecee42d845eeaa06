"""PyTorch adapter over the DALI pipeline of ``sciperf.data.dali`` (``data.loader=dali``).

Yields what the native loaders yield: x float32 with channels moved to dimension 1 as a
view of the channels-last batch (CosmoFlow (N, C, D, H, W), DeepCAM (N, C, H, W)), labels
as the loss wants them (CosmoFlow's float32 targets as stored, DeepCAM's uint8 class maps
as int64) — on the GPU the pipeline ran on, or on the CPU for a CPU-only pipeline
(``device_id=None``). Batches are cut to the plan's sizes: a DeepCAM validation shard ends
in a smaller batch, as with ``sciperf.data.loader.BatchLoader``.

``make_loader``/``make_deepcam_loader`` and ``batches`` have the signatures of their
native namesakes (``sciperf_pytorch.input``, ``sciperf_pytorch.workloads.deepcam.backend``), so a backend picks
its input functions by ``data.loader`` and changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from sciperf.data import dali as dali_spec
from sciperf.errors import SciperfError


class DaliLoader:
    """One rank's DALI input: ``epoch(e)`` iterates the batches of epoch e, ``len`` = steps."""

    def __init__(self, plan: dali_spec.DaliPlan):
        self.plan = plan

    def __len__(self) -> int:
        return self.plan.steps

    @property
    def samples(self) -> int:
        """Samples this rank reads per epoch."""
        return self.plan.samples

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of `epoch` from a fresh pipeline (order fixed by seed and epoch)."""
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        if not self.plan.sizes:  # an empty shard: no pipeline to build
            return
        try:
            pipe = dali_spec.build_pipeline(self.plan, epoch)
            # FILL: a last partial batch comes padded (the reader repeats its last
            # sample) and is cut to its size below — never a sample twice
            loader = DALIGenericIterator([pipe], list(dali_spec.OUTPUTS),
                                         reader_name=dali_spec.READER,
                                         last_batch_policy=LastBatchPolicy.FILL)
        except RuntimeError as exc:
            raise SciperfError(dali_spec.error_message(str(exc))) from None
        try:
            for size in self.plan.sizes:
                try:
                    out = next(loader)[0]
                except (RuntimeError, StopIteration) as exc:
                    raise SciperfError(dali_spec.error_message(str(exc))) from None
                yield channels_first(out["x"][:size]), labels(out["y"][:size])
        finally:
            del loader, pipe


def channels_first(x: torch.Tensor) -> torch.Tensor:
    """(N, *spatial, C) → (N, C, *spatial) as a view: channels-last memory, no copy."""
    return x.permute(0, x.ndim - 1, *range(1, x.ndim - 1))


def labels(y: torch.Tensor) -> torch.Tensor:
    """Class maps (integer) become int64 indices for the loss; float targets stay."""
    return y if y.is_floating_point() else y.long()


def make_dali_loader(files: Sequence[Path], batch: int, seed: int, shuffle: bool,
                     rank: int = 0, world: int = 1, device_id: int | None = None, *,
                     fmt: str = "npy", prefetch: int = 2, threads: int = 0,
                     shape: tuple[int, ...] | None = None, **workload: Any) -> DaliLoader:
    """The DALI loader over `files`, sharded by DALI into `world` (``DaliPlan`` explains).

    Whole split + rank/world: every rank must pass the same `seed` (one global shuffle).
    `workload` takes ``dali_spec.plan``'s workload/root/remainder (CosmoFlow by default).
    """
    return DaliLoader(dali_spec.plan(files, batch, seed, shuffle, rank, world, device_id,
                                     fmt=fmt, prefetch=prefetch, threads=threads,
                                     shape=shape, **workload))


def default_device_id() -> int | None:
    """The CUDA device this process computes on (``runtime.select_device`` sets it), or
    None (CPU-only pipeline) without CUDA."""
    return torch.cuda.current_device() if torch.cuda.is_available() else None


def make_loader(files: list[Path], fmt: str, shape: tuple[int, ...], batch: int, seed: int,
                shuffle: bool, prefetch: int) -> DaliLoader:
    """Drop-in for ``sciperf_pytorch.input.make_loader``: this rank's own (already sharded)
    files in a fixed shard, DALI on this process's device."""
    return make_dali_loader(files, batch, seed, shuffle, 0, 1, default_device_id(), fmt=fmt,
                            prefetch=prefetch, shape=tuple(shape))


def make_deepcam_loader(*args: Any, **kwargs: Any) -> DaliLoader:
    """Drop-in for ``sciperf_pytorch.workloads.deepcam.backend.make_loader`` (same arguments; see
    ``sciperf.data.dali.deepcam_loader``), DALI on this process's device."""
    return dali_spec.deepcam_loader(make_dali_loader, default_device_id(), *args, **kwargs)


def batches(loader: DaliLoader, epoch: int,
            device: torch.device | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Device batches of one epoch (the signature of the native ``batches``; the pipeline
    already placed them)."""
    yield from loader.epoch(epoch)
