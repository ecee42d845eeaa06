"""TensorFlow adapter over the DALI pipeline of ``sciperf.data.dali`` (``data.loader=dali``).

Yields what the native loader yields: x float32 channels-last, already transformed by the
workload's in-pipeline transform, labels as the loss wants them (float targets as stored,
integer class maps as int32 — ``input.labels``), through
``nvidia.dali.plugin.tf.DALIDataset`` placed on the device the pipeline runs on (CPU-only
when ``device_id`` is None). Batches are cut to the plan's sizes: a `keep` remainder ends
in a smaller batch, as with the native ``tf.data`` loader.

``make_loader`` takes the native loader's arguments plus the workload and dataset root
(the transform's statistics), and ``batches`` has the native signature, so the backend
template picks its input functions by ``data.loader`` and changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import tensorflow as tf

from sciperf.data import dali as dali_spec
from sciperf.errors import SciperfError
from sciperf.workloads.base import SampleReader
from sciperf_tensorflow.input import Transform, labels


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

    def epoch(self, epoch: int) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        """Batches of `epoch` from a fresh pipeline (order fixed by seed and epoch).

        ``DALIDataset`` never ends by itself, and a GPU-placed one should not be chained to
        other ``tf.data`` ops, so the epoch is cut at ``len(self)`` batches here, and a
        last partial batch (padded by the reader with its last sample) to its size.
        """
        if not self.plan.sizes:  # an empty shard: no pipeline to build
            return
        try:
            batches = self._iterator(epoch)
            for size in self.plan.sizes:
                x, y = next(batches)
                if size < self.plan.batch:
                    x, y = x[:size], y[:size]
                yield x, labels(y)
        except (tf.errors.OpError, RuntimeError) as exc:
            raise SciperfError(dali_spec.failure(
                self.plan, getattr(exc, "message", None) or str(exc))) from None

    def _iterator(self, epoch: int) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        """An iterator over the DALIDataset of one epoch's pipeline, both made on the
        pipeline's device (so the iterator's ops are placed there too)."""
        from nvidia.dali.plugin.tf import DALIDataset

        p = self.plan
        with tf.device("/cpu:0" if p.device_id is None else "/gpu:0"):
            dataset = DALIDataset(
                pipeline=dali_spec.build_pipeline(p, epoch), batch_size=p.batch,
                num_threads=p.threads, device_id=p.device_id, prefetch_queue_depth=p.prefetch,
                output_dtypes=(tf.float32, tf.as_dtype(p.label_dtype)),
                output_shapes=((p.batch, *p.sample_shape), (p.batch, *p.label_shape)))
            return iter(dataset)


def make_dali_loader(files: Sequence[Path], batch: int, seed: int, shuffle: bool,
                     rank: int = 0, world: int = 1, device_id: int | None = None, *,
                     fmt: str = "npy", prefetch: int = 2, threads: int = 0,
                     shape: tuple[int, ...] | None = None, **workload: Any) -> DaliLoader:
    """The DALI loader over `files`, sharded by DALI into `world` (``DaliPlan`` explains).

    Whole split + rank/world: every rank must pass the same `seed` (one global shuffle).
    `workload` takes ``dali_spec.plan``'s workload/root/remainder (the default workload's
    format when not given).
    """
    return DaliLoader(dali_spec.plan(files, batch, seed, shuffle, rank, world, device_id,
                                     fmt=fmt, prefetch=prefetch, threads=threads,
                                     shape=shape, **workload))


def default_device_id() -> int | None:
    """The CUDA ordinal of the GPU TF computes on, or None (CPU-only pipeline) without one.

    ``runtime.select_device`` narrows TF to one GPU that TF then calls /GPU:0; DALI sees
    every GPU, so this is that GPU's physical index, not TF's.
    """
    visible = tf.config.get_visible_devices("GPU")
    if not visible:
        return None
    return tf.config.list_physical_devices("GPU").index(visible[0])


def make_loader(files: Sequence[Path], reader: SampleReader, workload: str,
                root: str | Path, batch: int, seed: int, shuffle: bool, prefetch: int,
                remainder: str = "error") -> DaliLoader:
    """Drop-in for ``sciperf_tensorflow.input.make_loader``: this rank's own (already
    sharded) files in a fixed shard, the reader's sample shape, the workload's transform
    of `root`, DALI on this process's device."""
    return dali_spec.own_shard_loader(make_dali_loader, default_device_id(), files, reader,
                                      workload, str(root), batch, seed, shuffle, prefetch,
                                      remainder)


def batches(loader: DaliLoader, epoch: int,
            transform: Transform | None = None) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
    """Batches of one epoch (the signature of the native ``batches``; the pipeline has
    already applied the workload's transform, so the backend passes none)."""
    for x, y in loader.epoch(epoch):
        yield (x if transform is None else transform(x)), y
