"""What a run prints as it trains (rank 0): a line every `train.log_every` steps inside an
epoch, one line per epoch (loss, metric against the target, throughput, ETA), and the
finite check that stops a run at its first NaN/Inf loss or metric.

The lines are for the person watching; the MLLOG (`sciperf.results.mllog`) is the record.
"""

from __future__ import annotations

import math
import time
from typing import Any

from sciperf.backends import EpochProgress, EpochResult
from sciperf.errors import SciperfError
from sciperf.progress import fmt_duration
from sciperf.run.state import RunState
from sciperf.workloads.base import Workload


class StepLines:
    """Progress inside an epoch, a line every `train.log_every` steps (rank 0): a full-size
    epoch runs for hours (CosmoFlow's 524,288 samples, OpenFold's minutes a step), and a
    line per epoch would show nothing for that long. The loss is rank 0's, averaged over
    the steps since the last line; the rate counts every rank's samples."""

    def __init__(self, every: int, epoch: int, max_epochs: int, total: int | None,
                 done_steps: int, world: int) -> None:
        self.every, self.epoch, self.max_epochs, self.total = every, epoch, max_epochs, total
        self.steps, self.world = done_steps, world
        self.t0, self.taken, self.samples = time.perf_counter(), 0, 0
        self.loss_sum, self.window = 0.0, 0

    def __call__(self, samples: int, loss: float) -> None:
        self.steps, self.taken = self.steps + 1, self.taken + 1
        self.samples, self.loss_sum = self.samples + samples, self.loss_sum + loss
        self.window += 1
        if self.steps % self.every:
            return
        elapsed = time.perf_counter() - self.t0
        rate = self.samples * self.world / max(elapsed, 1e-9)
        where = f"step {self.steps}" + (f"/{self.total}" if self.total else "")
        eta = ""
        if self.total:
            left = elapsed / self.taken * max(self.total - self.steps, 0)
            eta = f", epoch ETA {fmt_duration(left)}"
        print(f"epoch {self.epoch:3d}/{self.max_epochs} {where} loss "
              f"{self.loss_sum / self.window:.4f} | {rate:.1f} samples/s{eta}", flush=True)
        self.loss_sum, self.window = 0.0, 0


def step_lines(cfg: Any, backend: Any, epoch: int, max_epochs: int,
               progress: EpochProgress | None) -> StepLines | None:
    """The epoch's step lines when `train.log_every` asks for them (None: per epoch only)."""
    every = int(cfg.train.log_every)
    if not every:
        return None
    loader = getattr(backend, "train_loader", None)
    try:
        total = len(loader) if loader is not None else None
    except TypeError:  # a loader without a length: lines without the epoch's ETA
        total = None
    world = int(getattr(getattr(backend, "ctx", None), "world", 1) or 1)
    return StepLines(every, epoch, max_epochs, total, progress.steps if progress else 0, world)


def epoch_line(cfg: Any, workload: Workload, state: RunState, result: EpochResult,
               eval_s: float,
               max_epochs: int, loop_start: float, first: int = 0) -> None:
    """One progress line per epoch: loss, metric vs target, throughput, ETA to max_epochs."""
    elapsed = time.time() - loop_start
    eta = elapsed / max(state.epochs - first, 1) * (max_epochs - state.epochs)
    rate = result.samples * state.world / max(result.seconds, 1e-9)
    mark = " <= target" if state.success else ""
    print(f"epoch {state.epochs:3d}/{max_epochs} loss {result.loss:.4f} "
          f"{workload.metric.key} {state.metric:.4f} (target {cfg.train.target}){mark} "
          f"| {rate:.1f} samples/s train, eval {eval_s:.1f}s "
          f"| elapsed {fmt_duration(elapsed)}, ETA ≤ {fmt_duration(eta)}", flush=True)


def check_finite(value: float, what: str, epoch: int, workload: Workload) -> None:
    """Stop at the first NaN/Inf loss or metric: epochs of `loss nan` teach nothing, and
    the MLLOG and summary.json would carry a value JSON cannot hold."""
    if not math.isfinite(float(value)):
        raise SciperfError(
            f"{what} is {value} in epoch {epoch}: training diverged or the data holds "
            f"NaN/Inf (`sciperf prepare workload={workload.name} data.source=existing` "
            "checks the files); stopped")
