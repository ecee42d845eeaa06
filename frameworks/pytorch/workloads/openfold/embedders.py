"""Embedders of AlphaFold2's inputs: target/MSA features and relative positions, the
previous recycling pass, template pair and angle features, the extra MSA
(AF2 supplement §1.5, §1.7, §1.10; shared/spec/openfold.md §3).

The feature builders (:func:`template_pair_feat`, :func:`template_angle_feat`,
:func:`extra_msa_feat`, :func:`pseudo_beta`) turn the reference's batch keys into the
network's input channels inside the model, as the reference does, so the data pipeline
delivers the same keys as the reference's.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_pytorch.workloads.openfold.primitives import Linear, layer_norm

__all__ = ["ExtraMSAEmbedder", "InputEmbedder", "RecyclingEmbedder", "TemplateAngleEmbedder",
           "TemplatePairEmbedder", "extra_msa_feat", "pseudo_beta", "template_angle_feat",
           "template_pair_feat"]

Batch = dict[str, torch.Tensor]


class InputEmbedder(nn.Module):
    """m = Linear(msa_feat) + Linear(target_feat) per row;
    z_ij = Linear(onehot(clip(r_i − r_j, ±k))) + Linear(tf)_i + Linear'(tf)_j (Algorithms 3–4)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.relpos_k = spec.relpos_k
        self.linear_tf_z_i = Linear(spec.tf_dim, spec.c_z)
        self.linear_tf_z_j = Linear(spec.tf_dim, spec.c_z)
        self.linear_tf_m = Linear(spec.tf_dim, spec.c_m)
        self.linear_msa_m = Linear(spec.msa_dim, spec.c_m)
        self.linear_relpos = Linear(2 * spec.relpos_k + 1, spec.c_z)

    def forward(self, target_feat: torch.Tensor, residue_index: torch.Tensor,
                msa_feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """target_feat [B, N, 22], residue_index [B, N], msa_feat [B, S, N, 49]."""
        tf_i = self.linear_tf_z_i(target_feat)
        tf_j = self.linear_tf_z_j(target_feat)
        offset = residue_index.long().unsqueeze(-1) - residue_index.long().unsqueeze(-2)
        bins = torch.clamp(offset, -self.relpos_k, self.relpos_k) + self.relpos_k
        relpos = F.one_hot(bins, 2 * self.relpos_k + 1).to(tf_i.dtype)
        z = self.linear_relpos(relpos) + tf_i.unsqueeze(-2) + tf_j.unsqueeze(-3)
        m = self.linear_msa_m(msa_feat) + self.linear_tf_m(target_feat).unsqueeze(-3)
        return m, z


class RecyclingEmbedder(nn.Module):
    """LN(m0_prev) and LN(z_prev) + Linear(one-hot of squared pseudo-β distance bins)
    (Algorithm 32): the previous pass's first MSA row, pair and structure."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.min_bin, self.max_bin = spec.recycling_min_bin, spec.recycling_max_bin
        self.num_bins, self.inf = spec.recycling_num_bins, spec.recycling_inf
        self.linear = Linear(spec.recycling_num_bins, spec.c_z)
        self.layer_norm_m = layer_norm(spec.c_m, spec.layer_norm_eps)
        self.layer_norm_z = layer_norm(spec.c_z, spec.layer_norm_eps)

    def forward(self, m0_prev: torch.Tensor, z_prev: torch.Tensor,
                x_prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """m0_prev [B, N, c_m], z_prev [B, N, N, c_z], x_prev pseudo-β [B, N, 3]."""
        lower = torch.linspace(self.min_bin, self.max_bin, self.num_bins,
                               dtype=x_prev.dtype, device=x_prev.device) ** 2
        upper = torch.cat([lower[1:], lower.new_tensor([self.inf])])
        d2 = ((x_prev.unsqueeze(-2) - x_prev.unsqueeze(-3)) ** 2).sum(dim=-1, keepdim=True)
        dgram = ((d2 > lower) & (d2 < upper)).to(x_prev.dtype)
        return self.layer_norm_m(m0_prev), self.linear(dgram) + self.layer_norm_z(z_prev)


class TemplateAngleEmbedder(nn.Module):
    """Linear → ReLU → Linear of the 57 template angle channels: extra MSA rows."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.linear_1 = Linear(spec.template_angle_dim, spec.c_m, init="relu")
        self.linear_2 = Linear(spec.c_m, spec.c_m, init="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(torch.relu(self.linear_1(x)))


class TemplatePairEmbedder(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.linear = Linear(spec.template_pair_dim, spec.c_t, init="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class ExtraMSAEmbedder(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.linear = Linear(spec.extra_msa_dim, spec.c_e)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


# -- feature builders -----------------------------------------------------------------------
def pseudo_beta(aatype: torch.Tensor, atom37: torch.Tensor) -> torch.Tensor:
    """CB position, CA for glycine: [*, N, 37, 3] → [*, N, 3]."""
    is_gly = (aatype == rc.RESTYPES.index("G")).unsqueeze(-1)
    return torch.where(is_gly, atom37[..., rc.ATOM_ORDER["CA"], :],
                       atom37[..., rc.ATOM_ORDER["CB"], :])


def extra_msa_feat(batch: Batch, num_classes: int) -> torch.Tensor:
    """23-class one-hot + has_deletion + deletion value → [B, S_extra, N, 25]."""
    dtype = batch["extra_has_deletion"].dtype
    return torch.cat([F.one_hot(batch["extra_msa"].long(), num_classes).to(dtype),
                      batch["extra_has_deletion"].unsqueeze(-1),
                      batch["extra_deletion_value"].unsqueeze(-1)], dim=-1)


def template_angle_feat(batch: Batch, num_classes: int) -> torch.Tensor:
    """Template aatype one-hot (22) + torsion sin/cos (14) + alt (14) + mask (7) → 57."""
    sin_cos = batch["template_torsion_angles_sin_cos"]
    alt = batch["template_alt_torsion_angles_sin_cos"]
    return torch.cat([F.one_hot(batch["template_aatype"].long(), num_classes).to(sin_cos.dtype),
                      sin_cos.flatten(-2), alt.flatten(-2),
                      batch["template_torsion_angles_mask"].to(sin_cos.dtype)], dim=-1)


def template_pair_feat(batch: Batch, spec: ModelSpec, dtype: torch.dtype) -> torch.Tensor:
    """The 88 pair channels of ONE template (batch tensors without the template dim).

    39 squared-distance bins of the template pseudo-β + its 2-D mask + the aatype one-hot
    of residue j, then of residue i + 3 unit-vector channels (zero: the benchmark's
    ``use_unit_vector=False``) + the 2-D backbone (N, CA, C) mask; everything is then
    multiplied by that backbone mask.
    """
    pb = batch["template_pseudo_beta"].to(dtype)
    pb_mask = batch["template_pseudo_beta_mask"].to(dtype)
    pb_mask_2d = pb_mask.unsqueeze(-1) * pb_mask.unsqueeze(-2)
    d2 = ((pb.unsqueeze(-2) - pb.unsqueeze(-3)) ** 2).sum(dim=-1, keepdim=True)
    lower = torch.linspace(spec.template_dgram_min_bin, spec.template_dgram_max_bin,
                           spec.template_dgram_num_bins, device=pb.device) ** 2
    upper = torch.cat([lower[1:], lower.new_tensor([spec.template_feat_inf])])
    dgram = ((d2 > lower) & (d2 < upper)).to(dtype)
    n_res = pb.shape[-2]
    onehot = F.one_hot(batch["template_aatype"].long(), spec.template_aatype_classes).to(dtype)
    aa_j = onehot.unsqueeze(-3).expand(*onehot.shape[:-2], n_res, n_res, -1)
    aa_i = onehot.unsqueeze(-2).expand(*onehot.shape[:-2], n_res, n_res, -1)
    atom_mask = batch["template_all_atom_mask"].to(dtype)
    n, ca, c = (rc.ATOM_ORDER[a] for a in ("N", "CA", "C"))
    bb = atom_mask[..., n] * atom_mask[..., ca] * atom_mask[..., c]
    bb_2d = (bb.unsqueeze(-1) * bb.unsqueeze(-2)).unsqueeze(-1)
    unit_vector = torch.zeros_like(d2).expand(*d2.shape[:-1], 3)
    feat = torch.cat([dgram, pb_mask_2d.unsqueeze(-1), aa_j, aa_i, unit_vector, bb_2d], dim=-1)
    return feat * bb_2d
