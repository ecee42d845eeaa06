"""Compute numbers of the report: training throughput per accelerator, scaling efficiency
of one machine at several scales, and the achieved fraction of the accelerator's peak.

A run's rate is its samples/s (summary.json's measured value, else the samples its logged
epochs stand for / training time: MLLOG's epoch_num counts epochs of train_samples for
most workloads, samples for OpenFold, 1,000-step epochs for GPT-2 — the workload's data
plan says which, `samples_per_epoch_num`); per accelerator it is that over the run's
accelerators (nodes where a system has none, as the rules' instance scale counts them).
A group's rate is the median over its runs. The FLOPs of a training sample are `sciperf
characterize`'s count of the workload's reference model (its spec's defaults: the
typical sample where the data sets the cost), so a published round and our runs are
measured by one convention; peaks come from the accelerator table
(`sciperf.tools.accelerators`) by the description's accelerator name, or from our run's
`system.peak_flops`.
"""

from __future__ import annotations

from functools import cache

from sciperf.tools import accelerators

MIXED = "bf16"  # published logs do not log precision: the 16-bit tensor peak is assumed
FALLBACK = "fp16"  # accelerators without bf16 (V100) have the fp16 tensor peak


@cache
def train_flops(benchmark: str) -> tuple[float | None, str]:
    """FLOPs of one training sample of `benchmark`'s reference model, and its source."""
    from sciperf.workloads import WORKLOADS, get
    if benchmark not in WORKLOADS:
        return None, f"{benchmark} is no sciperf workload: no FLOP count"
    from sciperf.tools.characterize import count_flops
    workload = get(benchmark)
    counts = count_flops(workload.model())
    return float(counts.train), "characterize's count of the reference model"


@cache
def _full_config(benchmark: str) -> object:
    from sciperf.config import compose
    return compose([f"workload={benchmark}", "experiment=full"])


@cache
def samples_per_epoch_num(benchmark: str, global_batch: int, train_samples: int) -> float:
    """Samples trained per unit of MLLOG's ``epoch_num`` in a run of `benchmark` at
    `global_batch` over `train_samples`: the data plan's samples per epoch over the
    epoch_num one epoch adds (one for OpenFold, whose epoch_num counts samples); a
    benchmark sciperf does not know counts epochs of train_samples."""
    from sciperf.workloads import WORKLOADS, get
    if benchmark not in WORKLOADS:
        return float(train_samples)
    spec = get(benchmark)
    cfg = _full_config(benchmark).copy()  # type: ignore[attr-defined]
    cfg.train.global_batch_size = int(global_batch)
    cfg.data.train_samples = int(train_samples)
    unit = spec.epoch_num(cfg, 2) - spec.epoch_num(cfg, 1)
    return spec.plan.steps_per_epoch(cfg) * spec.plan.step_samples(cfg) / unit


def accelerator_peak(name: str | None, precision: str | None) -> tuple[float | None, str]:
    """Peak FLOP/s of one accelerator, and what was assumed or why there is none."""
    if not name:
        return None, "no accelerator model named"
    tries = [precision] if precision else [MIXED, FALLBACK]
    for choice in tries:
        peak = accelerators.peak_flops(name, choice)
        if peak:
            assumed = "" if precision else f" (precision not logged: {choice} assumed)"
            return float(peak), f"{name} {choice} peak{assumed}"
    return None, f"{name} is not in the accelerator table ({'/'.join(tries)})"


def median(values: list[float]) -> float | None:
    """The median (mean of the middle two for an even count), None for no values."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return None
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def fraction_of_peak(rate_per_accelerator: float | None, flops: float | None,
                     peak: float | None) -> float | None:
    """Achieved FLOP/s per accelerator over its peak, None when any part is unknown."""
    if not rate_per_accelerator or not flops or not peak:
        return None
    return rate_per_accelerator * flops / peak

