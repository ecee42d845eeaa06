"""AlphaFold2's structure module: invariant point attention, backbone updates and the
torsion-angle side chains, one set of weights applied ``sm_blocks`` times
(AF2 supplement §1.8, Algorithms 20–25; shared/spec/openfold.md §3).

Frames start at the identity ("black hole" start) and are kept as unit quaternions plus
translations in internal units (nm-like); outputs scale translations by
``trans_scale_factor`` (10) to Å. Between iterations the rotation is detached, so each
iteration's rotation gradient stays local (Algorithm 20, line 20).

Side chains: the 7 predicted (sin, cos) torsions rotate the literature rigid-group
frames of each residue type about their x axes; χ2–χ4 chain onto χ1; atom14 positions are
the literature positions in their group's frame (residue constants from
:mod:`sciperf.workloads.openfold.residue_constants`).

Outputs per iteration, stacked on dim 1: ``frames`` [B, I, N, 7] (quaternion w-first,
translation in Å), ``sidechain_frames`` [B, I, N, 8, 4, 4], ``unnormalized_angles`` and
``angles`` [B, I, N, 7, 2], ``positions`` [B, I, N, 14, 3], ``states`` [B, I, N, c_s];
and ``single`` [B, N, c_s], the last iteration's s.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_pytorch.workloads.openfold.primitives import Linear, layer_norm
from sciperf_pytorch.workloads.openfold.rigids import (
    Rigid,
    compose_quat_update,
    identity_quaternion,
    quat_to_rot,
)

__all__ = ["InvariantPointAttention", "StructureModule", "atom14_to_atom37",
           "frames_to_atom14", "torsion_angles_to_frames"]

SOFTPLUS_INVERSE_1 = 0.541324854612918  # softplus⁻¹(1): point weights start at 1


class InvariantPointAttention(nn.Module):
    """IPA (Algorithm 22): attention from scalar q·k, the pair bias and the distances of
    query/key points placed in the residues' frames; outputs scalar, point (back in the
    local frame, with norms) and pair channels.

    Weight layouts the checkpoint fixes: ``linear_kv`` holds k then v per head;
    ``linear_*_points`` hold all x, then all y, then all z coordinates; ``linear_out``
    reads [scalar | point x | point y | point z | point norm | pair].
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        c_s, heads, hidden = spec.c_s, spec.num_heads_ipa, spec.c_hidden_ipa
        self.heads, self.hidden = heads, hidden
        self.qk_points, self.v_points = spec.num_qk_points, spec.num_v_points
        self.inf, self.eps = spec.sm_inf, spec.sm_eps
        self.head_weights = nn.Parameter(torch.full((heads,), SOFTPLUS_INVERSE_1))
        self.linear_q = Linear(c_s, heads * hidden)
        self.linear_kv = Linear(c_s, 2 * heads * hidden)
        self.linear_q_points = Linear(c_s, heads * self.qk_points * 3)
        self.linear_kv_points = Linear(c_s, heads * (self.qk_points + self.v_points) * 3)
        self.linear_b = Linear(spec.c_z, heads)
        self.linear_out = Linear(heads * (spec.c_z + hidden + 4 * self.v_points), c_s,
                                 init="final")

    def _points(self, linear: Linear, s: torch.Tensor, frames: Rigid) -> torch.Tensor:
        """Points [B, N, H, P, 3] in global coordinates (layout: x block, y block, z block)."""
        raw = linear(s)
        pts = torch.stack(torch.chunk(raw, 3, dim=-1), dim=-1)  # [B, N, H·P, 3]
        pts = frames.unsqueeze(-1).apply(pts)
        return pts.view(*pts.shape[:-2], self.heads, -1, 3)

    def forward(self, s: torch.Tensor, z: torch.Tensor, frames: Rigid,
                mask: torch.Tensor) -> torch.Tensor:
        h, c = self.heads, self.hidden
        q = self.linear_q(s).view(*s.shape[:-1], h, c)
        k, v = self.linear_kv(s).view(*s.shape[:-1], h, 2 * c).split(c, dim=-1)
        q_pts = self._points(self.linear_q_points, s, frames)
        k_pts, v_pts = self._points(self.linear_kv_points, s, frames).split(
            (self.qk_points, self.v_points), dim=-2)

        logits = torch.matmul(q.movedim(-3, -2), k.movedim(-3, -1))  # [B, H, N, N]
        logits = logits * math.sqrt(1.0 / (3 * c))
        logits = logits + math.sqrt(1.0 / 3) * self.linear_b(z).movedim(-1, -3)
        d2 = ((q_pts.unsqueeze(-4) - k_pts.unsqueeze(-5)) ** 2).sum(dim=-1)  # [B,N,N,H,P]
        weights = F.softplus(self.head_weights) * math.sqrt(
            1.0 / (3 * (self.qk_points * 9.0 / 2)))
        pt_logits = -0.5 * (d2 * weights.unsqueeze(-1)).sum(dim=-1)  # [B, N, N, H]
        square_mask = (mask.unsqueeze(-1) * mask.unsqueeze(-2) - 1.0) * self.inf
        logits = logits + pt_logits.movedim(-1, -3) + square_mask.unsqueeze(-3)
        a = torch.softmax(logits, dim=-1)  # [B, H, N(i), N(j)]

        o = torch.matmul(a, v.transpose(-2, -3)).transpose(-2, -3)  # [B, N, H, C]
        o_pt = torch.einsum("bhij,bjhpx->bihpx", a, v_pts)  # [B, N, H, Pv, 3]
        o_pt = frames.unsqueeze(-1).unsqueeze(-1).invert_apply(o_pt)
        o_pt_norm = torch.sqrt((o_pt ** 2).sum(dim=-1) + self.eps).flatten(-2)
        o_pt = o_pt.flatten(-3, -2)  # [B, N, H·Pv, 3]
        o_pair = torch.matmul(a.transpose(-2, -3), z)  # [B, N, H, c_z]
        out = torch.cat([o.flatten(-2), *o_pt.unbind(dim=-1), o_pt_norm, o_pair.flatten(-2)],
                        dim=-1)
        return self.linear_out(out)


class SingleTransition(nn.Module):
    """s + Linear(ReLU(Linear(ReLU(Linear(s))))), dropout, LN."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        c = spec.c_s
        self.linear_1 = Linear(c, c, init="relu")
        self.linear_2 = Linear(c, c, init="relu")
        self.linear_3 = Linear(c, c, init="final")
        self.dropout = nn.Dropout(spec.sm_dropout)
        self.layer_norm = layer_norm(c, spec.layer_norm_eps)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        s = s + self.linear_3(torch.relu(self.linear_2(torch.relu(self.linear_1(s)))))
        return self.layer_norm(self.dropout(s))


class BackboneUpdate(nn.Module):
    """Linear(c_s → 6): quaternion vector part (b, c, d) and translation (zero init)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.linear = Linear(spec.c_s, 6, init="final")

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return self.linear(s)


class AngleResnetBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.linear_1 = Linear(c, c, init="relu")
        self.linear_2 = Linear(c, c, init="final")

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return a + self.linear_2(torch.relu(self.linear_1(torch.relu(a))))


class AngleResnet(nn.Module):
    """(sin, cos) of the 7 torsions from s and the initial s; normalised, and also
    returned raw for the angle-norm loss. The ReLUs on the inputs are DeepMind's code's
    (absent from the supplement's pseudocode)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        c, self.num_angles, self.eps = spec.c_hidden_angle, spec.num_angles, spec.sm_eps
        self.linear_in = Linear(spec.c_s, c)
        self.linear_initial = Linear(spec.c_s, c)
        self.layers = nn.ModuleList(AngleResnetBlock(c) for _ in range(spec.angle_blocks))
        self.linear_out = Linear(c, 2 * spec.num_angles)

    def forward(self, s: torch.Tensor,
                s_initial: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.linear_in(torch.relu(s)) + self.linear_initial(torch.relu(s_initial))
        for layer in self.layers:
            a = layer(a)
        raw = self.linear_out(torch.relu(a)).view(*a.shape[:-1], self.num_angles, 2)
        norm = torch.sqrt(torch.clamp((raw ** 2).sum(dim=-1, keepdim=True), min=self.eps))
        return raw, raw / norm


@lru_cache(maxsize=8)
def _tables(dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    """Residue-constant tables as tensors, cached per dtype/device (no module buffers,
    so the state dict holds parameters only, like the reference's)."""
    def t(a: np.ndarray, as_dtype: torch.dtype | None = dtype) -> torch.Tensor:
        return torch.as_tensor(np.array(a), device=device).to(as_dtype)
    return {"default_frames": t(rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME),
            "group_idx": t(rc.RESTYPE_ATOM14_TO_RIGID_GROUP, torch.long),
            "atom_mask": t(rc.RESTYPE_ATOM14_MASK),
            "lit_positions": t(rc.RESTYPE_ATOM14_RIGID_GROUP_POSITIONS)}


def torsion_angles_to_frames(backbone: Rigid, angles: torch.Tensor, aatype: torch.Tensor,
                             default_frames: torch.Tensor) -> Rigid:
    """The 8 rigid-group frames [*, N, 8] in global coordinates (Algorithm 24).

    Group g's frame = backbone ∘ default_g ∘ Rx(torsion_g), with the χ2–χ4 groups chained
    onto χ1 (each default frame of χ2..χ4 is relative to the previous χ group). The
    backbone group's torsion is the identity (sin 0, cos 1). Rx(α) = [[1,0,0],[0,c,−s],[0,s,c]].
    """
    defaults = Rigid.from_tensor_4x4(default_frames[aatype])  # [*, N, 8]
    ident = torch.zeros_like(angles[..., :1, :])
    ident[..., 1] = 1.0
    sin, cos = torch.cat([ident, angles], dim=-2).unbind(dim=-1)  # [*, N, 8]
    zero, one = torch.zeros_like(sin), torch.ones_like(sin)
    rx = torch.stack([torch.stack([one, zero, zero], dim=-1),
                      torch.stack([zero, cos, -sin], dim=-1),
                      torch.stack([zero, sin, cos], dim=-1)], dim=-2)
    local = defaults.compose(Rigid(rx, torch.zeros_like(defaults.trans)))
    chained = [local[..., g] for g in range(5)]
    for g in (5, 6, 7):  # χ2 onto χ1, χ3 onto χ2, χ4 onto χ3
        chained.append(chained[-1].compose(local[..., g]))
    to_backbone = Rigid(torch.stack([f.rot for f in chained], dim=-3),
                        torch.stack([f.trans for f in chained], dim=-2))
    return backbone.unsqueeze(-1).compose(to_backbone)


def frames_to_atom14(frames: Rigid, aatype: torch.Tensor,
                     tables: dict[str, torch.Tensor]) -> torch.Tensor:
    """atom14 positions [*, N, 14, 3]: each atom's literature position in its group frame,
    zero where the residue type has no such atom (Algorithm 24, lines 10–11)."""
    group = tables["group_idx"][aatype]  # [*, N, 14]
    idx = group[..., None, None].expand(*group.shape, 3, 3)
    rot = torch.gather(frames.rot, -3, idx)
    trans = torch.gather(frames.trans, -2, group[..., None].expand(*group.shape, 3))
    pos = Rigid(rot, trans).apply(tables["lit_positions"][aatype].to(rot.dtype))
    return pos * tables["atom_mask"][aatype].unsqueeze(-1).to(pos.dtype)


def atom14_to_atom37(atom14: torch.Tensor, residx_atom37_to_atom14: torch.Tensor,
                     atom37_atom_exists: torch.Tensor) -> torch.Tensor:
    """atom37 positions [*, N, 37, 3] from atom14 through the per-residue index map."""
    idx = residx_atom37_to_atom14.long().unsqueeze(-1).expand(
        *residx_atom37_to_atom14.shape, 3)
    return torch.gather(atom14, -2, idx) * atom37_atom_exists.unsqueeze(-1).to(atom14.dtype)


class StructureModule(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.num_blocks, self.scale = spec.sm_blocks, spec.trans_scale_factor
        eps = spec.layer_norm_eps
        self.layer_norm_s = layer_norm(spec.c_s, eps)
        self.layer_norm_z = layer_norm(spec.c_z, eps)
        self.linear_in = Linear(spec.c_s, spec.c_s)
        self.ipa = InvariantPointAttention(spec)
        self.ipa_dropout = nn.Dropout(spec.sm_dropout)
        self.layer_norm_ipa = layer_norm(spec.c_s, eps)
        self.transition = SingleTransition(spec)
        self.bb_update = BackboneUpdate(spec)
        self.angle_resnet = AngleResnet(spec)

    def forward(self, s: torch.Tensor, z: torch.Tensor, mask: torch.Tensor,
                aatype: torch.Tensor) -> dict[str, torch.Tensor]:
        """s [B, N, c_s], z [B, N, N, c_z], mask [B, N], aatype [B, N]."""
        s = self.layer_norm_s(s)
        z = self.layer_norm_z(z)
        s_initial = s
        s = self.linear_in(s)
        quat = identity_quaternion(s.shape[:-1], dtype=torch.promote_types(s.dtype,
                                                                           torch.float32),
                                   device=s.device)
        trans = torch.zeros_like(quat[..., 1:])
        tables = _tables(quat.dtype, s.device)
        aatype = aatype.long()
        steps: list[dict[str, torch.Tensor]] = []
        for _ in range(self.num_blocks):
            s = s + self.ipa(s, z, Rigid(quat_to_rot(quat), trans), mask)
            s = self.layer_norm_ipa(self.ipa_dropout(s))
            s = self.transition(s)
            quat, trans = compose_quat_update(quat, trans, self.bb_update(s))
            backbone = Rigid(quat_to_rot(quat), trans * self.scale)
            raw, angles = self.angle_resnet(s, s_initial)
            groups = torsion_angles_to_frames(backbone, angles, aatype,
                                              tables["default_frames"])
            steps.append({
                "frames": torch.cat([quat, trans * self.scale], dim=-1),
                "sidechain_frames": groups.to_tensor_4x4(),
                "unnormalized_angles": raw,
                "angles": angles,
                "positions": frames_to_atom14(groups, aatype, tables),
                "states": s,
            })
            quat = quat.detach()  # stop the rotation gradient between iterations
        out = {key: torch.stack([step[key] for step in steps], dim=1) for key in steps[0]}
        out["single"] = s
        return out
