"""The MSA/pair stacks of AlphaFold2 in Keras 3: Evoformer, extra-MSA stack, template pair
stack and template pointwise attention (AF2 supplement §1.6–1.7) — the mirror of
``sciperf_pytorch.workloads.openfold.evoformer``, class for class.

Names: a layer is built as ``Cls(<the PyTorch module's arguments>, path)`` (a stack as
``Cls(spec, path)``), ``path`` being its reference module path with ``.`` spelled ``__``,
and it creates its children in the reference's order under the reference's attribute
names, so the generic Keras mapper writes exactly the stack's entries of
``ModelSpec.weight_shapes()``, in order.

Shapes: MSA m [B, S, N, c_m], pair z [B, N, N, c_z], MSA mask [B, S, N], pair mask
[B, N, N]; S and N may be unknown when traced (every reshape reads ``tf.shape``). Every
update is residual; dropout is applied to the update only.

Dropout and checkpointing: masks are drawn statelessly from the seed of
:func:`~sciperf_tensorflow.workloads.openfold.primitives.dropout_seed`. :func:`run_blocks`
gives every block its own seed and, with checkpointing while training, wraps each block
in ``tf.recompute_grad`` with that seed as an input, so the recomputation in the backward
pass draws the same masks as the forward pass (PyTorch restores its RNG state instead).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_tensorflow.workloads.openfold import primitives
from sciperf_tensorflow.workloads.openfold.primitives import (
    Attention,
    Block,
    Dense,
    SharedDropout,
    Transition,
    at_least_fp32,
    child,
    columnwise_dropout,
    dropout_seed,
    layer_norm,
    rowwise_dropout,
)

__all__ = ["BlockCore", "EvoformerBlock", "EvoformerStack", "ExtraMSABlock", "ExtraMSAStack",
           "GlobalAttention", "MSAColumnAttention", "MSAColumnGlobalAttention",
           "MSARowAttentionWithPairBias", "OuterProductMean", "TemplatePairBlock",
           "TemplatePairStack", "TemplatePointwiseAttention", "TriangleAttention",
           "TriangleMultiplication", "run_blocks"]

# A template's dropout seed is its block's seed + [0, index·2³²]: the layers' salts (added
# to the same component) are < 2³¹, so no template's mask stream meets another layer's.
TEMPLATE_SEED_STRIDE = 1 << 32


def run_blocks(blocks: Sequence[keras.layers.Layer], state: tuple[tf.Tensor, ...],
               checkpointing: bool, training: bool, seed: tf.Tensor | None = None,
               **kwargs: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """Run ``blocks`` in turn on ``state`` (each block maps state → state).

    Block ``i`` draws its dropout masks from ``seed + [i, 0]`` (int64 [2]; None: no
    dropout). With ``checkpointing`` while training, each block's activations are
    recomputed in the backward pass instead of stored (the reference checkpoints per
    block); the seed is an input of the recomputed function, so both passes draw the same
    masks.
    """
    names = tuple(kwargs)
    extra = tuple(kwargs[name] for name in names)
    for i, block in enumerate(blocks):
        block_seed = None if seed is None else \
            tf.cast(seed, tf.int64) + tf.constant([i, 0], tf.int64)
        if checkpointing and training:
            run = _recomputed(block, len(state), names, block_seed is not None)
            # as float64 (exact below 2**53): recompute_grad watches its inputs, and
            # TensorFlow warns on every integer one
            seeds = () if block_seed is None else (tf.cast(block_seed, tf.float64),)
            state = tuple(run(*seeds, *state, *extra))
        else:
            with dropout_seed(block_seed):
                state = tuple(block(*state, training=training, **kwargs))
    return state


def _recomputed(block: keras.layers.Layer, n_state: int, names: tuple[str, ...],
                seeded: bool) -> Callable[..., tuple[tf.Tensor, ...]]:
    """``block`` in training mode as a function of tensors only — (seed,) + state + the
    keyword tensors `names`, all positional (``tf.custom_gradient`` takes no keywords in
    graph mode) — under ``tf.recompute_grad``. The block's variables are read inside, so
    ``recompute_grad`` returns their gradients too."""

    def run(*tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
        seed, tensors = (tf.cast(tensors[0], tf.int64), tensors[1:]) if seeded \
            else (None, tensors)
        state, extra = tensors[:n_state], tensors[n_state:]
        with dropout_seed(seed):
            return tuple(block(*state, training=True, **dict(zip(names, extra, strict=True))))

    return tf.recompute_grad(run)


class _Block(Block):
    """A Block whose weights all exist once it is constructed (children create theirs in
    their constructors), so building it is a no-op. Keras' default would trace the whole
    ``call`` symbolically on the first call to look for unbuilt state (the dropouts and
    attentions hold none): seconds per stack."""

    def build(self, input_shape: object = None) -> None:
        self.built = True


def _swap(x: tf.Tensor, a: int, b: int) -> tf.Tensor:
    """`x` with axes `a` and `b` (negative) exchanged."""
    perm = list(range(x.shape.rank))
    perm[a], perm[b] = perm[b], perm[a]
    return tf.transpose(x, perm)


def _move(x: tf.Tensor, source: int, destination: int) -> tf.Tensor:
    """`x` with axis `source` moved to `destination` (either may be negative)."""
    rank = x.shape.rank
    perm = list(range(rank))
    axis = perm.pop(source % rank)
    perm.insert(destination % rank, axis)
    return tf.transpose(x, perm)


def _pair_bias(linear: keras.layers.Dense, z: tf.Tensor) -> tf.Tensor:
    """Linear(z) [B, N, N, H] as an attention bias [B, 1, H, N, N] (shared by all rows)."""
    return tf.expand_dims(_move(linear(z), -1, -3), -4)


# -- MSA attention -------------------------------------------------------------------------
class MSARowAttentionWithPairBias(_Block):
    """Row-wise gated self-attention over residues, biased by Dense(LN(z)) per head."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int, num_heads: int, inf: float,
                 eps: float, path: str) -> None:
        super().__init__(name=path)
        self.layer_norm_m = layer_norm(c_m, child(path, "layer_norm_m"), eps)
        self.layer_norm_z = layer_norm(c_z, child(path, "layer_norm_z"), eps)
        self.linear_z = Dense(c_z, num_heads, child(path, "linear_z"), bias=False,
                              init="normal")
        self.mha = Attention(c_m, c_m, c_hidden, num_heads, inf, child(path, "mha"))

    def call(self, m: tf.Tensor, z: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        bias = _pair_bias(self.linear_z, self.layer_norm_z(z))
        m = self.layer_norm_m(m)
        return self.mha(m, m, mask[..., None, None, :], bias=bias)


class MSAColumnAttention(_Block):
    """Column-wise gated self-attention over sequences (each residue position alone)."""

    def __init__(self, c_m: int, c_hidden: int, num_heads: int, inf: float, eps: float,
                 path: str) -> None:
        super().__init__(name=path)
        self.layer_norm_m = layer_norm(c_m, child(path, "layer_norm_m"), eps)
        self.mha = Attention(c_m, c_m, c_hidden, num_heads, inf, child(path, "mha"))

    def call(self, m: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        m = self.layer_norm_m(_swap(m, -2, -3))  # [B, N, S, c]
        mask = _swap(mask, -1, -2)[..., None, None, :]  # [B, N, 1, 1, S]
        return _swap(self.mha(m, m, mask), -2, -3)


class GlobalAttention(_Block):
    """Global column attention of the extra-MSA stack (AF2 supplement Algorithm 19).

    One query per column — the masked mean over sequences — against single-head keys and
    values shared by all heads: linear in the (large) number of extra sequences. The mean
    and the softmax run in at least float32 (a count of 1,024 sequences is not exact in
    bfloat16).
    """

    def __init__(self, c_e: int, c_hidden: int, num_heads: int, inf: float, eps: float,
                 path: str) -> None:
        super().__init__(name=path)
        self.c_hidden, self.num_heads, self.inf, self.eps = c_hidden, num_heads, inf, eps
        hidden = c_hidden * num_heads
        self.linear_q = Dense(c_e, hidden, child(path, "linear_q"), bias=False, init="glorot")
        self.linear_k = Dense(c_e, c_hidden, child(path, "linear_k"), bias=False,
                              init="glorot")
        self.linear_v = Dense(c_e, c_hidden, child(path, "linear_v"), bias=False,
                              init="glorot")
        self.linear_g = Dense(c_e, hidden, child(path, "linear_g"), init="gating")
        self.linear_o = Dense(hidden, c_e, child(path, "linear_o"), init="final")

    def _split(self, x: tf.Tensor) -> tf.Tensor:
        """[*, H·C] → [*, H, C]."""
        return tf.reshape(x, tf.concat([tf.shape(x)[:-1], [self.num_heads, self.c_hidden]], 0))

    def call(self, m: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """m [B, N, S, c_e] (columns first), mask [B, N, S]."""
        wide = at_least_fp32(m.dtype)
        mask_w = tf.cast(mask, wide)
        mean = tf.reduce_sum(tf.cast(m, wide) * mask_w[..., None], axis=-2) \
            / (tf.reduce_sum(mask_w, axis=-1) + self.eps)[..., None]
        # a Python scale converts straight to m's dtype (tf.cast of it would go by float32)
        q = self.linear_q(tf.cast(mean, m.dtype)) * math.sqrt(1.0 / self.c_hidden)
        q = self._split(q)  # [B, N, H, C]
        k, v = self.linear_k(m), self.linear_v(m)  # [B, N, S, C]
        logits = tf.cast(tf.matmul(q, k, transpose_b=True), wide) \
            + ((mask_w - 1.0) * self.inf)[..., None, :]  # [B, N, H, S]
        o = tf.matmul(tf.cast(tf.nn.softmax(logits, axis=-1), v.dtype), v)  # [B, N, H, C]
        gate = self._split(tf.sigmoid(self.linear_g(m)))  # [B, N, S, H, C]
        o = o[..., None, :, :] * gate
        flat = tf.reshape(o, tf.concat([tf.shape(o)[:-2], [self.num_heads * self.c_hidden]],
                                       0))
        return self.linear_o(flat)


class MSAColumnGlobalAttention(_Block):
    def __init__(self, c_e: int, c_hidden: int, num_heads: int, inf: float, eps: float,
                 ln_eps: float, path: str) -> None:
        super().__init__(name=path)
        self.layer_norm_m = layer_norm(c_e, child(path, "layer_norm_m"), ln_eps)
        self.global_attention = GlobalAttention(c_e, c_hidden, num_heads, inf, eps,
                                                child(path, "global_attention"))

    def call(self, m: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        m = self.layer_norm_m(_swap(m, -2, -3))
        return _swap(self.global_attention(m, _swap(mask, -1, -2)), -2, -3)


# -- MSA → pair and pair updates -----------------------------------------------------------
class OuterProductMean(_Block):
    """z_ij += Dense(Σ_s a_si ⊗ b_sj) / (Σ_s mask_si·mask_sj + eps) (Algorithm 10).

    The normalisation divides the projected output (its bias included), as the reference;
    the count and the division run in at least float32.
    """

    def __init__(self, c_m: int, c_z: int, c_hidden: int, eps: float, ln_eps: float,
                 path: str) -> None:
        super().__init__(name=path)
        self.eps = eps
        self.layer_norm = layer_norm(c_m, child(path, "layer_norm"), ln_eps)
        self.linear_1 = Dense(c_m, c_hidden, child(path, "linear_1"))
        self.linear_2 = Dense(c_m, c_hidden, child(path, "linear_2"))
        self.linear_out = Dense(c_hidden * c_hidden, c_z, child(path, "linear_out"),
                                init="final")

    def call(self, m: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        m = self.layer_norm(m)
        mask_c = tf.cast(mask, m.dtype)[..., None]  # [B, S, N, 1]
        a = self.linear_1(m) * mask_c
        b = self.linear_2(m) * mask_c
        outer = tf.einsum("...sic,...sjd->...ijcd", a, b)
        outer = self.linear_out(tf.reshape(outer, tf.concat([tf.shape(outer)[:-2], [-1]], 0)))
        wide = at_least_fp32(outer.dtype)
        mask_w = tf.cast(mask, wide)
        norm = tf.einsum("...si,...sj->...ij", mask_w, mask_w)[..., None]
        return tf.cast(tf.cast(outer, wide) / (norm + self.eps), outer.dtype)


class TriangleMultiplication(_Block):
    """Triangle update with outgoing (Σ_k a_ik b_jk) or incoming (Σ_k a_ki b_kj) edges."""

    def __init__(self, c_z: int, c_hidden: int, outgoing: bool, eps: float,
                 path: str) -> None:
        super().__init__(name=path)
        self.equation = "...ikc,...jkc->...ijc" if outgoing else "...kic,...kjc->...ijc"
        self.linear_a_p = Dense(c_z, c_hidden, child(path, "linear_a_p"))
        self.linear_a_g = Dense(c_z, c_hidden, child(path, "linear_a_g"), init="gating")
        self.linear_b_p = Dense(c_z, c_hidden, child(path, "linear_b_p"))
        self.linear_b_g = Dense(c_z, c_hidden, child(path, "linear_b_g"), init="gating")
        self.linear_g = Dense(c_z, c_z, child(path, "linear_g"), init="gating")
        self.linear_z = Dense(c_hidden, c_z, child(path, "linear_z"), init="final")
        self.layer_norm_in = layer_norm(c_z, child(path, "layer_norm_in"), eps)
        self.layer_norm_out = layer_norm(c_hidden, child(path, "layer_norm_out"), eps)

    def call(self, z: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        z = self.layer_norm_in(z)
        mask = tf.cast(mask, z.dtype)[..., None]
        a = tf.sigmoid(self.linear_a_g(z)) * mask * self.linear_a_p(z)
        b = tf.sigmoid(self.linear_b_g(z)) * mask * self.linear_b_p(z)
        x = self.linear_z(self.layer_norm_out(tf.einsum(self.equation, a, b)))
        return x * tf.sigmoid(self.linear_g(z))


class TriangleAttention(_Block):
    """Gated attention around the starting node (rows) or ending node (columns), biased
    by Dense(LN(z)) (Algorithms 13–14). The ending node runs on the transposed pair."""

    def __init__(self, c_z: int, c_hidden: int, num_heads: int, inf: float, starting: bool,
                 eps: float, path: str) -> None:
        super().__init__(name=path)
        self.starting = starting
        self.layer_norm = layer_norm(c_z, child(path, "layer_norm"), eps)
        self.linear = Dense(c_z, num_heads, child(path, "linear"), bias=False, init="normal")
        self.mha = Attention(c_z, c_z, c_hidden, num_heads, inf, child(path, "mha"))

    def call(self, z: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        if not self.starting:
            z, mask = _swap(z, -2, -3), _swap(mask, -1, -2)
        z = self.layer_norm(z)
        bias = _pair_bias(self.linear, z)  # [B, 1, H, N, N]
        z = self.mha(z, z, mask[..., None, None, :], bias=bias)
        return z if self.starting else _swap(z, -2, -3)


class BlockCore(_Block):
    """MSA transition, outer-product mean and the pair stack: the part the Evoformer and
    extra-MSA blocks share (reference name ``core``)."""

    def __init__(self, c_m: int, c_z: int, transition_n: int, c_opm: int, c_tri_mul: int,
                 c_tri_att: int, heads_tri: int, pair_dropout: float, inf: float,
                 opm_eps: float, eps: float, path: str) -> None:
        super().__init__(name=path)
        p = pair_dropout
        self.msa_transition = Transition(c_m, transition_n, child(path, "msa_transition"), eps)
        self.outer_product_mean = OuterProductMean(c_m, c_z, c_opm, opm_eps, eps,
                                                   child(path, "outer_product_mean"))
        self.tri_mul_out = TriangleMultiplication(c_z, c_tri_mul, True, eps,
                                                  child(path, "tri_mul_out"))
        self.tmo_dropout_rowwise = rowwise_dropout(p, child(path, "tmo_dropout_rowwise"))
        self.tri_mul_in = TriangleMultiplication(c_z, c_tri_mul, False, eps,
                                                 child(path, "tri_mul_in"))
        self.tmi_dropout_rowwise = rowwise_dropout(p, child(path, "tmi_dropout_rowwise"))
        self.tri_att_start = TriangleAttention(c_z, c_tri_att, heads_tri, inf, True, eps,
                                               child(path, "tri_att_start"))
        self.tasn_dropout_rowwise = rowwise_dropout(p, child(path, "tasn_dropout_rowwise"))
        self.tri_att_end = TriangleAttention(c_z, c_tri_att, heads_tri, inf, False, eps,
                                             child(path, "tri_att_end"))
        self.taen_dropout_columnwise = columnwise_dropout(
            p, child(path, "taen_dropout_columnwise"))
        self.pair_transition = Transition(c_z, transition_n, child(path, "pair_transition"),
                                          eps)

    def call(self, m: tf.Tensor, z: tf.Tensor, msa_mask: tf.Tensor, pair_mask: tf.Tensor,
             training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        m = m + self.msa_transition(m)
        z = z + self.outer_product_mean(m, msa_mask)
        z = z + self.tmo_dropout_rowwise(self.tri_mul_out(z, pair_mask), training=training)
        z = z + self.tmi_dropout_rowwise(self.tri_mul_in(z, pair_mask), training=training)
        z = z + self.tasn_dropout_rowwise(self.tri_att_start(z, pair_mask), training=training)
        z = z + self.taen_dropout_columnwise(self.tri_att_end(z, pair_mask),
                                             training=training)
        z = z + self.pair_transition(z)
        return m, z


class _MSABlock(_Block):
    """Row attention with pair bias (row-wise dropout), a column attention, the core."""

    msa_att_row: MSARowAttentionWithPairBias
    msa_att_col: keras.layers.Layer
    msa_dropout_rowwise: SharedDropout
    core: BlockCore

    @staticmethod
    def _core_args(spec: ModelSpec, extra: bool) -> dict:
        if extra:
            return dict(c_m=spec.c_e, c_z=spec.c_z, transition_n=spec.extra_transition_n,
                        c_opm=spec.extra_c_hidden_opm, c_tri_mul=spec.extra_c_hidden_tri_mul,
                        c_tri_att=spec.extra_c_hidden_tri_att,
                        heads_tri=spec.extra_num_heads_tri,
                        pair_dropout=spec.extra_pair_dropout, inf=spec.extra_inf,
                        opm_eps=spec.opm_eps, eps=spec.layer_norm_eps)
        return dict(c_m=spec.c_m, c_z=spec.c_z, transition_n=spec.transition_n,
                    c_opm=spec.c_hidden_opm, c_tri_mul=spec.c_hidden_tri_mul,
                    c_tri_att=spec.c_hidden_tri_att, heads_tri=spec.num_heads_tri,
                    pair_dropout=spec.pair_dropout, inf=spec.evoformer_inf,
                    opm_eps=spec.opm_eps, eps=spec.layer_norm_eps)

    def call(self, m: tf.Tensor, z: tf.Tensor, msa_mask: tf.Tensor, pair_mask: tf.Tensor,
             training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        m = m + self.msa_dropout_rowwise(self.msa_att_row(m, z, msa_mask), training=training)
        m = m + self.msa_att_col(m, msa_mask)
        return self.core(m, z, msa_mask, pair_mask, training=training)


class EvoformerBlock(_MSABlock):
    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        eps = spec.layer_norm_eps
        self.msa_att_row = MSARowAttentionWithPairBias(
            spec.c_m, spec.c_z, spec.c_hidden_msa_att, spec.num_heads_msa,
            spec.evoformer_inf, eps, child(path, "msa_att_row"))
        self.msa_att_col = MSAColumnAttention(spec.c_m, spec.c_hidden_msa_att,
                                              spec.num_heads_msa, spec.evoformer_inf, eps,
                                              child(path, "msa_att_col"))
        self.msa_dropout_rowwise = rowwise_dropout(spec.msa_dropout,
                                                   child(path, "msa_dropout_rowwise"))
        self.core = BlockCore(**self._core_args(spec, extra=False), path=child(path, "core"))


class ExtraMSABlock(_MSABlock):
    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        eps = spec.layer_norm_eps
        self.msa_att_row = MSARowAttentionWithPairBias(
            spec.c_e, spec.c_z, spec.extra_c_hidden_msa_att, spec.extra_num_heads_msa,
            spec.extra_inf, eps, child(path, "msa_att_row"))
        self.msa_att_col = MSAColumnGlobalAttention(
            spec.c_e, spec.extra_c_hidden_msa_att, spec.extra_num_heads_msa, spec.extra_inf,
            spec.extra_eps, eps, child(path, "msa_att_col"))
        self.msa_dropout_rowwise = rowwise_dropout(spec.extra_msa_dropout,
                                                   child(path, "msa_dropout_rowwise"))
        self.core = BlockCore(**self._core_args(spec, extra=True), path=child(path, "core"))


def _blocks(path: str, count: int, make: Callable[[str], keras.layers.Layer],
            ) -> list[keras.layers.Layer]:
    """`count` blocks named ``<path>__blocks__<i>`` (the reference's ``blocks.<i>``)."""
    return [make(child(child(path, "blocks"), str(i))) for i in range(count)]


class EvoformerStack(_Block):
    """The Evoformer blocks, then the single representation s = Dense(m[:, 0])."""

    def __init__(self, spec: ModelSpec, path: str = "evoformer_stack") -> None:
        super().__init__(name=path)
        self.blocks = _blocks(path, spec.evoformer_blocks, lambda p: EvoformerBlock(spec, p))
        self.linear = Dense(spec.c_m, spec.c_s, child(path, "linear"))

    def call(self, m: tf.Tensor, z: tf.Tensor, msa_mask: tf.Tensor, pair_mask: tf.Tensor,
             checkpointing: bool = False, training: bool = False,
             seed: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        m, z = run_blocks(self.blocks, (m, z), checkpointing, training, seed,
                          msa_mask=msa_mask, pair_mask=pair_mask)
        return m, z, self.linear(m[:, 0])


class ExtraMSAStack(_Block):
    """The extra-MSA blocks; only the pair representation leaves the stack."""

    def __init__(self, spec: ModelSpec, path: str = "extra_msa_stack") -> None:
        super().__init__(name=path)
        self.blocks = _blocks(path, spec.extra_blocks, lambda p: ExtraMSABlock(spec, p))

    def call(self, a: tf.Tensor, z: tf.Tensor, msa_mask: tf.Tensor, pair_mask: tf.Tensor,
             checkpointing: bool = False, training: bool = False,
             seed: tf.Tensor | None = None) -> tf.Tensor:
        _, z = run_blocks(self.blocks, (a, z), checkpointing, training, seed,
                          msa_mask=msa_mask, pair_mask=pair_mask)
        return z


# -- templates ----------------------------------------------------------------------------
class TemplatePairBlock(_Block):
    """tri-att start → tri-att end → tri-mul out → tri-mul in → transition, per template.

    Templates run one after the other, as the reference, so their count (the model's
    template slots) must be known when traced. Template ``j`` draws its dropout
    masks from the block's seed + [0, j·2³²], so templates get independent masks, as the
    reference's sequential draws give them.
    """

    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        c, eps, inf = spec.c_t, spec.layer_norm_eps, spec.template_inf
        att, heads = spec.template_c_hidden_tri_att, spec.template_num_heads_tri
        mul, p = spec.template_c_hidden_tri_mul, spec.template_dropout
        self.tri_att_start = TriangleAttention(c, att, heads, inf, True, eps,
                                               child(path, "tri_att_start"))
        self.tasn_dropout_rowwise = rowwise_dropout(p, child(path, "tasn_dropout_rowwise"))
        self.tri_att_end = TriangleAttention(c, att, heads, inf, False, eps,
                                             child(path, "tri_att_end"))
        self.taen_dropout_columnwise = columnwise_dropout(
            p, child(path, "taen_dropout_columnwise"))
        self.tri_mul_out = TriangleMultiplication(c, mul, True, eps, child(path, "tri_mul_out"))
        self.tmo_dropout_rowwise = rowwise_dropout(p, child(path, "tmo_dropout_rowwise"))
        self.tri_mul_in = TriangleMultiplication(c, mul, False, eps, child(path, "tri_mul_in"))
        self.tmi_dropout_rowwise = rowwise_dropout(p, child(path, "tmi_dropout_rowwise"))
        self.pair_transition = Transition(c, spec.template_transition_n,
                                          child(path, "pair_transition"), eps)

    def _one(self, t: tf.Tensor, mask: tf.Tensor, training: bool) -> tf.Tensor:
        t = t + self.tasn_dropout_rowwise(self.tri_att_start(t, mask), training=training)
        t = t + self.taen_dropout_columnwise(self.tri_att_end(t, mask), training=training)
        t = t + self.tmo_dropout_rowwise(self.tri_mul_out(t, mask), training=training)
        t = t + self.tmi_dropout_rowwise(self.tri_mul_in(t, mask), training=training)
        return t + self.pair_transition(t)

    def _template(self, seed: tf.Tensor | None, j: int, t: tf.Tensor, mask: tf.Tensor,
                  training: bool) -> tf.Tensor:
        """Template `j` ([B, N, N, c_t]) under its own dropout seed."""
        if seed is not None:
            seed = tf.cast(seed, tf.int64) + tf.constant([0, j * TEMPLATE_SEED_STRIDE],
                                                         tf.int64)
        with dropout_seed(seed):
            return self._one(t, mask, training)

    def call(self, t: tf.Tensor, pair_mask: tf.Tensor, training: bool = False,
             ) -> tuple[tf.Tensor]:
        """t [B, T, N, N, c_t], pair_mask [B, N, N] (PyTorch's ``mask``: Keras takes a
        ``mask`` keyword for a Keras mask and warns that the layer drops it)."""
        mask = pair_mask
        if t.shape[-4] is None:
            raise ValueError(f"{self.name}: the template count (dim -4 of t, shape "
                             f"{t.shape}) must be known when traced: templates run in turn")
        seed = primitives.current_seed()  # the seed run_blocks set for this block
        return (tf.stack([self._template(seed, j, x, mask, training)
                          for j, x in enumerate(tf.unstack(t, axis=-4))], axis=-4),)


class TemplatePairStack(_Block):
    def __init__(self, spec: ModelSpec, path: str = "template_pair_stack") -> None:
        super().__init__(name=path)
        self.blocks = _blocks(path, spec.template_blocks, lambda p: TemplatePairBlock(spec, p))
        self.layer_norm = layer_norm(spec.c_t, child(path, "layer_norm"), spec.layer_norm_eps)

    def call(self, t: tf.Tensor, pair_mask: tf.Tensor, checkpointing: bool = False,
             training: bool = False, seed: tf.Tensor | None = None) -> tf.Tensor:
        """t [B, T, N, N, c_t], pair_mask [B, N, N] (PyTorch's ``mask``, renamed as in
        :class:`TemplatePairBlock`)."""
        (t,) = run_blocks(self.blocks, (t,), checkpointing, training, seed,
                          pair_mask=pair_mask)
        return self.layer_norm(t)


class TemplatePointwiseAttention(_Block):
    """Each pair position z_ij attends over the templates' t_ij (no gate, Algorithm 17)."""

    def __init__(self, spec: ModelSpec, path: str = "template_pointwise_attention") -> None:
        super().__init__(name=path)
        self.mha = Attention(spec.c_z, spec.c_t, spec.template_pointwise_c_hidden,
                             spec.template_pointwise_num_heads, spec.template_pointwise_inf,
                             child(path, "mha"), gated=False)

    def call(self, t: tf.Tensor, z: tf.Tensor, template_mask: tf.Tensor) -> tf.Tensor:
        """t [B, T, N, N, c_t], z [B, N, N, c_z], template_mask [B, T] → [B, N, N, c_z].

        The pair positions run flattened to one dim, so the logits [B, N·N, H, 1, T] have
        rank 5: TensorFlow's CPU (oneDNN) softmax takes at most 5 dims.
        """
        shape = tf.shape(z)
        t = _move(t, -4, -2)  # [B, N, N, T, c_t]
        t = tf.reshape(t, tf.concat([shape[:1], [-1], tf.shape(t)[-2:]], 0))  # [B, N·N, T, c]
        q = tf.reshape(z, tf.concat([shape[:1], [-1, 1], shape[-1:]], 0))  # [B, N·N, 1, c_z]
        mask = template_mask[:, None, None, None, :]  # against [B, N·N, H, 1, T]
        return tf.reshape(self.mha(q, t, mask), shape)
