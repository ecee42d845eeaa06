"""Rigid transforms (rotation + translation) for the AlphaFold2 structure module and loss.

A :class:`Rigid` holds rotation matrices ``rot`` [*, 3, 3] and translations ``trans`` [*, 3]
and behaves like a tensor of transforms with shape ``[*]`` (indexing, unsqueeze, cat).
x ↦ rot·x + trans maps local coordinates to global ones.

Conventions that the reference fixes and the checkpoint's weights rely on
(shared/spec/openfold.md §3, §4):

* Quaternions are (w, x, y, z) with w first; ``sm.frames`` stores a frame as the
  7-vector (w, x, y, z, tx, ty, tz).
* The backbone update of the structure module is the quaternion (1, b, c, d) multiplied
  onto the current rotation, q ← normalise(q + q·(0, b, c, d)), and the translation update
  is rotated by the *old* rotation (:func:`compose_quat_update`).
* :meth:`Rigid.from_3_points` is Gram–Schmidt with eps inside each square root: the x-axis
  points from ``p_neg_x_axis`` to ``origin``, the y-axis lies in the plane of the three
  points on the side of ``p_xy_plane``; the matrix columns are the (x, y, z) axes.
* Rotations and translations are never held in half precision: fp16/bf16 inputs are
  promoted to fp32 (the reference forces fp32 for the same reason; unlike it, fp64 stays
  fp64, so double-precision checks stay double).

Matrix products are written as broadcast multiply-and-sum over the 3×3 entries instead of
``matmul`` so that autocast never lowers their precision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["Rigid", "compose_quat_update", "identity_quaternion", "quat_multiply",
           "quat_to_rot", "rot_matmul", "rot_to_quat", "rot_vec_mul"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _full(t: torch.Tensor) -> torch.Tensor:
    """``t`` in at least fp32: frames accumulate error over 8 iterations and many atoms."""
    return t.float() if t.dtype in _LOW_PRECISION else t


def rot_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a·b for rotation matrices [*, 3, 3] (broadcasting over the leading dims)."""
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(dim=-2)


def rot_vec_mul(r: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """r·v for rotations [*, 3, 3] and vectors [*, 3]."""
    return (r * v.unsqueeze(-2)).sum(dim=-1)


def quat_to_rot(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices [*, 3, 3] of quaternions (w, x, y, z) [*, 4].

    The quaternion is used as given (no normalisation): a unit quaternion gives a
    rotation, which is what every caller passes.
    """
    w, x, y, z = torch.unbind(q, dim=-1)
    rows = (
        (w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z),
    )
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def rot_to_quat(r: torch.Tensor) -> torch.Tensor:
    """A unit quaternion [*, 4] of rotation matrices [*, 3, 3].

    Bar-Itzhack's method, as the reference: the eigenvector of the largest eigenvalue of
    the symmetric 4×4 matrix built from ``r``. Robust for every rotation (no branch on
    the trace); the sign of the result is whatever the eigensolver returns (q and −q are
    the same rotation).
    """
    if r.shape[-2:] != (3, 3):
        raise ValueError(f"rotation matrices must be [*, 3, 3], got {tuple(r.shape)}")
    (xx, xy, xz), (yx, yy, yz), (zx, zy, zz) = (torch.unbind(row, dim=-1)
                                                for row in torch.unbind(r, dim=-2))
    k = (
        (xx + yy + zz, zy - yz, xz - zx, yx - xy),
        (zy - yz, xx - yy - zz, xy + yx, xz + zx),
        (xz - zx, xy + yx, yy - xx - zz, yz + zy),
        (yx - xy, xz + zx, yz + zy, zz - xx - yy),
    )
    k = (1.0 / 3.0) * torch.stack([torch.stack(row, dim=-1) for row in k], dim=-2)
    _, vectors = torch.linalg.eigh(k)
    return vectors[..., -1]


def quat_multiply(q1: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    """Hamilton product q1·q2 of quaternions (w, x, y, z) [*, 4]."""
    w1, x1, y1, z1 = torch.unbind(q1, dim=-1)
    w2, x2, y2, z2 = torch.unbind(q2, dim=-1)
    return torch.stack((
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ), dim=-1)


def identity_quaternion(shape: Sequence[int], dtype: torch.dtype | None = None,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """(1, 0, 0, 0) quaternions of batch shape ``shape``: the structure module's start."""
    q = torch.zeros((*shape, 4), dtype=dtype, device=device)
    q[..., 0] = 1.0
    return q


def compose_quat_update(quat: torch.Tensor, trans: torch.Tensor,
                        update: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply the backbone update [*, 6] = (b, c, d, tx, ty, tz) to frames (quat, trans).

    The update's rotation is the non-unit quaternion (1, b, c, d) composed on the right;
    the result is renormalised. The translation update lives in the old local frame, so
    it is rotated by the old rotation before it is added (AF2 supplement Algorithm 23).
    """
    quat, trans, update = _full(quat), _full(trans), _full(update)
    vec, t_update = update[..., :3], update[..., 3:]
    pure = torch.cat([torch.zeros_like(vec[..., :1]), vec], dim=-1)
    new_quat = quat + quat_multiply(quat, pure)
    new_quat = new_quat / torch.linalg.norm(new_quat, dim=-1, keepdim=True)
    new_trans = trans + rot_vec_mul(quat_to_rot(quat), t_update)
    return new_quat, new_trans


class Rigid:
    """A tensor of rigid transforms: rotations ``rot`` [*, 3, 3], translations ``trans`` [*, 3]."""

    __slots__ = ("rot", "trans")

    def __init__(self, rot: torch.Tensor, trans: torch.Tensor) -> None:
        if rot.shape[-2:] != (3, 3) or trans.shape[-1:] != (3,):
            raise ValueError(f"Rigid needs rot [*, 3, 3] and trans [*, 3], "
                             f"got {tuple(rot.shape)} and {tuple(trans.shape)}")
        if rot.shape[:-2] != trans.shape[:-1]:
            raise ValueError(f"Rigid rot batch {tuple(rot.shape[:-2])} differs from "
                             f"trans batch {tuple(trans.shape[:-1])}")
        self.rot = _full(rot)
        self.trans = _full(trans)

    # -- construction ----------------------------------------------------------------
    @staticmethod
    def identity(shape: Sequence[int], dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None) -> Rigid:
        """Identity transforms of batch shape ``shape``."""
        rot = torch.eye(3, dtype=dtype, device=device).expand(*shape, 3, 3).contiguous()
        return Rigid(rot, torch.zeros((*shape, 3), dtype=dtype, device=device))

    @staticmethod
    def from_quaternion(quat: torch.Tensor, trans: torch.Tensor,
                        normalize: bool = True) -> Rigid:
        """Frames from quaternions (w, x, y, z) [*, 4] and translations [*, 3]."""
        quat = _full(quat)
        if normalize:
            quat = quat / torch.linalg.norm(quat, dim=-1, keepdim=True)
        return Rigid(quat_to_rot(quat), trans)

    @staticmethod
    def from_tensor_7(t: torch.Tensor, normalize: bool = False) -> Rigid:
        """Frames from 7-vectors (w, x, y, z, tx, ty, tz), the layout of ``sm.frames``."""
        if t.shape[-1] != 7:
            raise ValueError(f"7-vector frames must be [*, 7], got {tuple(t.shape)}")
        return Rigid.from_quaternion(t[..., :4], t[..., 4:], normalize=normalize)

    @staticmethod
    def from_tensor_4x4(t: torch.Tensor) -> Rigid:
        """Frames from homogeneous matrices [*, 4, 4] (the bottom row is ignored)."""
        if t.shape[-2:] != (4, 4):
            raise ValueError(f"homogeneous frames must be [*, 4, 4], got {tuple(t.shape)}")
        return Rigid(t[..., :3, :3], t[..., :3, 3])

    @staticmethod
    def from_3_points(p_neg_x_axis: torch.Tensor, origin: torch.Tensor,
                      p_xy_plane: torch.Tensor, eps: float = 1e-8) -> Rigid:
        """Frames by Gram–Schmidt (AF2 supplement Algorithm 21), e.g. from (N, CA, C).

        eps sits inside both square roots, so coincident points give finite (zero-ish)
        axes instead of NaN — masked residues of the features rely on it.
        """
        e0 = origin - p_neg_x_axis
        e1 = p_xy_plane - origin
        e0 = e0 / torch.sqrt((e0 * e0).sum(dim=-1, keepdim=True) + eps)
        e1 = e1 - e0 * (e0 * e1).sum(dim=-1, keepdim=True)
        e1 = e1 / torch.sqrt((e1 * e1).sum(dim=-1, keepdim=True) + eps)
        e2 = torch.linalg.cross(e0, e1, dim=-1)
        return Rigid(torch.stack([e0, e1, e2], dim=-1), origin)

    @staticmethod
    def cat(rigids: Sequence[Rigid], dim: int) -> Rigid:
        """Concatenate along batch dimension ``dim`` (negative counts from the batch end)."""
        rot_dim = dim if dim >= 0 else dim - 2
        trans_dim = dim if dim >= 0 else dim - 1
        return Rigid(torch.cat([r.rot for r in rigids], dim=rot_dim),
                     torch.cat([r.trans for r in rigids], dim=trans_dim))

    # -- tensor-like -----------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        """Batch shape ``[*]``."""
        return self.trans.shape[:-1]

    @property
    def dtype(self) -> torch.dtype:
        return self.trans.dtype

    @property
    def device(self) -> torch.device:
        return self.trans.device

    def __getitem__(self, index: Any) -> Rigid:
        """Index the batch dimensions like a tensor of shape ``[*]``."""
        index = index if isinstance(index, tuple) else (index,)
        return Rigid(self.rot[(*index, slice(None), slice(None))],
                     self.trans[(*index, slice(None))])

    def unsqueeze(self, dim: int) -> Rigid:
        """A new batch dimension at ``dim`` (negative counts from the batch end)."""
        if dim >= len(self.shape) + 1 or dim < -len(self.shape) - 1:
            raise IndexError(f"unsqueeze dim {dim} out of range for batch {tuple(self.shape)}")
        rot_dim = dim if dim >= 0 else dim - 2
        trans_dim = dim if dim >= 0 else dim - 1
        return Rigid(self.rot.unsqueeze(rot_dim), self.trans.unsqueeze(trans_dim))

    def to(self, dtype: torch.dtype | None = None,
           device: torch.device | str | None = None) -> Rigid:
        return Rigid(self.rot.to(device=device, dtype=dtype),
                     self.trans.to(device=device, dtype=dtype))

    # -- algebra ---------------------------------------------------------------------
    def compose(self, other: Rigid) -> Rigid:
        """self ∘ other: apply ``other`` first, then ``self``."""
        return Rigid(rot_matmul(self.rot, other.rot),
                     rot_vec_mul(self.rot, other.trans) + self.trans)

    def invert(self) -> Rigid:
        """The inverse transform (Rᵀ, −Rᵀt)."""
        rot_inv = self.rot.transpose(-1, -2)
        return Rigid(rot_inv, -rot_vec_mul(rot_inv, self.trans))

    def apply(self, points: torch.Tensor) -> torch.Tensor:
        """R·p + t for points [*, 3] broadcast against the batch."""
        return rot_vec_mul(self.rot, points) + self.trans

    def invert_apply(self, points: torch.Tensor) -> torch.Tensor:
        """Rᵀ·(p − t): global points into the local frames."""
        return rot_vec_mul(self.rot.transpose(-1, -2), points - self.trans)

    def scale_translation(self, factor: float) -> Rigid:
        """Same rotations, translations × ``factor`` (nm-like internal units → Å)."""
        return Rigid(self.rot, self.trans * factor)

    def stop_rot_gradient(self) -> Rigid:
        """Rotations detached, translations kept in the graph (AF2 Algorithm 20, line 20)."""
        return Rigid(self.rot.detach(), self.trans)

    def detach(self) -> Rigid:
        return Rigid(self.rot.detach(), self.trans.detach())

    # -- export ----------------------------------------------------------------------
    def to_tensor_4x4(self) -> torch.Tensor:
        """Homogeneous matrices [*, 4, 4] with bottom row (0, 0, 0, 1)."""
        top = torch.cat([self.rot, self.trans.unsqueeze(-1)], dim=-1)
        bottom = torch.zeros_like(top[..., :1, :])
        bottom[..., 0, 3] = 1.0
        return torch.cat([top, bottom], dim=-2)

    def to_tensor_7(self) -> torch.Tensor:
        """7-vectors (quaternion from the matrix by :func:`rot_to_quat`, translation)."""
        return torch.cat([rot_to_quat(self.rot), self.trans], dim=-1)

    def __repr__(self) -> str:
        return f"Rigid(shape={tuple(self.shape)}, dtype={self.dtype})"
