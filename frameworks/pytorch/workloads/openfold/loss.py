"""The OpenFold training loss exactly as the MLPerf-HPC reference computes it (REF
``openfold/openfold/loss.py``, ``AlphaFoldLoss``; facts: shared/spec/openfold.md §4).

Per sample b (every term is a [B] tensor first)::

    total_b = 1.0·fape + 1.0·chi + 0.3·distogram + 2.0·masked_msa + 0.01·plddt
              + 0.0·experimentally_resolved + 0.0·violation
    loss    = mean_b( sqrt(min(seq_length_b, N_res)) · total_b )

A weighted term with a NaN or inf anywhere in the batch is replaced by zeros (for every
sample, with no gradient), as the reference does; the two zero-weight terms are still
computed every step because the reference computes them (their NaNs would zero them too).

What the reference fixes and this module reproduces, quirks included (each is marked
"REF quirk" where it is written):

* FAPE = 0.5·backbone + 0.5·side chain, clamp 10 Å, length scale 10 Å, eps 1e-4 both inside
  the square root and in the two normalisers. Backbone: the frames of every structure-module
  iteration against the ground-truth backbone frames, the per-iteration values averaged;
  ``use_clamped_fape`` (per sample, 0 or 1) blends the clamped and the unclamped loss.
  Side chain: the 8 rigid groups × 14 atoms of the last iteration, against the ground truth
  renamed to whichever naming of the ambiguous atoms matches the prediction better
  (:func:`renamed_ground_truth`, AF2 supplement Alg. 26).
* chi: 0.5 × masked mean of the squared (sin, cos) error of chi1–4 over every iteration,
  the π-shifted truth taken where it is closer for π-periodic chis, + 0.01 × masked mean of
  | ‖unnormalised (sin, cos)‖ − 1 | over all 7 angles.
* distogram: 64-bin cross-entropy on squared pseudo-β distances against
  linspace(2.3125, 21.6875, 63)² (float32 boundaries, as the reference), diagonal included.
* masked MSA: 23-class cross-entropy averaged over the BERT-masked positions.
* pLDDT: 50-bin cross-entropy against floor(50 · per-residue lDDT-Cα) of the final prediction
  (detached; a residue with no scored neighbour scores 1, REF quirk of the eps ratio),
  averaged over residues with a true CA, applied when 0.1 ≤ resolution ≤ 3.0.
* experimentally resolved and the violation loss (peptide bond length and angles, clashes
  between residues, bond/clash bounds within residues), both at weight 0.

Interface: :func:`loss` takes the model's output dict and the feature dict of ONE recycling
pass — the reference slices every feature's trailing recycling dimension to its LAST pass
(``t[..., -1]``) before its loss, and so must the caller. Every tensor has a leading batch
dimension B. Structure-module outputs are read from ``outputs["sm"][name]`` (or the
reference's flat ``outputs["sm_" + name]``): ``frames`` [B, I, N, 7] (quaternion + Å
translation, or [B, I, N, 4, 4]), ``sidechain_frames`` [B, I, N, 8, 4, 4], ``positions``
[B, I, N, 14, 3], ``angles``/``unnormalized_angles`` [B, I, N, 7, 2].

Not reproduced: the TM-score loss (disabled in the benchmark's preset), the reference's
printing of a warning for a zeroed term, and its writing of intermediate results back into
``outputs``/``batch`` (this module never mutates its inputs). The violation masks that only
feed the reference's metrics are not computed; only what enters the violation loss is.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.spec import LOSS_WEIGHTS as W
from sciperf_pytorch.workloads.openfold import rigids

__all__ = ["TERMS", "LossConfig", "backbone_fape", "chi_loss", "distogram_loss",
           "experimentally_resolved_loss", "fape", "lddt", "lddt_ca", "loss",
           "masked_msa_loss", "per_sample_terms", "plddt_loss", "renamed_ground_truth",
           "sidechain_fape", "violation_loss"]

Tensors = Mapping[str, torch.Tensor]

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


def _sm(outputs: Mapping, name: str) -> torch.Tensor:
    """A structure-module output: nested ``outputs["sm"][name]`` or the reference's flat
    ``outputs["sm_" + name]`` (both spellings exist; the loss reads either)."""
    nested = outputs.get("sm")
    if isinstance(nested, Mapping) and name in nested:
        return nested[name]
    return outputs["sm_" + name]


def _rigid(t: torch.Tensor) -> rigids.Rigid:
    """Frames from the 7-vector (quaternion, translation) or the 4×4 homogeneous form. The
    quaternion is not renormalised and becomes a rotation matrix before use, as in REF."""
    if t.shape[-1] == 7:
        return rigids.Rigid.from_tensor_7(t)
    return rigids.Rigid.from_tensor_4x4(t)


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor, classes: int,
                   name: str) -> torch.Tensor:
    """−log softmax(logits)[label] per position (the reference's one-hot · log-softmax sum,
    which also insists on ``classes`` logits)."""
    if logits.shape[-1] != classes:
        raise ValueError(f"{name} has {logits.shape[-1]} classes, expected {classes}")
    log_p = torch.log_softmax(logits, dim=-1)
    return -torch.gather(log_p, -1, labels.long().unsqueeze(-1)).squeeze(-1)


def _masked_mean(mask: torch.Tensor, value: torch.Tensor, dims: tuple[int, ...],
                 eps: float = MASKED_MEAN_EPS) -> torch.Tensor:
    mask = mask.expand(value.shape)
    return torch.sum(mask * value, dim=dims) / (eps + torch.sum(mask, dim=dims))


def _resolution_gate(resolution: torch.Tensor, config: LossConfig) -> torch.Tensor:
    """1 where the structure's resolution is inside the configured window, else 0."""
    return (resolution >= config.min_resolution) & (resolution <= config.max_resolution)


def _pair_distances(x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """sqrt(eps + ‖x_i − y_j‖²) for every pair of points of [..., N, 3] and [..., M, 3]."""
    return torch.sqrt(eps + torch.sum((x[..., :, None, :] - y[..., None, :, :]) ** 2, dim=-1))


# ---------------------------------------------------------------------------- FAPE


def fape(pred_frames: rigids.Rigid, true_frames: rigids.Rigid, frames_mask: torch.Tensor,
         pred_points: torch.Tensor, true_points: torch.Tensor, points_mask: torch.Tensor,
         length_scale: float, clamp: float | None, eps: float) -> torch.Tensor:
    """Frame-aligned point error (AF2 supplement Alg. 28): every point expressed in every
    frame's local coordinates, the distances between prediction and truth (sqrt(d² + eps),
    clamped), divided by the length scale, summed over masked frames × points and divided by
    (eps + #frames)·(eps + #points). Frames [..., F], points [..., P, 3] → [...]."""
    local_pred = pred_frames[..., None].invert_apply(pred_points[..., None, :, :])
    local_true = true_frames[..., None].invert_apply(true_points[..., None, :, :])
    error = torch.sqrt(torch.sum((local_pred - local_true) ** 2, dim=-1) + eps)
    if clamp is not None:
        error = torch.clamp(error, min=0.0, max=clamp)
    error = error / length_scale * frames_mask[..., :, None] * points_mask[..., None, :]
    norm = (eps + torch.sum(frames_mask, dim=-1)) * (eps + torch.sum(points_mask, dim=-1))
    return torch.sum(error, dim=(-1, -2)) / norm


def backbone_fape(pred_frames: torch.Tensor, batch: Tensors, config: LossConfig) -> torch.Tensor:
    """Backbone FAPE [B]: the frames of each structure-module iteration [B, I, N, 7|4×4]
    (translations in Å) against ``backbone_rigid_tensor``, frames and points (the frame
    origins) masked by ``backbone_rigid_mask``, averaged over the iterations; per sample
    clamped or not by ``use_clamped_fape`` (clamped when the feature is absent)."""
    pred = _rigid(pred_frames)
    true = rigids.Rigid.from_tensor_4x4(batch["backbone_rigid_tensor"])[:, None]
    mask = batch["backbone_rigid_mask"][:, None]

    def per_iteration(clamp: float | None) -> torch.Tensor:
        return fape(pred, true, mask, pred.trans, true.trans, mask,
                    config.fape_backbone_length_scale, clamp, config.fape_eps)

    value = per_iteration(config.fape_backbone_clamp)  # [B, I]
    use_clamped = batch.get("use_clamped_fape")
    if use_clamped is not None:
        use_clamped = use_clamped.to(value.dtype)[:, None]
        value = value * use_clamped + per_iteration(None) * (1 - use_clamped)
    return torch.mean(value, dim=1)


def renamed_ground_truth(atom14_pred: torch.Tensor, batch: Tensors) -> dict[str, torch.Tensor]:
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

    def atom_distances(x: torch.Tensor) -> torch.Tensor:  # [B, N, N, 14, 14]
        b, n = x.shape[:2]
        flat = x.reshape(b, n * 14, 3)
        d = _pair_distances(flat, flat, DIST_EPS).reshape(b, n, 14, n, 14)
        return d.permute(0, 1, 3, 2, 4)

    pred_d = atom_distances(atom14_pred.detach())  # a choice, not a gradient path
    # pairs (ambiguous atom a of residue i, non-ambiguous atom b of residue j), both present
    mask = ((exists * ambiguous)[:, :, None, :, None]
            * (exists * (1.0 - ambiguous))[:, None, :, None, :])

    def mismatch(x: torch.Tensor) -> torch.Tensor:
        err = torch.sqrt(DIST_EPS + (pred_d - atom_distances(x)) ** 2)
        return torch.sum(mask * err, dim=(-1, -2, -3))

    better = (mismatch(alt) < mismatch(true)).to(atom14_pred.dtype)
    return {
        "alt_naming_is_better": better,
        "renamed_atom14_gt_positions": torch.where(better[..., None, None] > 0, alt, true),
        "renamed_atom14_gt_exists": torch.where(
            better[..., None] > 0, batch["atom14_alt_gt_exists"], exists),
    }


def sidechain_fape(sidechain_frames: torch.Tensor, atom14_pred: torch.Tensor, batch: Tensors,
                   renamed: Mapping[str, torch.Tensor], config: LossConfig) -> torch.Tensor:
    """Side-chain FAPE [B] of the last iteration: all 8 rigid groups of every residue
    (``sidechain_frames`` [B, N, 8, 4, 4], existing groups only) against the ground-truth
    groups in the better naming, over all 14 atom slots ``atom14_pred`` [B, N, 14, 3] present
    in the renamed truth. Always clamped."""
    b = atom14_pred.shape[0]
    swap = renamed["alt_naming_is_better"][..., None, None, None] > 0
    true_frames = torch.where(swap, batch["rigidgroups_alt_gt_frames"],
                              batch["rigidgroups_gt_frames"])
    return fape(
        rigids.Rigid.from_tensor_4x4(sidechain_frames.reshape(b, -1, 4, 4)),
        rigids.Rigid.from_tensor_4x4(true_frames.reshape(b, -1, 4, 4)),
        batch["rigidgroups_gt_exists"].reshape(b, -1),
        atom14_pred.reshape(b, -1, 3),
        renamed["renamed_atom14_gt_positions"].reshape(b, -1, 3),
        renamed["renamed_atom14_gt_exists"].reshape(b, -1),
        config.fape_sidechain_length_scale, config.fape_sidechain_clamp, config.fape_eps)


# ---------------------------------------------------------------------------- torsions


def chi_loss(angles: torch.Tensor, unnormalized_angles: torch.Tensor, batch: Tensors,
             config: LossConfig) -> torch.Tensor:
    """Supervised chi loss [B] (AF2 supplement Alg. 27) over every iteration: angles
    [B, I, N, 7, 2] (sin, cos) whose last 4 are chi1–4, truth ``chi_angles_sin_cos``
    [B, N, 4, 2] masked by ``chi_mask``; a π-periodic chi may match the truth rotated by π
    (sin, cos negated). Plus the norm penalty on all 7 unnormalised angles (``seq_mask``)."""
    periodic = _table(rc.CHI_PI_PERIODIC, angles)[batch["aatype"].long()]  # [B, N, 4]
    true = batch["chi_angles_sin_cos"][:, None]  # [B, 1, N, 4, 2]
    pred = angles[..., 3:, :]
    flip = (1.0 - 2.0 * periodic)[:, None, :, :, None]
    error = torch.minimum(torch.sum((true - pred) ** 2, dim=-1),
                          torch.sum((flip * true - pred) ** 2, dim=-1))
    chi = _masked_mean(batch["chi_mask"][:, None], error, dims=(-1, -2, -3))

    norm = torch.sqrt(torch.sum(unnormalized_angles ** 2, dim=-1) + config.chi_eps)
    norm_error = torch.abs(norm - 1.0)
    angle_norm = _masked_mean(batch["seq_mask"][:, None, :, None], norm_error,
                              dims=(-1, -2, -3))
    return config.chi_weight * chi + config.angle_norm_weight * angle_norm


# ---------------------------------------------------------------------------- heads


def distogram_loss(logits: torch.Tensor, batch: Tensors, config: LossConfig) -> torch.Tensor:
    """Distogram cross-entropy [B] over the pairs of residues with a pseudo-β (i = j too).
    Bins: squared distance against squared boundaries; the reference builds its boundaries
    in float32 whatever the input dtype, and so does this function (identical bins)."""
    bounds = torch.linspace(config.distogram_min_bin, config.distogram_max_bin,
                            config.distogram_bins - 1, dtype=torch.float32,
                            device=logits.device) ** 2
    x = batch["pseudo_beta"]
    d2 = torch.sum((x[..., :, None, :] - x[..., None, :, :]) ** 2, dim=-1, keepdim=True)
    true_bins = torch.sum(d2 > bounds, dim=-1)
    errors = _cross_entropy(logits, true_bins, config.distogram_bins, "distogram_logits")
    m = batch["pseudo_beta_mask"]
    pair_mask = m[..., :, None] * m[..., None, :]
    return (torch.sum(errors * pair_mask, dim=(-1, -2))
            / (config.distogram_eps + torch.sum(pair_mask, dim=(-1, -2))))


def masked_msa_loss(logits: torch.Tensor, batch: Tensors, config: LossConfig) -> torch.Tensor:
    """BERT masked-MSA cross-entropy [B] over the masked positions (``bert_mask``) of the
    cluster rows, target ``true_msa``. REF computes Σ·½ / (eps + ½·Σmask) (an fp16 guard),
    i.e. Σ / (2·eps + Σmask), written so here."""
    mask = batch["bert_mask"]
    errors = _cross_entropy(logits, batch["true_msa"], config.masked_msa_classes,
                            "masked_msa_logits")
    return (torch.sum(errors * mask, dim=(-1, -2))
            / (2.0 * config.masked_msa_eps + torch.sum(mask, dim=(-1, -2))))


def lddt(pred: torch.Tensor, true: torch.Tensor, mask: torch.Tensor, cutoff: float = 15.0,
         eps: float = 1e-10, per_residue: bool = True) -> torch.Tensor:
    """lDDT of points [..., N, 3] (no superposition, no stereochemistry; spec §6): pairs
    i ≠ j with both points present (``mask`` [..., N]) and true distance < cutoff score
    ¼·Σ_{t∈{0.5,1,2,4}} [|d_true − d_pred| < t]; distances are sqrt(eps + d²). Global
    [...]: (eps + Σ scores)/(eps + #pairs) over ordered pairs; per residue [..., N]: the same
    over j for each i (a residue with no scored pair gets eps/eps = 1)."""
    n = mask.shape[-1]
    mask = mask.to(true.dtype)
    d_true = _pair_distances(true, true, eps)
    d_pred = _pair_distances(pred, pred, eps)
    scored = ((d_true < cutoff) * mask[..., :, None] * mask[..., None, :]
              * (1.0 - torch.eye(n, dtype=mask.dtype, device=mask.device)))
    delta = torch.abs(d_true - d_pred)
    score = 0.25 * sum((delta < t).to(delta.dtype) for t in (0.5, 1.0, 2.0, 4.0))
    dims = (-1,) if per_residue else (-2, -1)
    return (eps + torch.sum(scored * score, dim=dims)) / (eps + torch.sum(scored, dim=dims))


def lddt_ca(all_atom_pred: torch.Tensor, all_atom_true: torch.Tensor,
            all_atom_mask: torch.Tensor, cutoff: float = 15.0, eps: float = 1e-10,
            per_residue: bool = True) -> torch.Tensor:
    """:func:`lddt` of the CA atoms of atom37 coordinates [..., N, 37, 3] (mask [..., N, 37]).
    The benchmark's metric is ``per_residue=False`` with eps 1e-8 (REF validation_metrics)."""
    ca = rc.ATOM_ORDER["CA"]
    return lddt(all_atom_pred[..., ca, :], all_atom_true[..., ca, :],
                all_atom_mask[..., ca].to(all_atom_pred.dtype), cutoff, eps, per_residue)


def plddt_loss(logits: torch.Tensor, final_atom_positions: torch.Tensor, batch: Tensors,
               config: LossConfig) -> torch.Tensor:
    """pLDDT cross-entropy [B]: target bin floor(bins · lDDT-Cα_i) (clamped to the last bin)
    of the detached per-residue lDDT-Cα of the final prediction (REF passes its config eps,
    1e-8, as the lDDT eps), averaged over residues with a true CA, gated by resolution."""
    mask = batch["all_atom_mask"][..., rc.ATOM_ORDER["CA"]].to(logits.dtype)
    score = lddt_ca(final_atom_positions, batch["all_atom_positions"], batch["all_atom_mask"],
                    config.plddt_cutoff, config.plddt_eps, per_residue=True).detach()
    bins = torch.clamp(torch.floor(score * config.plddt_bins).long(), max=config.plddt_bins - 1)
    errors = _cross_entropy(logits, bins, config.plddt_bins, "lddt_logits")
    value = torch.sum(errors * mask, dim=-1) / (config.plddt_eps + torch.sum(mask, dim=-1))
    return value * _resolution_gate(batch["resolution"], config)


def experimentally_resolved_loss(logits: torch.Tensor, batch: Tensors,
                                 config: LossConfig) -> torch.Tensor:
    """Sigmoid cross-entropy [B] of the atom37 "resolved" logits against ``all_atom_mask``,
    summed over the atoms that exist for the residue type, divided by their number, gated
    by resolution."""
    exists = batch["atom37_atom_exists"]
    errors = F.binary_cross_entropy_with_logits(
        logits, batch["all_atom_mask"].to(logits.dtype), reduction="none")
    value = (torch.sum(errors * exists, dim=(-1, -2))
             / (config.experimentally_resolved_eps + torch.sum(exists, dim=(-1, -2))))
    return value * _resolution_gate(batch["resolution"], config)


# ---------------------------------------------------------------------------- violations


def _table(array: np.ndarray | list, like: torch.Tensor) -> torch.Tensor:
    """A residue-constants table as a tensor of ``like``'s dtype and device (copied: the
    numpy tables are read-only)."""
    return torch.tensor(np.array(array), dtype=like.dtype, device=like.device)


@functools.lru_cache(maxsize=4)
def _atom14_bounds(overlap: float, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) [21, 14, 14] allowed intra-residue atom distances (built once)."""
    bounds = rc.atom14_dists_bounds(overlap, factor)
    return np.asarray(bounds["lower_bound"]), np.asarray(bounds["upper_bound"])


def _bond_terms(pos: torch.Tensor, exists: torch.Tensor, residue_index: torch.Tensor,
                aatype: torch.Tensor, factor: float) -> torch.Tensor:
    """Flat-bottom peptide-geometry loss [B] between consecutive residues (AF2 supplement
    eq. 44–45): C–N bond length (longer before a proline), CA–C–N and C–N–CA angle cosines,
    each relu(|error| − factor·stddev) averaged over the bonded pairs, the three summed."""
    this_ca, this_c = pos[:, :-1, 1], pos[:, :-1, 2]
    next_n, next_ca = pos[:, 1:, 0], pos[:, 1:, 1]
    ca_ok, c_ok = exists[:, :-1, 1], exists[:, :-1, 2]
    n_ok, next_ca_ok = exists[:, 1:, 0], exists[:, 1:, 1]
    no_gap = (residue_index[:, 1:] - residue_index[:, :-1]) == 1

    def flat_bottom(error: torch.Tensor, stddev: float | torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
        per_pair = torch.relu(torch.sqrt(BOND_EPS + error ** 2) - factor * stddev)
        return torch.sum(mask * per_pair, dim=-1) / (torch.sum(mask, dim=-1) + BOND_EPS)

    def length(v: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(BOND_EPS + torch.sum(v ** 2, dim=-1))

    c_n_len = length(this_c - next_n)
    before_pro = aatype[:, 1:] == rc.RESTYPES.index("P")
    # torch.where of two Python floats is float32, like REF's bool-mask arithmetic: the
    # target C–N length and its tolerance (factor·stddev) are float32 numbers in every
    # precision, as in REF (a ~1e-8 Å effect, kept so that float64 checks match REF exactly).
    c_n = flat_bottom(
        c_n_len - torch.where(before_pro, rc.BETWEEN_RES_BOND_LENGTH_C_N[1],
                              rc.BETWEEN_RES_BOND_LENGTH_C_N[0]),
        torch.where(before_pro, rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N[1],
                    rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N[0]),
        c_ok * n_ok * no_gap)

    c_to_ca = (this_ca - this_c) / length(this_ca - this_c)[..., None]
    c_to_n = (next_n - this_c) / c_n_len[..., None]
    n_to_ca = (next_ca - next_n) / length(next_ca - next_n)[..., None]
    # REF quirk (from AlphaFold): the CA–C–N angle's tolerance uses the C–N *bond length*
    # stddev, not the angle's own (0.014 instead of 0.0311).
    ca_c_n = flat_bottom(torch.sum(c_to_ca * c_to_n, dim=-1) - rc.BETWEEN_RES_COS_ANGLES_CA_C_N[0],
                         rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N[0], ca_ok * c_ok * n_ok * no_gap)
    c_n_ca = flat_bottom(torch.sum(-c_to_n * n_to_ca, dim=-1) - rc.BETWEEN_RES_COS_ANGLES_C_N_CA[0],
                         rc.BETWEEN_RES_COS_ANGLES_C_N_CA[1], c_ok * n_ok * next_ca_ok * no_gap)
    return c_n + ca_c_n + c_n_ca


def _clash_sum(pos: torch.Tensor, exists: torch.Tensor, radius: torch.Tensor,
               residue_index: torch.Tensor, overlap: float) -> torch.Tensor:
    """Σ over atom pairs of different residues (each unordered pair once, by residue index)
    of relu(r_a + r_b − overlap − d) [B] (AF2 supplement eq. 46, between residues). Not
    clashes: the peptide C(i)–N(i+1) bond and CYS SG–SG (a disulfide bridge)."""
    b, n = pos.shape[:2]
    d = _pair_distances(pos.reshape(b, n * 14, 3), pos.reshape(b, n * 14, 3), DIST_EPS)
    d = d.reshape(b, n, 14, n, 14).permute(0, 1, 3, 2, 4)  # [B, i, j, a, b]
    ri = residue_index[:, :, None, None, None]
    rj = residue_index[:, None, :, None, None]
    mask = exists[:, :, None, :, None] * exists[:, None, :, None, :] * (ri < rj)
    atom_c, atom_n = 2, 0  # atom14 slots, the same in every residue type
    sg = rc.RESTYPE_NAME_TO_ATOM14_NAMES["CYS"].index("SG")
    bonded = torch.zeros(14, 14, dtype=pos.dtype, device=pos.device)
    not_clash = bonded.clone()
    bonded[atom_c, atom_n] = 1.0
    not_clash[sg, sg] = 1.0  # REF quirk: slot 5 of any residue pair, not only two CYS
    mask = mask * (1.0 - (ri + 1 == rj) * bonded) * (1.0 - not_clash)
    lower = mask * (radius[:, :, None, :, None] + radius[:, None, :, None, :])
    return torch.sum(mask * torch.relu(lower - overlap - d), dim=(1, 2, 3, 4))


def _within_residue_sum(pos: torch.Tensor, exists: torch.Tensor, aatype: torch.Tensor,
                        config: LossConfig) -> torch.Tensor:
    """Σ over ordered atom pairs inside each residue of the distance outside the allowed
    [lower, upper] range (bond lengths ± factor·stddev, else van der Waals − overlap) [B]."""
    lower_np, upper_np = _atom14_bounds(config.clash_overlap_tolerance,
                                        config.violation_tolerance_factor)
    lower = _table(lower_np, pos)[aatype]
    upper = _table(upper_np, pos)[aatype]
    eye = torch.eye(14, dtype=pos.dtype, device=pos.device)
    mask = exists[..., :, None] * exists[..., None, :] * (1.0 - eye)
    d = _pair_distances(pos, pos, DIST_EPS)
    error = mask * (torch.relu(lower - d) + torch.relu(d - upper))
    return torch.sum(error, dim=(-1, -2, -3))


def violation_loss(atom14_pred: torch.Tensor, batch: Tensors, config: LossConfig) -> torch.Tensor:
    """Structural-violation loss [B] of the last iteration's atom14 positions (AF2
    supplement §1.9.11): the three peptide terms + (clashes between residues + bound
    violations within residues) per existing atom. The reference sums its per-atom loss
    sums, which count every pair from both ends: hence the factor 2 on both pair sums."""
    exists = batch["atom14_atom_exists"].to(atom14_pred.dtype)
    aatype = batch["aatype"].long()
    residue_index = batch["residue_index"]
    factor = config.violation_tolerance_factor
    bonds = _bond_terms(atom14_pred, exists, residue_index, aatype, factor)

    element_radius = [rc.VAN_DER_WAALS_RADIUS[name[0]] for name in rc.ATOM_TYPES]
    radius = exists * _table(element_radius, atom14_pred)[batch["residx_atom14_to_atom37"].long()]
    pair_sums = (_clash_sum(atom14_pred, exists, radius, residue_index,
                            config.clash_overlap_tolerance)
                 + _within_residue_sum(atom14_pred, exists, aatype, config))
    atoms = torch.sum(exists, dim=(-1, -2))
    return bonds + 2.0 * pair_sums / (config.violation_eps + atoms)


# ---------------------------------------------------------------------------- total


def per_sample_terms(outputs: Mapping, batch: Tensors,
                     config: LossConfig = LossConfig()) -> dict[str, torch.Tensor]:
    """Every unweighted term of :data:`TERMS` as a [B] tensor (connected to the graph)."""
    positions = _sm(outputs, "positions")  # [B, I, N, 14, 3]
    last_atoms = positions[:, -1]
    renamed = renamed_ground_truth(last_atoms, batch)
    fape_value = (
        config.fape_backbone_weight * backbone_fape(_sm(outputs, "frames"), batch, config)
        + config.fape_sidechain_weight * sidechain_fape(
            _sm(outputs, "sidechain_frames")[:, -1], last_atoms, batch, renamed, config))
    return {
        "fape": fape_value,
        "supervised_chi": chi_loss(_sm(outputs, "angles"), _sm(outputs, "unnormalized_angles"),
                                   batch, config),
        "distogram": distogram_loss(outputs["distogram_logits"], batch, config),
        "masked_msa": masked_msa_loss(outputs["masked_msa_logits"], batch, config),
        "plddt_loss": plddt_loss(outputs["lddt_logits"], outputs["final_atom_positions"],
                                 batch, config),
        "experimentally_resolved": experimentally_resolved_loss(
            outputs["experimentally_resolved_logits"], batch, config),
        "violation": violation_loss(last_atoms, batch, config),
    }


def _drop_non_finite(weighted: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each weighted term, or zeros cut from the graph where any sample's value is NaN or
    inf (REF: the term is dropped for the whole batch, so no NaN gradient reaches the
    model). One host synchronisation for all terms; a dropped term becomes a leaf that
    requires grad, as in REF, so backward() works even when every term is dropped."""
    finite = torch.isfinite(torch.stack([t.detach() for t in weighted])).all(dim=1).tolist()
    return [t if ok else torch.zeros_like(t.detach()).requires_grad_()
            for t, ok in zip(weighted, finite, strict=True)]


def loss(outputs: Mapping, batch: Tensors,
         config: LossConfig = LossConfig()) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training loss: (scalar to backpropagate, detached breakdown).

    ``batch`` is the feature dict of the LAST recycling pass (every feature's trailing
    recycling dimension sliced with ``[..., -1]``, as REF train.py does), with a leading batch
    dimension. The breakdown holds the batch mean of each unweighted term of :data:`TERMS`,
    ``weighted_total_loss`` (before the length scaling) and ``scaled_weighted_total_loss``
    (the returned value) — the reference's logged names."""
    terms = per_sample_terms(outputs, batch, config)
    weighted = _drop_non_finite([terms[name] * w for name, w in config.weights().items()])
    total = sum(weighted[1:], weighted[0])  # [B], summed in REF's order
    # "we multiply the final loss of each training example by the square root of the
    # number of residues after cropping" (AF2 supplement 1.9); float32 as in REF.
    seq_length = batch["seq_length"].float()
    scale = torch.sqrt(torch.clamp(seq_length, max=float(batch["aatype"].shape[1])))
    scaled = scale * total
    breakdown = {name: value.detach().mean() for name, value in terms.items()}
    breakdown["weighted_total_loss"] = total.detach().mean()
    breakdown["scaled_weighted_total_loss"] = scaled.detach().mean()
    return scaled.mean(), breakdown
