"""OpenFold's network as counted layers: one recycling pass, per sample, in forward order.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sciperf.workloads.base import Layer
from sciperf.workloads.openfold.sizes import ModelSpec


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


def network(spec: ModelSpec, size: SampleSizes) -> list[Layer]:
    """Every counted layer of one pass at `size`, in forward order: multiply-adds,
    parameters (once per weight, from the spec's weight table) and output elements."""
    t = _Tally(spec)
    for part in (_embedders, _templates, _extra_msa, _evoformer, _structure_module, _heads):
        part(t, size)
    return t.layers


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
