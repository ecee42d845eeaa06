"""How a rank's cores run a framework's ops: one op at a time over every core, or ops side
by side on a core each (frameworks with an inter-op pool: TensorFlow).

Why it matters: an op split over the cores pays a hand-off to the pool's threads (~40 µs a
oneDNN call under TensorFlow's Eigen pool, against ~8 µs under PyTorch's OpenMP); a
model of many small layers spends more in hand-offs than in arithmetic, while its
independent ops (a layer's two gradient convolutions, parallel branches) could run at
once, each on its own core without a hand-off. Large layers are the opposite: two big
convolutions side by side fight over cache and cores. Measured side by side, TensorFlow
2.21 on a 2-vCPU AMD EPYC (Zen 5), samples/s with one op over 2 cores → two ops on a core
each: DeepCAM mini 118.6 → 157.9, OC20 mini 111.6 → 206.4, CosmoFlow mini 415.7 → 346.2;
full DeepCAM bf16 4.39 → 5.10 s a step. What separates them is the arithmetic of an
average layer in a step on one core: 20–25 MFLOP (DeepCAM and OC20 minis), 300 MFLOP
(CosmoFlow mini), 4 GFLOP and more (full models). Below :data:`SMALL_LAYER_FLOPS` ops run
side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SMALL_LAYER_FLOPS = 1e8  # per layer, per training step, per core
SIDE_BY_SIDE = 2  # ops at once when the layers are small


@dataclass(frozen=True)
class Layout:
    """Threads of one op (intra) and ops at once (inter), with the reason."""

    intra: int
    inter: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """For summary.json."""
        return {"intra_op": self.intra, "inter_op": self.inter, "reason": self.reason}


def layout(cores: int, inter_asked: int, layer_flops: float | None) -> Layout:
    """The layout for `cores` cores: `inter_asked` > 0 is the user's (its intra: the cores
    shared out); 0 chooses from `layer_flops`, the training FLOPs of an average layer in
    one step of this rank (None: unknown, one op at a time)."""
    cores = max(cores, 1)
    if inter_asked > 0:
        return Layout(max(cores // inter_asked, 1), inter_asked,
                      f"framework.inter_op_threads={inter_asked} asked")
    if layer_flops is None or cores < SIDE_BY_SIDE:
        return Layout(cores, 1, "one op at a time over every core")
    per_core = layer_flops / cores
    if per_core >= SMALL_LAYER_FLOPS:
        return Layout(cores, 1, f"{per_core / 1e6:.0f} MFLOP a layer and core a step: one op "
                                "at a time over every core")
    return Layout(cores // SIDE_BY_SIDE, SIDE_BY_SIDE,
                  f"{per_core / 1e6:.0f} MFLOP a layer and core a step (< "
                  f"{SMALL_LAYER_FLOPS / 1e6:.0f}): {SIDE_BY_SIDE} ops side by side")


def layer_flops(cfg: Any, local_batch: int) -> float | None:
    """Training FLOPs of an average counted layer in one step of `local_batch` samples (the
    workload's own count, on the data's own samples where they set the cost); None when
    it counts no layer."""
    from sciperf.tools.characterize import count_flops, counted_layers
    from sciperf.workloads import get

    model = get(cfg.workload).model_spec(cfg)
    layers, _ = counted_layers(cfg, model)
    if not layers:
        return None
    return count_flops(model, layers).train * local_batch / len(layers)


def apply(cfg: Any, runtime: Any, local_batch: int) -> Layout:
    """Set up `runtime`'s threads for this run (before the framework's first op: TensorFlow
    fixes its pools there) and return the layout. A framework without an inter-op pool
    (``runtime.INTER_OP_POOL`` false: PyTorch's eager ops run one after another) gets every
    core for each op."""
    from sciperf.distributed import cpu_count
    from sciperf.errors import SciperfError

    cores = int(cfg.framework.threads) or cpu_count()
    if getattr(runtime, "INTER_OP_POOL", False):
        try:
            flops = layer_flops(cfg, local_batch)
        except (ValueError, SciperfError):  # a bad model config: its check names it next
            flops = None
        chosen = layout(cores, int(cfg.framework.inter_op_threads), flops)
    elif int(cfg.framework.inter_op_threads):  # was ignored in silence (summary: inter_op 1)
        raise SciperfError(f"framework.inter_op_threads={cfg.framework.inter_op_threads}: "
                           f"{cfg.framework.name} runs one op at a time (it has no inter-op "
                           "pool); leave it 0 and set framework.threads")
    else:
        chosen = Layout(cores, 1, "ops one at a time (no inter-op pool)")
    runtime.setup_threads(chosen.intra, chosen.inter)
    return chosen
