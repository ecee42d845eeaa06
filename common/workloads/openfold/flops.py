"""OpenFold's counted layers for `sciperf characterize` (the convention is there): the
network's layers (:mod:`sciperf.workloads.openfold.flop_network`, where what is counted
and what is left out is written) at a training sample's sizes, what a checkpointed step
keeps of them, and the parts of the report's breakdown.

Recycling and training (:func:`passes`): the layers are one pass; how many passes a
sample costs is derived there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from sciperf.workloads.base import Layer
from sciperf.workloads.openfold.flop_network import SampleSizes, network
from sciperf.workloads.openfold.sizes import ModelSpec

__all__ = ["CHECKPOINTED", "DATA_FED", "ELEMENTWISE_PRODUCTS", "FLOPS_PASSES", "NO_GRAD", "PARTS",
           "SampleSizes", "by_part", "layers", "layers_for", "passes",
           "sample_sizes", "step_macs", "untagged"]


# Layers by name suffix (iteration tag ``#i`` aside, :func:`untagged`): products that
# this count includes but torch's FlopCounterMode cannot see, because the network computes
# them by broadcasting (flop_network's docstring).
ELEMENTWISE_PRODUCTS = (".point_logits",)
# Top-level modules whose blocks are recomputed in backward (gradient checkpointing per
# block in the reference: evoformer_stack.py, extra_msa_stack.py, template_pair_stack.py).
CHECKPOINTED = ("template_pair_stack.blocks.", "extra_msa_stack.blocks.",
                "evoformer_stack.blocks.")
# Linears whose input is data (features or the no-grad recycled structure): backward
# needs their weight gradient only.
DATA_FED = ("input_embedder.", "recycling_embedder.linear", "template_pair_embedder.linear",
            "template_angle_embedder.linear_1", "extra_msa_embedder.linear")
# Products without any gradient: the outer-product mean's mask count (mask × mask).
NO_GRAD = (".outer_product_mean.norm",)

# The report's breakdown: top-level module → part of the network.
PARTS = {
    "input_embedder": "embedders", "recycling_embedder": "embedders",
    "template_pair_embedder": "templates", "template_pair_stack": "templates",
    "template_pointwise_attention": "templates", "template_angle_embedder": "templates",
    "extra_msa_embedder": "extra MSA", "extra_msa_stack": "extra MSA",
    "evoformer_stack": "Evoformer", "structure_module": "structure module",
    "auxiliary_heads": "heads",
}


def untagged(name: str) -> str:
    """A layer's name without the structure module's iteration tag ``#i``."""
    return name.partition("#")[0]


def sample_sizes(spec: ModelSpec) -> SampleSizes:
    """The spec's training sample: its crop, MSA clusters, extra sequences, templates."""
    return SampleSizes(spec.crop_size, spec.max_msa_clusters, spec.max_extra_msa,
                       spec.max_templates)


def layers(spec: ModelSpec) -> list[Layer]:
    """The counted layers of ONE forward pass for the spec's training sample
    (:func:`sample_sizes`: crop 256, 128 MSA rows, 1024 extra, 4 templates at full size),
    with the outputs a checkpointed training step keeps (``Workload.flops``: characterize
    and the memory check read it)."""
    s = sample_sizes(spec)
    return layers_for(spec, s.n_res, s.n_clust, s.n_extra, s.n_templ, checkpointing=True)


def layers_for(spec: ModelSpec, n_res: int, n_clust: int, n_extra: int, n_templ: int,
               checkpointing: bool = False) -> list[Layer]:
    """Every counted layer of one pass of the network at these sizes, in forward order,
    with multiply-adds, parameters (once per weight) and output elements per sample.

    ``outputs`` is each layer's output size. With `checkpointing` (the benchmark trains
    with gradient checkpointing per block, spec §3), a layer's output inside a
    recomputed block is not kept, so summing every layer's output (155 GiB in fp32 at
    crop 256) would be no lower bound of a step's memory; the outputs then describe one
    moment of the backward pass instead — the recomputation of the last Evoformer block:
    the saved input of every checkpointed block (a ``checkpoint`` entry before each
    block, no multiply-adds), the outputs of that one block and of the layers before the
    stacks that are still saved; the structure module's and the heads' (backpropagated
    earlier) and those of the other recomputed blocks count 0. MACs and parameters are
    the same either way.
    """
    if min(n_res, n_clust, n_extra, n_templ) < 1:
        raise ValueError(f"sizes must be positive: n_res={n_res}, n_clust={n_clust}, "
                         f"n_extra={n_extra}, n_templ={n_templ}")
    size = SampleSizes(n_res, n_clust, n_extra, n_templ)
    found = network(spec, size)
    return _kept_in_backward(found, spec, size) if checkpointing else found


def by_part(found: Iterable[Layer]) -> dict[str, int]:
    """Multiply-adds per part of the network (:data:`PARTS`), in the forward's order."""
    out: dict[str, int] = {}
    for layer in found:
        part = PARTS[layer.name.split(".", 1)[0]]
        out[part] = out.get(part, 0) + layer.macs
    return out


def passes(spec: ModelSpec, found: list[Layer] | None = None) -> tuple[float, float]:
    """(training, evaluation) FLOPs per sample as multiples of ONE pass's forward F
    (``Workload.flops_passes``), for `found` (the spec's training sample by default).

    Training (spec §5, §3): the step's recycling count is drawn uniformly from
    0..num_recycling_iters (shuffled blocks of [0, 1, 2, 3]: mean 1.5 over every 4
    steps). Those passes run without gradients and without the heads (the heads read the
    last pass only): 1.5·(F − F_heads). The last pass costs its forward F, its backward
    and, with gradient checkpointing per block, one more forward of the checkpointed
    stacks' blocks (template pair, extra MSA, Evoformer: F_ckpt). The backward of a layer
    is its weight gradient plus its input gradient, each the size of its forward (2F),
    less the input gradients nobody needs — the linears fed by data (:data:`DATA_FED`)
    and both operands of the mask count (:data:`NO_GRAD`): D. Training =
    1.5·(F − F_heads) + F + (2F − D) + F_ckpt; at full size 5.497 F (F_heads is 0.013 %
    of F, D 0.07 %, F_ckpt 99.8 %).

    F_ckpt is whole blocks, as the reference's checkpoint (``torch.utils.checkpoint``
    without ``use_reentrant``: reentrant) recomputes them. PyTorch's non-reentrant
    checkpoint, which our model uses, stops recomputing after the last tensor backward
    needs, so it skips each block's final linear (``pair_transition.linear_2``; in the
    template block the last template's): 3.8 % of F less, 5.459 F (the test measures
    both).

    Evaluation (spec §6) runs all num_recycling_iters + 1 passes, the heads once, no
    backward: 3·(F − F_heads) + F = 3.9996 F. It is a multiple of a pass AT THE EVALUATED
    LENGTH: evaluation does not crop (CAMEO chains up to 700 residues), while F here is
    counted at the training sample's 256 residues with the same 124 + 4 MSA rows, 1024
    extra sequences and 4 templates, so characterize's evaluation FLOPs are those of a
    256-residue chain; a chain of length L costs this multiple × the forward of
    :func:`layers_for` at n_res = L (the pair stack grows as L³).
    """
    found = layers(spec) if found is None else found
    forward = sum(layer.macs for layer in found)
    mean_recycling = spec.num_recycling_iters / 2  # uniform over 0..num_recycling_iters
    return (step_macs(found, mean_recycling, training=True) / forward,
            step_macs(found, spec.num_recycling_iters, training=False) / forward)


def step_macs(found: list[Layer], recycled: float, training: bool) -> float:
    """Multiply-adds of one sample's step over the one-pass layers `found`: `recycled`
    passes without gradients and heads, then the last pass — with backward and the
    recomputation of the checkpointed blocks when `training` (:func:`passes`)."""
    forward = sum(layer.macs for layer in found)
    heads = sum(layer.macs for layer in found if layer.name.startswith("auxiliary_heads."))
    last = forward
    if training:
        ckpt = sum(layer.macs for layer in found if layer.name.startswith(CHECKPOINTED))
        unneeded = sum(layer.macs for layer in found if layer.name.startswith(DATA_FED)) \
            + sum(2 * layer.macs for layer in found if layer.name.endswith(NO_GRAD))
        last += 2 * forward - unneeded + ckpt
    return recycled * (forward - heads) + last


def _kept_in_backward(found: list[Layer], spec: ModelSpec, s: SampleSizes) -> list[Layer]:
    """`found` with the outputs live while the last Evoformer block is recomputed in the
    backward pass (:func:`layers_for`): a moment of the step, so their sum is a lower
    bound of its peak."""
    n = s.n_res
    block_input = {"template_pair_stack": s.n_templ * n * n * spec.c_t,
                   "extra_msa_stack": s.n_extra * n * spec.c_e + n * n * spec.c_z,
                   "evoformer_stack": s.msa_rows * n * spec.c_m + n * n * spec.c_z}
    recomputed = f"evoformer_stack.blocks.{spec.evoformer_blocks - 1}."
    after_stacks = ("evoformer_stack.linear", "structure_module.", "auxiliary_heads.")
    out: list[Layer] = []
    seen: set[str] = set()
    for layer in found:
        if layer.name.startswith(CHECKPOINTED):
            block = ".".join(layer.name.split(".")[:3]) + "."
            if block not in seen:
                seen.add(block)
                stack = block.split(".")[0]
                out.append(Layer(f"{block}input", "checkpoint", 0, 0, block_input[stack]))
            if block != recomputed:
                layer = replace(layer, outputs=0)
        elif layer.name.startswith(after_stacks):
            layer = replace(layer, outputs=0)
        out.append(layer)
    return out


# The full model's (training, evaluation) multiples, for ``Workload.flops_passes`` (one pair
# for every configuration: the mini's are 5.30 and 3.97, its heads and structure module
# weigh more).
FLOPS_PASSES = passes(ModelSpec())


# `sciperf project`'s one calibrated number per accelerator kind: the share of the roofline
# a training step reaches (η), fitted on the published MLPerf HPC v2.0 + v3.0 groups
# (docs/projection.md; `sciperf project ROUND_TREES --json` prints the fit)
EFFICIENCY = {
    "A100": 0.0327,  # 3 groups
    "H100": 0.0178,  # 2 groups
}
