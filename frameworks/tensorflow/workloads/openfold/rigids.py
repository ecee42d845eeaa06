"""Rigid transforms (rotation + translation) for the AlphaFold2 structure module and loss,
in TensorFlow — the mirror of ``sciperf_pytorch.workloads.openfold.rigids``.

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
``matmul``, as in the PyTorch mirror, so both frameworks sum the same terms in the same
order and a mixed-precision policy never lowers their precision.

Shapes: batch dimensions may be dynamic (``None`` residues inside a ``tf.function``); the
checks below only look at the static trailing 3 / 3×3 / 4×4 / 7 dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

__all__ = ["Rigid", "compose_quat_update", "identity_quaternion", "quat_multiply",
           "quat_to_rot", "rot_matmul", "rot_to_quat", "rot_vec_mul"]

_LOW_PRECISION = (tf.float16, tf.bfloat16)


def _full(t: tf.Tensor) -> tf.Tensor:
    """``t`` in at least fp32: frames accumulate error over 8 iterations and many atoms."""
    t = tf.convert_to_tensor(t)
    return tf.cast(t, tf.float32) if t.dtype in _LOW_PRECISION else t


def _tail(t: tf.Tensor, n: int) -> tuple[int | None, ...]:
    """The static sizes of the last `n` dims of `t` (None where unknown)."""
    return tuple(t.shape[-n:].as_list()) if t.shape.rank is not None else (None,) * n


def _batch_dim(dim: int, tail: int) -> int:
    """Tensor axis of batch dim `dim` for a tensor with `tail` trailing non-batch dims."""
    return dim if dim >= 0 else dim - tail


def rot_matmul(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """a·b for rotation matrices [*, 3, 3] (broadcasting over the leading dims)."""
    return tf.reduce_sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)


def rot_vec_mul(r: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
    """r·v for rotations [*, 3, 3] and vectors [*, 3]."""
    return tf.reduce_sum(r * v[..., None, :], axis=-1)


def quat_to_rot(q: tf.Tensor) -> tf.Tensor:
    """Rotation matrices [*, 3, 3] of quaternions (w, x, y, z) [*, 4].

    The quaternion is used as given (no normalisation): a unit quaternion gives a
    rotation, which is what every caller passes.
    """
    w, x, y, z = tf.unstack(q, num=4, axis=-1)
    rows = (
        (w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z),
    )
    return tf.stack([tf.stack(row, axis=-1) for row in rows], axis=-2)


def rot_to_quat(r: tf.Tensor) -> tf.Tensor:
    """A unit quaternion [*, 4] of rotation matrices [*, 3, 3].

    Bar-Itzhack's method, as the reference: the eigenvector of the largest eigenvalue of
    the symmetric 4×4 matrix built from ``r``. Robust for every rotation (no branch on
    the trace); the sign of the result is whatever the eigensolver returns (q and −q are
    the same rotation), so it may differ from PyTorch's by a factor −1.
    """
    r = tf.convert_to_tensor(r)
    if _tail(r, 2) != (3, 3):
        raise ValueError(f"rotation matrices must be [*, 3, 3], got {r.shape}")
    (xx, xy, xz), (yx, yy, yz), (zx, zy, zz) = (tf.unstack(row, num=3, axis=-1)
                                                for row in tf.unstack(r, num=3, axis=-2))
    k = (
        (xx + yy + zz, zy - yz, xz - zx, yx - xy),
        (zy - yz, xx - yy - zz, xy + yx, xz + zx),
        (xz - zx, xy + yx, yy - xx - zz, yz + zy),
        (yx - xy, xz + zx, yz + zy, zz - xx - yy),
    )
    k = (1.0 / 3.0) * tf.stack([tf.stack(row, axis=-1) for row in k], axis=-2)
    _, vectors = tf.linalg.eigh(k)  # eigenvalues ascending, vectors in the columns
    return vectors[..., -1]


def quat_multiply(q1: tf.Tensor, q2: tf.Tensor) -> tf.Tensor:
    """Hamilton product q1·q2 of quaternions (w, x, y, z) [*, 4]."""
    w1, x1, y1, z1 = tf.unstack(q1, num=4, axis=-1)
    w2, x2, y2, z2 = tf.unstack(q2, num=4, axis=-1)
    return tf.stack((
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ), axis=-1)


def identity_quaternion(shape: Sequence[int] | tf.Tensor,
                        dtype: tf.DType | str = tf.float32) -> tf.Tensor:
    """(1, 0, 0, 0) quaternions of batch shape ``shape`` (a list or a shape tensor, so
    the residue count may be dynamic): the structure module's start."""
    shape = tf.cast(shape, tf.int32)
    return tf.concat([tf.ones(tf.concat([shape, [1]], 0), dtype=dtype),
                      tf.zeros(tf.concat([shape, [3]], 0), dtype=dtype)], axis=-1)


def compose_quat_update(quat: tf.Tensor, trans: tf.Tensor,
                        update: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Apply the backbone update [*, 6] = (b, c, d, tx, ty, tz) to frames (quat, trans).

    The update's rotation is the non-unit quaternion (1, b, c, d) composed on the right;
    the result is renormalised. The translation update lives in the old local frame, so
    it is rotated by the old rotation before it is added (AF2 supplement Algorithm 23).
    """
    quat, trans, update = _full(quat), _full(trans), _full(update)
    vec, t_update = update[..., :3], update[..., 3:]
    pure = tf.concat([tf.zeros_like(vec[..., :1]), vec], axis=-1)
    new_quat = quat + quat_multiply(quat, pure)
    new_quat = new_quat / tf.norm(new_quat, axis=-1, keepdims=True)
    new_trans = trans + rot_vec_mul(quat_to_rot(quat), t_update)
    return new_quat, new_trans


class Rigid:
    """A tensor of rigid transforms: rotations ``rot`` [*, 3, 3], translations ``trans`` [*, 3]."""

    __slots__ = ("rot", "trans")

    def __init__(self, rot: tf.Tensor, trans: tf.Tensor) -> None:
        rot, trans = tf.convert_to_tensor(rot), tf.convert_to_tensor(trans)
        if _tail(rot, 2) != (3, 3) or _tail(trans, 1) != (3,):
            raise ValueError(f"Rigid needs rot [*, 3, 3] and trans [*, 3], "
                             f"got {rot.shape} and {trans.shape}")
        if not rot.shape[:-2].is_compatible_with(trans.shape[:-1]):
            raise ValueError(f"Rigid rot batch {rot.shape[:-2]} differs from "
                             f"trans batch {trans.shape[:-1]}")
        self.rot = _full(rot)
        self.trans = _full(trans)

    # -- construction ----------------------------------------------------------------
    @staticmethod
    def identity(shape: Sequence[int] | tf.Tensor,
                 dtype: tf.DType | str = tf.float32) -> Rigid:
        """Identity transforms of batch shape ``shape`` (a list or a shape tensor)."""
        shape = tf.cast(shape, tf.int32)
        rot = tf.eye(3, batch_shape=None, dtype=dtype)
        rot = tf.broadcast_to(rot, tf.concat([shape, [3, 3]], 0))
        return Rigid(rot, tf.zeros(tf.concat([shape, [3]], 0), dtype=dtype))

    @staticmethod
    def from_quaternion(quat: tf.Tensor, trans: tf.Tensor, normalize: bool = True) -> Rigid:
        """Frames from quaternions (w, x, y, z) [*, 4] and translations [*, 3]."""
        quat = _full(quat)
        if normalize:
            quat = quat / tf.norm(quat, axis=-1, keepdims=True)
        return Rigid(quat_to_rot(quat), trans)

    @staticmethod
    def from_tensor_7(t: tf.Tensor, normalize: bool = False) -> Rigid:
        """Frames from 7-vectors (w, x, y, z, tx, ty, tz), the layout of ``sm.frames``."""
        t = tf.convert_to_tensor(t)
        if _tail(t, 1) != (7,):
            raise ValueError(f"7-vector frames must be [*, 7], got {t.shape}")
        return Rigid.from_quaternion(t[..., :4], t[..., 4:], normalize=normalize)

    @staticmethod
    def from_tensor_4x4(t: tf.Tensor) -> Rigid:
        """Frames from homogeneous matrices [*, 4, 4] (the bottom row is ignored)."""
        t = tf.convert_to_tensor(t)
        if _tail(t, 2) != (4, 4):
            raise ValueError(f"homogeneous frames must be [*, 4, 4], got {t.shape}")
        return Rigid(t[..., :3, :3], t[..., :3, 3])

    @staticmethod
    def from_3_points(p_neg_x_axis: tf.Tensor, origin: tf.Tensor,
                      p_xy_plane: tf.Tensor, eps: float = 1e-8) -> Rigid:
        """Frames by Gram–Schmidt (AF2 supplement Algorithm 21), e.g. from (N, CA, C).

        eps sits inside both square roots, so coincident points give finite (zero-ish)
        axes instead of NaN — masked residues of the features rely on it.
        """
        e0 = origin - p_neg_x_axis
        e1 = p_xy_plane - origin
        e0 = e0 / tf.sqrt(tf.reduce_sum(e0 * e0, axis=-1, keepdims=True) + eps)
        e1 = e1 - e0 * tf.reduce_sum(e0 * e1, axis=-1, keepdims=True)
        e1 = e1 / tf.sqrt(tf.reduce_sum(e1 * e1, axis=-1, keepdims=True) + eps)
        e2 = tf.linalg.cross(e0, e1)
        return Rigid(tf.stack([e0, e1, e2], axis=-1), origin)

    @staticmethod
    def cat(rigids: Sequence[Rigid], dim: int) -> Rigid:
        """Concatenate along batch dimension ``dim`` (negative counts from the batch end)."""
        return Rigid(tf.concat([r.rot for r in rigids], axis=_batch_dim(dim, 2)),
                     tf.concat([r.trans for r in rigids], axis=_batch_dim(dim, 1)))

    # -- tensor-like -----------------------------------------------------------------
    @property
    def shape(self) -> tf.TensorShape:
        """Static batch shape ``[*]`` (None where dynamic; ``tf.shape(trans)[:-1]`` for
        the dynamic one)."""
        return self.trans.shape[:-1]

    @property
    def dtype(self) -> tf.DType:
        return self.trans.dtype

    @property
    def device(self) -> str:
        return self.trans.device

    def __getitem__(self, index: Any) -> Rigid:
        """Index the batch dimensions like a tensor of shape ``[*]`` (basic indexing:
        ints, slices, ``...``, ``None``)."""
        index = index if isinstance(index, tuple) else (index,)
        return Rigid(self.rot[(*index, slice(None), slice(None))],
                     self.trans[(*index, slice(None))])

    def unsqueeze(self, dim: int) -> Rigid:
        """A new batch dimension at ``dim`` (negative counts from the batch end)."""
        rank = len(self.shape)
        if dim >= rank + 1 or dim < -rank - 1:
            raise IndexError(f"unsqueeze dim {dim} out of range for batch {self.shape}")
        return Rigid(tf.expand_dims(self.rot, _batch_dim(dim, 2)),
                     tf.expand_dims(self.trans, _batch_dim(dim, 1)))

    def to(self, dtype: tf.DType | str | None = None) -> Rigid:
        """The same transforms in ``dtype`` (half precision still lands in fp32)."""
        if dtype is None:
            return self
        return Rigid(tf.cast(self.rot, dtype), tf.cast(self.trans, dtype))

    # -- algebra ---------------------------------------------------------------------
    def compose(self, other: Rigid) -> Rigid:
        """self ∘ other: apply ``other`` first, then ``self``."""
        return Rigid(rot_matmul(self.rot, other.rot),
                     rot_vec_mul(self.rot, other.trans) + self.trans)

    def invert(self) -> Rigid:
        """The inverse transform (Rᵀ, −Rᵀt)."""
        rot_inv = tf.linalg.matrix_transpose(self.rot)
        return Rigid(rot_inv, -rot_vec_mul(rot_inv, self.trans))

    def apply(self, points: tf.Tensor) -> tf.Tensor:
        """R·p + t for points [*, 3] broadcast against the batch."""
        return rot_vec_mul(self.rot, points) + self.trans

    def invert_apply(self, points: tf.Tensor) -> tf.Tensor:
        """Rᵀ·(p − t): global points into the local frames."""
        return rot_vec_mul(tf.linalg.matrix_transpose(self.rot), points - self.trans)

    def scale_translation(self, factor: float) -> Rigid:
        """Same rotations, translations × ``factor`` (nm-like internal units → Å)."""
        return Rigid(self.rot, self.trans * factor)

    def stop_rot_gradient(self) -> Rigid:
        """Rotations detached, translations kept in the graph (AF2 Algorithm 20, line 20)."""
        return Rigid(tf.stop_gradient(self.rot), self.trans)

    def detach(self) -> Rigid:
        return Rigid(tf.stop_gradient(self.rot), tf.stop_gradient(self.trans))

    # -- export ----------------------------------------------------------------------
    def to_tensor_4x4(self) -> tf.Tensor:
        """Homogeneous matrices [*, 4, 4] with bottom row (0, 0, 0, 1)."""
        top = tf.concat([self.rot, self.trans[..., None]], axis=-1)  # [*, 3, 4]
        bottom = tf.zeros_like(top[..., :1, :]) + tf.constant([0.0, 0.0, 0.0, 1.0],
                                                               dtype=top.dtype)
        return tf.concat([top, bottom], axis=-2)

    def to_tensor_7(self) -> tf.Tensor:
        """7-vectors (quaternion from the matrix by :func:`rot_to_quat`, translation)."""
        return tf.concat([rot_to_quat(self.rot), self.trans], axis=-1)

    def __repr__(self) -> str:
        return f"Rigid(shape={self.shape}, dtype={self.dtype.name})"
