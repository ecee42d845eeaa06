"""Rigid transforms of the PyTorch OpenFold: quaternion algebra against scipy's rotations,
the frame algebra (compose, invert, apply), Gram–Schmidt frames, the 4×4 and 7-vector
layouts, the backbone quaternion update and the rotation-gradient stop."""

from __future__ import annotations

import pytest
import torch
from scipy.spatial.transform import Rotation as ScipyRotation

from sciperf_pytorch.workloads.openfold.rigids import (
    Rigid,
    compose_quat_update,
    identity_quaternion,
    quat_multiply,
    quat_to_rot,
    rot_matmul,
    rot_to_quat,
)

TOL = dict(atol=1e-10, rtol=1e-10)


def _quats(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return q / q.norm(dim=-1, keepdim=True)


def _rigids(n: int, seed: int) -> Rigid:
    g = torch.Generator().manual_seed(seed + 1)
    return Rigid.from_quaternion(_quats(n, seed), 5 * torch.randn(n, 3, generator=g,
                                                                   dtype=torch.float64))


def test_quat_to_rot_matches_scipy_and_is_a_rotation():
    q = _quats(32, 0)
    r = quat_to_rot(q)
    expected = ScipyRotation.from_quat(q[:, [1, 2, 3, 0]].numpy()).as_matrix()  # scalar last
    torch.testing.assert_close(r, torch.from_numpy(expected), **TOL)
    torch.testing.assert_close(rot_matmul(r, r.transpose(-1, -2)),
                               torch.eye(3, dtype=torch.float64).expand(32, 3, 3), **TOL)
    torch.testing.assert_close(torch.linalg.det(r), torch.ones(32, dtype=torch.float64), **TOL)


def test_rot_to_quat_round_trip_up_to_sign():
    q = _quats(32, 1)
    back = rot_to_quat(quat_to_rot(q))
    sign = torch.sign((back * q).sum(dim=-1, keepdim=True))
    torch.testing.assert_close(back * sign, q, atol=1e-9, rtol=1e-9)


def test_quat_multiply_is_rotation_composition():
    q1, q2 = _quats(16, 2), _quats(16, 3)
    torch.testing.assert_close(quat_to_rot(quat_multiply(q1, q2)),
                               rot_matmul(quat_to_rot(q1), quat_to_rot(q2)), **TOL)


def test_compose_invert_apply_algebra():
    a, b = _rigids(8, 4), _rigids(8, 5)
    p = torch.randn(8, 3, dtype=torch.float64)
    torch.testing.assert_close(a.compose(b).apply(p), a.apply(b.apply(p)), **TOL)
    torch.testing.assert_close(a.invert_apply(a.apply(p)), p, **TOL)
    torch.testing.assert_close(a.invert().apply(p), a.invert_apply(p), **TOL)
    ident = a.compose(a.invert())
    torch.testing.assert_close(ident.rot, torch.eye(3, dtype=torch.float64).expand(8, 3, 3),
                               **TOL)
    torch.testing.assert_close(ident.trans, torch.zeros(8, 3, dtype=torch.float64), **TOL)
    # Broadcasting: every frame applied to every point (the FAPE pattern).
    pts = torch.randn(5, 3, dtype=torch.float64)
    local = a.unsqueeze(-1).invert_apply(pts.unsqueeze(0))
    assert local.shape == (8, 5, 3)
    torch.testing.assert_close(local[3, 2], a[3].invert_apply(pts[2]), **TOL)


def test_from_3_points_gram_schmidt_convention():
    g = torch.Generator().manual_seed(6)
    n, ca, c = (torch.randn(10, 3, generator=g, dtype=torch.float64) for _ in range(3))
    frame = Rigid.from_3_points(n, ca, c, eps=0.0)
    torch.testing.assert_close(frame.trans, ca, **TOL)
    torch.testing.assert_close(rot_matmul(frame.rot.transpose(-1, -2), frame.rot),
                               torch.eye(3, dtype=torch.float64).expand(10, 3, 3), **TOL)
    torch.testing.assert_close(torch.linalg.det(frame.rot),
                               torch.ones(10, dtype=torch.float64), **TOL)
    n_local, c_local = frame.invert_apply(n), frame.invert_apply(c)
    # N on the negative x axis, C in the xy plane on the positive-y side.
    assert torch.all(n_local[:, 0] < 0)
    torch.testing.assert_close(n_local[:, 1:], torch.zeros(10, 2, dtype=torch.float64), **TOL)
    assert torch.all(c_local[:, 1] > 0)
    torch.testing.assert_close(c_local[:, 2], torch.zeros(10, dtype=torch.float64), **TOL)
    # eps keeps coincident points finite (masked residues are all zeros).
    zeros = torch.zeros(2, 3)
    assert torch.isfinite(Rigid.from_3_points(zeros, zeros, zeros).rot).all()


def test_4x4_and_7_vector_round_trips():
    a = _rigids(6, 7)
    m = a.to_tensor_4x4()
    assert m.shape == (6, 4, 4)
    torch.testing.assert_close(m[:, 3], torch.tensor([0, 0, 0, 1.0], dtype=torch.float64)
                               .expand(6, 4), **TOL)
    b = Rigid.from_tensor_4x4(m)
    torch.testing.assert_close(b.rot, a.rot, **TOL)
    torch.testing.assert_close(b.trans, a.trans, **TOL)
    seven = a.to_tensor_7()
    assert seven.shape == (6, 7)
    c = Rigid.from_tensor_7(seven)
    torch.testing.assert_close(c.rot, a.rot, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(c.trans, a.trans, **TOL)
    # The stored quaternion of sm.frames: w first.
    q = torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)  # 180° about z
    f = Rigid.from_tensor_7(torch.cat([q, torch.tensor([[1.0, 2.0, 3.0]],
                                                       dtype=torch.float64)], dim=-1))
    torch.testing.assert_close(f.apply(torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)),
                               torch.tensor([[0.0, 2.0, 3.0]], dtype=torch.float64), **TOL)


def test_backbone_quaternion_update():
    q, t = _quats(4, 8), torch.randn(4, 3, dtype=torch.float64)
    zero = torch.zeros(4, 6, dtype=torch.float64)
    q0, t0 = compose_quat_update(q, t, zero)
    torch.testing.assert_close(q0, q, **TOL)
    torch.testing.assert_close(t0, t, **TOL)
    upd = torch.randn(4, 6, dtype=torch.float64)
    q1, t1 = compose_quat_update(q, t, upd)
    # Same as composing the frame with the update frame (rotation (1,b,c,d), translation).
    one = torch.ones(4, 1, dtype=torch.float64)
    step = Rigid.from_quaternion(torch.cat([one, upd[:, :3]], dim=-1), upd[:, 3:])
    expected = Rigid.from_quaternion(q, t).compose(step)
    torch.testing.assert_close(quat_to_rot(q1), expected.rot, **TOL)
    torch.testing.assert_close(t1, expected.trans, **TOL)
    torch.testing.assert_close(q1.norm(dim=-1), torch.ones(4, dtype=torch.float64), **TOL)
    start = identity_quaternion((2, 3))
    assert start.shape == (2, 3, 4) and torch.equal(start[..., 0], torch.ones(2, 3))


def test_stop_rot_gradient_keeps_translation_gradient():
    q = _quats(3, 9).requires_grad_(True)
    t = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    frame = Rigid.from_quaternion(q, t).stop_rot_gradient()
    frame.apply(torch.ones(3, 3, dtype=torch.float64)).sum().backward()
    assert q.grad is None
    torch.testing.assert_close(t.grad, torch.ones(3, 3, dtype=torch.float64))


def test_low_precision_is_promoted_and_shape_helpers():
    half = Rigid(torch.eye(3, dtype=torch.bfloat16).expand(2, 3, 3),
                 torch.zeros(2, 3, dtype=torch.bfloat16))
    assert half.rot.dtype == torch.float32 and half.trans.dtype == torch.float32
    a = Rigid.identity((2, 5))
    assert a.shape == (2, 5) and a[:, 1:3].shape == (2, 2) and a[1].shape == (5,)
    assert a.unsqueeze(-1).shape == (2, 5, 1) and a.unsqueeze(0).shape == (1, 2, 5)
    assert Rigid.cat([a, a[:, :2]], dim=-1).shape == (2, 7)
    with pytest.raises(ValueError):
        Rigid(torch.eye(3).expand(2, 3, 3), torch.zeros(3, 3))
