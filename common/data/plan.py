"""A workload's data plan: which samples each rank trains and evaluates, epoch by epoch.

Every workload owns one (``Workload.plan``). The driver, staging, bench and both framework
templates ask it — the files a rank reads, what it stages, its training items of an
epoch, its validation batch, the rule for a last partial batch, the optimizer steps of an
epoch, MLLOG's epoch unit — and never branch on which plan it is
(docs/architecture.md, "Data"). The standard plans are the classes below; a workload picks
one or subclasses it:

* :class:`StrictPlan` — every sample count divides into ranks × local batch; each rank
  reads the strided shard ``files[rank::world]`` (CosmoFlow's reference rule);
* :class:`UnevenPlan` — every rank trains ⌊n/world⌋ samples in full batches (all ranks
  take the same steps) and validation shards may differ by one, each sample evaluated
  once (DeepCAM, OC20);
* :class:`SampledPlan` — training draws samples with replacement from the whole set on
  every rank (a workload's sampler gives each rank its items of an epoch); validation as
  uneven (OpenFold).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sciperf.data.sharding import check_divisibility, check_uneven, shard
from sciperf.data.staging import rank_share
from sciperf.distributed import RankInfo

StepsPerEpoch = Callable[[Any], int]  # run config → optimizer steps of one epoch


@dataclass(frozen=True)
class RankFiles:
    """This rank's files, its batch, and the dataset sizes the MLLOG header reports."""

    train: list[Path]
    evals: list[Path]
    local_batch: int
    train_samples: int  # the whole training set (every rank's share together)
    eval_samples: int


@dataclass(frozen=True)
class Draws:
    """Training items drawn rather than shuffled: ``count`` per epoch on this rank, and
    ``items(epoch)`` (0-indexed) — what the sample reader is given."""

    count: int
    items: Callable[[int], Sequence[Any]]


def _epoch(cfg: Any, epoch: int) -> int:
    """MLLOG's epoch_num is the 1-based epoch itself (the default unit)."""
    return epoch


class StrictPlan:
    """Every sample count divides into ranks × local batch; rank r reads ``files[r::world]``
    in whole batches, training and validation alike."""

    train_remainder = "error"  # a last partial batch (sciperf.data.loader.batch_sizes)
    eval_remainder = "error"

    def __init__(self, steps_per_epoch: StepsPerEpoch,
                 epoch_num: Callable[[Any, int], int] = _epoch,
                 eval_batch: int | None = None) -> None:
        # steps_per_epoch: the workload's count of an epoch of the configured set;
        # epoch_num: MLLOG's epoch_num of 1-based epoch n (cfg, n); eval_batch: samples per
        # validation batch where it cannot be the local batch (None: the local batch)
        self._steps, self._epoch_num, self._eval_batch = steps_per_epoch, epoch_num, eval_batch

    # ------------------------------------------------------------------ epochs
    def steps_per_epoch(self, cfg: Any) -> int:
        """Optimizer steps of one epoch of the configured set."""
        return int(self._steps(cfg))

    def epoch_num(self, cfg: Any, epoch: int) -> int:
        """MLLOG's ``epoch_num`` of 1-based `epoch` (the reference's unit)."""
        return int(self._epoch_num(cfg, epoch))

    def step_samples(self, cfg: Any) -> int:
        """Samples one optimizer step trains on over all ranks (what a step's FLOPs and
        all-reduce are counted for): the global batch, one forward per step."""
        return int(cfg.train.global_batch_size)

    def eval_batch(self, local_batch: int) -> int:
        """Samples per validation batch."""
        return self._eval_batch or local_batch

    def epoch_overrides(self, samples: int, global_batch: int) -> list[str]:
        """Config overrides beyond ``data.train_samples`` that make one epoch train
        `samples` samples in batches of `global_batch` (bench's rows)."""
        return []

    # ------------------------------------------------------------------ files
    def check(self, n_train: int, n_eval: int, world: int, local_batch: int) -> None:
        """The counts this plan can split over `world` ranks, or one line naming the key."""
        check_divisibility(n_train, world, local_batch, "data.train_samples")
        check_divisibility(n_eval, world, local_batch, "data.eval_samples")

    def rank_files(self, train: list[Path], evals: list[Path], info: RankInfo,
                   staged: bool) -> tuple[list[Path], list[Path]]:
        """This rank's (training, validation) files. Unstaged: the strided shard of the
        shared files; staged: the node's strided share, then the local rank's
        (docs/architecture.md, "Staging") — the files this rank copies are the files it
        reads."""
        if staged:
            share = partial(_node_share, info=info)
        else:
            share = partial(shard, rank=info.rank, world=info.world)
        return self.train_files(train, share(train), info.world), share(evals)

    def train_files(self, every: list[Path], mine: list[Path], world: int) -> list[Path]:
        """The training files this rank reads, from its share `mine` of `every` file."""
        return mine

    def stage_sources(self, train: list[Path], evals: list[Path],
                      info: RankInfo) -> list[Path]:
        """Which of the files this rank reads (its training and validation samples'
        files) it copies to the node: all of them, no other rank reads them."""
        return list(dict.fromkeys([*train, *evals]))

    def draws(self, files: Sequence[Path], cfg: Any, rank: int, world: int,
              local_batch: int) -> Draws | None:
        """This rank's drawn training items (None: each epoch shuffles its files)."""
        return None


def _node_share(files: list[Path], info: RankInfo) -> list[Path]:
    return rank_share(files, info.node, info.nodes, info.local_rank, info.local_size)


class UnevenPlan(StrictPlan):
    """The reference's uneven rule: training drops what does not fill a batch on every
    rank (all ranks take ⌊n/world⌋ samples in full batches), validation keeps a smaller
    last batch and shards may differ by one (every sample evaluated once)."""

    train_remainder = "drop"
    eval_remainder = "keep"

    def check(self, n_train: int, n_eval: int, world: int, local_batch: int) -> None:
        check_uneven(n_train, world, local_batch, "data.train_samples", full_batches=True)
        check_uneven(n_eval, world, local_batch, "data.eval_samples", full_batches=False)

    def train_files(self, every: list[Path], mine: list[Path], world: int) -> list[Path]:
        """Every share holds at least ⌊n/world⌋ files; the rest is not trained on."""
        return mine[:len(every) // world]


# (every training sample, cfg, 0-indexed epoch, rank, world, count) → this rank's items
Sampler = Callable[[Sequence[Path], Any, int, int, int, int], Sequence[Any]]


class SampledPlan(UnevenPlan):
    """Training draws with replacement from every training sample on every rank: the
    workload's `sampler` gives a rank its items of an epoch (an epoch is
    ``steps_per_epoch`` steps, set by the config key `epoch_key`); validation as
    :class:`UnevenPlan`. Staged, every node holds the whole set, its ranks splitting the
    copying (setup's barrier precedes the first read)."""

    def __init__(self, steps_per_epoch: StepsPerEpoch, sampler: Sampler, epoch_key: str,
                 epoch_num: Callable[[Any, int], int] = _epoch,
                 eval_batch: int | None = None) -> None:
        super().__init__(steps_per_epoch, epoch_num, eval_batch)
        self.sampler, self.epoch_key = sampler, epoch_key

    def epoch_overrides(self, samples: int, global_batch: int) -> list[str]:
        return [f"{self.epoch_key}={max(samples // global_batch, 1)}"]

    def check(self, n_train: int, n_eval: int, world: int, local_batch: int) -> None:
        check_uneven(n_train, 1, 1, "data.train_samples", full_batches=True)
        check_uneven(n_eval, world, local_batch, "data.eval_samples", full_batches=False)

    def train_files(self, every: list[Path], mine: list[Path], world: int) -> list[Path]:
        """Every rank draws from every training sample."""
        return list(every)

    def stage_sources(self, train: list[Path], evals: list[Path],
                      info: RankInfo) -> list[Path]:
        """Every rank of the node reads every training file: the node's ranks split their
        copying; a validation file no training sample names is this rank's alone."""
        shared = set(train)
        return list(dict.fromkeys([*shard(list(dict.fromkeys(train)), info.local_rank,
                                          info.local_size),
                                   *(f for f in evals if f not in shared)]))

    def draws(self, files: Sequence[Path], cfg: Any, rank: int, world: int,
              local_batch: int) -> Draws:
        count = self.steps_per_epoch(cfg) * local_batch
        return Draws(count, partial(self._items, list(files), cfg, rank, world, count))

    def _items(self, files: list[Path], cfg: Any, rank: int, world: int, count: int,
               epoch: int) -> Sequence[Any]:
        return self.sampler(files, cfg, epoch, rank, world, count)


DataPlan = StrictPlan  # the interface every plan offers (the strict plan is the base)
