"""TensorFlow adapter over the DALI pipeline of ``sciperf.data.dali`` (``data.loader=dali``).

Yields what ``sciperf_tensorflow.data.batches`` yields: x log1p float32 (N, D, H, W, C),
y float32 (N, 4), through ``nvidia.dali.plugin.tf.DALIDataset`` placed on the device the
pipeline runs on (CPU-only when ``device_id`` is None).

``make_loader`` and ``batches`` have the signatures of their ``sciperf_tensorflow.data``
namesakes, so a backend picks its input module by ``data.loader`` and changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import tensorflow as tf

from sciperf.data import dali as dali_spec
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import TARGET_SIZE


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
        other ``tf.data`` ops, so the epoch is cut at ``len(self)`` batches here.
        """
        from nvidia.dali.plugin.tf import DALIDataset

        p = self.plan
        place = "/cpu:0" if p.device_id is None else "/gpu:0"
        try:
            with tf.device(place):
                dataset = DALIDataset(
                    pipeline=dali_spec.build_pipeline(p, epoch), batch_size=p.batch,
                    num_threads=p.threads, device_id=p.device_id,
                    prefetch_queue_depth=p.prefetch,
                    output_dtypes=(tf.float32, tf.float32),
                    output_shapes=((p.batch, *p.sample_shape), (p.batch, TARGET_SIZE)))
                batches = iter(dataset)
            for _ in range(p.steps):
                yield next(batches)
        except (tf.errors.OpError, RuntimeError) as exc:
            raise SciperfError(dali_spec.error_message(
                getattr(exc, "message", None) or str(exc))) from None


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
    """The CUDA ordinal of the GPU TF computes on, or None (CPU-only pipeline) without one.

    ``runtime.select_device`` narrows TF to one GPU that TF then calls /GPU:0; DALI sees
    every GPU, so this is that GPU's physical index, not TF's.
    """
    visible = tf.config.get_visible_devices("GPU")
    if not visible:
        return None
    return tf.config.list_physical_devices("GPU").index(visible[0])


def make_loader(files: list[Path], fmt: str, shape: tuple[int, ...], batch: int, seed: int,
                shuffle: bool, prefetch: int) -> DaliLoader:
    """Drop-in for ``sciperf_tensorflow.data.make_loader``: this rank's own (already
    sharded) files in a fixed shard, DALI on this process's device."""
    return make_dali_loader(files, batch, seed, shuffle, 0, 1, default_device_id(), fmt=fmt,
                            prefetch=prefetch, shape=tuple(shape))


def batches(loader: DaliLoader, epoch: int) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
    """Batches of one epoch (the signature of ``sciperf_tensorflow.data.batches``)."""
    yield from loader.epoch(epoch)
