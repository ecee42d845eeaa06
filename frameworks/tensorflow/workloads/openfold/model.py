"""AlphaFold2 as the MLPerf HPC OpenFold benchmark trains it (``initial_training``), in
Keras 3 — the mirror of ``sciperf_pytorch.workloads.openfold.model``, built from
:class:`sciperf.workloads.openfold.sizes.ModelSpec` (shared/spec/openfold.md §2–3).

Every weight layer is named with its reference module path (``.`` spelled ``__``), so the
one Keras weight mapper writes exactly ``ModelSpec.weight_shapes()`` — 5,044 tensors,
93,229,082 parameters at full size — and the canonical ``.npz`` moves weights between the
frameworks.

Input: the reference's batch dict, every tensor with a leading batch dim B and the
trailing recycling dim R, as in PyTorch. ``num_recycling`` (a scalar tensor, so one trace
serves every count) selects the passes: passes 0..n−1 run in a ``tf.while_loop`` whose
results are ``stop_gradient``-ed (the reference's ``no_grad`` passes feeding the recycling
embedder); only pass n builds the gradient. ``seed`` (int64 [2]) seeds the training
dropout of the step, each pass and block drawing its own masks from it.

Output: the PyTorch model's keys (``msa``, ``pair``, ``single``, ``sm`` and ``sm_<name>``,
``final_atom_positions``, ``final_atom_mask``, ``final_affine_tensor``, the heads').
"""

from __future__ import annotations

import keras
import tensorflow as tf

from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_tensorflow.workloads.openfold.embedders import (
    ExtraMSAEmbedder,
    InputEmbedder,
    RecyclingEmbedder,
    TemplateAngleEmbedder,
    TemplatePairEmbedder,
    extra_msa_feat,
    pseudo_beta,
    template_angle_feat,
    template_pair_feat,
)
from sciperf_tensorflow.workloads.openfold.evoformer import (
    EvoformerStack,
    ExtraMSAStack,
    TemplatePairStack,
    TemplatePointwiseAttention,
)
from sciperf_tensorflow.workloads.openfold.heads import AuxiliaryHeads
from sciperf_tensorflow.workloads.openfold.primitives import Block, dropout_seed, full_precision
from sciperf_tensorflow.workloads.openfold.structure import StructureModule, atom14_to_atom37

__all__ = ["AlphaFold", "Batch"]

Batch = dict[str, tf.Tensor]
Recycled = tuple[tf.Tensor, tf.Tensor, tf.Tensor]  # m0, z, atom37 positions
PASS_SALT = 1_000_003  # a pass's seed: the step's + k·salt (blocks add their index)


class AlphaFold(keras.Model):
    """The network; ``checkpointing`` recomputes each stack block in backward (training)."""

    WEIGHT_KINDS = Block.WEIGHT_KINDS  # IPA's head weights map as a basis vector

    def __init__(self, spec: ModelSpec | None = None, checkpointing: bool = True) -> None:
        super().__init__(name="alphafold")
        self.spec = spec = spec or ModelSpec()
        self.checkpointing = checkpointing
        self.input_embedder = InputEmbedder(spec, "input_embedder")
        self.recycling_embedder = RecyclingEmbedder(spec, "recycling_embedder")
        self.template_angle_embedder = TemplateAngleEmbedder(spec, "template_angle_embedder")
        self.template_pair_embedder = TemplatePairEmbedder(spec, "template_pair_embedder")
        self.template_pair_stack = TemplatePairStack(spec, "template_pair_stack")
        self.template_pointwise_attention = TemplatePointwiseAttention(
            spec, "template_pointwise_attention")
        self.extra_msa_embedder = ExtraMSAEmbedder(spec, "extra_msa_embedder")
        self.extra_msa_stack = ExtraMSAStack(spec, "extra_msa_stack")
        self.evoformer_stack = EvoformerStack(spec, "evoformer_stack")
        self.structure_module = StructureModule(spec, "structure_module")
        self.auxiliary_heads = AuxiliaryHeads(spec, "auxiliary_heads")
        # every layer creates its weights when constructed: marked built, so Keras does
        # not trace the whole network symbolically on its first call to look for state
        for layer in self._flatten_layers(include_self=True, recursive=True):
            layer.built = True
        # one traced graph of a pass serves the recycling passes and the last one (a
        # call of the same tf.function), halving the step's graph; the network's code is
        # plain TensorFlow (loops are tf.while_loop), so autograph has nothing to convert
        self._pass = tf.function(self._iteration, autograph=False)

    def call(self, batch: Batch, num_recycling: tf.Tensor | int | None = None,
             seed: tf.Tensor | None = None, training: bool = False) -> dict:
        passes = tf.shape(batch["aatype"])[-1]
        n = passes - 1 if num_recycling is None else tf.convert_to_tensor(num_recycling,
                                                                          tf.int32)
        tf.debugging.assert_less(n, passes, "num_recycling needs a longer recycling dim")
        seed = None if seed is None or not training else tf.cast(seed, tf.int64)
        recycled = self._initial(batch)
        checkpointing = self.checkpointing and training  # recomputation only costs backward

        def body(j: tf.Tensor, *state: tf.Tensor) -> tuple:
            _, new = self._pass(_select(batch, j), tuple(state), _pass_seed(seed, j),
                                checkpointing=checkpointing, training=training)
            return (j + 1, *(tf.stop_gradient(t) for t in new))

        _, *recycled = tf.while_loop(lambda j, *_: j < n, body, (tf.constant(0), *recycled))
        outputs, _ = self._pass(
            _select(batch, n), tuple(tf.stop_gradient(t) for t in recycled),
            _pass_seed(seed, n), checkpointing=checkpointing, training=training)
        outputs.update(self.auxiliary_heads(outputs["sm"]["single"], outputs["pair"],
                                            outputs["msa"], outputs["single"]))
        return outputs

    def _initial(self, batch: Batch) -> Recycled:
        """Zeros for the first pass's recycled m0, z and atom positions (these in full
        precision)."""
        shape = tf.shape(batch["aatype"])
        b, n_res = shape[0], shape[1]
        dtype = self.compute_dtype
        s = self.spec
        return (tf.zeros([b, n_res, s.c_m], dtype), tf.zeros([b, n_res, n_res, s.c_z], dtype),
                tf.zeros([b, n_res, s.num_atom_types, 3], full_precision()))

    def _iteration(self, feats: Batch, recycled: Recycled, seed: tf.Tensor | None,
                   checkpointing: bool, training: bool) -> tuple[dict, Recycled]:
        """One pass of Algorithm 2 (embed, recycle, templates, extra MSA, Evoformer, SM)."""
        n_clust = tf.shape(feats["msa_feat"])[1]
        m, z = self.input_embedder(feats["target_feat"], feats["residue_index"],
                                   feats["msa_feat"])
        seq_mask = tf.cast(feats["seq_mask"], z.dtype)
        pair_mask = seq_mask[..., :, None] * seq_mask[..., None, :]
        m, z = self._recycle(m, z, feats, recycled)

        t_pair, t_rows = self._templates(feats, z, pair_mask, seed, checkpointing, training)
        z = z + t_pair
        m = tf.concat([m, tf.cast(t_rows, m.dtype)], axis=1)
        msa_mask = tf.concat([tf.cast(feats["msa_mask"], m.dtype),
                              tf.cast(feats["template_torsion_angles_mask"][..., 2], m.dtype)],
                             axis=-2)

        a = self.extra_msa_embedder(tf.cast(extra_msa_feat(feats, self.spec.msa_classes),
                                            z.dtype))
        z = self.extra_msa_stack(a, z, tf.cast(feats["extra_msa_mask"], z.dtype), pair_mask,
                                 checkpointing=checkpointing, training=training,
                                 seed=_salted(seed, 1))
        m, z, s = self.evoformer_stack(m, z, msa_mask, pair_mask, checkpointing=checkpointing,
                                       training=training, seed=_salted(seed, 2))

        with dropout_seed(_salted(seed, 3)):  # the structure module's dropout draws from it
            sm = self.structure_module(s, z, seq_mask, feats["aatype"], training=training)
        final = atom14_to_atom37(sm["positions"][:, -1], feats["residx_atom37_to_atom14"],
                                 feats["atom37_atom_exists"])
        outputs = {"msa": m[:, :n_clust], "pair": z, "single": s, "sm": sm,
                   **{f"sm_{key}": value for key, value in sm.items()},
                   "final_atom_positions": final,
                   "final_atom_mask": feats["atom37_atom_exists"],
                   "final_affine_tensor": sm["frames"][:, -1]}
        # positions stay in full precision: the recycling embedder bins their distances
        return outputs, (m[:, 0], z, tf.cast(final, full_precision()))

    def _recycle(self, m: tf.Tensor, z: tf.Tensor, feats: Batch,
                 recycled: Recycled) -> tuple[tf.Tensor, tf.Tensor]:
        """Add the previous pass's embedding (zeros on the first pass) to m row 0 and z."""
        m0_prev, z_prev, x_prev = recycled
        x_prev = pseudo_beta(feats["aatype"], x_prev)
        m0_update, z_update = self.recycling_embedder(m0_prev, z_prev, x_prev)
        m = tf.concat([(m[:, 0] + tf.cast(m0_update, m.dtype))[:, None], m[:, 1:]], axis=1)
        return m, z + tf.cast(z_update, z.dtype)

    def _templates(self, feats: Batch, z: tf.Tensor, pair_mask: tf.Tensor,
                   seed: tf.Tensor | None, checkpointing: bool,
                   training: bool) -> tuple[tf.Tensor, tf.Tensor]:
        """The template pair update of z (zero without any template) and the template
        torsion-angle rows [B, T, N, c_m] to append to the MSA."""
        n_templ = feats["template_aatype"].shape[1]  # static: the spec's template slots
        t = tf.stack([
            self.template_pair_embedder(template_pair_feat(
                {k: v[:, i] for k, v in feats.items() if k.startswith("template_")},
                self.spec, z.dtype))
            for i in range(n_templ)], axis=1)
        t = self.template_pair_stack(t, pair_mask, checkpointing=checkpointing,
                                     training=training, seed=_salted(seed, 0))
        template_mask = tf.cast(feats["template_mask"], z.dtype)
        update = tf.cast(self.template_pointwise_attention(t, z, template_mask), z.dtype)
        any_template = tf.cast(tf.reduce_sum(template_mask, axis=1) > 0, z.dtype)
        update = update * any_template[:, None, None, None]
        rows = self.template_angle_embedder(
            tf.cast(template_angle_feat(feats, self.spec.template_aatype_classes), z.dtype))
        return update, rows


def _select(batch: Batch, j: tf.Tensor) -> Batch:
    """The features of recycling pass ``j`` (the trailing dim gathered away)."""
    return {key: tf.gather(value, j, axis=-1) for key, value in batch.items()
            if isinstance(value, tf.Tensor) and value.shape.rank and value.shape.rank > 1}


def _pass_seed(seed: tf.Tensor | None, j: tf.Tensor) -> tf.Tensor | None:
    """Pass `j`'s dropout seed (None: no dropout)."""
    if seed is None:
        return None
    return seed + tf.stack([tf.constant(0, tf.int64), tf.cast(j, tf.int64) * PASS_SALT])


def _salted(seed: tf.Tensor | None, part: int) -> tf.Tensor | None:
    """The seed of one part of a pass (templates 0, extra MSA 1, Evoformer 2, structure
    module 3)."""
    if seed is None:
        return None
    return seed + tf.constant([part, 0], tf.int64) * 7919
