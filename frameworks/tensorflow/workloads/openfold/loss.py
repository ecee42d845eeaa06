"""The OpenFold training loss exactly as the MLPerf-HPC reference computes it (REF
``openfold/openfold/loss.py``, ``AlphaFoldLoss``; facts: shared/spec/openfold.md §4), in
TensorFlow — the mirror of ``sciperf_pytorch.workloads.openfold.loss``, function for function.

Per sample b (every term is a [B] tensor first)::

    total_b = 1.0·fape + 1.0·chi + 0.3·distogram + 2.0·masked_msa + 0.01·plddt
              + 0.0·experimentally_resolved + 0.0·violation
    loss    = mean_b( sqrt(min(seq_length_b, N_res)) · total_b )

A weighted term with a NaN or inf anywhere in the batch is replaced by zeros (for every
sample, with no gradient), as the reference does; the two zero-weight terms are still
computed every step because the reference computes them (their NaNs would zero them too).

What the reference fixes and this module reproduces, quirks included (each is marked
"REF quirk" where it is written), is listed in the PyTorch module's docstring; the terms:
FAPE (0.5·backbone over every structure-module iteration, blended clamped/unclamped by
``use_clamped_fape``, + 0.5·side chain against the renamed ground truth), supervised chi
with the angle-norm penalty, distogram, masked MSA, pLDDT (against the detached lDDT-Cα),
experimentally resolved and the violation loss.

Interface: as the PyTorch module's. :func:`loss` takes the model's output dict and the
feature dict of ONE recycling pass (the caller slices every feature's trailing recycling
dimension to its last pass); every tensor has a leading batch dimension B; structure-module
outputs are read from ``outputs["sm"][name]`` or the flat ``outputs["sm_" + name]``.

TensorFlow specifics, none of which changes a value:

* Everything runs inside ``tf.function``: nothing branches in Python on a tensor's value
  (the NaN/inf drop is a ``tf.where``), residue counts may be dynamic.
* TensorFlow does not promote dtypes, so :func:`per_sample_terms` reads the model outputs in
  at least float32 (a bf16/fp16 head is promoted: the loss math is never half precision)
  and casts the floating features to that dtype; the term functions expect matching
  dtypes. float64 outputs keep the whole loss in float64.
* PyTorch cuts a dropped term from the graph by replacing it with a fresh leaf. A
  ``tf.where`` alone would send a zero cotangent back through the dropped term, and
  0·NaN is NaN; so :func:`loss` gives every term its own view of the model outputs whose
  gradient is *selected* away (not multiplied) when the term is dropped (:class:`_Cut`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.spec import LOSS_WEIGHTS as W
from sciperf_tensorflow.workloads.openfold import rigids
from sciperf_tensorflow.workloads.openfold.primitives import at_least_fp32

__all__ = ["TERMS", "LossConfig", "backbone_fape", "chi_loss", "distogram_loss",
           "experimentally_resolved_loss", "fape", "lddt", "lddt_ca", "loss",
           "masked_msa_loss", "per_sample_terms", "plddt_loss", "renamed_ground_truth",
           "sidechain_fape", "violation_loss"]

Tensors = Mapping[str, tf.Tensor]

# The reference's per-sample loss terms, in its order and with its names (they are also the
# names of the logged breakdown, so logs compare term by term).
TERMS = ("fape", "supervised_chi", "distogram", "masked_msa", "plddt_loss",
         "experimentally_resolved", "violation")

# Numerical guards the reference hard-codes inside its violation functions (not in its config).
BOND_EPS = 1e-6  # inside the square roots of the between-residue bond/angle loss
DIST_EPS = 1e-10  # inside the square roots of atom-pair distances (clashes, renaming)
MASKED_MEAN_EPS = 1e-4  # the reference's _masked_mean (chi loss)


@dataclass(frozen=True)
class LossConfig:
    """Weights and knobs of the loss, defaulting to the reference's ``LossConfig`` for the
    ``initial_training`` preset (REF openfold/config.py; the weights are the spec's
    ``LOSS_WEIGHTS``, what MLLOG logs). The ``*_eps`` are the reference's
    per-term regularisers; they change the value in the last digits, so they stay knobs."""

    fape_weight: float = W["fape"]
    fape_backbone_weight: float = W["fape_backbone"]
    fape_sidechain_weight: float = W["fape_sidechain"]
    fape_backbone_clamp: float = 10.0  # Å
    fape_backbone_length_scale: float = 10.0  # Å
    fape_sidechain_clamp: float = 10.0  # Å
    fape_sidechain_length_scale: float = 10.0  # Å
    fape_eps: float = 1e-4
    chi_loss_weight: float = W["supervised_chi"]  # weight of the whole supervised chi term
    chi_weight: float = 0.5  # the squared-chi-error part inside it
    angle_norm_weight: float = 0.01  # the |‖angle‖ − 1| part inside it
    chi_eps: float = 1e-8
    distogram_weight: float = W["distogram"]
    distogram_min_bin: float = 2.3125  # Å
    distogram_max_bin: float = 21.6875  # Å
    distogram_bins: int = 64
    distogram_eps: float = 1e-8
    masked_msa_weight: float = W["masked_msa"]
    masked_msa_classes: int = 23  # 20 amino acids, X, gap, mask token
    masked_msa_eps: float = 1e-8
    plddt_weight: float = W["plddt"]
    plddt_cutoff: float = 15.0  # Å, lDDT inclusion radius
    plddt_bins: int = 50
    plddt_eps: float = 1e-8
    min_resolution: float = 0.1  # Å; pLDDT and experimentally-resolved apply inside
    max_resolution: float = 3.0  # Å   [min_resolution, max_resolution]
    experimentally_resolved_weight: float = W["experimentally_resolved"]
    experimentally_resolved_eps: float = 1e-8
    violation_weight: float = W["violation"]
    violation_tolerance_factor: float = 12.0  # stddevs of the PDB bond/angle distributions
    clash_overlap_tolerance: float = 1.5  # Å
    violation_eps: float = 1e-8

    def weights(self) -> dict[str, float]:
        """The weight of each of :data:`TERMS`."""
        return {"fape": self.fape_weight, "supervised_chi": self.chi_loss_weight,
                "distogram": self.distogram_weight, "masked_msa": self.masked_msa_weight,
                "plddt_loss": self.plddt_weight,
                "experimentally_resolved": self.experimentally_resolved_weight,
                "violation": self.violation_weight}


# ---------------------------------------------------------------------------- helpers


class _View(Mapping):
    """A read-only view of a (possibly nested) dict of tensors whose values pass through
    ``convert`` when read: only what a term reads is converted, and nested dicts (the
    structure module's ``outputs["sm"]``) stay dicts."""

    def __init__(self, data: Mapping, convert: Callable[[Any], tf.Tensor]) -> None:
        self._data = data
        self._convert = convert

    def __getitem__(self, key: str) -> Any:
        value = self._data[key]
        if isinstance(value, Mapping):
            return _View(value, self._convert)
        return self._convert(value)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class _Cut:
    """Where the gradient of one term is cut when the term is dropped: an identity on each
    model output the term reads whose backward *selects* the incoming gradient or zeros
    (``tf.where``, so a NaN computed inside the dropped term never reaches the model: a
    multiplication by 0 would keep it). ``keep`` (a scalar bool tensor) is set by
    :func:`loss` once the term's value exists; the gradient function reads it only when
    the gradient is built, which is always later."""

    def __init__(self) -> None:
        self.keep: tf.Tensor | None = None

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        @tf.custom_gradient
        def gate(x: tf.Tensor) -> tuple[tf.Tensor, Callable]:
            def grad(g: tf.Tensor) -> tf.Tensor:
                g = tf.convert_to_tensor(g)
                if self.keep is None:  # differentiated outside loss(): nothing is dropped
                    return g
                return tf.where(self.keep, g, tf.zeros_like(g))

            return tf.identity(x), grad

        return gate(x)


def _model_output(x: Any) -> tf.Tensor:
    """A model output in at least float32: the loss math is never half precision."""
    x = tf.convert_to_tensor(x)
    return tf.cast(x, at_least_fp32(x.dtype)) if x.dtype.is_floating else x


def _sm(outputs: Mapping, name: str) -> tf.Tensor:
    """A structure-module output: nested ``outputs["sm"][name]`` or the reference's flat
    ``outputs["sm_" + name]`` (both spellings exist; the loss reads either)."""
    nested = outputs.get("sm")
    if isinstance(nested, Mapping) and name in nested:
        return nested[name]
    return outputs["sm_" + name]


def _rigid(t: tf.Tensor) -> rigids.Rigid:
    """Frames from the 7-vector (quaternion, translation) or the 4×4 homogeneous form. The
    quaternion is not renormalised and becomes a rotation matrix before use, as in REF."""
    if t.shape[-1] == 7:
        return rigids.Rigid.from_tensor_7(t)
    return rigids.Rigid.from_tensor_4x4(t)


def _float(x: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """``x`` (a mask, bool or numeric) in ``like``'s dtype: TensorFlow does not promote."""
    return tf.cast(x, like.dtype)


def _cross_entropy(logits: tf.Tensor, labels: tf.Tensor, classes: int,
                   name: str) -> tf.Tensor:
    """−log softmax(logits)[label] per position (the reference's one-hot · log-softmax sum,
    which also insists on ``classes`` logits)."""
    if logits.shape[-1] != classes:
        raise ValueError(f"{name} has {logits.shape[-1]} classes, expected {classes}")
    log_p = tf.nn.log_softmax(logits, axis=-1)
    labels = tf.cast(labels, tf.int32)
    return -tf.gather(log_p, labels[..., None], batch_dims=labels.shape.rank)[..., 0]


def _masked_mean(mask: tf.Tensor, value: tf.Tensor, axes: tuple[int, ...],
                 eps: float = MASKED_MEAN_EPS) -> tf.Tensor:
    mask = tf.broadcast_to(mask, tf.shape(value))
    return tf.reduce_sum(mask * value, axis=axes) / (eps + tf.reduce_sum(mask, axis=axes))


def _resolution_gate(resolution: tf.Tensor, config: LossConfig) -> tf.Tensor:
    """True where the structure's resolution is inside the configured window."""
    return (resolution >= config.min_resolution) & (resolution <= config.max_resolution)


def _pair_distances(x: tf.Tensor, y: tf.Tensor, eps: float) -> tf.Tensor:
    """sqrt(eps + ‖x_i − y_j‖²) for every pair of points of [..., N, 3] and [..., M, 3]."""
    diff = x[..., :, None, :] - y[..., None, :, :]
    return tf.sqrt(eps + tf.reduce_sum(diff ** 2, axis=-1))


def _atom_pair_distances(x: tf.Tensor) -> tf.Tensor:
    """Distances [B, i, j, a, b] between atom a of residue i and atom b of residue j, of
    atom14 positions [B, N, 14, 3] (sqrt(DIST_EPS + d²))."""
    b, n = tf.shape(x)[0], tf.shape(x)[1]
    flat = tf.reshape(x, [b, -1, 3])
    d = tf.reshape(_pair_distances(flat, flat, DIST_EPS), [b, n, 14, n, 14])
    return tf.transpose(d, [0, 1, 3, 2, 4])


# ---------------------------------------------------------------------------- FAPE


def fape(pred_frames: rigids.Rigid, true_frames: rigids.Rigid, frames_mask: tf.Tensor,
         pred_points: tf.Tensor, true_points: tf.Tensor, points_mask: tf.Tensor,
         length_scale: float, clamp: float | None, eps: float) -> tf.Tensor:
    """Frame-aligned point error (AF2 supplement Alg. 28): every point expressed in every
    frame's local coordinates, the distances between prediction and truth (sqrt(d² + eps),
    clamped), divided by the length scale, summed over masked frames × points and divided by
    (eps + #frames)·(eps + #points). Frames [..., F], points [..., P, 3] → [...]."""
    local_pred = pred_frames[..., None].invert_apply(pred_points[..., None, :, :])
    local_true = true_frames[..., None].invert_apply(true_points[..., None, :, :])
    error = tf.sqrt(tf.reduce_sum((local_pred - local_true) ** 2, axis=-1) + eps)
    if clamp is not None:
        error = tf.clip_by_value(error, 0.0, clamp)
    error = error / length_scale * frames_mask[..., :, None] * points_mask[..., None, :]
    norm = ((eps + tf.reduce_sum(frames_mask, axis=-1))
            * (eps + tf.reduce_sum(points_mask, axis=-1)))
    return tf.reduce_sum(error, axis=(-1, -2)) / norm


def backbone_fape(pred_frames: tf.Tensor, batch: Tensors, config: LossConfig) -> tf.Tensor:
    """Backbone FAPE [B]: the frames of each structure-module iteration [B, I, N, 7|4×4]
    (translations in Å) against ``backbone_rigid_tensor``, frames and points (the frame
    origins) masked by ``backbone_rigid_mask``, averaged over the iterations; per sample
    clamped or not by ``use_clamped_fape`` (clamped when the feature is absent)."""
    pred = _rigid(pred_frames)
    true = rigids.Rigid.from_tensor_4x4(batch["backbone_rigid_tensor"])[:, None]
    mask = batch["backbone_rigid_mask"][:, None]

    def per_iteration(clamp: float | None) -> tf.Tensor:
        return fape(pred, true, mask, pred.trans, true.trans, mask,
                    config.fape_backbone_length_scale, clamp, config.fape_eps)

    value = per_iteration(config.fape_backbone_clamp)  # [B, I]
    use_clamped = batch.get("use_clamped_fape")
    if use_clamped is not None:  # the feature's presence, not its value
        use_clamped = _float(use_clamped, value)[:, None]
        value = value * use_clamped + per_iteration(None) * (1 - use_clamped)
    return tf.reduce_mean(value, axis=1)


def renamed_ground_truth(atom14_pred: tf.Tensor, batch: Tensors) -> dict[str, tf.Tensor]:
    """AF2 supplement Alg. 26: per residue, keep the ground truth's naming of its ambiguous
    atoms (ASP OD1/OD2, GLU OE1/OE2, the PHE/TYR ring pairs) or swap it, whichever
    gives the smaller sum of |d_pred − d_true| from its ambiguous atoms to every
    non-ambiguous atom of the chain. ``atom14_pred`` [B, N, 14, 3] (last iteration).

    Returns ``alt_naming_is_better`` [B, N] (1.0 where swapped), ``renamed_atom14_gt_positions``
    and ``renamed_atom14_gt_exists``. Nothing here carries a gradient."""
    true = batch["atom14_gt_positions"]
    alt = batch["atom14_alt_gt_positions"]
    exists = batch["atom14_gt_exists"]
    ambiguous = batch["atom14_atom_is_ambiguous"]

    pred_d = _atom_pair_distances(tf.stop_gradient(atom14_pred))  # a choice, not a gradient
    # pairs (ambiguous atom a of residue i, non-ambiguous atom b of residue j), both present
    mask = ((exists * ambiguous)[:, :, None, :, None]
            * (exists * (1.0 - ambiguous))[:, None, :, None, :])

    def mismatch(x: tf.Tensor) -> tf.Tensor:
        err = tf.sqrt(DIST_EPS + (pred_d - _atom_pair_distances(x)) ** 2)
        return tf.reduce_sum(mask * err, axis=(-1, -2, -3))

    better = tf.stop_gradient(_float(mismatch(alt) < mismatch(true), atom14_pred))
    return {
        "alt_naming_is_better": better,
        "renamed_atom14_gt_positions": tf.where(better[..., None, None] > 0, alt, true),
        "renamed_atom14_gt_exists": tf.where(
            better[..., None] > 0, batch["atom14_alt_gt_exists"], exists),
    }


def sidechain_fape(sidechain_frames: tf.Tensor, atom14_pred: tf.Tensor, batch: Tensors,
                   renamed: Mapping[str, tf.Tensor], config: LossConfig) -> tf.Tensor:
    """Side-chain FAPE [B] of the last iteration: all 8 rigid groups of every residue
    (``sidechain_frames`` [B, N, 8, 4, 4], existing groups only) against the ground-truth
    groups in the better naming, over all 14 atom slots ``atom14_pred`` [B, N, 14, 3] present
    in the renamed truth. Always clamped."""
    b = tf.shape(atom14_pred)[0]
    swap = renamed["alt_naming_is_better"][..., None, None, None] > 0
    true_frames = tf.where(swap, batch["rigidgroups_alt_gt_frames"],
                           batch["rigidgroups_gt_frames"])
    return fape(
        rigids.Rigid.from_tensor_4x4(tf.reshape(sidechain_frames, [b, -1, 4, 4])),
        rigids.Rigid.from_tensor_4x4(tf.reshape(true_frames, [b, -1, 4, 4])),
        tf.reshape(batch["rigidgroups_gt_exists"], [b, -1]),
        tf.reshape(atom14_pred, [b, -1, 3]),
        tf.reshape(renamed["renamed_atom14_gt_positions"], [b, -1, 3]),
        tf.reshape(renamed["renamed_atom14_gt_exists"], [b, -1]),
        config.fape_sidechain_length_scale, config.fape_sidechain_clamp, config.fape_eps)


# ---------------------------------------------------------------------------- torsions


def chi_loss(angles: tf.Tensor, unnormalized_angles: tf.Tensor, batch: Tensors,
             config: LossConfig) -> tf.Tensor:
    """Supervised chi loss [B] (AF2 supplement Alg. 27) over every iteration: angles
    [B, I, N, 7, 2] (sin, cos) whose last 4 are chi1–4, truth ``chi_angles_sin_cos``
    [B, N, 4, 2] masked by ``chi_mask``; a π-periodic chi may match the truth rotated by π
    (sin, cos negated). Plus the norm penalty on all 7 unnormalised angles (``seq_mask``)."""
    periodic = tf.gather(_table(rc.CHI_PI_PERIODIC, angles), batch["aatype"])  # [B, N, 4]
    true = batch["chi_angles_sin_cos"][:, None]  # [B, 1, N, 4, 2]
    pred = angles[..., 3:, :]
    flip = (1.0 - 2.0 * periodic)[:, None, :, :, None]
    error = tf.minimum(tf.reduce_sum((true - pred) ** 2, axis=-1),
                       tf.reduce_sum((flip * true - pred) ** 2, axis=-1))
    chi = _masked_mean(batch["chi_mask"][:, None], error, axes=(-1, -2, -3))

    norm = tf.sqrt(tf.reduce_sum(unnormalized_angles ** 2, axis=-1) + config.chi_eps)
    norm_error = tf.abs(norm - 1.0)
    angle_norm = _masked_mean(batch["seq_mask"][:, None, :, None], norm_error,
                              axes=(-1, -2, -3))
    return config.chi_weight * chi + config.angle_norm_weight * angle_norm


# ---------------------------------------------------------------------------- heads


def distogram_loss(logits: tf.Tensor, batch: Tensors, config: LossConfig) -> tf.Tensor:
    """Distogram cross-entropy [B] over the pairs of residues with a pseudo-β (i = j too).
    Bins: squared distance against squared boundaries; the reference builds its boundaries
    in float32 whatever the input dtype, and so does this function (identical bins)."""
    bounds = tf.linspace(tf.constant(config.distogram_min_bin, tf.float32),
                         tf.constant(config.distogram_max_bin, tf.float32),
                         config.distogram_bins - 1) ** 2
    x = batch["pseudo_beta"]
    d2 = tf.reduce_sum((x[..., :, None, :] - x[..., None, :, :]) ** 2, axis=-1, keepdims=True)
    true_bins = tf.reduce_sum(tf.cast(d2 > tf.cast(bounds, d2.dtype), tf.int32), axis=-1)
    errors = _cross_entropy(logits, true_bins, config.distogram_bins, "distogram_logits")
    m = batch["pseudo_beta_mask"]
    pair_mask = m[..., :, None] * m[..., None, :]
    return (tf.reduce_sum(errors * pair_mask, axis=(-1, -2))
            / (config.distogram_eps + tf.reduce_sum(pair_mask, axis=(-1, -2))))


def masked_msa_loss(logits: tf.Tensor, batch: Tensors, config: LossConfig) -> tf.Tensor:
    """BERT masked-MSA cross-entropy [B] over the masked positions (``bert_mask``) of the
    cluster rows, target ``true_msa``. REF computes Σ·½ / (eps + ½·Σmask) (an fp16 guard),
    i.e. Σ / (2·eps + Σmask), written so here."""
    mask = batch["bert_mask"]
    errors = _cross_entropy(logits, batch["true_msa"], config.masked_msa_classes,
                            "masked_msa_logits")
    return (tf.reduce_sum(errors * mask, axis=(-1, -2))
            / (2.0 * config.masked_msa_eps + tf.reduce_sum(mask, axis=(-1, -2))))


def lddt(pred: tf.Tensor, true: tf.Tensor, mask: tf.Tensor, cutoff: float = 15.0,
         eps: float = 1e-10, per_residue: bool = True) -> tf.Tensor:
    """lDDT of points [..., N, 3] (no superposition, no stereochemistry; spec §6): pairs
    i ≠ j with both points present (``mask`` [..., N]) and true distance < cutoff score
    ¼·Σ_{t∈{0.5,1,2,4}} [|d_true − d_pred| < t]; distances are sqrt(eps + d²). Global
    [...]: (eps + Σ scores)/(eps + #pairs) over ordered pairs; per residue [..., N]: the same
    over j for each i (a residue with no scored pair gets eps/eps = 1)."""
    mask = _float(mask, true)
    d_true = _pair_distances(true, true, eps)
    d_pred = _pair_distances(pred, pred, eps)
    off_diagonal = 1.0 - tf.eye(tf.shape(mask)[-1], dtype=mask.dtype)
    scored = (_float(d_true < cutoff, mask) * mask[..., :, None] * mask[..., None, :]
              * off_diagonal)
    delta = tf.abs(d_true - d_pred)
    score = 0.25 * sum(_float(delta < t, delta) for t in (0.5, 1.0, 2.0, 4.0))
    axes = (-1,) if per_residue else (-2, -1)
    return ((eps + tf.reduce_sum(scored * score, axis=axes))
            / (eps + tf.reduce_sum(scored, axis=axes)))


def lddt_ca(all_atom_pred: tf.Tensor, all_atom_true: tf.Tensor,
            all_atom_mask: tf.Tensor, cutoff: float = 15.0, eps: float = 1e-10,
            per_residue: bool = True) -> tf.Tensor:
    """:func:`lddt` of the CA atoms of atom37 coordinates [..., N, 37, 3] (mask [..., N, 37]).
    The benchmark's metric is ``per_residue=False`` with eps 1e-8 (REF validation_metrics)."""
    ca = rc.ATOM_ORDER["CA"]
    return lddt(all_atom_pred[..., ca, :], all_atom_true[..., ca, :],
                _float(all_atom_mask[..., ca], all_atom_pred), cutoff, eps, per_residue)


def plddt_loss(logits: tf.Tensor, final_atom_positions: tf.Tensor, batch: Tensors,
               config: LossConfig) -> tf.Tensor:
    """pLDDT cross-entropy [B]: target bin floor(bins · lDDT-Cα_i) (clamped to the last bin)
    of the detached per-residue lDDT-Cα of the final prediction (REF passes its config eps,
    1e-8, as the lDDT eps), averaged over residues with a true CA, gated by resolution."""
    mask = _float(batch["all_atom_mask"][..., rc.ATOM_ORDER["CA"]], logits)
    score = tf.stop_gradient(lddt_ca(final_atom_positions, batch["all_atom_positions"],
                                     batch["all_atom_mask"], config.plddt_cutoff,
                                     config.plddt_eps, per_residue=True))
    bins = tf.minimum(tf.cast(tf.floor(score * config.plddt_bins), tf.int32),
                      config.plddt_bins - 1)
    errors = _cross_entropy(logits, bins, config.plddt_bins, "lddt_logits")
    value = (tf.reduce_sum(errors * mask, axis=-1)
             / (config.plddt_eps + tf.reduce_sum(mask, axis=-1)))
    return value * _float(_resolution_gate(batch["resolution"], config), value)


def experimentally_resolved_loss(logits: tf.Tensor, batch: Tensors,
                                 config: LossConfig) -> tf.Tensor:
    """Sigmoid cross-entropy [B] of the atom37 "resolved" logits against ``all_atom_mask``,
    summed over the atoms that exist for the residue type, divided by their number, gated
    by resolution."""
    exists = batch["atom37_atom_exists"]
    errors = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=_float(batch["all_atom_mask"], logits), logits=logits)
    value = (tf.reduce_sum(errors * exists, axis=(-1, -2))
             / (config.experimentally_resolved_eps + tf.reduce_sum(exists, axis=(-1, -2))))
    return value * _float(_resolution_gate(batch["resolution"], config), value)


# ---------------------------------------------------------------------------- violations


def _table(array: np.ndarray | list, like: tf.Tensor) -> tf.Tensor:
    """A residue-constants table as a constant of ``like``'s dtype."""
    return tf.constant(np.array(array), dtype=like.dtype)


@functools.lru_cache(maxsize=4)
def _atom14_bounds(overlap: float, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) [21, 14, 14] allowed intra-residue atom distances (built once)."""
    bounds = rc.atom14_dists_bounds(overlap, factor)
    return np.asarray(bounds["lower_bound"]), np.asarray(bounds["upper_bound"])


def _bond_terms(pos: tf.Tensor, exists: tf.Tensor, residue_index: tf.Tensor,
                aatype: tf.Tensor, factor: float) -> tf.Tensor:
    """Flat-bottom peptide-geometry loss [B] between consecutive residues (AF2 supplement
    eq. 44–45): C–N bond length (longer before a proline), CA–C–N and C–N–CA angle cosines,
    each relu(|error| − factor·stddev) averaged over the bonded pairs, the three summed."""
    this_ca, this_c = pos[:, :-1, 1], pos[:, :-1, 2]
    next_n, next_ca = pos[:, 1:, 0], pos[:, 1:, 1]
    ca_ok, c_ok = exists[:, :-1, 1], exists[:, :-1, 2]
    n_ok, next_ca_ok = exists[:, 1:, 0], exists[:, 1:, 1]
    no_gap = _float((residue_index[:, 1:] - residue_index[:, :-1]) == 1, pos)

    def flat_bottom(error: tf.Tensor, tolerance: float | tf.Tensor,
                    mask: tf.Tensor) -> tf.Tensor:
        per_pair = tf.nn.relu(tf.sqrt(BOND_EPS + error ** 2) - tolerance)
        return tf.reduce_sum(mask * per_pair, axis=-1) / (tf.reduce_sum(mask, axis=-1)
                                                          + BOND_EPS)

    def length(v: tf.Tensor) -> tf.Tensor:
        return tf.sqrt(BOND_EPS + tf.reduce_sum(v ** 2, axis=-1))

    def float32_choice(pro: tf.Tensor, values: tuple[float, float]) -> tf.Tensor:
        return tf.where(pro, tf.constant(values[1], tf.float32),
                        tf.constant(values[0], tf.float32))

    c_n_len = length(this_c - next_n)
    before_pro = aatype[:, 1:] == rc.RESTYPES.index("P")
    # REF holds the target C–N length and its tolerance (factor·stddev, a float32 product)
    # in float32 in every precision (its bool-mask arithmetic; PyTorch's torch.where of two
    # Python floats): a ~1e-8 Å effect, kept so that float64 checks match REF exactly.
    c_n_target = float32_choice(before_pro, rc.BETWEEN_RES_BOND_LENGTH_C_N)
    c_n_tolerance = tf.constant(factor, tf.float32) * float32_choice(
        before_pro, rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N)
    c_n = flat_bottom(c_n_len - _float(c_n_target, pos), _float(c_n_tolerance, pos),
                      c_ok * n_ok * no_gap)

    c_to_ca = (this_ca - this_c) / length(this_ca - this_c)[..., None]
    c_to_n = (next_n - this_c) / c_n_len[..., None]
    n_to_ca = (next_ca - next_n) / length(next_ca - next_n)[..., None]
    # REF quirk (from AlphaFold): the CA–C–N angle's tolerance uses the C–N *bond length*
    # stddev, not the angle's own (0.014 instead of 0.0311).
    ca_c_n = flat_bottom(
        tf.reduce_sum(c_to_ca * c_to_n, axis=-1) - rc.BETWEEN_RES_COS_ANGLES_CA_C_N[0],
        factor * rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N[0], ca_ok * c_ok * n_ok * no_gap)
    c_n_ca = flat_bottom(
        tf.reduce_sum(-c_to_n * n_to_ca, axis=-1) - rc.BETWEEN_RES_COS_ANGLES_C_N_CA[0],
        factor * rc.BETWEEN_RES_COS_ANGLES_C_N_CA[1], c_ok * n_ok * next_ca_ok * no_gap)
    return c_n + ca_c_n + c_n_ca


def _clash_sum(pos: tf.Tensor, exists: tf.Tensor, radius: tf.Tensor,
               residue_index: tf.Tensor, overlap: float) -> tf.Tensor:
    """Σ over atom pairs of different residues (each unordered pair once, by residue index)
    of relu(r_a + r_b − overlap − d) [B] (AF2 supplement eq. 46, between residues). Not
    clashes: the peptide C(i)–N(i+1) bond and CYS SG–SG (a disulfide bridge)."""
    d = _atom_pair_distances(pos)  # [B, i, j, a, b]
    ri = residue_index[:, :, None, None, None]
    rj = residue_index[:, None, :, None, None]
    mask = exists[:, :, None, :, None] * exists[:, None, :, None, :] * _float(ri < rj, pos)
    atom_c, atom_n = 2, 0  # atom14 slots, the same in every residue type
    sg = rc.RESTYPE_NAME_TO_ATOM14_NAMES["CYS"].index("SG")
    bonded = np.zeros((14, 14))
    not_clash = np.zeros((14, 14))
    bonded[atom_c, atom_n] = 1.0
    not_clash[sg, sg] = 1.0  # REF quirk: slot 5 of any residue pair, not only two CYS
    mask = (mask * (1.0 - _float(ri + 1 == rj, pos) * _table(bonded, pos))
            * (1.0 - _table(not_clash, pos)))
    lower = mask * (radius[:, :, None, :, None] + radius[:, None, :, None, :])
    return tf.reduce_sum(mask * tf.nn.relu(lower - overlap - d), axis=(1, 2, 3, 4))


def _within_residue_sum(pos: tf.Tensor, exists: tf.Tensor, aatype: tf.Tensor,
                        config: LossConfig) -> tf.Tensor:
    """Σ over ordered atom pairs inside each residue of the distance outside the allowed
    [lower, upper] range (bond lengths ± factor·stddev, else van der Waals − overlap) [B]."""
    lower_np, upper_np = _atom14_bounds(config.clash_overlap_tolerance,
                                        config.violation_tolerance_factor)
    lower = tf.gather(_table(lower_np, pos), aatype)
    upper = tf.gather(_table(upper_np, pos), aatype)
    eye = tf.eye(14, dtype=pos.dtype)
    mask = exists[..., :, None] * exists[..., None, :] * (1.0 - eye)
    d = _pair_distances(pos, pos, DIST_EPS)
    error = mask * (tf.nn.relu(lower - d) + tf.nn.relu(d - upper))
    return tf.reduce_sum(error, axis=(-1, -2, -3))


def violation_loss(atom14_pred: tf.Tensor, batch: Tensors, config: LossConfig) -> tf.Tensor:
    """Structural-violation loss [B] of the last iteration's atom14 positions (AF2
    supplement §1.9.11): the three peptide terms + (clashes between residues + bound
    violations within residues) per existing atom. The reference sums its per-atom loss
    sums, which count every pair from both ends: hence the factor 2 on both pair sums."""
    exists = _float(batch["atom14_atom_exists"], atom14_pred)
    aatype = batch["aatype"]
    residue_index = batch["residue_index"]
    factor = config.violation_tolerance_factor
    bonds = _bond_terms(atom14_pred, exists, residue_index, aatype, factor)

    element_radius = [rc.VAN_DER_WAALS_RADIUS[name[0]] for name in rc.ATOM_TYPES]
    radius = exists * tf.gather(_table(element_radius, atom14_pred),
                                batch["residx_atom14_to_atom37"])
    pair_sums = (_clash_sum(atom14_pred, exists, radius, residue_index,
                            config.clash_overlap_tolerance)
                 + _within_residue_sum(atom14_pred, exists, aatype, config))
    atoms = tf.reduce_sum(exists, axis=(-1, -2))
    return bonds + 2.0 * pair_sums / (config.violation_eps + atoms)


# ---------------------------------------------------------------------------- total


def per_sample_terms(outputs: Mapping, batch: Tensors, config: LossConfig = LossConfig(),
                     cuts: Mapping[str, _Cut] | None = None) -> dict[str, tf.Tensor]:
    """Every unweighted term of :data:`TERMS` as a [B] tensor (connected to the graph).

    The model outputs are read in at least float32 and the floating features are cast to
    their dtype (module docstring). ``cuts`` (from :func:`loss`) gives each term its own
    gradient gate on the outputs it reads."""
    dtype = _model_output(_sm(outputs, "positions")).dtype

    def feature(x: Any) -> tf.Tensor:
        x = tf.convert_to_tensor(x)
        return tf.cast(x, dtype) if x.dtype.is_floating else x

    def view(term: str) -> Mapping:
        if cuts is None:
            return _View(outputs, _model_output)
        cut = cuts[term]
        return _View(outputs, lambda x: cut(_model_output(x)))

    batch = _View(batch, feature)
    fape_outputs, violation_outputs = view("fape"), view("violation")
    positions = _sm(fape_outputs, "positions")  # [B, I, N, 14, 3]
    last_atoms = positions[:, -1]
    renamed = renamed_ground_truth(last_atoms, batch)
    fape_value = (
        config.fape_backbone_weight * backbone_fape(_sm(fape_outputs, "frames"), batch, config)
        + config.fape_sidechain_weight * sidechain_fape(
            _sm(fape_outputs, "sidechain_frames")[:, -1], last_atoms, batch, renamed, config))
    chi_outputs = view("supervised_chi")
    plddt_outputs = view("plddt_loss")
    return {
        "fape": fape_value,
        "supervised_chi": chi_loss(_sm(chi_outputs, "angles"),
                                   _sm(chi_outputs, "unnormalized_angles"), batch, config),
        "distogram": distogram_loss(view("distogram")["distogram_logits"], batch, config),
        "masked_msa": masked_msa_loss(view("masked_msa")["masked_msa_logits"], batch, config),
        "plddt_loss": plddt_loss(plddt_outputs["lddt_logits"],
                                 plddt_outputs["final_atom_positions"], batch, config),
        "experimentally_resolved": experimentally_resolved_loss(
            view("experimentally_resolved")["experimentally_resolved_logits"], batch, config),
        "violation": violation_loss(_sm(violation_outputs, "positions")[:, -1], batch, config),
    }


def _drop_non_finite(weighted: list[tf.Tensor], cuts: list[_Cut]) -> list[tf.Tensor]:
    """Each weighted term, or zeros where any sample's value is NaN or inf (REF: the term
    is dropped for the whole batch, so no NaN gradient reaches the model). The decision is
    a tensor (no host synchronisation, traceable); the term's cut then selects zeros for
    its gradient as well."""
    kept = []
    for t, cut in zip(weighted, cuts, strict=True):
        cut.keep = tf.reduce_all(tf.math.is_finite(tf.stop_gradient(t)))
        kept.append(tf.where(cut.keep, t, tf.zeros_like(t)))
    return kept


def loss(outputs: Mapping, batch: Tensors,
         config: LossConfig = LossConfig()) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """The training loss: (scalar to differentiate, breakdown without gradient).

    ``batch`` is the feature dict of the LAST recycling pass (every feature's trailing
    recycling dimension sliced with ``[..., -1]``, as REF train.py does), with a leading batch
    dimension. The breakdown holds the batch mean of each unweighted term of :data:`TERMS`,
    ``weighted_total_loss`` (before the length scaling) and ``scaled_weighted_total_loss``
    (the returned value) — the reference's logged names."""
    cuts = {name: _Cut() for name in TERMS}
    terms = per_sample_terms(outputs, batch, config, cuts)
    weights = config.weights()
    weighted = _drop_non_finite([terms[name] * weights[name] for name in TERMS],
                                [cuts[name] for name in TERMS])
    total = sum(weighted[1:], weighted[0])  # [B], summed in REF's order
    # "we multiply the final loss of each training example by the square root of the
    # number of residues after cropping" (AF2 supplement 1.9); float32 as in REF.
    seq_length = tf.cast(batch["seq_length"], tf.float32)
    n_res = tf.cast(tf.shape(batch["aatype"])[1], tf.float32)
    scale = tf.sqrt(tf.minimum(seq_length, n_res))
    scaled = tf.cast(scale, total.dtype) * total
    breakdown = {name: tf.stop_gradient(tf.reduce_mean(value)) for name, value in terms.items()}
    breakdown["weighted_total_loss"] = tf.stop_gradient(tf.reduce_mean(total))
    breakdown["scaled_weighted_total_loss"] = tf.stop_gradient(tf.reduce_mean(scaled))
    return tf.reduce_mean(scaled), breakdown
