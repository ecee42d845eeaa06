"""PyTorch DimeNet++ (OC20): parameter counts and the canonical weight table, the torch
triplets and basis against the numpy references, forces against finite differences,
symmetry, the double backward of the force loss, the weight round trip and the initial
zero output.

Structures are small rattled Cu(111) slabs (one with an O adsorbate, one only one atom
wide so an atom sees its own periodic images) with ASE neighbour graphs at a 4.5 Å cutoff;
numerics tests use a tiny float64 model so that tolerances can be tight."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from ase.build import add_adsorbate, fcc111
from scipy.special import spherical_jn as scipy_jn

from sciperf.workloads.oc20 import basis, graph
from sciperf.workloads.oc20.spec import ModelSpec
from sciperf_pytorch.weights import export_weights, import_weights
from sciperf_pytorch.workloads.oc20 import model as dpp

CUTOFF = 4.5
MAX_NEIGHBOURS = 16
TINY = ModelSpec(hidden_channels=16, out_emb_channels=16, int_emb_size=8, basis_emb_size=4,
                 num_blocks=2, cutoff=CUTOFF)
MINI = ModelSpec(hidden_channels=64, out_emb_channels=64, int_emb_size=32, num_blocks=2)


def _slab(size: tuple[int, int, int], adsorbate: bool, seed: int):
    """A rattled Cu(111) slab, optionally with an O on top."""
    atoms = fcc111("Cu", size, vacuum=6.0)
    if adsorbate:
        add_adsorbate(atoms, "O", 1.5, "fcc")
    atoms.rattle(0.05, seed=seed)
    return atoms


def _batch(structures, dtype=torch.float64) -> dict[str, torch.Tensor]:
    """Concatenate structures into the shared batch dict (global atom ids in edge_index)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                          ("z", "pos", "cell", "batch", "edges", "offsets")}
    start = 0
    for b, atoms in enumerate(structures):
        g = graph.neighbour_graph(atoms.positions, atoms.cell.array, CUTOFF, MAX_NEIGHBOURS,
                                  pbc=tuple(bool(p) for p in atoms.pbc))
        parts["z"].append(atoms.numbers)
        parts["pos"].append(atoms.positions)
        parts["cell"].append(atoms.cell.array[None])
        parts["batch"].append(np.full(len(atoms), b))
        parts["edges"].append(g.edge_index + start)
        parts["offsets"].append(g.cell_offsets)
        start += len(atoms)
    cat = {k: np.concatenate(v, axis=1 if k == "edges" else 0) for k, v in parts.items()}
    return {"atomic_numbers": torch.as_tensor(cat["z"], dtype=torch.int64),
            "pos": torch.as_tensor(cat["pos"], dtype=dtype),
            "cell": torch.as_tensor(cat["cell"], dtype=dtype),
            "batch": torch.as_tensor(cat["batch"], dtype=torch.int64),
            "edge_index": torch.as_tensor(cat["edges"], dtype=torch.int64),
            "cell_offsets": torch.as_tensor(cat["offsets"], dtype=dtype)}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """These tensors are tiny: intra-op threads only add contention on a shared 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    """Two periodic structures: a 1-atom-wide slab and a 2×2 slab with O."""
    return _batch([_slab((1, 2, 3), False, 1), _slab((2, 2, 3), True, 2)])


def _model(spec: ModelSpec = TINY, seed: int = 0) -> dpp.DimeNetPP:
    """A float64 model whose zero-initialised final layers are made random (otherwise the
    energy is identically 0 and every force test is vacuous)."""
    torch.manual_seed(seed)
    net = dpp.DimeNetPP(spec).double()
    with torch.no_grad():
        for b in range(spec.num_blocks + 1):
            net.dense(f"output_blocks/{b}/dense_final").weight.normal_(0.0, 0.5)
    return net


def test_parameter_counts_equal_the_spec() -> None:
    """Reference layout, TF-original layout and the mini model, counted from the modules."""
    cases = [(ModelSpec(), 1_810_182), (ModelSpec(output_up_bias=False), 1_809_414),
             (MINI, 155_526)]
    for spec, want in cases:
        net = dpp.DimeNetPP(spec)
        assert sum(p.numel() for p in net.parameters()) == spec.parameter_count() == want


def test_triplets_equal_numpy_reference_with_periodic_images(batch) -> None:
    """Same triplets in the same order as graph.triplets; in the 1-atom-wide slab some
    kept triplets have k == i through another image, and no back-tracking one survives."""
    edges, offsets = batch["edge_index"], batch["cell_offsets"]
    kj, ji = dpp.triplets(edges, offsets, batch["pos"].shape[0])
    ref_kj, ref_ji = graph.triplets(edges.numpy(), offsets.numpy().astype(np.int64))
    np.testing.assert_array_equal(kj.numpy(), ref_kj)
    np.testing.assert_array_equal(ji.numpy(), ref_ji)
    same_atom = edges[0][kj] == edges[1][ji]
    offset_sum = (offsets[kj] + offsets[ji]).abs().sum(dim=1)
    assert bool(same_atom.any()), "expected k == i through a periodic image"
    assert bool((offset_sum[same_atom] > 0).all())


def test_spherical_bessel_matches_scipy_in_float64() -> None:
    """j_l for l ≤ 6 on (0, z_l6] including tiny arguments: ≤ 1e-10 relative (away from
    the roots, where the relative error is meaningless, an absolute 1e-14 bound)."""
    roots = basis.bessel_roots(7, 6)
    x = np.concatenate([np.geomspace(1e-6, 1.0, 60), np.linspace(1e-3, 1.0, 400)])
    args = roots[:, -1:] * x[None]  # [L, M]: every order up to its largest root
    got = dpp.spherical_jn(torch.as_tensor(args)).numpy()
    want = scipy_jn(np.arange(7)[:, None], args)
    err = np.abs(got - want)
    assert np.all(err <= 1e-10 * np.abs(want) + 1e-14)
    assert np.all(err[np.abs(want) > 1e-3] <= 1e-10 * np.abs(want[np.abs(want) > 1e-3]))


def test_spherical_bessel_gradient_is_finite_at_small_arguments() -> None:
    """Both branches see safe arguments: no NaN in d j_l/dx anywhere (tiny to large x)."""
    x = torch.tensor(np.geomspace(1e-7, 26.0, 200)[None].repeat(7, 0), requires_grad=True)
    (grad,) = torch.autograd.grad(dpp.spherical_jn(x).sum(), x)
    assert torch.isfinite(grad).all()


def test_gather_equals_indexing_through_the_double_backward() -> None:
    """The model's index_select gather is src[index] in value, gradient and the gradient's
    gradient (repeated indices accumulate), so swapping it in changed no numerics."""
    index = torch.tensor([3, 0, 3, 3, 1, 4, 0])
    grads = []
    for take in (dpp.gather, lambda s, i: s[i]):
        src = torch.arange(15.0, dtype=torch.float64).reshape(5, 3).requires_grad_(True)
        out = take(src, index)
        (g,) = torch.autograd.grad((out ** 3).sum(), src, create_graph=True)
        (gg,) = torch.autograd.grad((g ** 2).sum(), src)
        grads.append((out.detach(), g.detach(), gg))
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_radial_and_spherical_basis_match_numpy(batch) -> None:
    """Model rbf and sbf (float64) equal basis.py, short edges (0.5 Å) included."""
    spec = TINY
    dist = torch.tensor([0.5, 0.9, 1.7, 2.55, 3.3, 4.0, 4.49, 4.5], dtype=torch.float64)
    rbf = dpp.BesselBasis(spec.num_radial, spec.cutoff, spec.envelope_exponent).double()
    rbf.reset_parameters()  # nπ in float64, not a float32-rounded copy
    want = basis.radial_basis(dist.numpy(), spec.cutoff, basis.initial_frequencies(6))
    np.testing.assert_allclose(rbf(dist).detach().numpy(), want, rtol=1e-12, atol=1e-12)
    sbf = dpp.SphericalBasis(7, 6, spec.cutoff, spec.envelope_exponent)
    angle = torch.linspace(0.0, np.pi, 11, dtype=torch.float64)
    idx = torch.arange(11) % len(dist)
    got = sbf(dist, angle, idx).numpy()
    ref = basis.spherical_basis(dist.numpy()[idx.numpy()], angle.numpy(), spec.cutoff, 7, 6)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


def test_geometry_angles_match_numpy(batch) -> None:
    """Edge lengths and triplet angles equal graph.edge_vectors / basis.triplet_angle."""
    geo = dpp.geometry(batch)
    vec = dpp.edge_vectors(batch).numpy()
    np.testing.assert_allclose(geo.dist.numpy(), np.linalg.norm(vec, axis=1), rtol=1e-14)
    angle = basis.triplet_angle(vec[geo.idx_ji.numpy()], vec[geo.idx_kj.numpy()])
    np.testing.assert_allclose(geo.angle.numpy(), angle, rtol=1e-12, atol=1e-12)
    assert not geo.angle.requires_grad


def _frozen_angle_energy(net, batch, pos: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Total energy at `pos` with the triplet angles held at `angle`."""
    moved = {**batch, "pos": pos}
    geo = dataclasses.replace(dpp.geometry(moved), angle=angle)
    return net.energy(moved, geo).sum()


def test_forces_equal_finite_differences_with_angles_frozen(batch) -> None:
    """The model's forces are −∂E/∂pos with the angles detached, i.e. the exact gradient of
    E(distances(pos), angles fixed). So a central difference of E with the angles frozen
    at the base geometry must equal them; the full finite difference (angles moving) must
    not — that difference is the reference's angle detach, kept deliberately."""
    net = _model()
    _, forces = dpp.energy_and_forces(net, batch, create_graph=False)
    angle = dpp.geometry(batch).angle
    pos, h = batch["pos"], 1e-5
    rng = np.random.default_rng(0)
    picks = [(int(a), int(c)) for a, c in zip(rng.integers(0, pos.shape[0], 10),
                                              rng.integers(0, 3, 10), strict=True)]
    gap = 0.0
    with torch.no_grad():
        for a, c in picks:
            plus, minus = pos.clone(), pos.clone()
            plus[a, c] += h
            minus[a, c] -= h
            frozen = (_frozen_angle_energy(net, batch, plus, angle)
                      - _frozen_angle_energy(net, batch, minus, angle)) / (2 * h)
            assert float(-frozen) == pytest.approx(float(forces[a, c]), rel=1e-7, abs=1e-8)
            full = (net({**batch, "pos": plus}).sum() - net({**batch, "pos": minus}).sum())
            gap = max(gap, abs(float(-full / (2 * h) - forces[a, c])))
    assert gap > 1e-2, "forces should omit the angle derivative (reference detach)"


def _rotation() -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(3),
                                       dtype=torch.float64))
    return q * torch.sign(torch.det(q))  # proper rotation


def test_energy_invariant_forces_equivariant(batch) -> None:
    """Rotating positions and cell leaves the energy and rotates the forces; a translation
    changes neither."""
    net = _model()
    energy, forces = dpp.energy_and_forces(net, batch, create_graph=False)
    rot = _rotation()
    turned = {**batch, "pos": batch["pos"] @ rot.T, "cell": batch["cell"] @ rot.T}
    e_rot, f_rot = dpp.energy_and_forces(net, turned, create_graph=False)
    torch.testing.assert_close(e_rot, energy, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(f_rot, forces @ rot.T, rtol=1e-9, atol=1e-10)
    shifted = {**batch, "pos": batch["pos"] + torch.tensor([0.7, -1.3, 2.1],
                                                           dtype=torch.float64)}
    e_sh, f_sh = dpp.energy_and_forces(net, shifted, create_graph=False)
    torch.testing.assert_close(e_sh, energy, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(f_sh, forces, rtol=1e-9, atol=1e-10)
    assert energy.shape == (2,) and forces.shape == batch["pos"].shape


def test_force_loss_double_backward_reaches_every_weight(batch) -> None:
    """With create_graph=True an L1 force loss backpropagates into every parameter
    (frequencies and embedding included) with finite, non-zero gradients."""
    net, fbatch = _model().float(), _batch_float(batch)
    _, forces = dpp.energy_and_forces(net, fbatch, create_graph=True)
    target = torch.randn_like(forces, generator=torch.Generator().manual_seed(1))
    (forces - target).abs().sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert float(p.grad.abs().sum()) > 0.0, name


def test_evaluation_under_no_grad(batch) -> None:
    """energy_and_forces enables grad itself (reference conditional_grad) and detaches."""
    net = _model()
    want_e, want_f = dpp.energy_and_forces(net, batch, create_graph=False)
    with torch.no_grad():
        energy, forces = dpp.energy_and_forces(net, batch, create_graph=False)
    torch.testing.assert_close(energy, want_e, rtol=0, atol=0)
    torch.testing.assert_close(forces, want_f, rtol=0, atol=0)
    assert not energy.requires_grad and not forces.requires_grad


def test_bf16_autocast_keeps_basis_in_float32(batch) -> None:
    """Under CPU bf16 autocast the output stays float32 and close to the float32 model."""
    net, fbatch = _model().float(), _batch_float(batch)
    want = net(fbatch).detach()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        energy, forces = dpp.energy_and_forces(net, fbatch, create_graph=False)
    assert energy.dtype == torch.float32 and forces.dtype == torch.float32
    assert torch.isfinite(forces).all()
    torch.testing.assert_close(energy, want, rtol=0.05, atol=0.05 * float(want.abs().max()))


def test_weight_round_trip_and_canonical_names(batch) -> None:
    """Exported entries are exactly spec.weight_shapes() (names, order, shapes); importing
    them into a differently seeded model reproduces its outputs bit for bit (float32: the
    weight files are float32)."""
    src, dst, batch = _model(seed=0).float(), _model(seed=1).float(), _batch_float(batch)
    with torch.no_grad():
        src.rbf_layer.frequencies.add_(0.1)  # a non-default value must travel too
    arrays = export_weights(src)
    shapes = TINY.weight_shapes()
    assert list(arrays) == list(shapes)
    assert {k: v.shape for k, v in arrays.items()} == shapes
    assert not torch.equal(src(batch), dst(batch))
    import_weights(dst, arrays)
    assert torch.equal(dst(batch), src(batch))


def test_initialisation_and_zero_initial_energy(batch) -> None:
    """§1.2: dense_final zero (so the initial energy is exactly 0), glorot-orthogonal
    variance 2/(fan_in + fan_out), zeroed biases except the output up-projection,
    frequencies nπ, embedding within ±√3."""
    torch.manual_seed(0)
    net = dpp.DimeNetPP(MINI)
    for b in range(MINI.num_blocks + 1):
        assert not net.dense(f"output_blocks/{b}/dense_final").weight.any()
    assert not net(_batch_float(batch)).any()
    w = net.dense("int_blocks/0/dense_kj").weight
    assert float(w.detach().var()) == pytest.approx(2.0 / sum(w.shape), rel=1e-5)
    assert not net.dense("int_blocks/1/layers_after_skip/1/dense_2").bias.any()
    assert not net.dense("output_blocks/2/dense_layers/0").bias.any()
    assert net.dense("output_blocks/2/up_projection").bias.abs().max() > 0
    assert net.dense("emb_block/dense").bias.abs().max() > 0  # torch default init
    np.testing.assert_allclose(net.rbf_layer.frequencies.detach().numpy(),
                               np.arange(1, 7) * np.pi, rtol=1e-6)
    assert float(net.emb_block.weight.detach().abs().max()) <= 3**0.5


def _batch_float(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.float() if v.is_floating_point() else v for k, v in batch.items()}
