"""PyTorch adapter over the DALI pipeline of ``sciperf.data.dali`` (``data.loader=dali``).

Yields what the native loader (``sciperf_pytorch.input``) yields: x float32 with channels
moved to dimension 1 as a view of the channels-last batch, labels as the loss wants them
(float targets as stored, integer class maps as int64) — on the GPU the pipeline ran on,
or on the CPU for a CPU-only pipeline (``device_id=None``). Batches are cut to the plan's
sizes: an uneven validation shard ends in a smaller batch, as with
``sciperf.data.loader.BatchLoader``. The workload's transform already ran inside the
pipeline, so a backend's ``device_transform`` is not applied to these batches.

``make_loader`` and ``batches`` are drop-ins for the native pair (the same batches, and
``make_loader`` takes the native loader's arguments plus the workload and dataset root the
pipeline's transform needs), so a backend picks its input functions by ``data.loader`` and
changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from sciperf.data import dali as dali_spec
from sciperf.errors import SciperfError
from sciperf.workloads.base import SampleReader
from sciperf_pytorch.input import channels_first, labels


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
            raise SciperfError(dali_spec.failure(self.plan, str(exc))) from None
        try:
            for size in self.plan.sizes:
                try:
                    out = next(loader)[0]
                except (RuntimeError, StopIteration) as exc:
                    raise SciperfError(dali_spec.failure(self.plan, str(exc))) from None
                yield channels_first(out["x"][:size]), labels(out["y"][:size])
        finally:
            del loader, pipe


def make_dali_loader(files: Sequence[Path], batch: int, seed: int, shuffle: bool,
                     rank: int = 0, world: int = 1, device_id: int | None = None, *,
                     fmt: str = "npy", prefetch: int = 2, threads: int = 0,
                     shape: tuple[int, ...] | None = None, **workload: Any) -> DaliLoader:
    """The DALI loader over `files`, sharded by DALI into `world` (``DaliPlan`` explains).

    Whole split + rank/world: every rank must pass the same `seed` (one global shuffle).
    `workload` takes ``dali_spec.plan``'s workload/root/remainder (the registry's default
    workload when not given).
    """
    return DaliLoader(dali_spec.plan(files, batch, seed, shuffle, rank, world, device_id,
                                     fmt=fmt, prefetch=prefetch, threads=threads,
                                     shape=shape, **workload))


def default_device_id() -> int | None:
    """The CUDA device this process computes on (``runtime.select_device`` sets it), or
    None (CPU-only pipeline) without CUDA."""
    return torch.cuda.current_device() if torch.cuda.is_available() else None


def make_loader(files: Sequence[Path], reader: SampleReader, workload: str,
                root: str | Path, batch: int, seed: int, shuffle: bool, prefetch: int,
                remainder: str = "error") -> DaliLoader:
    """Drop-in for ``sciperf_pytorch.input.make_loader``: this rank's own (already sharded)
    files in a fixed shard, the reader's format and sample shape, the workload's transform
    of the dataset `root`, DALI on this process's device."""
    return dali_spec.own_shard_loader(make_dali_loader, default_device_id(), files, reader,
                                      workload, str(root), batch, seed, shuffle, prefetch,
                                      remainder)


def batches(loader: DaliLoader, epoch: int,
            device: torch.device | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Device batches of one epoch (the signature of the native ``batches``; the pipeline
    already placed them)."""
    yield from loader.epoch(epoch)
