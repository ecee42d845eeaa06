"""The OpenFold training loss (sciperf_pytorch.workloads.openfold.loss): every term against an
independent brute-force computation (explicit loops, numpy, float64), the invariances of FAPE,
the ambiguous-atom renaming, NaN/inf term dropping, the √crop scaling, gradients, the torch
lDDT against the numpy metric, and per-sample values recorded from the reference.

All inputs come from :func:`make_case`: a deterministic (closed-form, no RNG) batch of two
chains with ambiguous residues (ASP, GLU, PHE, TYR), PRO, CYS, GLY, missing atoms, an
unresolved residue, padding, a residue-index gap, and predictions over 3 structure-module
iterations — one far beyond the FAPE clamp — with the ambiguous atoms of some residues
predicted in the swapped naming.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sciperf.workloads.openfold import lddt as np_lddt
from sciperf.workloads.openfold import residue_constants as rc
from sciperf_pytorch.workloads.openfold import loss as ofl
from sciperf_pytorch.workloads.openfold.rigids import quat_to_rot

D = torch.float64
SEQS = ("DEFYRPCGKA", "YFEDGPCSLW")
N_RES, ITERS, N_CLUST, PAD = 10, 3, 4, 2
SWAPPED = ((0, 0), (0, 3), (1, 1), (1, 2))  # (sample, residue) predicted in the alt naming
CFG = ofl.LossConfig()


# ---------------------------------------------------------------------------- the case


def _wave(shape: tuple[int, ...], k: float) -> torch.Tensor:
    """Deterministic pseudo-random values in [−1, 1]: sin(k·(1..n))."""
    n = math.prod(shape)
    return torch.sin(k * torch.arange(1, n + 1, dtype=D) + 0.3 * k).reshape(shape)


def _table(array, index: torch.Tensor) -> torch.Tensor:
    t = torch.tensor(np.array(array))
    return (t.to(D) if t.is_floating_point() else t)[index]


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def _x_rotation(angle: torch.Tensor) -> torch.Tensor:
    """Rotations about x by ``angle`` [...] → [..., 3, 3]."""
    c, s = torch.cos(angle), torch.sin(angle)
    one, zero = torch.ones_like(c), torch.zeros_like(c)
    return torch.stack([torch.stack([one, zero, zero], -1), torch.stack([zero, c, -s], -1),
                        torch.stack([zero, s, c], -1)], -2)


def _homogeneous(rot: torch.Tensor, trans: torch.Tensor) -> torch.Tensor:
    top = torch.cat([rot, trans[..., None]], -1)
    bottom = torch.zeros_like(top[..., :1, :])
    bottom[..., 0, 3] = 1.0
    return torch.cat([top, bottom], -2)


def _group_frames(rot, trans, twist):
    """8 rigid-group frames [B, N, 8, 4, 4] hanging off backbone frames (rot, trans): group g
    is the backbone rotated by 0.4·g + twist about x and shifted 0.5·g Å along x."""
    g = torch.arange(8, dtype=D)
    local_rot = _x_rotation(0.4 * g + twist)  # [..., 8, 3, 3]
    local_t = torch.stack([0.5 * g, 0 * g, 0 * g], -1)
    r = rot[..., None, :, :] @ local_rot
    t = (rot[..., None, :, :] @ local_t[..., None])[..., 0] + trans[..., None, :]
    return _homogeneous(r, t)


def make_case() -> tuple[dict, dict]:
    """(outputs, batch) in float64; the model outputs in the reference's flat ``sm_*`` keys."""
    b_, n = 2, N_RES
    aatype = torch.tensor([[rc.RESTYPE_ORDER[c] for c in s] for s in SEQS])
    seq_mask = torch.ones(b_, n, dtype=D)
    seq_mask[0, n - PAD:] = 0
    aatype = aatype * seq_mask.long()  # the schema pad writes zeros
    residue_index = torch.arange(n).repeat(b_, 1)
    residue_index[:, 6:] += 4  # a chain break
    residue_index = residue_index * seq_mask.long()

    rot = quat_to_rot(_unit(_wave((b_, n, 4), 1.3)))
    steps = _unit(_wave((b_, n, 3), 0.71) + torch.tensor([0.8, 0.0, 0.0], dtype=D))
    trans = torch.cumsum(3.8 * steps, dim=1)
    exists14 = _table(rc.RESTYPE_ATOM14_MASK, aatype) * seq_mask[..., None]
    group = _table(rc.RESTYPE_ATOM14_TO_RIGID_GROUP, aatype)
    local = (_table(rc.RESTYPE_ATOM14_RIGID_GROUP_POSITIONS, aatype)
             + 0.6 * group[..., None] * torch.tensor([1.0, 0.5, 0.2], dtype=D))

    def place(r, t):
        return ((r[..., None, :, :] @ local[..., None])[..., 0] + t[..., None, :]) * exists14[
            ..., None]

    atoms = place(rot, trans)
    gt_exists = exists14 * (_wave((b_, n, 14), 2.9) < 0.75)  # missing atoms
    gt_exists[..., :3] = exists14[..., :3]  # keep most backbones
    gt_exists[1, 3] = 0  # one unresolved residue
    renaming = _table(rc.RESTYPE_AMBIGUOUS_RENAMING, aatype)
    alt_atoms = torch.einsum("bnac,bnad->bndc", atoms, renaming)
    alt_exists = torch.einsum("bna,bnad->bnd", gt_exists, renaming)
    ambiguous = _table(rc.RESTYPE_ATOM14_IS_AMBIGUOUS, aatype)

    to14 = _table(rc.RESTYPE_ATOM37_TO_ATOM14, aatype)
    exists37 = _table(rc.RESTYPE_ATOM37_MASK, aatype) * seq_mask[..., None]
    all_atom_positions = torch.gather(atoms, 2, to14[..., None].expand(-1, -1, -1, 3)) * exists37[
        ..., None]
    all_atom_mask = torch.gather(gt_exists, 2, to14) * exists37

    resolved = gt_exists[..., 1]
    frames = _group_frames(rot, trans, torch.zeros(()))
    periodic = _table(rc.CHI_PI_PERIODIC, aatype)  # [B, N, 4]
    flip = torch.diag(torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=D))  # π about x
    alt_frames = frames.clone()
    alt_frames[..., 4:, :, :] = torch.where(periodic[..., None, None] > 0,
                                            frames[..., 4:, :, :] @ flip, frames[..., 4:, :, :])
    group_exists = torch.cat([torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=D).expand(b_, n, 4),
                              _table(rc.CHI_ANGLES_MASK, aatype)], -1) * resolved[..., None]
    is_gly = aatype == rc.RESTYPE_ORDER["G"]
    ca, cb = rc.ATOM_ORDER["CA"], rc.ATOM_ORDER["CB"]
    torsion = 1.7 * _wave((b_, n, 7), 0.83)
    chi_mask = _table(rc.CHI_ANGLES_MASK, aatype) * resolved[..., None]
    batch = {
        "aatype": aatype, "seq_mask": seq_mask, "residue_index": residue_index,
        "seq_length": torch.tensor([n - PAD, 300]),
        "resolution": torch.tensor([1.8, 3.4], dtype=D),
        "use_clamped_fape": torch.tensor([1.0, 0.0], dtype=D),
        "all_atom_positions": all_atom_positions, "all_atom_mask": all_atom_mask,
        "atom37_atom_exists": exists37, "atom14_atom_exists": exists14,
        "residx_atom14_to_atom37": _table(rc.RESTYPE_ATOM14_TO_ATOM37, aatype),
        "atom14_gt_positions": atoms * gt_exists[..., None], "atom14_gt_exists": gt_exists,
        "atom14_alt_gt_positions": alt_atoms * alt_exists[..., None],
        "atom14_alt_gt_exists": alt_exists, "atom14_atom_is_ambiguous": ambiguous,
        "rigidgroups_gt_frames": frames, "rigidgroups_alt_gt_frames": alt_frames,
        "rigidgroups_gt_exists": group_exists,
        "backbone_rigid_tensor": frames[..., 0, :, :],
        "backbone_rigid_mask": gt_exists[..., 0] * gt_exists[..., 1] * gt_exists[..., 2],
        "pseudo_beta": torch.where(is_gly[..., None], all_atom_positions[..., ca, :],
                                   all_atom_positions[..., cb, :]),
        "pseudo_beta_mask": torch.where(is_gly, all_atom_mask[..., ca], all_atom_mask[..., cb]),
        "chi_angles_sin_cos": torch.stack([torch.sin(torch.cos(torsion[..., 3:]) * 3),
                                           torch.cos(torch.cos(torsion[..., 3:]) * 3)], -1)
        * chi_mask[..., None],
        "chi_mask": chi_mask,
        "true_msa": (torch.arange(n) * 7 + torch.arange(N_CLUST)[:, None] * 3
                     + torch.arange(b_)[:, None, None]) % 23,
        "bert_mask": ((torch.arange(n) + 2 * torch.arange(N_CLUST)[:, None]
                       + torch.arange(b_)[:, None, None]) % 4 == 0).to(D),
    }
    swap = torch.zeros(b_, n, dtype=torch.bool)
    for s, i in SWAPPED:
        swap[s, i] = True
    quats, translations, side, positions, angles, raw = [], [], [], [], [], []
    for it in range(ITERS):
        damp = 1.0 / (1 + it)
        q = _unit(_unit(_wave((b_, n, 4), 1.3)) + 0.25 * damp * _wave((b_, n, 4), 3.1 + it))
        t = trans + 2.0 * damp * _wave((b_, n, 3), 1.7 + it)
        if it == 1:
            t = t + 16.0 * _wave((b_, n, 3), 0.37)  # far beyond the 10 Å clamp
        r = quat_to_rot(q)
        sc = _group_frames(r, t, 0.1 * _wave((b_, n, 8), 2.3 + it))
        x = place(r, t) + 0.15 * damp * _wave((b_, n, 14, 3), 1.1 + it)
        x = torch.where(swap[..., None, None], torch.einsum("bnac,bnad->bndc", x, renaming), x)
        pred_torsion = torsion + 0.3 * damp * _wave((b_, n, 7), 0.61 + it)
        pred_torsion[..., 3:] = torch.cos(pred_torsion[..., 3:]) * 3 + math.pi * (
            swap[..., None] & (periodic > 0))  # π-periodic chis predicted half a turn off
        unnorm = torch.stack([torch.sin(pred_torsion), torch.cos(pred_torsion)], -1) * (
            1.0 + 0.3 * _wave((b_, n, 7, 1), 1.9 + it))
        quats.append(q), translations.append(t), side.append(sc), positions.append(x)
        angles.append(_unit(unnorm)), raw.append(unnorm)
    outputs = {
        "sm_frames": torch.cat([torch.stack(quats, 1), torch.stack(translations, 1)], -1),
        "sm_sidechain_frames": torch.stack(side, 1),
        "sm_positions": torch.stack(positions, 1),
        "sm_angles": torch.stack(angles, 1),
        "sm_unnormalized_angles": torch.stack(raw, 1),
        "distogram_logits": 3 * _wave((b_, n, n, CFG.distogram_bins), 0.577),
        "masked_msa_logits": 3 * _wave((b_, N_CLUST, n, 23), 0.443),
        "lddt_logits": 3 * _wave((b_, n, CFG.plddt_bins), 0.291),
        "experimentally_resolved_logits": 3 * _wave((b_, n, 37), 0.733),
    }
    last = outputs["sm_positions"][:, -1]
    outputs["final_atom_positions"] = torch.gather(
        last, 2, to14[..., None].expand(-1, -1, -1, 3)) * exists37[..., None]
    return outputs, batch


@pytest.fixture(scope="module")
def case():
    torch.set_num_threads(1)
    return make_case()


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().numpy()


# ---------------------------------------------------------------------------- brute force


def _fape_loops(pred_frames, true_frames, frames_mask, pred_x, true_x, points_mask,
                scale, clamp, eps):
    """FAPE by explicit loops over frames × points (frames as 4×4 numpy arrays)."""
    total = 0.0
    for f in range(len(frames_mask)):
        if not frames_mask[f]:
            continue
        for p in range(len(points_mask)):
            if not points_mask[p]:
                continue
            lp = pred_frames[f, :3, :3].T @ (pred_x[p] - pred_frames[f, :3, 3])
            lt = true_frames[f, :3, :3].T @ (true_x[p] - true_frames[f, :3, 3])
            err = math.sqrt(float(np.sum((lp - lt) ** 2)) + eps)
            total += (err if clamp is None else min(err, clamp)) / scale
    return total / ((eps + frames_mask.sum()) * (eps + points_mask.sum()))


def _frames_4x4_from_7(t: np.ndarray) -> np.ndarray:
    w, x, y, z = t[..., 0], t[..., 1], t[..., 2], t[..., 3]
    rot = np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)
    out = np.zeros(t.shape[:-1] + (4, 4))
    out[..., :3, :3], out[..., :3, 3], out[..., 3, 3] = rot, t[..., 4:], 1.0
    return out


def _renaming_loops(pred, batch, b):
    """Per residue of sample b: 1 where the alt naming has the smaller Σ|d_pred − d_true|
    from the residue's ambiguous atoms to all non-ambiguous atoms (loops)."""
    gt, alt = _np(batch["atom14_gt_positions"][b]), _np(batch["atom14_alt_gt_positions"][b])
    ex, amb = _np(batch["atom14_gt_exists"][b]), _np(batch["atom14_atom_is_ambiguous"][b])
    x = _np(pred[b])
    n = len(ex)
    better = np.zeros(n)
    for i in range(n):
        cost = [0.0, 0.0]
        for a in range(14):
            if not (ex[i, a] and amb[i, a]):
                continue
            for j in range(n):
                for c in range(14):
                    if not ex[j, c] or amb[j, c]:
                        continue
                    dp = math.sqrt(1e-10 + float(np.sum((x[i, a] - x[j, c]) ** 2)))
                    for k, truth in enumerate((gt, alt)):
                        dt = math.sqrt(1e-10 + float(np.sum((truth[i, a] - truth[j, c]) ** 2)))
                        cost[k] += math.sqrt(1e-10 + (dp - dt) ** 2)
        better[i] = float(cost[1] < cost[0])
    return better


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


# ---------------------------------------------------------------------------- FAPE


def test_backbone_fape_equals_explicit_loops_clamped_and_unclamped(case):
    outputs, batch = case
    got = ofl.backbone_fape(outputs["sm_frames"], batch, CFG)
    pred = _frames_4x4_from_7(_np(outputs["sm_frames"]))
    true = _np(batch["backbone_rigid_tensor"])
    mask = _np(batch["backbone_rigid_mask"])
    for b in range(2):
        clamp = CFG.fape_backbone_clamp if batch["use_clamped_fape"][b] else None
        per_iter = [_fape_loops(pred[b, it], true[b], mask[b], pred[b, it, :, :3, 3],
                                true[b, :, :3, 3], mask[b], 10.0, clamp, 1e-4)
                    for it in range(ITERS)]
        assert got[b].item() == pytest.approx(np.mean(per_iter), rel=1e-12)
    # sample 1 is unclamped: its far-off iteration counts in full, so clamping must lower it
    clamped = ofl.backbone_fape(outputs["sm_frames"],
                              {**batch, "use_clamped_fape": torch.ones(2, dtype=D)}, CFG)
    assert clamped[1] < got[1] - 0.1
    absent = {k: v for k, v in batch.items() if k != "use_clamped_fape"}
    torch.testing.assert_close(ofl.backbone_fape(outputs["sm_frames"], absent, CFG), clamped)


def test_renaming_picks_the_better_naming(case):
    outputs, batch = case
    pred = outputs["sm_positions"][:, -1]
    renamed = ofl.renamed_ground_truth(pred, batch)
    better = _np(renamed["alt_naming_is_better"])
    for b in range(2):
        np.testing.assert_array_equal(better[b], _renaming_loops(pred, batch, b))
    # exactly the residues predicted in the swapped naming whose ambiguous atoms are all
    # present; TYR (0, 3) lacks CD2 and CE2, so its alt naming (partners missing) is worse
    amb, ex = batch["atom14_atom_is_ambiguous"], batch["atom14_gt_exists"]
    complete = [(s, i) for s, i in SWAPPED if bool((ex[s, i] >= amb[s, i]).all())]
    assert len(complete) == 3
    assert sorted(zip(*np.nonzero(better), strict=True)) == sorted(complete)
    sel = renamed["alt_naming_is_better"][..., None, None] > 0
    torch.testing.assert_close(renamed["renamed_atom14_gt_positions"],
                               torch.where(sel, batch["atom14_alt_gt_positions"],
                                           batch["atom14_gt_positions"]))


def test_sidechain_fape_equals_explicit_loops(case):
    outputs, batch = case
    pred_x = outputs["sm_positions"][:, -1]
    renamed = ofl.renamed_ground_truth(pred_x, batch)
    got = ofl.sidechain_fape(outputs["sm_sidechain_frames"][:, -1], pred_x, batch, renamed, CFG)
    alt = _np(renamed["alt_naming_is_better"])
    for b in range(2):
        true_frames = np.where(alt[b][:, None, None, None] > 0,
                               _np(batch["rigidgroups_alt_gt_frames"][b]),
                               _np(batch["rigidgroups_gt_frames"][b]))
        expected = _fape_loops(
            _np(outputs["sm_sidechain_frames"][b, -1]).reshape(-1, 4, 4),
            true_frames.reshape(-1, 4, 4), _np(batch["rigidgroups_gt_exists"][b]).reshape(-1),
            _np(pred_x[b]).reshape(-1, 3),
            _np(renamed["renamed_atom14_gt_positions"][b]).reshape(-1, 3),
            _np(renamed["renamed_atom14_gt_exists"][b]).reshape(-1), 10.0, 10.0, 1e-4)
        assert got[b].item() == pytest.approx(expected, rel=1e-12)


def _moved(frames4: torch.Tensor, points: torch.Tensor, rot: torch.Tensor, shift: torch.Tensor):
    moved = frames4.clone()
    moved[..., :3, :3] = rot @ frames4[..., :3, :3]
    moved[..., :3, 3] = (rot @ frames4[..., :3, 3, None])[..., 0] + shift
    return moved, (rot @ points[..., None])[..., 0] + shift


def test_fape_is_invariant_to_global_motion_and_minimal_for_a_perfect_prediction(case):
    outputs, batch = case
    from sciperf_pytorch.workloads.openfold.rigids import Rigid

    pf = outputs["sm_sidechain_frames"][:, -1].reshape(2, -1, 4, 4)
    tf = batch["rigidgroups_gt_frames"].reshape(2, -1, 4, 4)
    px = outputs["sm_positions"][:, -1].reshape(2, -1, 3)
    tx = batch["atom14_gt_positions"].reshape(2, -1, 3)
    fm = batch["rigidgroups_gt_exists"].reshape(2, -1)
    pm = batch["atom14_gt_exists"].reshape(2, -1)

    def value(pf, px, tf, tx):
        return ofl.fape(Rigid.from_tensor_4x4(pf), Rigid.from_tensor_4x4(tf), fm, px, tx, pm,
                      10.0, 10.0, 1e-4)

    base = value(pf, px, tf, tx)
    r1, r2 = quat_to_rot(_unit(torch.tensor([0.3, -0.5, 0.7, 0.2], dtype=D))), quat_to_rot(
        _unit(torch.tensor([-0.6, 0.1, 0.2, 0.9], dtype=D)))
    mpf, mpx = _moved(pf, px, r1, torch.tensor([30.0, -4.0, 12.0], dtype=D))
    mtf, mtx = _moved(tf, tx, r2, torch.tensor([-7.0, 50.0, 1.0], dtype=D))
    torch.testing.assert_close(value(mpf, mpx, mtf, mtx), base, rtol=1e-12, atol=0)
    # a perfect prediction (even moved as a whole) leaves only the eps floor sqrt(eps)/scale
    perfect = value(mtf, (r2 @ tx[..., None])[..., 0] + torch.tensor([-7.0, 50.0, 1.0],
                                                                      dtype=D), tf, tx)
    floor = (0.01 / 10.0 * fm.sum(-1) * pm.sum(-1)
             / ((1e-4 + fm.sum(-1)) * (1e-4 + pm.sum(-1))))
    torch.testing.assert_close(perfect, floor, rtol=1e-12, atol=0)
    assert bool((base > 10 * floor).all())


# ---------------------------------------------------------------------------- other terms


def test_chi_loss_equals_loops_with_pi_periodic_chis(case):
    outputs, batch = case
    got = ofl.chi_loss(outputs["sm_angles"], outputs["sm_unnormalized_angles"], batch, CFG)
    ang, raw = _np(outputs["sm_angles"]), _np(outputs["sm_unnormalized_angles"])
    true, cm = _np(batch["chi_angles_sin_cos"]), _np(batch["chi_mask"])
    sm, aa = _np(batch["seq_mask"]), _np(batch["aatype"])
    periodic_seen = 0
    for b in range(2):
        chi_sum = norm_sum = 0.0
        for it in range(ITERS):
            for i in range(N_RES):
                for c in range(4):
                    err = float(np.sum((true[b, i, c] - ang[b, it, i, 3 + c]) ** 2))
                    if rc.CHI_PI_PERIODIC[aa[b, i]][c]:
                        shifted = float(np.sum((-true[b, i, c] - ang[b, it, i, 3 + c]) ** 2))
                        periodic_seen += shifted < err
                        err = min(err, shifted)
                    chi_sum += cm[b, i, c] * err
                for k in range(7):
                    norm = math.sqrt(float(np.sum(raw[b, it, i, k] ** 2)) + 1e-8)
                    norm_sum += sm[b, i] * abs(norm - 1.0)
        chi = chi_sum / (1e-4 + ITERS * cm[b].sum())
        angle_norm = norm_sum / (1e-4 + ITERS * 7 * sm[b].sum())
        assert got[b].item() == pytest.approx(0.5 * chi + 0.01 * angle_norm, rel=1e-12)
    assert periodic_seen > 0  # the π-shifted truth was the closer one somewhere


def test_distogram_masked_msa_and_resolved_equal_hand_computation(case):
    outputs, batch = case
    x, m = _np(batch["pseudo_beta"]), _np(batch["pseudo_beta_mask"])
    logp = _log_softmax(_np(outputs["distogram_logits"]))
    bounds = np.linspace(2.3125, 21.6875, 63)
    msa_logp = _log_softmax(_np(outputs["masked_msa_logits"]))
    true_msa, bert = _np(batch["true_msa"]), _np(batch["bert_mask"])
    res_logits, atom_mask = _np(outputs["experimentally_resolved_logits"]), _np(
        batch["all_atom_mask"])
    exists37 = _np(batch["atom37_atom_exists"])
    dist = ofl.distogram_loss(outputs["distogram_logits"], batch, CFG)
    msa = ofl.masked_msa_loss(outputs["masked_msa_logits"], batch, CFG)
    resolved = ofl.experimentally_resolved_loss(outputs["experimentally_resolved_logits"],
                                              batch, CFG)
    bins_used = set()
    for b in range(2):
        num = den = 0.0
        for i in range(N_RES):
            for j in range(N_RES):
                d = math.sqrt(float(np.sum((x[b, i] - x[b, j]) ** 2)))
                k = int(np.sum(d > bounds))
                bins_used.add(k)
                num += m[b, i] * m[b, j] * -logp[b, i, j, k]
                den += m[b, i] * m[b, j]
        assert dist[b].item() == pytest.approx(num / (1e-8 + den), rel=1e-12)
        ce = -np.take_along_axis(msa_logp[b], true_msa[b][..., None], -1)[..., 0]
        assert msa[b].item() == pytest.approx((ce * bert[b]).sum() / (2e-8 + bert[b].sum()),
                                              rel=1e-12)
        z, y = res_logits[b], atom_mask[b]
        bce = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
        gate = 0.1 <= batch["resolution"][b].item() <= 3.0
        expected = gate * (bce * exists37[b]).sum() / (1e-8 + exists37[b].sum())
        assert resolved[b].item() == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert len(bins_used) > 5 and 0 in bins_used  # diagonal in bin 0, many bins exercised
    assert resolved[1].item() == 0.0  # resolution 3.4 Å is outside the window


def test_plddt_loss_targets_the_numpy_per_residue_lddt(case):
    outputs, batch = case
    got = ofl.plddt_loss(outputs["lddt_logits"], outputs["final_atom_positions"], batch, CFG)
    pred_ca, _ = np_lddt.ca_atoms(_np(outputs["final_atom_positions"]),
                                  _np(batch["all_atom_mask"]))
    true_ca, mask = np_lddt.ca_atoms(_np(batch["all_atom_positions"]),
                                     _np(batch["all_atom_mask"]))
    score = np_lddt.lddt_ca(pred_ca, true_ca, mask, eps=1e-8, per_residue=True)
    bins = np.minimum(np.floor(score * 50).astype(int), 49)
    assert len(np.unique(bins[mask > 0])) > 2
    logp = _log_softmax(_np(outputs["lddt_logits"]))
    ce = -np.take_along_axis(logp, bins[..., None], -1)[..., 0]
    expected = (ce * mask).sum(-1) / (1e-8 + mask.sum(-1)) * np.array([1.0, 0.0])  # 3.4 Å gated
    np.testing.assert_allclose(_np(got), expected, rtol=1e-12)


def _violation_loops(pos, batch, b):
    """The violation loss of sample b by loops over residue pairs, atom pairs and bonds."""
    ex, aa = _np(batch["atom14_atom_exists"][b]), _np(batch["aatype"][b])
    ri, to37 = _np(batch["residue_index"][b]), _np(batch["residx_atom14_to_atom37"][b])
    x = _np(pos[b])
    n = len(aa)

    def dist(p, q):
        return math.sqrt(1e-10 + float(np.sum((p - q) ** 2)))

    def unit(v):
        return v / math.sqrt(1e-6 + float(np.sum(v ** 2)))

    terms = {"cn": [0.0, 0.0], "cacn": [0.0, 0.0], "cnca": [0.0, 0.0]}
    for i in range(n - 1):
        if ri[i + 1] - ri[i] != 1:
            continue
        ca, c, nn, nca = x[i, 1], x[i, 2], x[i + 1, 0], x[i + 1, 1]
        pro = aa[i + 1] == rc.RESTYPE_ORDER["P"]
        length = math.sqrt(1e-6 + float(np.sum((c - nn) ** 2)))
        cos1 = float(np.dot(unit(ca - c), unit(nn - c)))
        cos2 = float(np.dot(unit(c - nn), unit(nca - nn)))
        # REF holds the C–N target and its tolerance (12·stddev) in float32
        cn_target = float(np.float32(1.341 if pro else 1.329))
        cn_tol = float(np.float32(12.0) * np.float32(0.016 if pro else 0.014))
        parts = {
            "cn": (length - cn_target, cn_tol, ex[i, 2] * ex[i + 1, 0]),
            "cacn": (cos1 + 0.4473, 12 * 0.014, ex[i, 1] * ex[i, 2] * ex[i + 1, 0]),  # REF quirk
            "cnca": (cos2 + 0.5203, 12 * 0.0353, ex[i, 2] * ex[i + 1, 0] * ex[i + 1, 1]),
        }
        for key, (err, tol, w) in parts.items():
            terms[key][0] += w * max(0.0, math.sqrt(1e-6 + err * err) - tol)
            terms[key][1] += w
    bonds = sum(num / (den + 1e-6) for num, den in terms.values())
    radius = [rc.VAN_DER_WAALS_RADIUS[rc.ATOM_TYPES[k][0]] for k in range(37)]
    bounds = rc.atom14_dists_bounds(1.5, 12.0)
    lower, upper = bounds["lower_bound"], bounds["upper_bound"]
    sg = rc.RESTYPE_NAME_TO_ATOM14_NAMES["CYS"].index("SG")
    pair_sum = 0.0
    for i in range(n):
        for a in range(14):
            if not ex[i, a]:
                continue
            for j in range(n):
                for c in range(14):
                    if not ex[j, c]:
                        continue
                    d = dist(x[i, a], x[j, c])
                    # REF sums per-atom sums: every pair counts from both of its atoms
                    if i == j and a != c:  # within the residue: outside [lower, upper]
                        pair_sum += 2 * max(0.0, float(lower[aa[i], a, c]) - d)
                        pair_sum += 2 * max(0.0, d - float(upper[aa[i], a, c]))
                    elif ri[i] < ri[j] and not (ri[i] + 1 == ri[j] and a == 2 and c == 0) \
                            and not (a == sg and c == sg):  # between residues: clash
                        pair_sum += 2 * max(0.0, radius[to37[i, a]] + radius[to37[j, c]]
                                            - 1.5 - d)
    return bonds + pair_sum / (1e-8 + ex.sum())


def test_violation_loss_equals_loops(case):
    outputs, batch = case
    pos = outputs["sm_positions"][:, -1]
    got = ofl.violation_loss(pos, batch, CFG)
    for b in range(2):
        assert got[b].item() == pytest.approx(_violation_loops(pos, batch, b), rel=1e-10)
    # an ideal peptide bond costs nothing; stretched beyond 12 stddev it costs the excess
    two = {k: v[:1, 4:6].clone() for k, v in batch.items() if k in (
        "aatype", "residue_index", "atom14_atom_exists", "residx_atom14_to_atom37")}
    two["aatype"][:] = rc.RESTYPE_ORDER["G"]
    two["atom14_atom_exists"] = torch.zeros(1, 2, 14, dtype=D)
    two["atom14_atom_exists"][0, 0, 1:3] = 1  # CA, C of residue 0
    two["atom14_atom_exists"][0, 1, 0:2] = 1  # N, CA of residue 1
    two["residue_index"] = torch.tensor([[0, 1]])
    c1, c2 = -0.4473, -0.5203  # ideal cos(CA-C-N), cos(C-N-CA)

    def chain(cn):
        x = torch.zeros(1, 2, 14, 3, dtype=D)
        x[0, 0, 2] = torch.tensor([0.0, 0.0, 0.0], dtype=D)  # C
        x[0, 1, 0] = torch.tensor([cn, 0.0, 0.0], dtype=D)  # N
        x[0, 0, 1] = 1.525 * torch.tensor([c1, math.sqrt(1 - c1 * c1), 0.0], dtype=D)  # CA
        x[0, 1, 1] = x[0, 1, 0] + 1.458 * torch.tensor([-c2, math.sqrt(1 - c2 * c2), 0.0],
                                                        dtype=D)
        return x

    assert ofl.violation_loss(chain(1.329), two, CFG).item() == pytest.approx(0.0, abs=1e-6)
    stretched = ofl.violation_loss(chain(1.329 + 12 * 0.014 + 0.2), two, CFG).item()
    assert stretched == pytest.approx(0.2, abs=1e-5)


def _pair_batch(residues: str, slots: tuple[int, int], residue_index: tuple[int, int]):
    """Two residues holding one atom each, in atom14 ``slots``."""
    aatype = torch.tensor([[rc.RESTYPE_ORDER[c] for c in residues]])
    exists = torch.zeros(1, 2, 14, dtype=D)
    exists[0, 0, slots[0]] = exists[0, 1, slots[1]] = 1.0
    return {"aatype": aatype, "residue_index": torch.tensor([residue_index]),
            "atom14_atom_exists": exists,
            "residx_atom14_to_atom37": _table(rc.RESTYPE_ATOM14_TO_ATOM37, aatype)}


@pytest.mark.parametrize(("residues", "slots", "index", "expected"), [
    ("AA", (4, 4), (0, 5), 2 * (1.7 + 1.7 - 1.5 - 1.2) / 2),  # CB–CB: a clash
    ("CC", (5, 5), (0, 5), 0.0),  # SG–SG: a disulfide bridge, never a clash
    ("SS", (5, 5), (0, 5), 0.0),  # OG–OG: REF quirk, atom slot 5 of ANY pair is excluded
    ("AA", (2, 0), (0, 1), 0.0),  # C(i)–N(i+1): the peptide bond (1.2 Å is within 12 σ)
    ("AA", (2, 0), (0, 2), 2 * (1.7 + 1.55 - 1.5 - 1.2) / 2),  # C–N across a gap: a clash
])
def test_clash_exclusions(residues, slots, index, expected):
    """Two atoms 1.2 Å apart: (2 × the overlap beyond 1.5 Å) / 2 atoms, or nothing."""
    batch = _pair_batch(residues, slots, index)
    pos = torch.zeros(1, 2, 14, 3, dtype=D)
    pos[0, 1, slots[1]] = torch.tensor([1.2, 0.0, 0.0], dtype=D)
    assert ofl.violation_loss(pos, batch, CFG).item() == pytest.approx(expected, abs=1e-7)


# ---------------------------------------------------------------------------- lDDT


@pytest.mark.parametrize("per_residue", [False, True])
@pytest.mark.parametrize("eps", [1e-8, 1e-10])
def test_torch_lddt_equals_the_numpy_metric(per_residue, eps):
    g = torch.Generator().manual_seed(7)
    true = torch.cumsum(3.8 * _unit(torch.randn(3, 30, 3, generator=g, dtype=D)), dim=1)
    pred = true + torch.randn(3, 30, 3, generator=g, dtype=D) * torch.tensor([0.3, 1.5, 4.0],
                                                                           dtype=D)[:, None, None]
    mask = (torch.rand(3, 30, generator=g) > 0.15).to(D)
    mask[0, 5] = 1
    true[0, 5] += 100.0  # a lone residue: no scored pair, per-residue score eps/eps = 1
    got = ofl.lddt(pred, true, mask, eps=eps, per_residue=per_residue)
    expected = np_lddt.lddt_ca(pred.numpy(), true.numpy(), mask.numpy(), eps=eps,
                               per_residue=per_residue)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-13, atol=0)
    if per_residue:
        assert got[0, 5].item() == 1.0
    else:
        assert got[0] > got[1] > got[2]  # more noise, lower score


# ---------------------------------------------------------------------------- total


def _weighted_sum(terms):
    return sum(CFG.weights()[k] * terms[k] for k in ofl.TERMS)


def test_total_is_the_sqrt_crop_scaled_mean_of_weighted_terms(case):
    outputs, batch = case
    terms = ofl.per_sample_terms(outputs, batch, CFG)
    total, breakdown = ofl.loss(outputs, batch, CFG)
    scale = torch.sqrt(torch.tensor([N_RES - PAD, N_RES], dtype=D))  # min(seq_length, N_res)
    torch.testing.assert_close(total, (scale * _weighted_sum(terms)).mean(), rtol=1e-7,
                               atol=0)  # the scale is float32, as in REF
    assert set(breakdown) == {*ofl.TERMS, "weighted_total_loss", "scaled_weighted_total_loss"}
    for k in ofl.TERMS:
        assert breakdown[k].item() == pytest.approx(terms[k].mean().item(), rel=1e-14)
        assert torch.isfinite(terms[k]).all() and not breakdown[k].requires_grad
    assert breakdown["scaled_weighted_total_loss"].item() == total.item()


def test_flat_and_nested_structure_outputs_give_the_same_loss(case):
    outputs, batch = case
    nested = {k: v for k, v in outputs.items() if not k.startswith("sm_")}
    nested["sm"] = {k[3:]: v for k, v in outputs.items() if k.startswith("sm_")}
    assert ofl.loss(nested, batch)[0].item() == ofl.loss(outputs, batch)[0].item()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_weighted_term_is_dropped_for_the_whole_batch(case, bad):
    outputs, batch = case
    leaves = {k: v.clone().requires_grad_() for k, v in outputs.items()}
    with torch.no_grad():
        leaves["distogram_logits"][1, 2, 3, 4] = bad  # only sample 1's pair (2, 3)
    terms = ofl.per_sample_terms(leaves, batch, CFG)
    assert torch.isfinite(terms["distogram"][0]) and not torch.isfinite(terms["distogram"][1])
    total, _ = ofl.loss(leaves, batch, CFG)
    others = sum(CFG.weights()[k] * terms[k] for k in ofl.TERMS if k != "distogram")
    scale = torch.sqrt(torch.tensor([N_RES - PAD, N_RES], dtype=D))
    torch.testing.assert_close(total, (scale * others).mean(), rtol=1e-7, atol=0)
    total.backward()
    # the dropped term is cut from the graph; the pLDDT target is detached
    no_grad = {k for k, v in leaves.items() if v.grad is None}
    assert no_grad == {"distogram_logits", "final_atom_positions"}
    for k, v in leaves.items():
        assert k in no_grad or torch.isfinite(v.grad).all(), k
    assert leaves["masked_msa_logits"].grad.any()


def test_gradients_flow_finite_through_every_term(case):
    outputs, batch = case
    leaves = {k: v.clone().requires_grad_() for k, v in outputs.items()}
    terms = ofl.per_sample_terms(leaves, batch, CFG)
    reaches = {"fape": ("sm_frames", "sm_sidechain_frames", "sm_positions"),
               "supervised_chi": ("sm_angles", "sm_unnormalized_angles"),
               "distogram": ("distogram_logits",), "masked_msa": ("masked_msa_logits",),
               "plddt_loss": ("lddt_logits",),
               "experimentally_resolved": ("experimentally_resolved_logits",),
               "violation": ("sm_positions",)}
    for name, targets in reaches.items():
        grads = torch.autograd.grad(terms[name].sum(), [leaves[t] for t in targets],
                                    retain_graph=True)
        for t, gr in zip(targets, grads, strict=True):
            assert torch.isfinite(gr).all() and gr.abs().sum() > 0, (name, t)
    # the pLDDT target is detached: no gradient reaches the positions through it
    assert torch.autograd.grad(terms["plddt_loss"].sum(), leaves["final_atom_positions"],
                               retain_graph=True, allow_unused=True)[0] is None
    total, _ = ofl.loss(leaves, batch, CFG)
    total.backward()
    for k, v in leaves.items():
        assert k == "final_atom_positions" or torch.isfinite(v.grad).all(), k
    assert not leaves["experimentally_resolved_logits"].grad.any()  # weight 0


# Per-sample values of the reference (mlcommons/hpc @2c627d4 openfold/openfold/loss.py,
# AlphaFoldLoss and its term functions) on make_case(), computed in float64 with the
# reference's forced float32 casts of rotations/translations (rigid_utils.py) disabled;
# with them left in, FAPE differs from these by ~1e-8 relative.
REFERENCE = {
    "fape": [0.28945658766215554, 0.6072913592622018],
    "supervised_chi": [0.05782137982375911, 0.0818577615943317],
    "distogram": [6.0670613151773845, 5.391869667480826],
    "masked_msa": [6.253711903905039, 4.013811357888659],
    "plddt_loss": [5.763316513998772, 0.0],
    "experimentally_resolved": [1.1148555120738521, 0.0],
    "violation": [8.35972656187536, 9.05943674088142],
    "total": 37.17484992823852,
}


def test_matches_values_recorded_from_the_reference(case):
    outputs, batch = case
    terms = ofl.per_sample_terms(outputs, batch, CFG)
    total, _ = ofl.loss(outputs, batch, CFG)
    for k in ofl.TERMS:
        np.testing.assert_allclose(_np(terms[k]), REFERENCE[k], rtol=1e-10, atol=1e-14,
                                   err_msg=k)
    assert total.item() == pytest.approx(REFERENCE["total"], rel=1e-10)


def test_float32_inputs_give_the_float64_loss(case):
    outputs, batch = case
    f32 = {k: v.float() for k, v in outputs.items()}
    b32 = {k: v.float() if v.is_floating_point() else v for k, v in batch.items()}
    total32, terms32 = ofl.loss(f32, b32, CFG)
    total64, terms64 = ofl.loss(outputs, batch, CFG)
    assert total32.dtype == torch.float32
    for k in ofl.TERMS:
        assert terms32[k].item() == pytest.approx(terms64[k].item(), rel=1e-5, abs=1e-7), k


def test_a_head_with_the_wrong_number_of_classes_is_named(case):
    outputs, batch = case
    wrong = {**outputs, "masked_msa_logits": outputs["masked_msa_logits"][..., :22]}
    with pytest.raises(ValueError, match="masked_msa_logits has 22 classes, expected 23"):
        ofl.loss(wrong, batch, CFG)
