"""lDDT-Cα (spec §6): brute force, hand-made cases, and values of the reference's function."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sciperf.workloads.openfold.lddt import VALIDATION_EPS, ca_atoms, lddt_ca


def chain(rng: np.random.Generator, n: int, step: float = 3.8) -> np.ndarray:
    """A random-walk CA trace with CA–CA steps of ``step`` Å: a compact-ish fake protein."""
    directions = rng.normal(size=(n, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return np.cumsum(step * directions, axis=0)


def reference_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inputs the reference's ``lddt`` was run on (batch 2 × 24 residues, float32):
    noisy predictions with σ 0.8 and 2.5 Å and three unresolved residues."""
    rng = np.random.default_rng(20240611)
    true = np.stack([chain(rng, 24), chain(rng, 24)])
    pred = true + rng.normal(size=true.shape) * np.array([0.8, 2.5])[:, None, None]
    mask = np.ones((2, 24))
    mask[0, [3, 17]] = 0.0
    mask[1, 0] = 0.0
    return pred.astype(np.float32), true.astype(np.float32), mask.astype(np.float32)


# mlcommons/hpc openfold/openfold/loss.py `lddt` (torch 2.13 CPU, float32), run in /tmp on
# reference_case(): global scores with its default eps 1e-10 and with validation's 1e-8, and
# the per-residue scores (eps 1e-8, the pLDDT loss's setting). Ours were bitwise equal there,
# and on 200 further random float32 structures (5..120 residues) in all three settings.
REFERENCE_GLOBAL = {1e-10: [0.71634614, 0.44680849], 1e-8: [0.71634614, 0.44680849]}
REFERENCE_PER_RESIDUE: list[list[float]] = [
    [
        0.6666667, 0.7307693, 0.7166667, 1.0, 0.6833334, 0.828125, 0.6833334, 0.703125,
        0.875, 0.71875, 0.75, 0.765625, 0.796875, 0.5657895, 0.575, 0.7083333,
        0.7777778, 1.0, 0.7833334, 0.5555556, 0.84375, 0.7222222, 0.6944445, 0.59375,
    ],
    [
        1.0, 0.3571429, 0.4545455, 0.5, 0.3571429, 0.4583333, 0.4411765, 0.5294118,
        0.6111111, 0.4605263, 0.4047619, 0.4375, 0.6309524, 0.3289474, 0.4852941, 0.5131579,
        0.475, 0.3333333, 0.5416667, 0.4583333, 0.4166667, 0.1666667, 0.4807692, 0.4027778,
    ],
]


def brute_force(pred, true, mask, cutoff=15.0, per_residue=False, eps=1e-10):
    """Spec §6 written as loops over ordered pairs, in float64."""
    n = len(mask)
    num, den = np.zeros(n), np.zeros(n)
    for i, j in itertools.product(range(n), range(n)):
        if i == j or not (mask[i] and mask[j]):
            continue
        d_true = np.sqrt(eps + np.sum((true[i] - true[j]) ** 2))
        d_pred = np.sqrt(eps + np.sum((pred[i] - pred[j]) ** 2))
        if d_true >= cutoff:
            continue
        delta = abs(d_true - d_pred)
        num[i] += sum(delta < t for t in (0.5, 1.0, 2.0, 4.0)) / 4.0
        den[i] += 1.0
    if per_residue:
        return (eps + num) / (eps + den)
    return (eps + num.sum()) / (eps + den.sum())


def test_equals_brute_force_on_random_structures():
    rng = np.random.default_rng(0)
    for n, sigma in [(12, 0.5), (30, 1.5), (30, 4.0)]:
        true = chain(rng, n)
        pred = true + rng.normal(scale=sigma, size=true.shape)
        mask = (rng.random(n) > 0.2).astype(np.float64)
        for per_residue in (False, True):
            got = lddt_ca(pred, true, mask, per_residue=per_residue)
            want = brute_force(pred, true, mask, per_residue=per_residue)
            np.testing.assert_allclose(got, want, rtol=1e-12)
        assert 0.0 < lddt_ca(pred, true, mask) < 1.0


def test_batched_equals_one_by_one_and_keeps_float32():
    pred, true, mask = reference_case()
    batched = lddt_ca(pred, true, mask)
    assert batched.shape == (2,) and batched.dtype == np.float32
    for b in range(2):
        assert batched[b] == lddt_ca(pred[b], true[b], mask[b])
    assert lddt_ca(pred, true, mask, per_residue=True).shape == (2, 24)


def test_perfect_prediction_scores_one():
    true = chain(np.random.default_rng(1), 20)
    assert lddt_ca(true, true, np.ones(20)) == pytest.approx(1.0, abs=1e-12)
    moved = true @ _rotation(0.7).T + np.array([5.0, -3.0, 2.0])  # no superposition needed
    np.testing.assert_allclose(lddt_ca(moved, true, np.ones(20), per_residue=True), 1.0,
                               atol=1e-12)


def _rotation(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def test_thresholds_are_strict():
    """Two residues 10 Å apart; stretching the prediction by exactly 0.5/1/2/4 Å (binary-exact
    distances) fails that threshold and passes the larger ones."""
    true = np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0]])
    mask = np.ones(2)
    for stretch, want in [(0.25, 1.0), (0.5, 0.75), (1.0, 0.5), (2.0, 0.25), (4.0, 0.0)]:
        pred = np.array([[0.0, 0.0, 0.0], [10.0 + stretch, 0.0, 0.0]])
        assert lddt_ca(pred, true, mask, eps=0.0, sqrt_eps=0.0) == want


def test_scaled_structure():
    """A uniformly scaled prediction: exact against loops, and worse the more it is scaled."""
    true = chain(np.random.default_rng(2), 25)
    mask = np.ones(25)
    scores = [lddt_ca(true * s, true, mask) for s in (1.0, 1.05, 1.2, 1.6)]
    assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(1.0)
    np.testing.assert_allclose(scores[2], brute_force(true * 1.2, true, mask), rtol=1e-12)


def test_unresolved_residues_are_excluded():
    rng = np.random.default_rng(3)
    true = chain(rng, 15)
    pred = true + rng.normal(scale=0.3, size=true.shape)
    mask = np.ones(15)
    mask[[4, 9]] = 0.0
    wrecked = pred.copy()
    wrecked[[4, 9]] += 40.0  # wherever the unresolved residues are predicted: no effect
    assert lddt_ca(wrecked, true, mask) == lddt_ca(pred, true, mask)
    keep = mask > 0
    assert lddt_ca(pred, true, mask) == pytest.approx(lddt_ca(pred[keep], true[keep],
                                                              np.ones(13)), rel=1e-12)
    per_residue = lddt_ca(wrecked, true, mask, per_residue=True)
    assert per_residue[4] == per_residue[9] == 1.0  # nothing scored: eps/eps, as the reference


def test_inclusion_uses_the_true_distance_only():
    """A pair 20 Å apart in truth but 1 Å apart in the prediction is never scored; a pair
    close in truth but far in the prediction is scored (and scores 0)."""
    true = np.array([[0.0, 0.0, 0.0], [3.8, 0.0, 0.0], [23.8, 0.0, 0.0]])
    pred = np.array([[0.0, 0.0, 0.0], [3.8, 0.0, 0.0], [4.8, 0.0, 0.0]])
    # only (0,1) is within 15 Å in truth, and it is perfect: pair (1,2), wrong by 19 Å, ignored
    assert lddt_ca(pred, true, np.ones(3)) == pytest.approx(1.0)
    np.testing.assert_allclose(lddt_ca(pred, true, np.ones(3), per_residue=True), [1, 1, 1])
    far = np.array([[0.0, 0.0, 0.0], [30.0, 0.0, 0.0], [23.8, 0.0, 0.0]])
    assert lddt_ca(far, true, np.ones(3)) == pytest.approx(0.0, abs=1e-9)
    assert lddt_ca(far, true, np.ones(3), cutoff=30.0) > 0.0


def test_global_is_not_the_mean_of_per_residue_scores():
    rng = np.random.default_rng(4)
    true = chain(rng, 20)
    pred = true + rng.normal(scale=1.5, size=true.shape)
    mask = np.ones(20)
    global_score = lddt_ca(pred, true, mask)
    assert global_score != pytest.approx(lddt_ca(pred, true, mask, per_residue=True).mean(),
                                         abs=1e-6)


def test_matches_reference_values():
    pred, true, mask = reference_case()
    for eps, want in REFERENCE_GLOBAL.items():
        np.testing.assert_allclose(lddt_ca(pred, true, mask, eps=eps), want, atol=1e-6)
    np.testing.assert_allclose(lddt_ca(pred, true, mask, eps=VALIDATION_EPS, per_residue=True),
                               REFERENCE_PER_RESIDUE, atol=1e-6)


def test_ca_atoms_selects_atom_type_one():
    positions = np.zeros((2, 5, 37, 3))
    positions[..., 1, :] = 7.0
    mask = np.zeros((2, 5, 37))
    mask[0, 2, 1] = 1.0
    ca, ca_mask = ca_atoms(positions, mask)
    assert ca.shape == (2, 5, 3) and (ca == 7.0).all()
    np.testing.assert_array_equal(np.nonzero(ca_mask), ([0], [2]))


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="mask"):
        lddt_ca(np.zeros((4, 3)), np.zeros((4, 3)), np.ones(5))
