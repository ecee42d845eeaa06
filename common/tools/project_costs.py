"""What a workload asks of a system at one global batch size, for `sciperf project`: the
counts of `sciperf characterize` (FLOPs, activations, bytes read, parameters) on the full
experiment, the data plan's steps per epoch and the RCPs' epochs to the target (for a
workload without RCPs, its full recipe's length, said in a line)."""

from __future__ import annotations

from functools import cache
from typing import Any

from sciperf.errors import SciperfError
from sciperf.tools.project_model import Costs
from sciperf.workloads import get, names


@cache
def _counted(workload: str) -> tuple[Any, dict[str, Any]]:
    """The full experiment's config and its characterize counts (no data.dir needed: the
    spec's typical sample and the format's payload stand in)."""
    from sciperf.config import compose
    from sciperf.tools.characterize import characterize
    cfg = compose([f"workload={workload}", "experiment=full"])
    return cfg, characterize(cfg)


def rcp_epochs(rcps: dict[int, float], gbs: int) -> tuple[float, str | None]:
    """Epochs to the target at `gbs` (MLLOG epoch units), linear between the two RCP batch
    sizes around it; outside the table the nearest one's, with a line saying so."""
    sizes = sorted(rcps)
    if gbs in rcps:
        return float(rcps[gbs]), None
    if gbs < sizes[0] or gbs > sizes[-1]:
        near = sizes[0] if gbs < sizes[0] else sizes[-1]
        return float(rcps[near]), (f"global batch {gbs} is outside the RCPs ({sizes[0]}…"
                                   f"{sizes[-1]}): epochs to target assumed as at {near}")
    low = max(s for s in sizes if s < gbs)
    high = min(s for s in sizes if s > gbs)
    share = (gbs - low) / (high - low)
    return rcps[low] + share * (rcps[high] - rcps[low]), None


def workload_costs(workload: str, gbs: int, train_samples: int | None = None,
                   eval_samples: int | None = None) -> tuple[Costs, list[str]]:
    """The :class:`Costs` of `workload` at global batch `gbs` (the reference's sample
    counts unless given), and the lines saying what was assumed."""
    if workload not in names():
        raise SciperfError(f"workload {workload!r} is not one sciperf counts "
                           f"({', '.join(names())})")
    if gbs <= 0:
        raise SciperfError(f"global batch size {gbs} must be > 0")
    spec = get(workload)
    base, counts = _counted(workload)
    cfg = base.copy()
    cfg.train.global_batch_size = int(gbs)
    cfg.data.train_samples = int(train_samples or spec.train_samples)
    unit = spec.epoch_num(cfg, 2) - spec.epoch_num(cfg, 1)  # MLLOG epoch units per epoch
    if spec.rcp_epochs:
        mllog_epochs, note = rcp_epochs(dict(spec.rcp_epochs), gbs)
        epochs = mllog_epochs / unit
    else:  # a workload of sciperf's own: no reference runs yet, its recipe's length instead
        epochs = float(cfg.train.max_epochs)
        note = (f"{workload} has no reference convergence points: epochs to target assumed "
                f"= the full recipe's train.max_epochs ({epochs:g})")
    flops = counts["flops_per_sample"]
    costs = Costs(
        workload=workload, flops_train=float(flops["train"]), flops_eval=float(flops["eval"]),
        activations=float(sum(layer["outputs"] for layer in counts["layers"])),
        bytes_per_sample=float(counts["bytes_per_sample"]), params=int(counts["parameters"]),
        train_samples=int(cfg.data.train_samples),
        eval_samples=int(eval_samples or spec.eval_samples),
        global_batch=spec.plan.step_samples(cfg),
        steps_per_epoch=spec.plan.steps_per_epoch(cfg), epochs_to_target=epochs)
    return costs, [note] if note else []
