"""OpenFold's counted layers for `sciperf characterize` (the convention is there).

AlphaFold2's cost is not in its weights but in the parameter-free products between
activations: attention logits and weighted values over every axis of the MSA and the pair,
the outer-product mean and the triangle multiplications (cubic in residues). A Linear layer
is counted as rows × fan_in × fan_out multiply-adds (its bias add is elementwise, left out);
a product of two activations as the multiply-adds of its contraction. The layers of ONE
recycling pass of the network (shared/spec/openfold.md §3), per sample, at N residues,
S = N_clust + N_templ MSA rows (the template torsion-angle rows join the MSA before the
Evoformer), E extra sequences and T templates:

* input embedder: the target-feature and relative-position linears (N, N, N, N², and
  N_clust·N rows for ``msa_feat``); recycling embedder: the distance-bin linear (N² rows);
* templates: the pair embedder (T·N² rows); per template-stack block, for each of the T
  templates, triangle attention around the starting and the ending node, the outgoing and
  incoming triangle multiplications and the pair transition; the pointwise attention (each
  of the N² pair positions attends over the T templates); the angle embedder (T·N rows);
* extra MSA: the embedder (E·N rows), then per block row attention with pair bias (E rows
  attend over N residues), *global* column attention (one mean query per column against
  single-head keys and values: linear in E), the MSA transition, the outer-product mean
  (N²·c²·E) and the pair stack;
* Evoformer: per block row attention with pair bias over S rows, column attention (N
  columns attend over S rows), the MSA transition, the outer-product mean and the pair
  stack (triangle multiplications N³·c each, triangle attention N·N²·c each); then
  s = Linear(m[0]);
* structure module: LN, ``linear_in``, then ``sm_blocks`` (8) iterations of ONE set of
  weights — IPA (its q/kv/point linears, the pair bias Linear(z) on N² rows in every
  iteration, the scalar q·kᵀ, the point distances, and the weighted sums of v, of the value
  points and of z), the transition, the backbone update and the angle ResNet. A layer
  run in every iteration is listed once per iteration (name suffix ``#i``), its parameters
  only on ``#0``;
* heads: pLDDT (N rows), distogram (N² rows), masked MSA (the N_clust·N clustered rows),
  experimentally resolved (N rows).

LayerNorms (and IPA's head weights) are listed with their parameters and no multiply-adds,
so the parameters add up to ``ModelSpec.parameter_count()``. Softmax, masks, gates,
dropout, the feature builders, the rigid-frame algebra (3×3 products written elementwise)
and the side-chain atoms are elementwise and left out, as the convention leaves them out
everywhere.

The one product counted here that torch's FlopCounterMode does not see in our model is
IPA's point term Σ_p ‖q_p − k_p‖² (N²·H·P·3 multiply-adds per iteration): a contraction
over the 3·P point coordinates, computed by broadcast subtraction (as in the reference).
The tests compare with FlopCounterMode after removing exactly that layer
(:data:`ELEMENTWISE_PRODUCTS`); everything else is equal, module by module. (The
reference also forms IPA's weighted value points by broadcasting where our model uses an
einsum; on the reference, FlopCounterMode misses those two and equals the rest.)

Sizes: a training sample is fixed by the crop and the padding — ``ModelSpec.crop_size``
(256) residues, ``max_msa_clusters`` (124) MSA clusters + one row per template,
``max_extra_msa`` (1024) extra sequences, ``max_templates`` (4) templates (spec §2, §7;
the mini's 32, 16, 64, 1 of spec §11): every training sample costs the same, a shorter
chain is padded to the crop.

Recycling and training (:func:`passes`): the layers are one pass; how many passes a
sample costs is derived there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from sciperf.workloads.base import Layer
from sciperf.workloads.openfold.sizes import ModelSpec

__all__ = ["CHECKPOINTED", "DATA_FED", "ELEMENTWISE_PRODUCTS", "FLOPS_PASSES", "NO_GRAD", "PARTS",
           "SampleSizes", "by_part", "layers", "layers_for", "passes",
           "sample_sizes", "step_macs", "untagged"]


@dataclass(frozen=True)
class SampleSizes:
    """What one sample's cost depends on: residues, MSA clusters, extra sequences and
    templates (the template rows join the clusters in the Evoformer's MSA)."""

    n_res: int
    n_clust: int
    n_extra: int
    n_templ: int

    @property
    def msa_rows(self) -> int:
        """Rows of the Evoformer's MSA: the clusters and one row per template."""
        return self.n_clust + self.n_templ


# Layers by name suffix (iteration tag ``#i`` aside, :func:`untagged`): products that
# this count includes but torch's FlopCounterMode cannot see, because the network computes
# them by broadcasting (module docstring).
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
    t = _Tally(spec)
    size = SampleSizes(n_res, n_clust, n_extra, n_templ)
    _embedders(t, size)
    _templates(t, size)
    _extra_msa(t, size)
    _evoformer(t, size)
    _structure_module(t, size)
    _heads(t, size)
    return _kept_in_backward(t.layers, spec, size) if checkpointing else t.layers


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


# -- the tally: layers in forward order, parameters from the spec's weight table --------------
class _Tally:
    """Collects layers; a module's parameters come from ``ModelSpec.reference_shapes`` and are
    carried by the first layer that names it (shared weights count once)."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.modules: dict[str, dict[str, tuple[int, ...]]] = {}
        for name, shape in spec.reference_shapes().items():
            module, _, param = name.rpartition(".")
            self.modules.setdefault(module, {})[param] = shape
        self.claimed: set[str] = set()
        self.layers: list[Layer] = []

    def _params(self, module: str) -> int:
        if module in self.claimed:
            return 0
        self.claimed.add(module)
        return sum(math.prod(shape) for shape in self.modules[module].values())

    def linear(self, module: str, rows: int, iteration: int | None = None) -> None:
        """A Linear on `rows` rows: rows × fan_in × fan_out multiply-adds."""
        fout, fin = self.modules[module]["weight"]
        name = module if iteration is None else f"{module}#{iteration}"
        self.layers.append(Layer(name, "dense", rows * fin * fout, self._params(module),
                                 rows * fout))

    def norm(self, module: str) -> None:
        """A LayerNorm: parameters, no multiply-adds (an affine; characterize's convention)."""
        self.layers.append(Layer(module, "norm", 0, self._params(module)))

    def weights(self, module: str, param: str) -> None:
        """A bare parameter tensor of `module` (IPA's head weights): a softplus scale."""
        self.layers.append(Layer(f"{module}.{param}", "weight", 0, self._params(module)))

    def product(self, name: str, macs: int, outputs: int) -> None:
        """A parameter-free product of two activations (an attention term, an einsum)."""
        self.layers.append(Layer(name, "matmul", macs, 0, outputs))


# -- module types (each mirrors one in the network) ---------------------------------------------
def _attention(t: _Tally, name: str, rows_q: int, rows_kv: int, groups: int, q_len: int,
               kv_len: int, heads: int, gated: bool) -> None:
    """Multi-head attention in `groups` independent groups of q_len queries × kv_len keys:
    q from rows_q rows, k and v from rows_kv rows, the gate on the query rows."""
    t.linear(f"{name}.linear_q", rows_q)
    t.linear(f"{name}.linear_k", rows_kv)
    t.linear(f"{name}.linear_v", rows_kv)
    width = t.modules[f"{name}.linear_q"]["weight"][0]  # heads × c_hidden
    pairs = groups * q_len * kv_len
    t.product(f"{name}.logits", pairs * width, pairs * heads)
    t.product(f"{name}.values", pairs * width, groups * q_len * width)
    if gated:
        t.linear(f"{name}.linear_g", rows_q)
    t.linear(f"{name}.linear_o", rows_q)


def _transition(t: _Tally, name: str, rows: int) -> None:
    t.norm(f"{name}.layer_norm")
    t.linear(f"{name}.linear_1", rows)
    t.linear(f"{name}.linear_2", rows)


def _triangle_attention(t: _Tally, name: str, n: int, copies: int, heads: int) -> None:
    """Around the starting or ending node: each of the n rows (or columns) of each of the
    `copies` pair maps attends over its n entries, biased by Linear(z) per head."""
    t.norm(f"{name}.layer_norm")
    t.linear(f"{name}.linear", copies * n * n)
    _attention(t, f"{name}.mha", copies * n * n, copies * n * n, copies * n, n, n, heads,
               gated=True)


def _triangle_multiplication(t: _Tally, name: str, n: int, copies: int) -> None:
    """Σ_k a_ik·b_jk (or a_ki·b_kj) per hidden channel: n³ multiply-adds each."""
    rows = copies * n * n
    t.norm(f"{name}.layer_norm_in")
    for linear in ("linear_a_g", "linear_a_p", "linear_b_g", "linear_b_p"):
        t.linear(f"{name}.{linear}", rows)
    hidden = t.modules[f"{name}.linear_a_p"]["weight"][0]
    t.product(f"{name}.product", copies * n ** 3 * hidden, rows * hidden)
    t.norm(f"{name}.layer_norm_out")
    t.linear(f"{name}.linear_z", rows)
    t.linear(f"{name}.linear_g", rows)


def _outer_product_mean(t: _Tally, name: str, n: int, seqs: int) -> None:
    """Σ_s a_si ⊗ b_sj (n²·c²·seqs) projected to the pair, over the mask count Σ_s m_si·m_sj."""
    t.norm(f"{name}.layer_norm")
    t.linear(f"{name}.linear_1", seqs * n)
    t.linear(f"{name}.linear_2", seqs * n)
    c = t.modules[f"{name}.linear_1"]["weight"][0]
    t.product(f"{name}.outer", n * n * c * c * seqs, n * n * c * c)
    t.linear(f"{name}.linear_out", n * n)
    t.product(f"{name}.norm", n * n * seqs, n * n)


def _pair_stack(t: _Tally, name: str, n: int, heads: int) -> None:
    """The pair updates of an Evoformer or extra-MSA block (its ``core``), in order."""
    _triangle_multiplication(t, f"{name}.tri_mul_out", n, 1)
    _triangle_multiplication(t, f"{name}.tri_mul_in", n, 1)
    _triangle_attention(t, f"{name}.tri_att_start", n, 1, heads)
    _triangle_attention(t, f"{name}.tri_att_end", n, 1, heads)
    _transition(t, f"{name}.pair_transition", n * n)


def _row_attention(t: _Tally, name: str, n: int, seqs: int, heads: int) -> None:
    """Each of the `seqs` MSA rows attends over its n residues, biased by Linear(LN(z))."""
    t.norm(f"{name}.layer_norm_m")
    t.norm(f"{name}.layer_norm_z")
    t.linear(f"{name}.linear_z", n * n)
    _attention(t, f"{name}.mha", seqs * n, seqs * n, seqs, n, n, heads, gated=True)


def _block_core(t: _Tally, name: str, n: int, seqs: int, heads_tri: int) -> None:
    _transition(t, f"{name}.msa_transition", seqs * n)
    _outer_product_mean(t, f"{name}.outer_product_mean", n, seqs)
    _pair_stack(t, name, n, heads_tri)


# -- the network, part by part ----------------------------------------------------------------
def _embedders(t: _Tally, s: SampleSizes) -> None:
    n = s.n_res
    for linear, rows in (("linear_tf_z_i", n), ("linear_tf_z_j", n), ("linear_relpos", n * n),
                         ("linear_msa_m", s.n_clust * n), ("linear_tf_m", n)):
        t.linear(f"input_embedder.{linear}", rows)
    t.norm("recycling_embedder.layer_norm_m")
    t.linear("recycling_embedder.linear", n * n)
    t.norm("recycling_embedder.layer_norm_z")


def _templates(t: _Tally, s: SampleSizes) -> None:
    spec, n, nt = t.spec, s.n_res, s.n_templ
    t.linear("template_pair_embedder.linear", nt * n * n)
    for i in range(spec.template_blocks):
        p = f"template_pair_stack.blocks.{i}"
        _triangle_attention(t, f"{p}.tri_att_start", n, nt, spec.template_num_heads_tri)
        _triangle_attention(t, f"{p}.tri_att_end", n, nt, spec.template_num_heads_tri)
        _triangle_multiplication(t, f"{p}.tri_mul_out", n, nt)
        _triangle_multiplication(t, f"{p}.tri_mul_in", n, nt)
        _transition(t, f"{p}.pair_transition", nt * n * n)
    t.norm("template_pair_stack.layer_norm")
    # each pair position z_ij (one query) attends over its T template entries t_ij
    _attention(t, "template_pointwise_attention.mha", n * n, nt * n * n, n * n, 1, nt,
               spec.template_pointwise_num_heads, gated=False)
    t.linear("template_angle_embedder.linear_1", nt * n)
    t.linear("template_angle_embedder.linear_2", nt * n)


def _extra_msa(t: _Tally, s: SampleSizes) -> None:
    spec, n, e = t.spec, s.n_res, s.n_extra
    t.linear("extra_msa_embedder.linear", e * n)
    for i in range(spec.extra_blocks):
        p = f"extra_msa_stack.blocks.{i}"
        _row_attention(t, f"{p}.msa_att_row", n, e, spec.extra_num_heads_msa)
        t.norm(f"{p}.msa_att_col.layer_norm_m")
        g = f"{p}.msa_att_col.global_attention"
        # one query per column (the masked mean over sequences, H heads) against the E
        # single-head keys and values of that column
        t.linear(f"{g}.linear_q", n)
        t.linear(f"{g}.linear_k", e * n)
        t.linear(f"{g}.linear_v", e * n)
        width = t.modules[f"{g}.linear_q"]["weight"][0]  # heads × c_hidden
        t.product(f"{g}.logits", n * e * width, n * e * spec.extra_num_heads_msa)
        t.product(f"{g}.values", n * e * width, n * width)
        t.linear(f"{g}.linear_g", e * n)
        t.linear(f"{g}.linear_o", e * n)
        _block_core(t, f"{p}.core", n, e, spec.extra_num_heads_tri)


def _evoformer(t: _Tally, s: SampleSizes) -> None:
    spec, n, rows = t.spec, s.n_res, s.msa_rows
    for i in range(spec.evoformer_blocks):
        p = f"evoformer_stack.blocks.{i}"
        _row_attention(t, f"{p}.msa_att_row", n, rows, spec.num_heads_msa)
        t.norm(f"{p}.msa_att_col.layer_norm_m")
        # each of the n columns attends over its `rows` sequences
        _attention(t, f"{p}.msa_att_col.mha", rows * n, rows * n, n, rows, rows,
                   spec.num_heads_msa, gated=True)
        _block_core(t, f"{p}.core", n, rows, spec.num_heads_tri)
    t.linear("evoformer_stack.linear", n)  # s = Linear(m[0])


def _structure_module(t: _Tally, s: SampleSizes) -> None:
    spec, n, p = t.spec, s.n_res, "structure_module"
    t.norm(f"{p}.layer_norm_s")
    t.norm(f"{p}.layer_norm_z")
    t.linear(f"{p}.linear_in", n)
    t.weights(f"{p}.ipa", "head_weights")
    t.norm(f"{p}.layer_norm_ipa")
    t.norm(f"{p}.transition.layer_norm")
    heads, c, c_z = spec.num_heads_ipa, spec.c_hidden_ipa, spec.c_z
    qk, v = spec.num_qk_points, spec.num_v_points
    for i in range(spec.sm_blocks):
        for linear in ("linear_q", "linear_kv", "linear_q_points", "linear_kv_points"):
            t.linear(f"{p}.ipa.{linear}", n, i)
        t.linear(f"{p}.ipa.linear_b", n * n, i)
        t.product(f"{p}.ipa.logits#{i}", n * n * heads * c, heads * n * n)
        t.product(f"{p}.ipa.point_logits#{i}", n * n * heads * qk * 3, heads * n * n)
        t.product(f"{p}.ipa.values#{i}", n * n * heads * c, n * heads * c)
        t.product(f"{p}.ipa.point_values#{i}", n * n * heads * v * 3, n * heads * v * 3)
        t.product(f"{p}.ipa.pair_values#{i}", n * n * heads * c_z, n * heads * c_z)
        t.linear(f"{p}.ipa.linear_out", n, i)
        for j in (1, 2, 3):
            t.linear(f"{p}.transition.linear_{j}", n, i)
        t.linear(f"{p}.bb_update.linear", n, i)
        a = f"{p}.angle_resnet"
        t.linear(f"{a}.linear_in", n, i)
        t.linear(f"{a}.linear_initial", n, i)
        for j in range(spec.angle_blocks):
            t.linear(f"{a}.layers.{j}.linear_1", n, i)
            t.linear(f"{a}.layers.{j}.linear_2", n, i)
        t.linear(f"{a}.linear_out", n, i)


def _heads(t: _Tally, s: SampleSizes) -> None:
    n, p = s.n_res, "auxiliary_heads"
    t.norm(f"{p}.plddt.layer_norm")
    for j in (1, 2, 3):
        t.linear(f"{p}.plddt.linear_{j}", n)
    t.linear(f"{p}.distogram.linear", n * n)
    t.linear(f"{p}.masked_msa.linear", s.n_clust * n)
    t.linear(f"{p}.experimentally_resolved.linear", n)


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
