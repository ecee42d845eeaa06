"""The Keras structure module and rigids against the PyTorch ones: the same weights through
both frameworks' canonical mappers, float64 on both sides, so the outputs and the weight
gradients agree to rounding; plus what only the Keras side has to get right (canonical
weight names, full precision under a mixed policy, a dynamic residue count, stateless
dropout masks that differ between iterations, and iterations that run as one graph loop
whose op count does not grow with ``sm_blocks``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")

import keras  # noqa: E402
from workloads.openfold.tf_parity import (  # noqa: E402
    copy_weights,
    keras_float64,
    nested,
    numpy,
)

from sciperf import weights  # noqa: E402
from sciperf.workloads.openfold import residue_constants as rc  # noqa: E402
from sciperf.workloads.openfold.sizes import ModelSpec, mini_spec  # noqa: E402
from sciperf_pytorch import weights as torch_weights  # noqa: E402
from sciperf_pytorch.workloads.openfold import rigids as prig  # noqa: E402
from sciperf_pytorch.workloads.openfold import structure as pst  # noqa: E402
from sciperf_tensorflow import weights as keras_weights  # noqa: E402
from sciperf_tensorflow.workloads.openfold import rigids as krig  # noqa: E402
from sciperf_tensorflow.workloads.openfold import structure as kst  # noqa: E402
from sciperf_tensorflow.workloads.openfold.primitives import (  # noqa: E402
    SharedDropout,
    dropout_seed,
)

F64 = torch.float64
PATH = "structure_module"
# Small but complete: 2 iterations (so the rotation stop between them matters), 2 angle
# blocks, masked residues; IPA keeps the reference's point counts.
SPEC = mini_spec().replace(c_s=16, c_z=8, c_hidden_angle=8, num_heads_ipa=2, c_hidden_ipa=4,
                           sm_blocks=2)
N_RES = 7


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _close(tf_value: object, torch_value: object, tol: float) -> None:
    np.testing.assert_allclose(numpy(tf_value), numpy(torch_value), rtol=tol, atol=tol)


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Every weight non-trivial (the init zeroes the output layers)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64) * 0.3)


def _quats(n: int, seed: int) -> np.ndarray:
    q = np.random.default_rng(seed).standard_normal((n, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _rigid_pair(n: int, seed: int) -> tuple[prig.Rigid, krig.Rigid]:
    q, t = _quats(n, seed), 5 * np.random.default_rng(seed + 100).standard_normal((n, 3))
    return (prig.Rigid.from_quaternion(torch.tensor(q), torch.tensor(t)),
            krig.Rigid.from_quaternion(tf.constant(q), tf.constant(t)))


def _inputs(seed: int = 0, n: int = N_RES) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    mask = np.ones((1, n))
    mask[0, -2:] = 0
    return {"s": g.standard_normal((1, n, SPEC.c_s)),
            "z": g.standard_normal((1, n, n, SPEC.c_z)),
            "mask": mask, "aatype": g.integers(0, 21, (1, n))}


@pytest.fixture(scope="module")
def modules() -> tuple[torch.nn.Module, keras.layers.Layer]:
    """The PyTorch module with random weights and the float64 Keras mirror holding them."""
    torch_sm = pst.StructureModule(SPEC).double().eval()
    _randomise(torch_sm, 0)
    with keras_float64():
        keras_sm = kst.StructureModule(SPEC)
    assert copy_weights(torch_sm, keras_sm, PATH) == len(
        [k for k in SPEC.weight_shapes() if k.startswith(f"{PATH}/")])
    return torch_sm, keras_sm


# ------------------------------------------------------------------------------ rigids
def test_rigid_ops_match_pytorch():
    q = _quats(16, 0)
    _close(krig.quat_to_rot(tf.constant(q)), prig.quat_to_rot(torch.tensor(q)), 1e-12)
    q2 = _quats(16, 1)
    _close(krig.quat_multiply(tf.constant(q), tf.constant(q2)),
           prig.quat_multiply(torch.tensor(q), torch.tensor(q2)), 1e-12)
    # rot_to_quat: the eigensolvers may pick opposite signs (q and −q: one rotation)
    r = prig.quat_to_rot(torch.tensor(q))
    kq, pq = numpy(krig.rot_to_quat(tf.constant(numpy(r)))), numpy(prig.rot_to_quat(r))
    np.testing.assert_allclose(kq * np.sign((kq * pq).sum(-1, keepdims=True)), pq,
                               rtol=1e-12, atol=1e-12)
    update = np.random.default_rng(2).standard_normal((16, 6))
    t = np.random.default_rng(3).standard_normal((16, 3))
    for k, p in zip(krig.compose_quat_update(tf.constant(q), tf.constant(t),
                                             tf.constant(update)),
                    prig.compose_quat_update(torch.tensor(q), torch.tensor(t),
                                             torch.tensor(update)), strict=True):
        _close(k, p, 1e-12)

    (pa, ka), (pb, kb) = _rigid_pair(8, 4), _rigid_pair(8, 5)
    pts = np.random.default_rng(6).standard_normal((8, 5, 3))
    pc, kc = pa.compose(pb), ka.compose(kb)
    _close(kc.rot, pc.rot, 1e-12)
    _close(kc.trans, pc.trans, 1e-12)
    _close(ka.invert().trans, pa.invert().trans, 1e-12)
    # broadcast every frame over every point (the FAPE and IPA pattern)
    _close(ka.unsqueeze(-1).apply(tf.constant(pts)),
           pa.unsqueeze(-1).apply(torch.tensor(pts)), 1e-12)
    _close(ka.unsqueeze(-1).invert_apply(tf.constant(pts)),
           pa.unsqueeze(-1).invert_apply(torch.tensor(pts)), 1e-12)
    # layouts and tensor-like indexing
    _close(ka.to_tensor_4x4(), pa.to_tensor_4x4(), 1e-12)
    _close(krig.Rigid.from_tensor_4x4(ka.to_tensor_4x4()).trans, pa.trans, 1e-12)
    _close(krig.Rigid.from_tensor_7(tf.constant(numpy(pa.to_tensor_7()))).rot,
           prig.Rigid.from_tensor_7(pa.to_tensor_7()).rot, 1e-12)
    _close(krig.Rigid.cat([ka[:3], ka[5:]], 0).rot, prig.Rigid.cat([pa[:3], pa[5:]], 0).rot,
           1e-12)
    x = [np.random.default_rng(7 + i).standard_normal((6, 3)) for i in range(3)]
    kf = krig.Rigid.from_3_points(*map(tf.constant, x))
    pf = prig.Rigid.from_3_points(*map(torch.tensor, x))
    _close(kf.rot, pf.rot, 1e-12)
    _close(kf.trans, pf.trans, 0)
    _close(krig.identity_quaternion([2, 3], tf.float64), prig.identity_quaternion((2, 3), F64),
           0)
    assert krig.Rigid.identity([4], tf.float64).rot.shape == (4, 3, 3)


def test_rigid_precision_and_rotation_gradient_stop():
    q = tf.constant(_quats(4, 8), tf.bfloat16)
    frames = krig.Rigid.from_quaternion(q, tf.zeros((4, 3), tf.bfloat16))
    assert frames.rot.dtype == tf.float32 and frames.trans.dtype == tf.float32
    rot, trans = tf.Variable(numpy(frames.rot)), tf.Variable(tf.ones((4, 3)))
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(krig.Rigid(rot, trans).stop_rot_gradient().apply(tf.ones((4, 3))))
    g_rot, g_trans = tape.gradient(out, [rot, trans])
    assert g_rot is None and float(tf.reduce_sum(g_trans)) == 12.0


# ------------------------------------------------------------------- network parity
def test_ipa_matches_pytorch():
    spec = SPEC
    torch_ipa = pst.InvariantPointAttention(spec).double()
    _randomise(torch_ipa, 1)
    with keras_float64():
        keras_ipa = kst.InvariantPointAttention(spec, f"{PATH}__ipa")
    copy_weights(torch_ipa, keras_ipa, f"{PATH}.ipa")
    x = _inputs(1)
    (pframes, kframes) = _rigid_pair(N_RES, 9)
    pframes, kframes = pframes[None], kframes[None]
    with torch.no_grad():
        expected = torch_ipa(torch.tensor(x["s"]), torch.tensor(x["z"]), pframes,
                             torch.tensor(x["mask"]))
    with warnings.catch_warnings():  # Keras' unbuilt-state and mask warnings are errors
        warnings.simplefilter("error")
        got = keras_ipa(tf.constant(x["s"]), tf.constant(x["z"]), frames=kframes,
                        mask=tf.constant(x["mask"]))
    assert float(expected.abs().max()) > 1e-2
    _close(got, expected, 1e-9)


def _maybe_traced(fn: object, graph: bool) -> object:
    """`fn` as a ``tf.function`` (its loop a graph ``While``) or as is (the loop runs
    eagerly)."""
    return tf.function(fn) if graph else fn


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_structure_module_outputs_match_pytorch(modules, graph):
    torch_sm, keras_sm = modules
    x = _inputs(2)
    with torch.no_grad():
        expected = torch_sm(*(torch.tensor(x[k]) for k in ("s", "z", "mask", "aatype")))
    got = _maybe_traced(keras_sm, graph)(*(tf.constant(x[k])
                                           for k in ("s", "z", "mask", "aatype")))
    assert set(got) == set(expected) == {"frames", "sidechain_frames", "unnormalized_angles",
                                         "angles", "positions", "states", "single"}
    for key, value in expected.items():
        assert tuple(got[key].shape) == tuple(value.shape), key
        assert got[key].dtype == tf.float64, key
        _close(got[key], value, 1e-9)
    assert float(tf.reduce_max(tf.abs(got["positions"]))) > 1.0


def _canonical_grads(named: dict[str, tuple[object, str]], grads: list[object],
                     layout: str) -> dict[str, np.ndarray]:
    return {name: weights.to_canonical(name, numpy(g), kind, layout)
            for (name, (_, kind)), g in zip(named.items(), grads, strict=True)}


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_structure_module_weight_gradients_match_pytorch(modules, graph):
    """Both through the eagerly run loop and through the graph ``While``'s gradient (the
    rotation's stop-gradient between iterations included)."""
    torch_sm, keras_sm = modules
    x = _inputs(3)
    g = np.random.default_rng(4)
    probes: dict[str, np.ndarray] = {}

    def scalar(out: dict, lib: object) -> object:
        total = 0.0
        for key in sorted(out):
            if key not in probes:
                probes[key] = g.standard_normal(tuple(out[key].shape))
            probe = torch.tensor(probes[key]) if lib is torch else tf.constant(probes[key])
            total = total + (out[key] * probe).sum() if lib is torch \
                else total + tf.reduce_sum(out[key] * probe)
        return total

    torch_sm.zero_grad()
    scalar(torch_sm(*(torch.tensor(x[k]) for k in ("s", "z", "mask", "aatype"))),
           torch).backward()
    torch_named = torch_weights._mapped(nested(torch_sm, PATH))  # noqa: SLF001
    expected = _canonical_grads(torch_named, [t.grad for t, _ in torch_named.values()],
                                "torch")

    keras_named = keras_weights.mapped(keras_sm)
    variables = [v for v, _ in keras_named.values()]

    def keras_grads() -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = scalar(keras_sm(*(tf.constant(x[k])
                                     for k in ("s", "z", "mask", "aatype"))), tf)
        return tape.gradient(loss, variables)

    got = _canonical_grads(keras_named, _maybe_traced(keras_grads, graph)(), "keras")
    assert set(got) == set(expected)
    for name, grad in expected.items():
        assert np.abs(grad).max() > 0, name  # every weight is in the graph
        np.testing.assert_allclose(got[name], grad, rtol=1e-8, atol=1e-8, err_msg=name)


def test_side_chain_functions_match_pytorch():
    n = 9
    g = np.random.default_rng(5)
    aatype = (np.arange(n)[None] * 3) % 21
    angles = g.standard_normal((1, n, 7, 2))
    angles /= np.linalg.norm(angles, axis=-1, keepdims=True)
    pb, kb = _rigid_pair(n, 10)
    pb, kb = pb[None], kb[None]
    ptab, ktab = pst._tables(F64, torch.device("cpu")), kst._tables(tf.float64)  # noqa: SLF001
    pgroups = pst.torsion_angles_to_frames(pb, torch.tensor(angles), torch.tensor(aatype),
                                           ptab["default_frames"])
    kgroups = kst.torsion_angles_to_frames(kb, tf.constant(angles), tf.constant(aatype),
                                           ktab["default_frames"])
    _close(kgroups.to_tensor_4x4(), pgroups.to_tensor_4x4(), 1e-9)
    p14 = pst.frames_to_atom14(pgroups, torch.tensor(aatype), ptab)
    k14 = kst.frames_to_atom14(kgroups, tf.constant(aatype), ktab)
    _close(k14, p14, 1e-9)
    idx = np.asarray(rc.RESTYPE_ATOM37_TO_ATOM14)[aatype]
    exists = np.asarray(rc.RESTYPE_ATOM37_MASK, np.float64)[aatype]
    exists[0, -1] = 0
    _close(kst.atom14_to_atom37(k14, tf.constant(idx), tf.constant(exists)),
           pst.atom14_to_atom37(p14, torch.tensor(idx), torch.tensor(exists)), 1e-9)


# ------------------------------------------------------------------- Keras-only duties
def test_weight_names_are_the_canonical_entries(modules):
    _, keras_sm = modules
    want = {k: v for k, v in SPEC.weight_shapes().items() if k.startswith(f"{PATH}/")}
    got = keras_weights.expected_entries(keras_sm)
    assert list(got) == list(want)  # names and the reference's order
    assert got == want


def _walk(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """`layer` and every layer under it."""
    return [layer, *(sub for child in getattr(layer, "layers", ()) for sub in _walk(child))]


def test_full_precision_under_mixed_policy_with_dynamic_residues():
    spec = SPEC.replace(angle_blocks=1)
    saved = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        sm = kst.StructureModule(spec)
    finally:
        keras.mixed_precision.set_global_policy(saved)
    assert {v.dtype for v in sm.weights} == {"float32"}
    assert {layer.compute_dtype for layer in _walk(sm)} == {"float32"}  # dropouts included

    @tf.function(input_signature=[tf.TensorSpec([1, None, spec.c_s], tf.bfloat16),
                                  tf.TensorSpec([1, None, None, spec.c_z], tf.bfloat16),
                                  tf.TensorSpec([1, None], tf.bfloat16),
                                  tf.TensorSpec([1, None], tf.int32)])
    def run(s, z, mask, aatype):
        return sm(s, z, mask, aatype)

    for n in (5, 8):  # one trace serves both residue counts
        x = _inputs(6, n)
        out = run(*(tf.constant(x[k], tf.bfloat16) for k in ("s", "z", "mask")),
                  tf.constant(x["aatype"], tf.int32))
        assert out["positions"].shape == (1, spec.sm_blocks, n, 14, 3)
        assert all(v.dtype == tf.float32 for v in out.values())
        assert np.isfinite(out["positions"].numpy()).all()
    assert run.experimental_get_tracing_count() == 1
    # the loop keeps every static size but the residue count
    static = run.get_concrete_function().structured_outputs
    assert static["positions"].shape.as_list() == [1, spec.sm_blocks, None, 14, 3]
    assert static["single"].shape.as_list() == [1, None, spec.c_s]


def _record_masks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, np.ndarray]]:
    """From now on, every training-mode dropout call appends (layer name, its mask) — the
    mask as the layer draws it for ones of the input's shape under the seed in force."""
    masks: list[tuple[str, np.ndarray]] = []
    call = SharedDropout.call

    def recording(self, x, training=False):
        if training:
            masks.append((self.name, numpy(call(self, tf.ones_like(x), training=True))))
        return call(self, x, training=training)

    monkeypatch.setattr(SharedDropout, "call", recording)
    return masks


def test_dropout_is_seeded_and_fresh_per_iteration(monkeypatch):
    spec = SPEC.replace(sm_dropout=0.5)
    with keras_float64():
        sm = kst.StructureModule(spec)
    x = {k: tf.constant(v) for k, v in _inputs(7).items()}
    args = (x["s"], x["z"], x["mask"], x["aatype"])
    eval_out = sm(*args)["single"]
    seed = tf.constant([3, 4], tf.int64)
    masks = _record_masks(monkeypatch)  # the eager loop calls the layers once an iteration
    with dropout_seed(seed):
        a = sm(*args, training=True)["single"]
        b = sm(*args, training=True)["single"]
    with dropout_seed(tf.constant([5, 6], tf.int64)):
        c = sm(*args, training=True)["single"]
    monkeypatch.undo()
    _close(a, b, 0)
    assert not np.allclose(numpy(a), numpy(eval_out))
    assert not np.allclose(numpy(a), numpy(c))

    # one pass: per iteration the IPA's dropout, then the transition's
    names = [f"{PATH}__ipa_dropout", f"{PATH}__transition__dropout"] * spec.sm_blocks
    assert [name for name, _ in masks[:len(names)]] == names
    first, again = masks[:len(names)], masks[len(names):2 * len(names)]
    for (_, mask), (_, same) in zip(first, again, strict=True):
        np.testing.assert_array_equal(mask, same)  # reproducible under one seed
    ipa = [mask for name, mask in first if name.endswith("ipa_dropout")]
    assert ipa[0].dtype == np.float64 and 0 < (ipa[0] == 0).mean() < 1
    assert not np.array_equal(ipa[0], ipa[1])  # fresh masks in each iteration
    # iteration i's masks are the layer's own under the seed + [0, i·stride]
    ones = tf.ones((1, N_RES, spec.c_s), tf.float64)
    for i, mask in enumerate(ipa):
        with dropout_seed(seed + tf.constant([0, i * kst.ITERATION_SEED_STRIDE], tf.int64)):
            np.testing.assert_array_equal(numpy(sm.ipa_dropout.call(ones, training=True)),
                                          mask)

    # the traced loop draws what the eager one does: the seed follows the loop counter
    @tf.function
    def traced(seed):
        with dropout_seed(seed):
            return sm(*args, training=True)["single"]

    _close(traced(seed), a, 1e-12)
    _close(traced(tf.constant([5, 6], tf.int64)), c, 1e-12)


# ------------------------------------------------------------------- graph size
def _op_count(sm: keras.layers.Layer, spec: ModelSpec) -> tuple[int, int]:
    """(all ops, the loop body's ops) of the structure module's traced graph; all ops count
    those of the functions the graph calls (the ``While``'s body and condition) too."""

    def run(s, z, mask, aatype):
        return sm(s, z, mask, aatype)

    graph = tf.function(run).get_concrete_function(
        tf.TensorSpec([1, None, spec.c_s], tf.float64),
        tf.TensorSpec([1, None, None, spec.c_z], tf.float64),
        tf.TensorSpec([1, None], tf.float64), tf.TensorSpec([1, None], tf.int32)).graph
    library = graph.as_graph_def().library.function
    assert sum(op.type in ("While", "StatelessWhile") for op in graph.get_operations()) == 1
    body = max(len(f.node_def) for f in library)  # the body: the condition is a compare
    return len(graph.get_operations()) + sum(len(f.node_def) for f in library), body


def test_iterations_trace_once():
    """The iterations run in one loop: the traced graph holds one iteration's ops whatever
    ``sm_blocks`` is (unrolled, 8 iterations made ~7× the ops of one)."""
    counts = []
    for blocks in (2, 8):
        spec = SPEC.replace(sm_blocks=blocks)
        with keras_float64():
            counts.append(_op_count(kst.StructureModule(spec), spec))
    (total_2, body_2), (total_8, body_8) = counts
    assert (total_8, body_8) == (total_2, body_2)
    assert total_8 < 2 * body_8  # everything outside the loop is less than one iteration
