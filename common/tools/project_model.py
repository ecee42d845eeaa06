"""The performance model of `sciperf project`: a workload's counted costs on a described
system → per-step, per-epoch and time-to-train figures, with the breakdown.

Per training step, on each of the R = nodes × g accelerators (local batch b = GBS / R,
fractional where several accelerators share a sample):

* compute (roofline): max(b·F / P, b·M / W) / η — F training FLOPs per sample
  (``sciperf characterize``), P the accelerator's dense peak at the precision, M the
  memory traffic per sample, W its memory bandwidth, η the efficiency factor calibrated
  per (workload, accelerator kind) (``project_calibration``). M counts activations only:
  5 × the counted layers' output elements × the element size (forward: written, read by
  the next layer; backward: read, gradient written and read).
* all-reduce of the fp32 gradients (S = 4 × parameters bytes), hierarchical as NCCL does
  it: inside a node a ring over the g accelerators' links (bandwidth B_l each way),
  2(g−1)/g · S/B_l + 2(g−1)·α_l; across N nodes each node carries S over its injection
  bandwidth B_n, by ring 2(N−1)/N · S/B_n + 2(N−1)·α or by tree 2·S/B_n + 2⌈log₂N⌉·α,
  whichever is faster (α: per-hop latency).
* input: b × bytes per sample read at the node's share of node-local storage (staged) or
  of the file system, min(B_n, fs / N), split over g; overlapped with compute (prefetch).

  step = max(compute, input) + all-reduce

An epoch is the workload's steps per epoch (its data plan) at that GBS, evaluation the
evaluation samples' forward passes spread over R. Staging copies each node's share of the
training and evaluation files at min(B_n, fs / N, node-local). Time to train = epochs to
the target (the RCPs at that GBS) × (epoch + evaluation), plus staging when the ruleset
times it (hpc 2.0: inside the run; 3.0: before run_start).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sciperf.tools.accelerators import Accelerator

GRAD_BYTES = 4  # fp32 gradients (as characterize counts them)
ACTIVATION_PASSES_TRAIN = 5  # memory passes over each activation in a training step
ACTIVATION_PASSES_EVAL = 2  # written and read once in a forward
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
INTER_NODE_LATENCY_S = 5e-6  # α per network hop of an all-reduce step
INTRA_NODE_LATENCY_S = 1e-6  # α_l per link hop inside a node


@dataclass
class System:
    """A described system, resolved: every number the model reads, per accelerator or per
    node as named, and the lines saying what was assumed for what the description lacked."""

    accelerator: Accelerator
    nodes: int
    per_node: int  # accelerators per node (a CPU-only node: its CPU, 1)
    precision: str
    peak_flops: float  # per accelerator, at `precision`
    mem_bw: float  # per accelerator
    injection_bw: float  # per node
    link_bw: float  # per accelerator, one direction, inside the node
    fs_bw: float | None  # the shared file system, aggregate (None: not limiting)
    local_bw: float  # node-local storage, per node
    notes: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node


@dataclass(frozen=True)
class Costs:
    """What one workload asks, per sample and per epoch, at one global batch size."""

    workload: str
    flops_train: float  # per training sample
    flops_eval: float  # per evaluation sample
    activations: float  # counted layers' output elements per sample
    bytes_per_sample: float  # read from storage
    params: int
    train_samples: int
    eval_samples: int
    global_batch: int
    steps_per_epoch: int
    epochs_to_target: float


def roofline_s(flops: float, mem_bytes: float, peak: float, mem_bw: float) -> float:
    """Time of work bound by compute or by memory traffic, whichever is slower."""
    return max(flops / peak, mem_bytes / mem_bw)


def ring_s(size: float, parties: int, bandwidth: float, latency: float) -> float:
    """Ring all-reduce of `size` bytes over `parties`: reduce-scatter + all-gather."""
    if parties <= 1:
        return 0.0
    return 2 * (parties - 1) / parties * size / bandwidth + 2 * (parties - 1) * latency


def tree_s(size: float, parties: int, bandwidth: float, latency: float) -> float:
    """Tree all-reduce (reduce up, broadcast down, pipelined): latency grows with log₂."""
    if parties <= 1:
        return 0.0
    return 2 * size / bandwidth + 2 * math.ceil(math.log2(parties)) * latency


def allreduce_s(size: float, system: System) -> float:
    """Hierarchical all-reduce: a ring inside each node, the faster of ring and tree across
    nodes (each node carries the whole `size` over its injection bandwidth)."""
    inside = ring_s(size, system.per_node, system.link_bw, INTRA_NODE_LATENCY_S) \
        if system.link_bw > 0 else 0.0
    across = min(ring_s(size, system.nodes, system.injection_bw, INTER_NODE_LATENCY_S),
                 tree_s(size, system.nodes, system.injection_bw, INTER_NODE_LATENCY_S))
    return inside + across


def read_bw_per_rank(system: System, staged: bool) -> float:
    """Bytes/s one accelerator's input reads at: node-local storage when staged, else its
    node's share of the file system (never above the node's injection bandwidth)."""
    node = system.local_bw if staged else _fs_share(system)
    return node / system.per_node


def _fs_share(system: System) -> float:
    share = system.injection_bw
    if system.fs_bw is not None:
        share = min(share, system.fs_bw / system.nodes)
    return share


@dataclass
class Projection:
    """The model's figures for one workload on one system (seconds)."""

    compute_s: float  # per step, after the efficiency factor
    roofline_s: float  # per step, at the roofline (η = 1)
    bound: str  # "compute" or "memory"
    allreduce_s: float  # per step
    input_s: float  # per step
    step_s: float
    epoch_s: float  # training only
    eval_s: float  # per epoch
    staging_s: float
    epochs: float  # to the target
    time_to_train_s: float
    staging_timed: bool  # whether time to train includes staging
    efficiency: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def project(costs: Costs, system: System, efficiency: float, staged: bool = True,
            staging_timed: bool = False) -> Projection:
    """The model of the module docstring."""
    ranks = system.ranks
    local = costs.global_batch / ranks
    width = ELEMENT_BYTES[system.precision]
    flops = local * costs.flops_train
    traffic = local * costs.activations * width * ACTIVATION_PASSES_TRAIN
    roof = roofline_s(flops, traffic, system.peak_flops, system.mem_bw)
    bound = "compute" if flops / system.peak_flops >= traffic / system.mem_bw else "memory"
    compute = roof / efficiency
    reduce = allreduce_s(GRAD_BYTES * costs.params, system)
    feed = local * costs.bytes_per_sample / read_bw_per_rank(system, staged)
    step = max(compute, feed) + reduce
    per_rank_eval = math.ceil(costs.eval_samples / ranks)
    evaluation = roofline_s(per_rank_eval * costs.flops_eval,
                            per_rank_eval * costs.activations * width * ACTIVATION_PASSES_EVAL,
                            system.peak_flops, system.mem_bw) / efficiency
    staging = staging_s(costs, system)
    epoch = costs.steps_per_epoch * step
    total = costs.epochs_to_target * (epoch + evaluation) + (staging if staging_timed else 0.0)
    return Projection(compute, roof, bound, reduce, feed, step, epoch, evaluation, staging,
                      costs.epochs_to_target, total, staging_timed, efficiency)


def staging_s(costs: Costs, system: System) -> float:
    """Each node copies its share of the training and evaluation files to node-local
    storage, at the slowest of its file-system share and the local storage."""
    share = (costs.train_samples + costs.eval_samples) * costs.bytes_per_sample / system.nodes
    return share / min(_fs_share(system), system.local_bw)
