"""OC20 DimeNet++ in TensorFlow/Keras 3: sizes and canonical names against the spec, the
in-graph triplets and bases against the numpy references, forces against finite
differences, symmetry, double backward, one trace for every batch size, the reference's
initialisation, and a weight round trip.

Structures are small rattled Cu(111) slabs (+ O adsorbate) with periodic neighbour graphs
from ``sciperf.workloads.oc20.graph``; models are tiny (hidden 16) unless a test is about
sizes. Numerics tests run the model under a float64 policy, so tolerances are tight.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from sciperf.workloads.oc20 import basis, graph
from sciperf.workloads.oc20.spec import ModelSpec
from sciperf_tensorflow.weights import export_weights, import_weights
from sciperf_tensorflow.workloads.oc20 import model as oc20

CUTOFF = 5.0
TINY = ModelSpec(hidden_channels=16, out_emb_channels=16, int_emb_size=8, basis_emb_size=4,
                 num_blocks=2, cutoff=CUTOFF)
MINI = ModelSpec(hidden_channels=64, out_emb_channels=64, int_emb_size=32, num_blocks=2)


def _structure(seed: int, size: tuple[int, int, int] = (2, 2, 3), adsorbate: bool = True):
    """A rattled Cu(111) slab, optionally with an O adsorbate (ASE)."""
    from ase.build import add_adsorbate, fcc111

    atoms = fcc111("Cu", size, vacuum=6.0)
    if adsorbate:
        add_adsorbate(atoms, "O", 1.5, "fcc")
    atoms.rattle(0.05, seed=seed)
    return atoms


def _batch(structures, cutoff: float = CUTOFF - 0.5, max_neighbours: int = 12,
           dtype=np.float32) -> dict[str, np.ndarray]:
    """The model's batch dict of several structures (atoms concatenated, edge indices
    offset by the atoms before them), as the data loader collates them."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in oc20.batch_signature()}
    start = 0
    for b, atoms in enumerate(structures):
        pos, cell = atoms.get_positions(), np.asarray(atoms.get_cell())
        g = graph.neighbour_graph(pos, cell, cutoff, max_neighbours)
        parts["atomic_numbers"].append(atoms.get_atomic_numbers().astype(np.int64))
        parts["pos"].append(pos)
        parts["cell"].append(cell[None])
        parts["batch"].append(np.full(len(atoms), b, np.int64))
        parts["edge_index"].append(g.edge_index + start)
        parts["cell_offsets"].append(g.cell_offsets)
        start += len(atoms)
    out = {k: np.concatenate(v, axis=1 if k == "edge_index" else 0) for k, v in parts.items()}
    for key in ("pos", "cell", "cell_offsets"):
        out[key] = out[key].astype(dtype)
    return out


def _tensors(batch: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
    return {k: tf.constant(v) for k, v in batch.items()}


def _model(spec: ModelSpec = TINY, dtype: str | None = None, seed: int = 0) -> oc20.DimeNetPP:
    """A model whose zero-initialised final layers are randomised, so energies are not 0."""
    keras.utils.set_random_seed(seed)
    model = oc20.DimeNetPP(spec, dtype=dtype)
    rng = np.random.default_rng(seed)
    for block in model.output_blocks:
        kernel = block.dense_final.kernel
        kernel.assign(rng.normal(0, 0.5, kernel.shape).astype(kernel.dtype))
    return model


@pytest.fixture(scope="module")
def pair() -> dict[str, np.ndarray]:
    """Two periodic slabs (13 atoms each), float64 geometry."""
    return _batch([_structure(1), _structure(2)], dtype=np.float64)


# ----------------------------------------------------------------------------- sizes, names

@pytest.mark.parametrize("spec, count", [(ModelSpec(), 1_810_182),
                                         (ModelSpec(output_up_bias=False), 1_809_414),
                                         (MINI, 155_526)])
def test_parameter_count_and_canonical_entries(spec: ModelSpec, count: int) -> None:
    """The built model has the spec's parameters, and the generic mapper exports exactly
    the spec's canonical entry table (names and Keras-layout shapes)."""
    model = oc20.DimeNetPP(spec)
    assert model.count_params() == spec.parameter_count() == count
    exported = export_weights(model)
    assert {k: v.shape for k, v in exported.items()} == spec.weight_shapes()


def test_initialisation_is_the_references() -> None:
    """§1.2: glorot-orthogonal kernels (orthogonal columns, empirical variance exactly
    2/(fan_in+fan_out)) with zero biases; zero final layers; U(±√3) embeddings; PyTorch's
    U(±1/√fan_in) on the embedding block's dense layers and the output up-projection bias;
    frequencies nπ."""
    spec = ModelSpec(hidden_channels=64, out_emb_channels=48, int_emb_size=32, num_blocks=1)
    w = export_weights(oc20.DimeNetPP(spec))
    np.testing.assert_allclose(w["rbf_layer/frequencies"], np.arange(1, 7) * math.pi, rtol=1e-6)
    assert np.abs(w["emb_block/embeddings"]).max() <= math.sqrt(3)
    assert w["emb_block/embeddings"].std() == pytest.approx(1.0, rel=0.05)  # U(±√3): var 1
    for name, fan_in in (("emb_block/dense_rbf", 6), ("emb_block/dense", 192),
                         ("output_blocks/0/up_projection", 64)):
        bound = 1 / math.sqrt(fan_in)
        params = ("kernel", "bias") if name.startswith("emb") else ("bias",)
        for p in params:
            arr = w[f"{name}/{p}"]
            assert np.abs(arr).max() <= bound and np.abs(arr).max() > 0.5 * bound, name
    for b in range(2):
        assert not w[f"output_blocks/{b}/dense_final/kernel"].any()
    glorot = ["int_blocks/0/dense_kj", "int_blocks/0/down_projection",
              "int_blocks/0/layers_after_skip/1/dense_2", "output_blocks/1/up_projection",
              "output_blocks/1/dense_layers/2", "int_blocks/0/dense_sbf1"]
    for name in glorot:
        kernel = w[f"{name}/kernel"].astype(np.float64)
        fan_in, fan_out = kernel.shape
        assert kernel.var(ddof=1) == pytest.approx(2 / (fan_in + fan_out), rel=1e-5), name
        small = kernel if fan_in >= fan_out else kernel.T  # orthogonal columns
        gram = small.T @ small
        np.testing.assert_allclose(gram, np.eye(len(gram)) * gram[0, 0], atol=1e-5)
    for name in ("int_blocks/0/dense_kj", "int_blocks/0/final_before_skip",
                 "int_blocks/0/layers_before_skip/0/dense_1", "output_blocks/0/dense_layers/0"):
        assert not w[f"{name}/bias"].any(), name


def test_untrained_energy_is_exactly_zero() -> None:
    """Every final output layer starts at zero, so energies and forces are exactly 0."""
    model = oc20.DimeNetPP(TINY)
    energy, forces = oc20.energy_and_forces(model, _tensors(_batch([_structure(3)])))
    assert energy.shape == (1,) and forces.shape == (13, 3)
    assert not np.any(energy.numpy()) and not np.any(forces.numpy())


# ----------------------------------------------------------------------------- graph

def _tf_triplets(batch):
    idx_kj, idx_ji = oc20.triplets(tf.constant(batch["edge_index"]),
                                   tf.constant(batch["cell_offsets"]),
                                   tf.constant(len(batch["pos"])))
    return idx_kj.numpy(), idx_ji.numpy()


def test_triplets_equal_the_numpy_reference(pair) -> None:
    """Same triplets in the same order on a periodic two-structure batch."""
    idx_kj, idx_ji = _tf_triplets(pair)
    ref_kj, ref_ji = graph.triplets(pair["edge_index"], pair["cell_offsets"])
    assert len(ref_kj) > 1000
    np.testing.assert_array_equal(idx_kj, ref_kj)
    np.testing.assert_array_equal(idx_ji, ref_ji)
    src, dst = pair["edge_index"]
    assert np.all(dst[idx_kj] == src[idx_ji])  # k→j then j→i, never across structures


def test_triplets_keep_k_equal_i_through_another_image() -> None:
    """In a one-atom-wide cell an atom neighbours its own images: a triplet returning to
    i in a *different* image is kept, the true back-tracking one is dropped."""
    batch = _batch([_structure(4, size=(1, 1, 3), adsorbate=False), _structure(5)],
                   cutoff=4.0, max_neighbours=20)
    idx_kj, idx_ji = _tf_triplets(batch)
    ref_kj, ref_ji = graph.triplets(batch["edge_index"], batch["cell_offsets"])
    np.testing.assert_array_equal(idx_kj, ref_kj)
    np.testing.assert_array_equal(idx_ji, ref_ji)
    src, dst = batch["edge_index"]
    same_atom = src[idx_kj] == dst[idx_ji]
    round_trip = np.all(batch["cell_offsets"][idx_kj] + batch["cell_offsets"][idx_ji] == 0,
                        axis=1)
    assert same_atom.any() and not (same_atom & round_trip).any()


# ----------------------------------------------------------------------------- bases

def test_spherical_bessel_is_float64_accurate() -> None:
    """j_l, l ≤ 6, over (1e-3, 30): relative error ≤ 1e-12 of the local amplitude (the
    small-argument series avoids the closed forms' cancellation), vs scipy."""
    from scipy.special import spherical_jn

    x = np.geomspace(1e-3, 30.0, 4001)
    j = oc20.spherical_bessel(tf.constant(np.tile(x, (7, 1))), 7).numpy()
    for order in range(7):
        ref = spherical_jn(order, x)
        amplitude = np.where(x < max(order, 1), np.abs(ref), np.maximum(np.abs(ref), 0.05 / x))
        assert np.max(np.abs(j[order] - ref) / amplitude) < 1e-12, order


def test_bases_equal_the_numpy_reference() -> None:
    """Radial (E, 6) and spherical (T, 42, l-major) bases in float64 vs ``basis.py``,
    distances from 0.5 Å (small Bessel arguments) to the cutoff, trained frequencies."""
    rng = np.random.default_rng(0)
    spec = ModelSpec()
    dist = np.r_[0.5, 0.51, rng.uniform(0.5, spec.cutoff, 200), spec.cutoff]
    angle = rng.uniform(0, math.pi, 300)
    idx_kj = rng.integers(0, len(dist), 300)
    rbf_layer = oc20.RadialBasis(spec, dtype="float64")
    rbf_layer.build()
    freq = basis.initial_frequencies(6) * rng.uniform(0.9, 1.1, 6)
    rbf_layer.frequencies.assign(freq)
    ref = basis.radial_basis(dist, spec.cutoff, freq)  # u(x) cancels to 0 at the cutoff:
    np.testing.assert_allclose(rbf_layer(tf.constant(dist)).numpy(), ref,  # absolute there
                               rtol=1e-12, atol=1e-14 * np.abs(ref).max())
    sbf = oc20.SphericalBasis(spec, dtype="float64")(tf.constant(dist), tf.constant(angle),
                                                      tf.constant(idx_kj)).numpy()
    ref = basis.spherical_basis(dist[idx_kj], angle, spec.cutoff, 7, 6)
    np.testing.assert_allclose(sbf, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def _numpy_energy(w: dict[str, np.ndarray], spec: ModelSpec, batch) -> np.ndarray:
    """The reference forward (§1.2, PyG 1.7.2 blocks) written out in float64 numpy over
    exported weights, with the numpy triplets and bases: an independent statement of the
    block wiring (concat order, skips, which projections have activations)."""
    def lin(name, x):
        return x @ w[f"{name}/kernel"] + w.get(f"{name}/bias", 0.0)

    def act(x):
        return x / (1.0 + np.exp(-x))

    def scatter(x, index, size):
        out = np.zeros((size, *x.shape[1:]))
        np.add.at(out, index, x)
        return out

    def residual(name, h):
        return h + act(lin(f"{name}/dense_2", act(lin(f"{name}/dense_1", h))))

    def output(name, m):
        x = lin(f"{name}/up_projection", scatter(lin(f"{name}/dense_rbf", rbf) * m, i, n))
        for k in range(spec.num_output_layers):
            x = act(lin(f"{name}/dense_layers/{k}", x))
        return lin(f"{name}/dense_final", x)

    def interaction(name, m):
        x_kj = act(lin(f"{name}/dense_kj", m)) * lin(f"{name}/dense_rbf2",
                                                      lin(f"{name}/dense_rbf1", rbf))
        x_kj = act(lin(f"{name}/down_projection", x_kj))
        x_kj = x_kj[kj] * lin(f"{name}/dense_sbf2", lin(f"{name}/dense_sbf1", sbf))
        h = act(lin(f"{name}/dense_ji", m)) + act(lin(f"{name}/up_projection",
                                                       scatter(x_kj, ji, len(m))))
        for k in range(spec.num_before_skip):
            h = residual(f"{name}/layers_before_skip/{k}", h)
        h = act(lin(f"{name}/final_before_skip", h)) + m
        for k in range(spec.num_after_skip):
            h = residual(f"{name}/layers_after_skip/{k}", h)
        return h

    pos, n = batch["pos"].astype(np.float64), len(batch["pos"])
    j, i = batch["edge_index"]
    vec = pos[j] - pos[i] + np.einsum("ek,ekl->el", batch["cell_offsets"],
                                      batch["cell"][batch["batch"][i]])
    dist = np.linalg.norm(vec, axis=1)
    kj, ji = graph.triplets(batch["edge_index"], batch["cell_offsets"])
    rbf = basis.radial_basis(dist, spec.cutoff, w["rbf_layer/frequencies"])
    sbf = basis.spherical_basis(dist[kj], basis.triplet_angle(vec[ji], vec[kj]), spec.cutoff,
                                spec.num_spherical, spec.num_radial)
    x = w["emb_block/embeddings"][batch["atomic_numbers"]]
    m = act(lin("emb_block/dense", np.concatenate(
        [x[i], x[j], act(lin("emb_block/dense_rbf", rbf))], axis=1)))
    per_atom = output("output_blocks/0", m)
    for b in range(spec.num_blocks):
        m = interaction(f"int_blocks/{b}", m)
        per_atom = per_atom + output(f"output_blocks/{b + 1}", m)
    return scatter(per_atom[:, 0], batch["batch"], len(batch["cell"]))


def test_energy_equals_a_numpy_forward(pair) -> None:
    """float64 energies equal the numpy statement of the reference forward (trained-like
    random weights everywhere, biases included)."""
    model = _model(dtype="float64")
    rng = np.random.default_rng(3)
    w = {k: v + rng.normal(0, 0.1, v.shape) for k, v in export_weights(model).items()}
    import_weights(model, w)
    energy = model(_tensors(pair)).numpy()
    assert np.abs(energy).min() > 1e-3
    np.testing.assert_allclose(energy, _numpy_energy(w, TINY, pair), rtol=1e-10)


# ----------------------------------------------------------------------------- forces

def _tile(batch: dict[str, np.ndarray], positions: list[np.ndarray]) -> dict[str, np.ndarray]:
    """One structure's graph repeated once per entry of `positions` (a batch of copies)."""
    n, copies = len(batch["pos"]), len(positions)
    shift = np.repeat(np.arange(copies) * n, batch["edge_index"].shape[1])
    return {"atomic_numbers": np.tile(batch["atomic_numbers"], copies),
            "pos": np.concatenate(positions), "cell": np.tile(batch["cell"], (copies, 1, 1)),
            "batch": np.repeat(np.arange(copies), n),
            "edge_index": np.tile(batch["edge_index"], copies) + shift,
            "cell_offsets": np.tile(batch["cell_offsets"], (copies, 1))}


def _central_differences(model, batch, coords, frozen_angle=None, h: float = 1e-5):
    """−(E(x+h) − E(x−h))/2h for each (atom, xyz) in `coords`, all in one batched call on
    the fixed graph; with `frozen_angle`, every copy keeps the unperturbed angles."""
    positions = []
    for a, c in coords:
        for step in (h, -h):
            moved = batch["pos"].copy()
            moved[a, c] += step
            positions.append(moved)
    tiled = _tensors(_tile(batch, positions))
    geo = model.geometry(tiled)
    if frozen_angle is not None:
        geo = geo._replace(angle=tf.tile(frozen_angle, [len(positions)]))
    energy = model.energy(tiled, geo).numpy().reshape(-1, 2)
    return -(energy[:, 0] - energy[:, 1]) / (2 * h)


def test_forces_are_the_distance_derivative() -> None:
    """Forces = −∂E/∂pos, honestly, given that the reference stops gradients at the angles:

    (a) with the spherical-basis projections zeroed, the angles drop out of E, so the
        autograd forces must equal a full central finite difference;
    (b) with all weights live, they must equal the finite difference of E at *frozen*
        angles (the angle inputs held at the unperturbed structure's), and differ from the
        full finite difference (the angular part is really cut, as in the reference).
    """
    batch = _batch([_structure(1)], dtype=np.float64)
    rng = np.random.default_rng(1)
    coords = list(zip(rng.integers(0, 13, 12).tolist(), rng.integers(0, 3, 12).tolist(),
                      strict=True))
    model = _model(dtype="float64")
    _, forces = oc20.energy_and_forces(model, _tensors(batch))
    auto = np.array([forces.numpy()[a, c] for a, c in coords])

    frozen = model.geometry(_tensors(batch)).angle
    fd_frozen = _central_differences(model, batch, coords, frozen)
    np.testing.assert_allclose(auto, fd_frozen, rtol=1e-6, atol=1e-8)
    fd_full = _central_differences(model, batch, coords)
    assert np.max(np.abs(auto - fd_full)) > 1e-4 * np.max(np.abs(fd_full))

    for block in model.int_blocks:
        block.dense_sbf1.kernel.assign(tf.zeros_like(block.dense_sbf1.kernel))
    _, forces = oc20.energy_and_forces(model, _tensors(batch))
    auto = np.array([forces.numpy()[a, c] for a, c in coords])
    fd_full = _central_differences(model, batch, coords)
    np.testing.assert_allclose(auto, fd_full, rtol=1e-6, atol=1e-8)


def _rotation(seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def test_energy_invariant_forces_equivariant(pair) -> None:
    """Rotating positions *and* cell and translating all atoms: energies unchanged,
    forces rotated with the structure."""
    model = _model(dtype="float64")
    energy, forces = oc20.energy_and_forces(model, _tensors(pair))
    rot = _rotation(7)
    moved = {**pair, "pos": pair["pos"] @ rot.T + np.array([1.3, -4.2, 0.7]),
             "cell": pair["cell"] @ rot.T}
    energy2, forces2 = oc20.energy_and_forces(model, _tensors(moved))
    assert np.abs(energy.numpy()).min() > 1e-3
    np.testing.assert_allclose(energy2.numpy(), energy.numpy(), rtol=1e-10)
    np.testing.assert_allclose(forces2.numpy(), forces.numpy() @ rot.T, rtol=1e-8,
                               atol=1e-10 * np.abs(forces.numpy()).max())


def test_force_loss_differentiates_to_every_weight() -> None:
    """Double backward: an outer tape over the weights sees through the inner position
    gradient; every trainable variable gets a finite, non-zero gradient."""
    model = _model()
    batch = _tensors(_batch([_structure(1), _structure(2)]))
    target = tf.random.stateless_normal((26, 3), seed=(1, 2))
    with tf.GradientTape() as tape:
        _, forces = oc20.energy_and_forces(model, batch, training=True)
        loss = tf.reduce_sum(tf.abs(forces - target))
    grads = tape.gradient(loss, model.trainable_variables)
    assert len(grads) == len(model.trainable_variables) == len(TINY.weight_shapes())
    for var, grad in zip(model.trainable_variables, grads, strict=True):
        assert grad is not None, var.path
        grad = tf.convert_to_tensor(grad).numpy()
        assert np.all(np.isfinite(grad)) and np.any(grad), var.path


# ----------------------------------------------------------------------------- graph mode

def test_one_trace_serves_every_batch_size() -> None:
    """A tf.function with open dimensions traces once for batches of 1 and 2 structures
    (different N, E, T, B) and equals eager execution."""
    model = _model()
    step = tf.function(lambda b: oc20.energy_and_forces(model, b, False),
                       input_signature=[oc20.batch_signature()])
    for structures in ([_structure(3)], [_structure(4), _structure(5, adsorbate=False)]):
        batch = _tensors(_batch(structures))
        energy, forces = step(batch)
        eager_energy, eager_forces = oc20.energy_and_forces(model, batch)
        assert energy.shape == (len(structures),)
        np.testing.assert_allclose(energy.numpy(), eager_energy.numpy(), rtol=1e-5)
        np.testing.assert_allclose(forces.numpy(), eager_forces.numpy(), rtol=1e-4, atol=1e-6)
    assert step.experimental_get_tracing_count() == 1


def test_weight_round_trip_gives_identical_outputs() -> None:
    """export → import into a differently seeded model: bit-identical energies and forces."""
    source, target = _model(seed=1), _model(seed=2)
    batch = _tensors(_batch([_structure(1), _structure(2)]))
    import_weights(target, export_weights(source))
    for a, b in zip(oc20.energy_and_forces(source, batch),
                    oc20.energy_and_forces(target, batch), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_mixed_precision_keeps_geometry_float32() -> None:
    """Under mixed_bfloat16 the dense layers compute in bf16 with float32 variables, while
    positions, bases and energies stay float32 (positions are not autocast)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = _model()
    finally:
        keras.config.set_dtype_policy(previous)
    assert model.int_blocks[0].dense_kj.compute_dtype == "bfloat16"
    assert model.int_blocks[0].dense_kj.kernel.dtype == "float32"
    assert model.rbf_layer.compute_dtype == "float32"
    batch = _tensors(_batch([_structure(1)]))
    geo = model.geometry(batch)
    assert geo.dist.dtype == tf.float32 and geo.angle.dtype == tf.float32
    energy, forces = oc20.energy_and_forces(model, batch)
    assert energy.dtype == tf.float32 and forces.dtype == tf.float32
    assert np.all(np.isfinite(forces.numpy())) and np.any(forces.numpy())
