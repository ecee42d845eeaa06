"""OC20 spec: the numbers, the parameter count by our own layer table, the RCP recipes
against mlperf-logging's file, the per-step LR, the loss scaling, and the numpy basis
functions against their defining properties and the values the spec derives."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import spherical_jn

from sciperf.workloads.oc20 import basis, spec


def _count(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    return sum(math.prod(s) for name, s in shapes.items() if name.startswith(prefix))


def test_parameter_count_by_block() -> None:
    """1,810,182 = 6 (frequencies) + 130,368 (embedding) + 4 × 149,568 (output blocks)
    + 3 × 360,512 (interaction blocks); the TF original's layout (no bias on the output
    up-projection) has 768 fewer."""
    shapes = spec.ModelSpec().weight_shapes()
    assert _count(shapes, "rbf_layer/") == 6
    assert _count(shapes, "emb_block/") == 130_368
    for b in range(4):
        assert _count(shapes, f"output_blocks/{b}/") == 149_568
    for b in range(3):
        assert _count(shapes, f"int_blocks/{b}/") == 360_512
    assert spec.ModelSpec().parameter_count() == spec.FULL_PARAMETER_COUNT == 1_810_182
    tf_layout = spec.ModelSpec(output_up_bias=False)
    assert tf_layout.parameter_count() == spec.TF_ORIGINAL_PARAMETER_COUNT == 1_809_414
    assert shapes["emb_block/dense/kernel"] == (3 * 192, 192)  # cat[x_i, x_j, rbf]
    assert shapes["int_blocks/0/dense_sbf1/kernel"] == (42, 8)  # 7 × 6 spherical basis
    assert "output_blocks/0/dense_final/bias" not in shapes


def test_rcp_recipes_are_mlperf_loggings() -> None:
    import mlperf_logging

    path = (Path(mlperf_logging.__file__).parent / "rcp_checker" / "hpc_3.0.0"
            / "rcps_oc20.json")
    for rcp in json.loads(path.read_text()).values():
        hp = rcp["Hyperparams"]
        lr, warmup, milestones, epochs = spec.RCP[rcp["BS"]]
        assert (lr, warmup, list(milestones)) == (hp["opt_base_learning_rate"],
                                                  hp["opt_learning_rate_warmup_steps"],
                                                  hp["opt_learning_rate_decay_boundary_steps"])
        assert hp["opt_learning_rate_warmup_factor"] == spec.OptimizerSpec().warmup_factor
        assert hp["opt_learning_rate_decay_factor"] == spec.OptimizerSpec().decay_factor
        assert list(epochs) == rcp["Epochs to converge"]
    assert set(spec.RCP) == {256, 1024, 2048}


def test_rcp_derived_numbers() -> None:
    """Olympic means and steps per epoch the spec derives; every recipe warms up for 4
    epochs, and the 256 milestones fall at epochs 16, 24 and 32."""
    assert [spec.olympic_epochs(g) for g in (256, 1024, 2048)] == [19.75, 24.375, 32.875]
    steps = {g: spec.steps_per_epoch_at(g) for g in spec.RCP}
    assert steps == {256: 7813, 1024: 1954, 2048: 977}
    for gbs, (_, warmup, _, _) in spec.RCP.items():
        assert warmup == 4 * steps[gbs]
    assert [m // steps[256] for m in spec.RCP[256][2]] == [16, 24, 32]


def test_runs_for_score_is_the_rules() -> None:
    from sciperf.results.score import required_runs

    assert required_runs("oc20") == spec.RUNS_FOR_SCORE == 5


def _opt(**kw) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(spec.OptimizerSpec()), **kw})


def test_lr_warmup_then_step_decay() -> None:
    o = _opt(lr=1.0, warmup_steps=100, milestones=[200, 300])
    assert spec.lr_for_step(o, 0) == pytest.approx(0.2)  # the LR at construction
    assert spec.lr_for_step(o, 50) == pytest.approx(0.6)
    assert spec.lr_for_step(o, 100) == pytest.approx(1.0)
    assert spec.lr_for_step(o, 199) == pytest.approx(1.0)
    assert spec.lr_for_step(o, 200) == pytest.approx(0.1)  # bisect_right: s = m has decayed
    assert spec.lr_for_step(o, 300) == pytest.approx(0.01)
    assert spec.lr_for_step(o, 10**6) == pytest.approx(0.01)


def test_optimizer_checks_name_the_key() -> None:
    spec.check_optimizer(_opt())
    with pytest.raises(ValueError, match="opt.milestones=.*>= 100"):
        spec.check_optimizer(_opt(milestones=[99, 500]))
    with pytest.raises(ValueError, match="opt.name=Adam: .*AdamW"):
        spec.check_optimizer(_opt(name="Adam"))


def test_loss_scale_makes_the_ddp_average_the_global_loss() -> None:
    """Per-rank losses scale·Σ|Δ| averaged over ranks (what DDP does to gradients) equal
    50·Σ|Δ| / N_free over the global batch."""
    rng = np.random.default_rng(0)
    parts = [np.abs(rng.normal(size=(n, 3))) for n in (5, 9, 2, 8)]
    free = sum(len(p) for p in parts)
    scale = spec.loss_scale(len(parts), free)
    mean_of_ranks = np.mean([scale * p.sum() for p in parts])
    assert mean_of_ranks == pytest.approx(50.0 * sum(p.sum() for p in parts) / free)


def test_a_global_batch_without_free_atoms_has_force_loss_zero() -> None:
    """Every rank's Σ|Δ| over free atoms is empty there: the factor stays finite (÷ max(N, 1))
    so the loss is 0, in both frameworks alike; a negative count is refused."""
    scale = spec.loss_scale(2, 0)
    assert math.isfinite(scale) and scale == spec.loss_scale(2, 1) == 100.0
    assert scale * np.zeros((0, 3)).sum() == 0.0
    with pytest.raises(ValueError, match="global_free_atoms=-1"):
        spec.loss_scale(2, -1)


def test_envelope_vanishes_smoothly_at_the_cutoff() -> None:
    p, a, b, c = basis.envelope_coefficients(5)
    assert (p, a, b, c) == (6, -28.0, 48.0, -21.0)
    x = np.array([1.0])
    assert basis.envelope(x)[0] == pytest.approx(0.0, abs=1e-12)
    h = 1e-5  # first and second derivatives vanish at x = 1 too
    d1 = (basis.envelope(x + h) - basis.envelope(x - h)) / (2 * h)
    d2 = (basis.envelope(x + h) - 2 * basis.envelope(x) + basis.envelope(x - h)) / h**2
    assert abs(d1[0]) < 1e-6 and abs(d2[0]) < 1e-3
    assert basis.envelope(np.array([1.2]))[0] != 0.0  # unmasked, as PyG 1.7.2


def test_bessel_roots_and_normalisers() -> None:
    z = basis.bessel_roots(7, 6)
    assert z.shape == (7, 6)
    np.testing.assert_allclose(z[0], np.arange(1, 7) * np.pi, rtol=1e-12)
    np.testing.assert_allclose(z[1, :3], [4.4934, 7.7253, 10.9041], atol=1e-4)
    assert z[6, 0] == pytest.approx(10.5128, abs=1e-4)
    for order in range(7):
        assert np.all(np.abs(spherical_jn(order, z[order])) < 1e-10)  # really roots
        assert np.all(np.diff(z[order]) > 0)
    assert np.all(z[1:, 0] > z[:-1, 0])  # roots move out with the order
    norm = basis.bessel_normalisers(7, 6)
    np.testing.assert_allclose(norm[0], 4.4429 * np.arange(1, 7), rtol=1e-4)
    np.testing.assert_allclose(norm[0], np.sqrt(2) * np.pi * np.arange(1, 7), rtol=1e-12)


def test_harmonics_and_angles() -> None:
    y = basis.spherical_harmonics(np.array([0.0, np.pi / 2, np.pi]), 3)
    assert y[0, 0] == pytest.approx(0.28209, abs=1e-5) == y[1, 0]
    assert y[0, 1] == pytest.approx(math.sqrt(3 / (4 * math.pi)))
    assert y[1, 1] == pytest.approx(0.0, abs=1e-15) and y[2, 1] == pytest.approx(-y[0, 1])
    assert y[1, 2] == pytest.approx(-0.5 * math.sqrt(5 / (4 * math.pi)))
    a = np.array([[1.0, 0, 0], [1.0, 0, 0], [1.0, 0, 0]])
    b = np.array([[0, 2.0, 0], [3.0, 0, 0], [-1.0, 0, 0]])
    np.testing.assert_allclose(basis.triplet_angle(a, b), [np.pi / 2, 0.0, np.pi])


def test_radial_and_spherical_basis_values_and_layout() -> None:
    cutoff, d = 6.0, np.array([1.3, 2.9, 5.2])
    x = d / cutoff
    u = basis.envelope(x)
    rbf = basis.radial_basis(d, cutoff, basis.initial_frequencies(6))
    assert rbf.shape == (3, 6)
    np.testing.assert_allclose(rbf[:, 2], u * np.sin(3 * np.pi * x), rtol=1e-12)
    angle = np.array([0.4, 1.7, 2.9])
    sbf = basis.spherical_basis(d, angle, cutoff, 7, 6)
    assert sbf.shape == (3, 42)
    z, norm = basis.bessel_roots(7, 6), basis.bessel_normalisers(7, 6)
    ylm = basis.spherical_harmonics(angle, 7)
    for order, n in ((0, 0), (0, 5), (3, 2), (6, 5)):
        want = u * norm[order, n] * spherical_jn(order, z[order, n] * x) * ylm[:, order]
        np.testing.assert_allclose(sbf[:, order * 6 + n], want, rtol=1e-12)  # l-major
    # l = 0: j_0(nπx) = sin(nπx)/(nπx), Y_0^0 constant — the radial basis up to a factor
    j0_col = sbf[:, 1]
    closed = u * norm[0, 1] * np.sin(2 * np.pi * x) / (2 * np.pi * x) / (2 * math.sqrt(math.pi))
    np.testing.assert_allclose(j0_col, closed, rtol=1e-12)
