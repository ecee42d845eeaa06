"""CosmoFlow's counted layers for `sciperf characterize` (the convention is there)."""

from __future__ import annotations

import math

from sciperf.workloads.base import Layer
from sciperf.workloads.cosmoflow.spec import ModelSpec


def layers(model: ModelSpec) -> list[Layer]:
    """Conv and dense layers from ModelSpec.layer_shapes(): a 'same' conv with stride 1
    keeps the side, each block's 2× max-pool halves it."""
    out, side = [], int(model.input_size)
    for name, shape in model.layer_shapes().items():
        n_weights = math.prod(shape)
        if name.startswith("conv"):
            out.append(Layer(name, "conv3d", side**3 * n_weights, n_weights + shape[-1],
                             side**3 * shape[-1]))
            side //= 2
        else:
            out.append(Layer(name, "dense", n_weights, n_weights + shape[-1], shape[-1]))
    return out


# `sciperf project`'s one calibrated number per accelerator kind: the share of the roofline
# a training step reaches (η), fitted on the published MLPerf HPC v2.0 + v3.0 groups
# (docs/projection.md; `sciperf project ROUND_TREES --json` prints the fit)
EFFICIENCY = {
    "A100": 0.06,  # 5 groups
    "A64FX": 0.0612,  # 4 groups
    "H100": 0.0644,  # 2 groups
    "V100": 0.0184,  # 1 group
}
