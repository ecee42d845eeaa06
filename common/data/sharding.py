"""Which files a rank reads, and the reference's divisibility rules, checked up front.

Two rules, the data plans' (``sciperf.data.plan``): ``strict`` — every sample count
divides into ranks × local batch; ``uneven`` — training drops what does not fill a batch on
every rank, validation evaluates every sample once on shards that differ by at most one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from sciperf.errors import SciperfError

T = TypeVar("T")


def shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """Strided shard `rank` of `world` (item i goes to rank i mod world), as tf.data.shard.

    Strided rather than contiguous so every rank sees files from the whole sorted list.
    """
    if world < 1 or not 0 <= rank < world:
        raise SciperfError(f"invalid shard {rank} of {world}")
    return list(items[rank::world])


def check_divisibility(n_samples: int, world: int, local_batch: int, what: str) -> None:
    """The reference requires n_samples divisible by (shards × local batch); say so clearly."""
    unit = world * local_batch
    if n_samples <= 0 or n_samples % unit:
        raise SciperfError(
            f"{what}={n_samples} must be a positive multiple of ranks × local batch = "
            f"{world} × {local_batch} = {unit} (every rank runs the same number of full batches)"
        )


def check_uneven(n_samples: int, world: int, local_batch: int, what: str,
                 full_batches: bool) -> None:
    """The ``uneven`` rule: training needs one full global batch (the remainder is
    dropped), validation one sample per rank at most uneven (shards differ by one)."""
    need = world * local_batch if full_batches else 1
    if n_samples < need:
        unit = f"ranks × local batch = {world} × {local_batch} = {need}" if full_batches \
            else "1"
        raise SciperfError(f"{what}={n_samples} is too small: at least {unit} sample(s) needed")


def local_batch_size(global_batch: int, world: int) -> int:
    """Per-rank batch; the global batch must split evenly over the ranks."""
    if global_batch % world:
        raise SciperfError(
            f"train.global_batch_size={global_batch} does not divide by the {world} ranks"
        )
    return global_batch // world
