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
