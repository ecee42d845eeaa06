"""AlphaFold2 as the MLPerf HPC OpenFold benchmark trains it (``initial_training``), built
from :class:`sciperf.workloads.openfold.sizes.ModelSpec` (shared/spec/openfold.md §2–3).

``named_parameters()`` equals ``ModelSpec.reference_shapes()`` — the reference's names,
shapes and order (5,044 tensors, 93,229,082 parameters at full size) — so the reference's
resumable checkpoint loads with ``strict=True`` and its Adam state (indexed by parameter
position) lines up. There are no buffers.

Input: the reference's batch dict, every tensor with a leading batch dim B and the
trailing recycling dim R (``aatype`` [B, N, R], ``msa_feat`` [B, S, N, 49, R], …).
Passes 0..R−2 run under ``no_grad`` and feed the recycling embedder; only the last pass
builds a graph. ``num_recycling`` (the step's recycling count, drawn by the caller) uses
the first ``num_recycling + 1`` entries of R, as the reference's loader slices the batch.

Output (of the last pass), the reference's keys: ``msa`` (clustered rows only), ``pair``,
``single``, ``final_atom_positions`` / ``final_atom_mask`` (atom37), ``final_affine_tensor``,
the heads' ``lddt_logits``, ``plddt``, ``distogram_logits``, ``masked_msa_logits``,
``experimentally_resolved_logits``; and the structure module's outputs both as the nested
``sm`` dict (``frames``, ``sidechain_frames``, ``unnormalized_angles``, ``angles``,
``positions``, ``states``, ``single``) and under the reference's flat ``sm_<name>`` keys
(the same tensors).
"""

from __future__ import annotations

import torch
from torch import nn

from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_pytorch.workloads.openfold.embedders import (
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
from sciperf_pytorch.workloads.openfold.evoformer import (
    EvoformerStack,
    ExtraMSAStack,
    TemplatePairStack,
    TemplatePointwiseAttention,
)
from sciperf_pytorch.workloads.openfold.heads import AuxiliaryHeads
from sciperf_pytorch.workloads.openfold.structure import StructureModule, atom14_to_atom37

__all__ = ["AlphaFold", "Batch"]

Batch = dict[str, torch.Tensor]
Recycled = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # m0, z, atom37 positions


class AlphaFold(nn.Module):
    """The network; ``checkpointing`` recomputes each stack block in backward (training)."""

    # canonical weights map every module of the tree by its reference path
    # (sciperf_pytorch.weights; ModelSpec.weight_shapes lists the entries)
    NESTED_WEIGHTS = True

    def __init__(self, spec: ModelSpec | None = None, checkpointing: bool = True) -> None:
        super().__init__()
        self.spec = spec = spec or ModelSpec()
        self.checkpointing = checkpointing
        self.input_embedder = InputEmbedder(spec)
        self.recycling_embedder = RecyclingEmbedder(spec)
        self.template_angle_embedder = TemplateAngleEmbedder(spec)
        self.template_pair_embedder = TemplatePairEmbedder(spec)
        self.template_pair_stack = TemplatePairStack(spec)
        self.template_pointwise_attention = TemplatePointwiseAttention(spec)
        self.extra_msa_embedder = ExtraMSAEmbedder(spec)
        self.extra_msa_stack = ExtraMSAStack(spec)
        self.evoformer_stack = EvoformerStack(spec)
        self.structure_module = StructureModule(spec)
        self.auxiliary_heads = AuxiliaryHeads(spec)

    def forward(self, batch: Batch, num_recycling: int | None = None) -> dict:
        passes = batch["aatype"].shape[-1]
        if num_recycling is not None:
            if not 0 <= num_recycling < passes:
                raise ValueError(f"num_recycling={num_recycling} needs a recycling dim of "
                                 f"at least {num_recycling + 1}, the batch has {passes}")
            passes = num_recycling + 1
        recycled: Recycled | None = None
        for j in range(passes - 1):
            with torch.no_grad():
                _, recycled = self._iteration(_select(batch, j), recycled, checkpointing=False)
        if torch.is_autocast_enabled():
            torch.clear_autocast_cache()  # pytorch#65766: no cached casts from no_grad passes
        outputs, _ = self._iteration(_select(batch, passes - 1), recycled,
                                     checkpointing=self.checkpointing and self.training)
        outputs.update(self.auxiliary_heads(outputs["sm"]["single"], outputs["pair"],
                                            outputs["msa"], outputs["single"]))
        return outputs

    def _iteration(self, feats: Batch, recycled: Recycled | None,
                   checkpointing: bool) -> tuple[dict, Recycled]:
        """One pass of Algorithm 2 (embed, recycle, templates, extra MSA, Evoformer, SM)."""
        n_clust = feats["msa_feat"].shape[1]
        m, z = self.input_embedder(feats["target_feat"], feats["residue_index"],
                                   feats["msa_feat"])
        seq_mask = feats["seq_mask"].to(z.dtype)
        pair_mask = seq_mask.unsqueeze(-1) * seq_mask.unsqueeze(-2)
        m, z = self._recycle(m, z, feats, recycled)

        t_pair, t_rows = self._templates(feats, z, pair_mask, checkpointing)
        z = z + t_pair
        m = torch.cat([m, t_rows], dim=1)
        msa_mask = torch.cat([feats["msa_mask"].to(m.dtype),
                              feats["template_torsion_angles_mask"][..., 2].to(m.dtype)], dim=-2)

        a = self.extra_msa_embedder(extra_msa_feat(feats, self.spec.msa_classes).to(z.dtype))
        z = self.extra_msa_stack(a, z, feats["extra_msa_mask"].to(z.dtype), pair_mask,
                                 checkpointing)
        m, z, s = self.evoformer_stack(m, z, msa_mask, pair_mask, checkpointing)

        sm = self.structure_module(s, z, seq_mask.to(s.dtype), feats["aatype"])
        final = atom14_to_atom37(sm["positions"][:, -1], feats["residx_atom37_to_atom14"],
                                 feats["atom37_atom_exists"])
        outputs = {"msa": m[:, :n_clust], "pair": z, "single": s, "sm": sm,
                   **{f"sm_{key}": value for key, value in sm.items()},
                   "final_atom_positions": final,
                   "final_atom_mask": feats["atom37_atom_exists"],
                   "final_affine_tensor": sm["frames"][:, -1]}
        return outputs, (m[:, 0], z, final)

    def _recycle(self, m: torch.Tensor, z: torch.Tensor, feats: Batch,
                 recycled: Recycled | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the previous pass's embedding (zeros on the first pass) to m row 0 and z."""
        if recycled is None:
            n_res = z.shape[-2]
            recycled = (torch.zeros_like(m[:, 0]), torch.zeros_like(z),
                        z.new_zeros((z.shape[0], n_res, self.spec.num_atom_types, 3)))
        m0_prev, z_prev, x_prev = recycled
        x_prev = pseudo_beta(feats["aatype"], x_prev).to(z.dtype)
        m0_update, z_update = self.recycling_embedder(m0_prev, z_prev, x_prev)
        m = torch.cat([(m[:, 0] + m0_update).unsqueeze(1), m[:, 1:]], dim=1)
        return m, z + z_update

    def _templates(self, feats: Batch, z: torch.Tensor, pair_mask: torch.Tensor,
                   checkpointing: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The template pair update of z (zero without any template) and the template
        torsion-angle rows [B, T, N, c_m] to append to the MSA."""
        n_templ = feats["template_aatype"].shape[1]
        t = torch.stack([
            self.template_pair_embedder(template_pair_feat(
                {k: v[:, i] for k, v in feats.items() if k.startswith("template_")},
                self.spec, z.dtype))
            for i in range(n_templ)], dim=1)
        t = self.template_pair_stack(t, pair_mask, checkpointing)
        template_mask = feats["template_mask"].to(z.dtype)
        update = self.template_pointwise_attention(t, z, template_mask)
        any_template = (template_mask.sum(dim=1) > 0).to(z.dtype)
        update = update * any_template[:, None, None, None]
        rows = self.template_angle_embedder(
            template_angle_feat(feats, self.spec.template_aatype_classes).to(z.dtype))
        return update, rows


def _select(batch: Batch, j: int) -> Batch:
    """The features of recycling pass ``j`` (the trailing dim sliced away)."""
    return {key: value[..., j].contiguous() for key, value in batch.items()
            if isinstance(value, torch.Tensor)}
