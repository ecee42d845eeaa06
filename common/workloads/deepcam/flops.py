"""DeepCAM's counted layers for `sciperf characterize` (the convention is there)."""

from __future__ import annotations

import math

from sciperf.workloads.base import Layer
from sciperf.workloads.deepcam.spec import ModelSpec


def layers(model: ModelSpec) -> list[Layer]:
    """The weight layers (ModelSpec.layers(), forward order) with the multiply-adds of
    each: kernel size × the spatial positions it runs over.

    The table carries no resolutions, so they are walked: the downsampling factor (input /
    feature map) is multiplied by a conv's stride and divided by a transposed conv's, which
    counts over its input. Three layers sit off that path: a block's `_skip` 1×1 conv reads
    the block input at the block stride (listed before the block's convs, it leaves the
    walk where it is); gpool_conv reads the 1×1 globally pooled map; low_conv reads the
    first block's output (the decoder's stride-4 skip connection).
    """
    first_block = model.blocks()[0].name
    factor, factor_after = 1, {}  # factor_after: name prefix ("block1") → factor after it
    out, produced = [], _positions(model, 1)
    for spec in model.layers():
        kernel = spec.weight_shapes().get(f"{spec.name}/kernel")
        if kernel is None:  # norm, affine: no multiply-adds; normalise the map just made
            positions = 0
        elif spec.name == "gpool_conv":
            positions = produced = 1
        elif spec.name == "low_conv":
            positions = produced = _positions(model, factor_after[first_block])
        elif spec.kind == "deconv":  # counted over its input, produces the larger map
            positions = _positions(model, factor)
            factor //= spec.stride
            produced = _positions(model, factor)
        elif spec.name.endswith("_skip"):
            positions = produced = _positions(model, factor * spec.stride)
        else:
            factor *= spec.stride
            positions = produced = _positions(model, factor)
        factor_after[spec.name.split("_")[0]] = factor
        macs = positions * math.prod(kernel) if kernel else 0
        out.append(Layer(spec.name, spec.kind, macs, spec.parameter_count(),
                         produced * spec.cout))
    return out


def _positions(model: ModelSpec, factor: int) -> int:
    """Pixels of a feature map at `factor`× downsampling ('same' padding; the input
    divides by the output stride 16, ModelSpec.check())."""
    return (int(model.height) // factor) * (int(model.width) // factor)


# `sciperf project`'s one calibrated number per accelerator kind: the share of the roofline
# a training step reaches (η), fitted on the published MLPerf HPC v2.0 + v3.0 groups
# (docs/projection.md; `sciperf project ROUND_TREES --json` prints the fit)
EFFICIENCY = {
    "A100": 0.13,  # 10 groups
    "H100": 0.168,  # 2 groups
    "V100": 0.037,  # 1 group
}
