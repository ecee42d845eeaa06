"""Which chain each rank trains on, with which seed, and how many recycling passes each step
runs: the reference's samplers and recycling stream reproduced draw for draw, numpy only
(REF ``openfold/samplers.py``, ``openfold/dataloaders.py``, ``train.py``; spec §5, §6).

Training. The reference fixes the whole run up front: one ``torch.Generator`` seeded with
the hash of ``initial_training_sampler_<seed>`` draws ``num_train_iters × global_batch``
chain indices with ``torch.multinomial(weights, n, replacement=True)``, a second generator
with the same seed draws as many sample seeds with ``torch.randint(0, 2**63 - 1)``; pair
``k`` is the ``k``-th sample of the run and rank ``r`` of ``w`` takes pairs ``r, r + w, …``
in local batches of consecutive pairs. torch 2.13's CPU kernel for ``n >= 2`` samples with
replacement (ATen ``cpu/MultinomialKernel.cpp``) builds the cumulative sum of the weights
sequentially in their dtype, divides every entry by the total, sets the last to exactly 1,
and per sample takes one double uniform ``(random64() & (2**53 - 1)) / 2**53`` and the
left-most category whose cumulative value is not below it (a binary search). Each sample
costs one 64-bit draw and depends on nothing drawn before, so the stream is
*prefix-stable*: the first ``k`` of ``n`` draws equal the ``k`` draws (checked against
torch for ``k >= 2``). ``n == 1`` is the exception: torch then takes its "fast path",
``argmax(weights / Exp(1))``, a different draw; the reference never asks for one sample
unless a run is a single step of a single chain. Prefix stability is what lets this module
hand out one train/validation cycle at a time instead of the reference's whole run.

Recycling. Every rank seeds ``random.Random`` with the hash of
``initial_training_dataloader_<seed>`` and draws the number of recycling iterations of each
optimizer step from an endless stream of shuffled blocks ``[0, 1, …, num_recycling_iters]``;
the batch's trailing recycling axis is cut to that number + 1.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from sciperf.errors import SciperfError
from sciperf.workloads.openfold.rng import (
    TRAIN_SAMPLER_SEED_FORMAT,
    TorchCompatibleStream,
    eval_seed,
    seed_from_string,
    train_sample_seeds,
)
from sciperf.workloads.openfold.sizes import ModelSpec

# The benchmark's recycling iterations (config initial_training: 3, so 1 to 4 passes).
NUM_RECYCLING_ITERS = ModelSpec.num_recycling_iters
# The string the reference hashes into the recycling stream's seed (REF train.py).
TRAIN_DATALOADER_SEED_FORMAT = "initial_training_dataloader_{seed}"
# torch refuses more categories than float32 counts exactly (ATen multinomial's check).
MAX_CATEGORIES = 2**24
_UNIFORM_BITS = 53  # a double uniform keeps the low 53 bits of one 64-bit draw
_SKIP_CHUNK_WORDS = 1 << 20  # skipping ahead draws and drops at most this many words at once


def training_draws(weights: np.ndarray, global_seed: int, count: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` (chain index, sample seed) pairs of the reference's training
    sampler, before rank striding: (indices int64, seeds int64), each of length ``count``.

    ``weights``: the training chains' sampling weights in the sampler's order
    (:func:`.layout.training_weights`, float64 as the reference's; float32 is drawn in
    float32 as torch would). ``global_seed``: the run's seed (``--seed``).
    """
    return _draws(weights, global_seed, 0, count)


def rank_epoch_draws(weights: np.ndarray, global_seed: int, epoch: int, rank: int,
                     world: int, local_batch: int, steps: int) -> list[tuple[int, int]]:
    """Rank ``rank``'s (chain index, sample seed) pairs of 0-indexed train/validation cycle
    ``epoch``, in the order its local batches consume them (``steps`` batches of
    ``local_batch`` consecutive pairs).

    The reference's rank takes every ``world``-th pair of the run's stream. A cycle covers
    the global draws ``[epoch·steps·G, (epoch+1)·steps·G)`` with ``G = local_batch·world``;
    its length is a multiple of ``world``, so striding that slice from ``rank`` gives the
    same pairs as striding the whole stream and cutting the rank's share into cycles.
    """
    for name, value, low in (("epoch", epoch, 0), ("world", world, 1),
                             ("local_batch", local_batch, 1), ("steps", steps, 1)):
        if value < low:
            raise SciperfError(f"sampler {name} must be >= {low}, got {value}")
    if not 0 <= rank < world:
        raise SciperfError(f"sampler rank must be in [0, {world}), got {rank}")
    cycle = steps * local_batch * world
    indices, seeds = _draws(weights, global_seed, epoch * cycle, (epoch + 1) * cycle)
    return list(zip(indices[rank::world].tolist(), seeds[rank::world].tolist(), strict=True))


def recycling_iterations(global_seed: int, count: int,
                         num_recycling_iters: int = NUM_RECYCLING_ITERS) -> np.ndarray:
    """The number of recycling iterations of the run's first ``count`` optimizer steps
    (int64), the same on every rank: the reference's shuffled blocks of
    ``[0, …, num_recycling_iters]``. With gradient accumulation the reference draws once
    per accumulation group, so entry ``k`` belongs to optimizer step ``k`` and all its
    micro-batches.
    """
    if count < 0:
        raise SciperfError(f"recycling iterations count must be >= 0, got {count}")
    if num_recycling_iters < 0:
        raise SciperfError(f"num_recycling_iters must be >= 0, got {num_recycling_iters}")
    rng = random.Random(seed_from_string(TRAIN_DATALOADER_SEED_FORMAT.format(
        seed=global_seed)))
    values: list[int] = []
    while len(values) < count:
        block = list(range(num_recycling_iters + 1))
        rng.shuffle(block)
        values.extend(block)
    return np.array(values[:count], np.int64)


def validation_order(chain_ids: Sequence[str], rank: int, world: int
                     ) -> list[tuple[int, int]]:
    """The reference's validation sampler for one rank: (index into ``chain_ids``, sample
    seed) pairs, the seed being the hash of the chain id (:func:`.features.eval_seed`, a
    uint64 that may exceed int64, hence Python ints).

    The reference pads the list to ``ceil(N / world)·world`` entries with its own first
    entries (repeated when ``world`` exceeds ``N``) so that every rank evaluates the same
    number of chains, then takes ``[rank::world]``; ``world == 1`` is the plain order.

    How the mean sees each chain once: its ``dist_gather_val_metrics`` gathers every rank's
    metric list (equal lengths, thanks to the padding) on the main rank and rebuilds the
    per-chain list by reading, for chain ``v < N`` only, entry ``v // world`` of rank
    ``v % world`` — exactly where chain ``v`` sits in the padded, strided order. The padded
    repeats occupy positions ``>= N`` and are never read; the mean lDDT-Cα is then the
    unweighted mean over the ``N`` chains (the gathered values pass through a float32
    tensor, which changes nothing as the per-chain lDDT-Cα is a float32 already). So
    evaluating strided shards ``[rank::world]`` without padding, each chain once, gives the
    same set of per-chain values and the same mean.
    """
    if world < 1:
        raise SciperfError(f"validation world must be >= 1, got {world}")
    if not 0 <= rank < world:
        raise SciperfError(f"validation rank must be in [0, {world}), got {rank}")
    if not chain_ids:
        raise SciperfError("validation set is empty")
    count = len(chain_ids)
    padded = list(range(count))
    if world > 1:
        padding = math.ceil(count / world) * world - count
        padded += (padded * math.ceil(padding / count))[:padding]
        padded = padded[rank::world]
    return [(index, eval_seed(chain_ids[index])) for index in padded]


def _draws(weights: np.ndarray, global_seed: int, start: int, stop: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """Global draws ``[start, stop)`` of the training stream (indices, seeds; int64)."""
    if start < 0 or stop < start:
        raise SciperfError(f"sampler draws must satisfy 0 <= start <= stop, got [{start}, "
                           f"{stop})")
    cumulative = _cumulative(weights)
    stream = TorchCompatibleStream(seed_from_string(TRAIN_SAMPLER_SEED_FORMAT.format(
        seed=global_seed)))
    _skip_words(stream, 2 * start)  # one 64-bit draw (two 32-bit words) per sample
    uniforms = (stream.random64(stop - start) & np.uint64((1 << _UNIFORM_BITS) - 1)
                ).astype(np.float64) / 2.0**_UNIFORM_BITS
    # left-most category with cumulative >= u: the kernel's binary search ("cum < u: go
    # right"); a float32 table compares exactly after widening, as in the kernel
    indices = np.searchsorted(cumulative, uniforms, side="left").astype(np.int64)
    seeds = train_sample_seeds(global_seed, stop)[start:]
    return indices, seeds


def _cumulative(weights: np.ndarray) -> np.ndarray:
    """The kernel's normalised cumulative distribution, in the weights' dtype: a sequential
    running sum (numpy's ``cumsum`` accumulates in order), each entry divided by the total,
    the last set to 1."""
    weights = np.asarray(weights)
    if weights.dtype not in (np.float64, np.float32):
        raise SciperfError(f"sampler weights must be float64 or float32, got {weights.dtype}")
    if weights.ndim != 1 or not 0 < weights.size <= MAX_CATEGORIES:
        raise SciperfError(f"sampler weights must be one vector of 1 to {MAX_CATEGORIES} "
                           f"entries, got shape {weights.shape}")
    if not np.isfinite(weights).all() or (weights < 0).any():
        bad = int(np.flatnonzero(~np.isfinite(weights) | (weights < 0))[0])
        raise SciperfError(f"sampler weight {bad} is {weights[bad]}, weights must be finite "
                           "and >= 0")
    cumulative = np.cumsum(weights, dtype=weights.dtype)
    total = cumulative[-1]
    if not total > 0:
        raise SciperfError("sampler weights sum to 0, nothing can be drawn")
    cumulative /= total
    cumulative[-1] = 1
    return cumulative


def _skip_words(stream: TorchCompatibleStream, words: int) -> None:
    """Advance the stream by ``words`` 32-bit outputs in bounded chunks."""
    while words > 0:
        step = min(words, _SKIP_CHUNK_WORDS)
        stream.random(step)
        words -= step
