"""The MSA/pair stacks of AlphaFold2: Evoformer, extra-MSA stack, template pair stack and
template pointwise attention (AF2 supplement §1.6–1.7; shared/spec/openfold.md §3).

Attribute names are the reference's state-dict names (``msa_att_row``, ``core.tri_mul_out``
…) and are created in the reference's order, so ``named_parameters`` lines up with
``ModelSpec.reference_shapes`` and the reference checkpoint loads strictly.

Shapes: MSA m [B, S, N, c_m], pair z [B, N, N, c_z], MSA mask [B, S, N], pair mask
[B, N, N]. Every update is residual; dropout is applied to the update only.

Per-block gradient checkpointing (``checkpointing=True`` while gradients are on) uses
``torch.utils.checkpoint`` with ``use_reentrant=False``, which restores the random state
for the recomputation, so dropout masks are identical in both passes.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_pytorch.workloads.openfold.primitives import (
    Attention,
    Linear,
    Transition,
    columnwise_dropout,
    layer_norm,
    rowwise_dropout,
)

__all__ = ["EvoformerStack", "ExtraMSAStack", "TemplatePairStack",
           "TemplatePointwiseAttention", "run_blocks"]


def run_blocks(blocks: nn.ModuleList, state: tuple[torch.Tensor, ...],
               checkpointing: bool, **kwargs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Run ``blocks`` in turn on ``state`` (each block maps state → state).

    With ``checkpointing`` and gradients enabled, each block's activations are recomputed
    in the backward pass instead of stored (the reference checkpoints per block).
    """
    use = checkpointing and torch.is_grad_enabled()
    for block in blocks:
        if use:
            state = checkpoint(_call_block, block, kwargs, *state, use_reentrant=False)
        else:
            state = block(*state, **kwargs)
    return state


def _call_block(block: nn.Module, kwargs: dict, *state: torch.Tensor):
    return block(*state, **kwargs)


# -- MSA attention -------------------------------------------------------------------------
class MSARowAttentionWithPairBias(nn.Module):
    """Row-wise gated self-attention over residues, biased by Linear(LN(z)) per head."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int, num_heads: int, inf: float,
                 eps: float) -> None:
        super().__init__()
        self.layer_norm_m = layer_norm(c_m, eps)
        self.layer_norm_z = layer_norm(c_z, eps)
        self.linear_z = Linear(c_z, num_heads, bias=False, init="normal")
        self.mha = Attention(c_m, c_m, c_hidden, num_heads, inf, gated=True)

    def forward(self, m: torch.Tensor, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        bias = self.linear_z(self.layer_norm_z(z)).movedim(-1, -3).unsqueeze(-4)  # [B,1,H,N,N]
        m = self.layer_norm_m(m)
        return self.mha(m, m, mask[..., None, None, :], bias)


class MSAColumnAttention(nn.Module):
    """Column-wise gated self-attention over sequences (each residue position alone)."""

    def __init__(self, c_m: int, c_hidden: int, num_heads: int, inf: float,
                 eps: float) -> None:
        super().__init__()
        self.layer_norm_m = layer_norm(c_m, eps)
        self.mha = Attention(c_m, c_m, c_hidden, num_heads, inf, gated=True)

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = self.layer_norm_m(m.transpose(-2, -3))  # [B, N, S, c]
        mask = mask.transpose(-1, -2)[..., None, None, :]  # [B, N, 1, 1, S]
        return self.mha(m, m, mask).transpose(-2, -3)


class GlobalAttention(nn.Module):
    """Global column attention of the extra-MSA stack (AF2 supplement Algorithm 19).

    One query per column — the masked mean over sequences — against single-head keys and
    values shared by all heads: linear in the (large) number of extra sequences.
    """

    def __init__(self, c_e: int, c_hidden: int, num_heads: int, inf: float,
                 eps: float) -> None:
        super().__init__()
        self.c_hidden, self.num_heads, self.inf, self.eps = c_hidden, num_heads, inf, eps
        self.linear_q = Linear(c_e, c_hidden * num_heads, bias=False, init="glorot")
        self.linear_k = Linear(c_e, c_hidden, bias=False, init="glorot")
        self.linear_v = Linear(c_e, c_hidden, bias=False, init="glorot")
        self.linear_g = Linear(c_e, c_hidden * num_heads, init="gating")
        self.linear_o = Linear(c_hidden * num_heads, c_e, init="final")

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """m [B, N, S, c_e] (columns first), mask [B, N, S]."""
        mean = (m * mask.unsqueeze(-1)).sum(dim=-2) / (mask.sum(dim=-1) + self.eps).unsqueeze(-1)
        q = self.linear_q(mean) * math.sqrt(1.0 / self.c_hidden)
        q = q.view(*q.shape[:-1], self.num_heads, self.c_hidden)  # [B, N, H, C]
        k, v = self.linear_k(m), self.linear_v(m)  # [B, N, S, C]
        logits = torch.matmul(q, k.transpose(-1, -2)) + ((mask - 1.0) * self.inf).unsqueeze(-2)
        o = torch.matmul(torch.softmax(logits, dim=-1), v)  # [B, N, H, C]
        gate = torch.sigmoid(self.linear_g(m))
        o = o.unsqueeze(-3) * gate.view(*gate.shape[:-1], self.num_heads, self.c_hidden)
        return self.linear_o(o.reshape(*o.shape[:-2], self.num_heads * self.c_hidden))


class MSAColumnGlobalAttention(nn.Module):
    def __init__(self, c_e: int, c_hidden: int, num_heads: int, inf: float, eps: float,
                 ln_eps: float) -> None:
        super().__init__()
        self.layer_norm_m = layer_norm(c_e, ln_eps)
        self.global_attention = GlobalAttention(c_e, c_hidden, num_heads, inf, eps)

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = self.layer_norm_m(m.transpose(-2, -3))
        return self.global_attention(m, mask.transpose(-1, -2)).transpose(-2, -3)


# -- MSA → pair and pair updates -----------------------------------------------------------
class OuterProductMean(nn.Module):
    """z_ij += Linear(Σ_s a_si ⊗ b_sj) / (Σ_s mask_si·mask_sj + eps) (Algorithm 10).

    The normalisation divides the projected output (its bias included), as the reference.
    """

    def __init__(self, c_m: int, c_z: int, c_hidden: int, eps: float, ln_eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.layer_norm = layer_norm(c_m, ln_eps)
        self.linear_1 = Linear(c_m, c_hidden)
        self.linear_2 = Linear(c_m, c_hidden)
        self.linear_out = Linear(c_hidden * c_hidden, c_z, init="final")

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = self.layer_norm(m)
        mask = mask.unsqueeze(-1)  # [B, S, N, 1]
        a = self.linear_1(m) * mask
        b = self.linear_2(m) * mask
        outer = torch.einsum("...sic,...sjd->...ijcd", a, b)
        outer = self.linear_out(outer.reshape(*outer.shape[:-2], -1))
        norm = torch.einsum("...si,...sj->...ij", mask[..., 0], mask[..., 0]).unsqueeze(-1)
        return outer / (norm + self.eps)


class TriangleMultiplication(nn.Module):
    """Triangle update with outgoing (Σ_k a_ik b_jk) or incoming (Σ_k a_ki b_kj) edges."""

    def __init__(self, c_z: int, c_hidden: int, outgoing: bool, eps: float) -> None:
        super().__init__()
        self.equation = "...ikc,...jkc->...ijc" if outgoing else "...kic,...kjc->...ijc"
        self.linear_a_p = Linear(c_z, c_hidden)
        self.linear_a_g = Linear(c_z, c_hidden, init="gating")
        self.linear_b_p = Linear(c_z, c_hidden)
        self.linear_b_g = Linear(c_z, c_hidden, init="gating")
        self.linear_g = Linear(c_z, c_z, init="gating")
        self.linear_z = Linear(c_hidden, c_z, init="final")
        self.layer_norm_in = layer_norm(c_z, eps)
        self.layer_norm_out = layer_norm(c_hidden, eps)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = self.layer_norm_in(z)
        mask = mask.unsqueeze(-1)
        a = torch.sigmoid(self.linear_a_g(z)) * mask * self.linear_a_p(z)
        b = torch.sigmoid(self.linear_b_g(z)) * mask * self.linear_b_p(z)
        x = self.linear_z(self.layer_norm_out(torch.einsum(self.equation, a, b)))
        return x * torch.sigmoid(self.linear_g(z))


class TriangleAttention(nn.Module):
    """Gated attention around the starting node (rows) or ending node (columns), biased
    by Linear(LN(z)) (Algorithms 13–14). The ending node runs on the transposed pair."""

    def __init__(self, c_z: int, c_hidden: int, num_heads: int, inf: float, starting: bool,
                 eps: float) -> None:
        super().__init__()
        self.starting = starting
        self.layer_norm = layer_norm(c_z, eps)
        self.linear = Linear(c_z, num_heads, bias=False, init="normal")
        self.mha = Attention(c_z, c_z, c_hidden, num_heads, inf, gated=True)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not self.starting:
            z, mask = z.transpose(-2, -3), mask.transpose(-1, -2)
        z = self.layer_norm(z)
        bias = self.linear(z).movedim(-1, -3).unsqueeze(-4)  # [B, 1, H, N, N]
        z = self.mha(z, z, mask[..., None, None, :], bias)
        return z if self.starting else z.transpose(-2, -3)


class BlockCore(nn.Module):
    """MSA transition, outer-product mean and the pair stack: the part the Evoformer and
    extra-MSA blocks share (reference name ``core``)."""

    def __init__(self, c_m: int, c_z: int, transition_n: int, c_opm: int, c_tri_mul: int,
                 c_tri_att: int, heads_tri: int, pair_dropout: float, inf: float,
                 opm_eps: float, eps: float) -> None:
        super().__init__()
        self.msa_transition = Transition(c_m, transition_n, eps)
        self.outer_product_mean = OuterProductMean(c_m, c_z, c_opm, opm_eps, eps)
        self.tri_mul_out = TriangleMultiplication(c_z, c_tri_mul, True, eps)
        self.tmo_dropout_rowwise = rowwise_dropout(pair_dropout)
        self.tri_mul_in = TriangleMultiplication(c_z, c_tri_mul, False, eps)
        self.tmi_dropout_rowwise = rowwise_dropout(pair_dropout)
        self.tri_att_start = TriangleAttention(c_z, c_tri_att, heads_tri, inf, True, eps)
        self.tasn_dropout_rowwise = rowwise_dropout(pair_dropout)
        self.tri_att_end = TriangleAttention(c_z, c_tri_att, heads_tri, inf, False, eps)
        self.taen_dropout_columnwise = columnwise_dropout(pair_dropout)
        self.pair_transition = Transition(c_z, transition_n, eps)

    def forward(self, m: torch.Tensor, z: torch.Tensor, msa_mask: torch.Tensor,
                pair_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = m + self.msa_transition(m)
        z = z + self.outer_product_mean(m, msa_mask)
        z = z + self.tmo_dropout_rowwise(self.tri_mul_out(z, pair_mask))
        z = z + self.tmi_dropout_rowwise(self.tri_mul_in(z, pair_mask))
        z = z + self.tasn_dropout_rowwise(self.tri_att_start(z, pair_mask))
        z = z + self.taen_dropout_columnwise(self.tri_att_end(z, pair_mask))
        z = z + self.pair_transition(z)
        return m, z


class _MSABlock(nn.Module):
    """Row attention with pair bias (row-wise dropout), a column attention, the core."""

    msa_att_col: nn.Module

    def _core_args(self, spec: ModelSpec, extra: bool) -> dict:
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

    def forward(self, m: torch.Tensor, z: torch.Tensor, msa_mask: torch.Tensor,
                pair_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = m + self.msa_dropout_rowwise(self.msa_att_row(m, z, msa_mask))
        m = m + self.msa_att_col(m, msa_mask)
        return self.core(m, z, msa_mask, pair_mask)


class EvoformerBlock(_MSABlock):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        eps = spec.layer_norm_eps
        self.msa_att_row = MSARowAttentionWithPairBias(
            spec.c_m, spec.c_z, spec.c_hidden_msa_att, spec.num_heads_msa,
            spec.evoformer_inf, eps)
        self.msa_att_col = MSAColumnAttention(spec.c_m, spec.c_hidden_msa_att,
                                              spec.num_heads_msa, spec.evoformer_inf, eps)
        self.msa_dropout_rowwise = rowwise_dropout(spec.msa_dropout)
        self.core = BlockCore(**self._core_args(spec, extra=False))


class ExtraMSABlock(_MSABlock):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        eps = spec.layer_norm_eps
        self.msa_att_row = MSARowAttentionWithPairBias(
            spec.c_e, spec.c_z, spec.extra_c_hidden_msa_att, spec.extra_num_heads_msa,
            spec.extra_inf, eps)
        self.msa_att_col = MSAColumnGlobalAttention(
            spec.c_e, spec.extra_c_hidden_msa_att, spec.extra_num_heads_msa, spec.extra_inf,
            spec.extra_eps, eps)
        self.msa_dropout_rowwise = rowwise_dropout(spec.extra_msa_dropout)
        self.core = BlockCore(**self._core_args(spec, extra=True))


class EvoformerStack(nn.Module):
    """The Evoformer blocks, then the single representation s = Linear(m[:, 0])."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(EvoformerBlock(spec) for _ in range(spec.evoformer_blocks))
        self.linear = Linear(spec.c_m, spec.c_s)

    def forward(self, m: torch.Tensor, z: torch.Tensor, msa_mask: torch.Tensor,
                pair_mask: torch.Tensor, checkpointing: bool = False,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m, z = run_blocks(self.blocks, (m, z), checkpointing,
                          msa_mask=msa_mask, pair_mask=pair_mask)
        return m, z, self.linear(m[:, 0])


class ExtraMSAStack(nn.Module):
    """The extra-MSA blocks; only the pair representation leaves the stack."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ExtraMSABlock(spec) for _ in range(spec.extra_blocks))

    def forward(self, a: torch.Tensor, z: torch.Tensor, msa_mask: torch.Tensor,
                pair_mask: torch.Tensor, checkpointing: bool = False) -> torch.Tensor:
        _, z = run_blocks(self.blocks, (a, z), checkpointing,
                          msa_mask=msa_mask, pair_mask=pair_mask)
        return z


# -- templates ----------------------------------------------------------------------------
class TemplatePairBlock(nn.Module):
    """tri-att start → tri-att end → tri-mul out → tri-mul in → transition, per template.

    Templates run one after the other, as the reference, so that dropout draws its masks
    in the reference's order and memory stays that of one template.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        c, eps, inf = spec.c_t, spec.layer_norm_eps, spec.template_inf
        att, heads = spec.template_c_hidden_tri_att, spec.template_num_heads_tri
        p = spec.template_dropout
        self.tri_att_start = TriangleAttention(c, att, heads, inf, True, eps)
        self.tasn_dropout_rowwise = rowwise_dropout(p)
        self.tri_att_end = TriangleAttention(c, att, heads, inf, False, eps)
        self.taen_dropout_columnwise = columnwise_dropout(p)
        self.tri_mul_out = TriangleMultiplication(c, spec.template_c_hidden_tri_mul, True, eps)
        self.tmo_dropout_rowwise = rowwise_dropout(p)
        self.tri_mul_in = TriangleMultiplication(c, spec.template_c_hidden_tri_mul, False, eps)
        self.tmi_dropout_rowwise = rowwise_dropout(p)
        self.pair_transition = Transition(c, spec.template_transition_n, eps)

    def _one(self, t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        t = t + self.tasn_dropout_rowwise(self.tri_att_start(t, mask))
        t = t + self.taen_dropout_columnwise(self.tri_att_end(t, mask))
        t = t + self.tmo_dropout_rowwise(self.tri_mul_out(t, mask))
        t = t + self.tmi_dropout_rowwise(self.tri_mul_in(t, mask))
        return t + self.pair_transition(t)

    def forward(self, t: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor]:
        """t [B, T, N, N, c_t], mask [B, N, N]."""
        return (torch.stack([self._one(x, mask) for x in t.unbind(dim=-4)], dim=-4),)


class TemplatePairStack(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(TemplatePairBlock(spec) for _ in range(spec.template_blocks))
        self.layer_norm = layer_norm(spec.c_t, spec.layer_norm_eps)

    def forward(self, t: torch.Tensor, mask: torch.Tensor,
                checkpointing: bool = False) -> torch.Tensor:
        (t,) = run_blocks(self.blocks, (t,), checkpointing, mask=mask)
        return self.layer_norm(t)


class TemplatePointwiseAttention(nn.Module):
    """Each pair position z_ij attends over the templates' t_ij (no gate, Algorithm 17)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.mha = Attention(spec.c_z, spec.c_t, spec.template_pointwise_c_hidden,
                             spec.template_pointwise_num_heads, spec.template_pointwise_inf,
                             gated=False)

    def forward(self, t: torch.Tensor, z: torch.Tensor,
                template_mask: torch.Tensor) -> torch.Tensor:
        """t [B, T, N, N, c_t], z [B, N, N, c_z], template_mask [B, T] → [B, N, N, c_z]."""
        t = t.movedim(-4, -2)  # [B, N, N, T, c_t]
        mask = template_mask[:, None, None, None, None, :]  # against [B, N, N, H, 1, T]
        return self.mha(z.unsqueeze(-2), t, mask).squeeze(-2)

