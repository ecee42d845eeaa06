"""Embedders of AlphaFold2's inputs in Keras 3: target/MSA features and relative
positions, the previous recycling pass, template pair and angle features, the extra MSA
(AF2 supplement §1.5, §1.7, §1.10; shared/spec/openfold.md §3) — the mirror of
``sciperf_pytorch.workloads.openfold.embedders``.

The feature builders (:func:`template_pair_feat`, :func:`template_angle_feat`,
:func:`extra_msa_feat`, :func:`pseudo_beta`) turn the reference's batch keys into the
network's input channels inside the model, as the reference does, so the data pipeline
delivers the same keys as the reference's. Their shapes come from ``tf.shape``: residue,
sequence and template counts may be dynamic.

Precision under a mixed bf16 policy: one-hot channels are exact in any float dtype;
squared distances and their bin edges are computed in at least float32 (a bf16
coordinate is off by up to 0.25 Å at 100 Å, enough to move a distance by a bin) and only
the 0/1 bin indicators reach a layer in its compute dtype.
"""

from __future__ import annotations

import tensorflow as tf

from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_tensorflow.workloads.openfold.primitives import (
    Block,
    Dense,
    at_least_fp32,
    child,
    layer_norm,
)

__all__ = ["ExtraMSAEmbedder", "InputEmbedder", "RecyclingEmbedder", "TemplateAngleEmbedder",
           "TemplatePairEmbedder", "extra_msa_feat", "pseudo_beta", "template_angle_feat",
           "template_pair_feat"]

Batch = dict[str, tf.Tensor]


class InputEmbedder(Block):
    """m = Dense(msa_feat) + Dense(target_feat) per row;
    z_ij = Dense(onehot(clip(r_i − r_j, ±k))) + Dense(tf)_i + Dense'(tf)_j (Algorithms 3–4)."""

    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        self.relpos_k = spec.relpos_k
        self.linear_tf_z_i = Dense(spec.tf_dim, spec.c_z, child(path, "linear_tf_z_i"))
        self.linear_tf_z_j = Dense(spec.tf_dim, spec.c_z, child(path, "linear_tf_z_j"))
        self.linear_tf_m = Dense(spec.tf_dim, spec.c_m, child(path, "linear_tf_m"))
        self.linear_msa_m = Dense(spec.msa_dim, spec.c_m, child(path, "linear_msa_m"))
        self.linear_relpos = Dense(2 * spec.relpos_k + 1, spec.c_z,
                                   child(path, "linear_relpos"))

    def call(self, target_feat: tf.Tensor, residue_index: tf.Tensor,
             msa_feat: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """target_feat [B, N, 22], residue_index [B, N], msa_feat [B, S, N, 49]."""
        tf_i = self.linear_tf_z_i(target_feat)
        tf_j = self.linear_tf_z_j(target_feat)
        ri = tf.cast(residue_index, tf.int64)  # offsets exact whatever the index dtype
        offset = ri[..., :, None] - ri[..., None, :]
        bins = tf.clip_by_value(offset, -self.relpos_k, self.relpos_k) + self.relpos_k
        relpos = tf.one_hot(bins, 2 * self.relpos_k + 1, dtype=tf_i.dtype)
        z = self.linear_relpos(relpos) + tf_i[..., :, None, :] + tf_j[..., None, :, :]
        m = self.linear_msa_m(msa_feat) + self.linear_tf_m(target_feat)[..., None, :, :]
        return m, z


class RecyclingEmbedder(Block):
    """LN(m0_prev) and LN(z_prev) + Dense(one-hot of squared pseudo-β distance bins)
    (Algorithm 32): the previous pass's first MSA row, pair and structure.

    Built with ``autocast=False`` so that ``x_prev`` reaches :meth:`call` in its own
    precision (Keras would otherwise cast every float argument to the compute dtype):
    the distances are binned in at least float32, the layers cast their own inputs."""

    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path, autocast=False)
        self.min_bin, self.max_bin = spec.recycling_min_bin, spec.recycling_max_bin
        self.num_bins, self.inf = spec.recycling_num_bins, spec.recycling_inf
        self.linear = Dense(spec.recycling_num_bins, spec.c_z, child(path, "linear"))
        self.layer_norm_m = layer_norm(spec.c_m, child(path, "layer_norm_m"),
                                       spec.layer_norm_eps)
        self.layer_norm_z = layer_norm(spec.c_z, child(path, "layer_norm_z"),
                                       spec.layer_norm_eps)

    def call(self, m0_prev: tf.Tensor, z_prev: tf.Tensor,
             x_prev: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """m0_prev [B, N, c_m], z_prev [B, N, N, c_z], x_prev pseudo-β [B, N, 3]."""
        wide = at_least_fp32(x_prev.dtype)
        x = tf.cast(x_prev, wide)
        lower = tf.square(tf.linspace(tf.constant(self.min_bin, wide),
                                      tf.constant(self.max_bin, wide), self.num_bins))
        upper = tf.concat([lower[1:], tf.constant([self.inf], wide)], axis=0)
        d2 = tf.reduce_sum(tf.square(x[..., :, None, :] - x[..., None, :, :]), axis=-1,
                           keepdims=True)
        dgram = tf.cast((d2 > lower) & (d2 < upper), self.linear.compute_dtype)
        z = self.linear(dgram) + self.layer_norm_z(z_prev)
        return self.layer_norm_m(m0_prev), z


class TemplateAngleEmbedder(Block):
    """Dense → ReLU → Dense of the 57 template angle channels: extra MSA rows."""

    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        self.linear_1 = Dense(spec.template_angle_dim, spec.c_m, child(path, "linear_1"),
                              init="relu")
        self.linear_2 = Dense(spec.c_m, spec.c_m, child(path, "linear_2"), init="relu")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.linear_2(tf.nn.relu(self.linear_1(x)))


class TemplatePairEmbedder(Block):
    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        self.linear = Dense(spec.template_pair_dim, spec.c_t, child(path, "linear"),
                            init="relu")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.linear(x)


class ExtraMSAEmbedder(Block):
    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        self.linear = Dense(spec.extra_msa_dim, spec.c_e, child(path, "linear"))

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.linear(x)


# -- feature builders -----------------------------------------------------------------------
def pseudo_beta(aatype: tf.Tensor, atom37: tf.Tensor) -> tf.Tensor:
    """CB position, CA for glycine: [*, N, 37, 3] → [*, N, 3]."""
    is_gly = tf.equal(aatype, tf.cast(rc.RESTYPES.index("G"), aatype.dtype))[..., None]
    return tf.where(is_gly, atom37[..., rc.ATOM_ORDER["CA"], :],
                    atom37[..., rc.ATOM_ORDER["CB"], :])


def extra_msa_feat(batch: Batch, num_classes: int) -> tf.Tensor:
    """23-class one-hot + has_deletion + deletion value → [B, S_extra, N, 25] (in the dtype
    of ``extra_has_deletion``)."""
    dtype = batch["extra_has_deletion"].dtype
    return tf.concat([tf.one_hot(tf.cast(batch["extra_msa"], tf.int64), num_classes,
                                 dtype=dtype),
                      batch["extra_has_deletion"][..., None],
                      tf.cast(batch["extra_deletion_value"], dtype)[..., None]], axis=-1)


def template_angle_feat(batch: Batch, num_classes: int) -> tf.Tensor:
    """Template aatype one-hot (22) + torsion sin/cos (14) + alt (14) + mask (7) → 57."""
    sin_cos = batch["template_torsion_angles_sin_cos"]
    alt = tf.cast(batch["template_alt_torsion_angles_sin_cos"], sin_cos.dtype)
    return tf.concat([tf.one_hot(tf.cast(batch["template_aatype"], tf.int64), num_classes,
                                 dtype=sin_cos.dtype),
                      _flatten_last_two(sin_cos), _flatten_last_two(alt),
                      tf.cast(batch["template_torsion_angles_mask"], sin_cos.dtype)], axis=-1)


def template_pair_feat(batch: Batch, spec: ModelSpec, dtype: tf.DType) -> tf.Tensor:
    """The 88 pair channels of ONE template (batch tensors without the template dim).

    39 squared-distance bins of the template pseudo-β + its 2-D mask + the aatype one-hot
    of residue j, then of residue i + 3 unit-vector channels (zero: the benchmark's
    ``use_unit_vector=False``) + the 2-D backbone (N, CA, C) mask; everything is then
    multiplied by that backbone mask.

    Every channel is 0 or 1, so computing in at least float32 and casting the result to
    `dtype` gives the values of a computation in `dtype` wherever no distance moves a bin.
    The bin edges are squared in float32 whatever `dtype` (as the reference's, made with
    torch's default dtype).
    """
    wide = at_least_fp32(tf.as_dtype(dtype))
    pb = tf.cast(batch["template_pseudo_beta"], wide)
    pb_mask = tf.cast(batch["template_pseudo_beta_mask"], wide)
    pb_mask_2d = pb_mask[..., :, None] * pb_mask[..., None, :]
    d2 = tf.reduce_sum(tf.square(pb[..., :, None, :] - pb[..., None, :, :]), axis=-1,
                       keepdims=True)
    lower = tf.square(tf.linspace(tf.constant(spec.template_dgram_min_bin, tf.float32),
                                  tf.constant(spec.template_dgram_max_bin, tf.float32),
                                  spec.template_dgram_num_bins))
    upper = tf.concat([lower[1:], tf.constant([spec.template_feat_inf], tf.float32)], axis=0)
    dgram = tf.cast((d2 > tf.cast(lower, wide)) & (d2 < tf.cast(upper, wide)), wide)
    n_res = tf.shape(pb)[-2]
    onehot = tf.one_hot(tf.cast(batch["template_aatype"], tf.int64),
                        spec.template_aatype_classes, dtype=wide)
    pair_shape = tf.concat([tf.shape(onehot)[:-2], [n_res, n_res, tf.shape(onehot)[-1]]],
                           axis=0)
    aa_j = tf.broadcast_to(onehot[..., None, :, :], pair_shape)
    aa_i = tf.broadcast_to(onehot[..., :, None, :], pair_shape)
    atom_mask = tf.cast(batch["template_all_atom_mask"], wide)
    n, ca, c = (rc.ATOM_ORDER[a] for a in ("N", "CA", "C"))
    bb = atom_mask[..., n] * atom_mask[..., ca] * atom_mask[..., c]
    bb_2d = (bb[..., :, None] * bb[..., None, :])[..., None]
    unit_vector = tf.zeros(tf.concat([tf.shape(d2)[:-1], [3]], axis=0), wide)
    feat = tf.concat([dgram, pb_mask_2d[..., None], aa_j, aa_i, unit_vector, bb_2d], axis=-1)
    return tf.cast(feat * bb_2d, dtype)


def _flatten_last_two(x: tf.Tensor) -> tf.Tensor:
    """[*, A, B] → [*, A·B]."""
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([shape[:-2], [shape[-2] * shape[-1]]], axis=0))
