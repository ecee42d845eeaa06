"""PyTorch adapter over the DALI pipeline of ``sciperf.data.dali`` (``data.loader=dali``).

Yields what ``sciperf_pytorch.data.batches`` yields: x log1p float32 (N, C, D, H, W) as a
view of the (N, D, H, W, C) batch (channels-last memory), y float32 (N, 4) — on the GPU
the pipeline ran on, or on the CPU for a CPU-only pipeline (``device_id=None``).

``make_loader`` and ``batches`` have the signatures of their ``sciperf_pytorch.data``
namesakes, so a backend picks its input module by ``data.loader`` and changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

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

        try:
            pipe = dali_spec.build_pipeline(self.plan, epoch)
            loader = DALIGenericIterator([pipe], list(dali_spec.OUTPUTS),
                                         reader_name=dali_spec.READER,
                                         last_batch_policy=LastBatchPolicy.DROP)
        except RuntimeError as exc:
            raise SciperfError(dali_spec.error_message(str(exc))) from None
        try:
            for _ in range(self.plan.steps):
                try:
                    out = next(loader)[0]
                except (RuntimeError, StopIteration) as exc:
                    raise SciperfError(dali_spec.error_message(str(exc))) from None
                yield out["x"].permute(0, 4, 1, 2, 3), out["y"]
        finally:
            del loader, pipe


def make_dali_loader(files: Sequence[Path], batch: int, seed: int, shuffle: bool,
                     rank: int = 0, world: int = 1, device_id: int | None = None, *,
                     fmt: str = "npy", prefetch: int = 2, threads: int = 0,
                     shape: tuple[int, ...] | None = None) -> DaliLoader:
    """The DALI loader over `files`, sharded by DALI into `world` (``DaliPlan`` explains).

    Whole split + rank/world: every rank must pass the same `seed` (one global shuffle).
    """
    return DaliLoader(dali_spec.plan(files, batch, seed, shuffle, rank, world, device_id,
                                     fmt=fmt, prefetch=prefetch, threads=threads,
                                     shape=shape))


def default_device_id() -> int | None:
    """The CUDA device this process computes on (``runtime.select_device`` sets it), or
    None (CPU-only pipeline) without CUDA."""
    return torch.cuda.current_device() if torch.cuda.is_available() else None


def make_loader(files: list[Path], fmt: str, shape: tuple[int, ...], batch: int, seed: int,
                shuffle: bool, prefetch: int) -> DaliLoader:
    """Drop-in for ``sciperf_pytorch.data.make_loader``: this rank's own (already sharded)
    files in a fixed shard, DALI on this process's device."""
    return make_dali_loader(files, batch, seed, shuffle, 0, 1, default_device_id(), fmt=fmt,
                            prefetch=prefetch, shape=tuple(shape))


def batches(loader: DaliLoader, epoch: int,
            device: torch.device | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Device batches of one epoch (the signature of ``sciperf_pytorch.data.batches``;
    the pipeline already placed them)."""
    yield from loader.epoch(epoch)
