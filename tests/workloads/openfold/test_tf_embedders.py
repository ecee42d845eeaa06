"""OpenFold in TensorFlow: the embedders, the feature builders and the output heads equal
the PyTorch reference's (``sciperf_pytorch.workloads.openfold.embedders`` / ``heads``).

Both frameworks hold the same weights, copied through their canonical ``.npz`` mappers
(tests/workloads/openfold/tf_parity.py), and run the mini model's sizes in float64 on a
12-residue reference batch, so that values and weight gradients agree to ~1e-10. The
Keras weight names are the canonical entries of ``ModelSpec.weight_shapes()``, and the
distances binned under a mixed bf16 policy stay float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from workloads.openfold.test_model_pytorch import make_batch  # noqa: E402
from workloads.openfold.tf_parity import copy_weights, keras_float64, nested, numpy  # noqa: E402

from sciperf import weights as canonical  # noqa: E402
from sciperf.workloads.openfold import residue_constants as rc  # noqa: E402
from sciperf.workloads.openfold.sizes import mini_spec  # noqa: E402
from sciperf_pytorch import weights as torch_weights  # noqa: E402
from sciperf_pytorch.workloads.openfold import embedders as pt  # noqa: E402
from sciperf_pytorch.workloads.openfold import heads as pt_heads  # noqa: E402
from sciperf_tensorflow import weights as keras_weights  # noqa: E402
from sciperf_tensorflow.workloads.openfold import embedders as kt  # noqa: E402
from sciperf_tensorflow.workloads.openfold import heads as kt_heads  # noqa: E402

SPEC = mini_spec()
TOL = 1e-10  # float64 both sides: sums of ≤ 64 products in different orders
F64 = torch.float64
N_RES, N_CLUST = 12, 4

# (torch class, Keras class, reference path) of every layer under test
LAYERS = [(pt.InputEmbedder, kt.InputEmbedder, "input_embedder"),
          (pt.RecyclingEmbedder, kt.RecyclingEmbedder, "recycling_embedder"),
          (pt.TemplateAngleEmbedder, kt.TemplateAngleEmbedder, "template_angle_embedder"),
          (pt.TemplatePairEmbedder, kt.TemplatePairEmbedder, "template_pair_embedder"),
          (pt.ExtraMSAEmbedder, kt.ExtraMSAEmbedder, "extra_msa_embedder"),
          (pt_heads.AuxiliaryHeads, kt_heads.AuxiliaryHeads, "auxiliary_heads")]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def policy(name: str) -> Iterator[None]:
    saved = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(saved)


def build_pair(torch_cls: type, keras_cls: type, path: str,
               seed: int = 0) -> tuple[torch.nn.Module, keras.layers.Layer]:
    """The torch module in float64 with non-trivial weights (the heads' ``final`` init is
    zero) and its float64 Keras mirror holding the same weights."""
    module = torch_cls(SPEC).to(F64)
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            x = g.standard_normal(tuple(p.shape))
            if p.dim() == 2:
                x = x / np.sqrt(p.shape[1])
            elif "layer_norm" in name and name.endswith("weight"):
                x = 1 + 0.1 * x
            else:
                x = 0.1 * x
            p.copy_(torch.tensor(x))
    with keras_float64():
        layer = keras_cls(SPEC, path.replace(".", "__"))
    assert copy_weights(module, layer, path) == len(list(module.parameters()))
    return module, layer


def reference_feats(seed: int = 0) -> dict[str, torch.Tensor]:
    """Pass 0 of a reference batch (B = 1, 12 residues, 4 clusters, 6 extra, 2 templates)."""
    batch = make_batch(seed, n_res=N_RES, n_clust=N_CLUST)
    return {key: value[..., 0].contiguous() for key, value in batch.items()}


def to_tf(feats: dict[str, torch.Tensor]) -> dict[str, tf.Tensor]:
    return {key: tf.constant(numpy(value)) for key, value in feats.items()}


def assert_close(got: object, want: object, what: str, tol: float = TOL) -> None:
    got, want = numpy(got), numpy(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def assert_same_gradients(module: torch.nn.Module, layer: keras.layers.Layer, path: str,
                          torch_inputs: Sequence[torch.Tensor],
                          keras_inputs: Sequence[tf.Tensor], seed: int = 5) -> None:
    """d⟨outputs, random cotangents⟩/d(weight), by canonical name, equal in both."""
    outs = module(*torch_inputs)
    g = np.random.default_rng(seed)
    cots = [g.standard_normal(tuple(o.shape)) for o in outs]
    loss = sum((o * torch.tensor(c)).sum() for o, c in zip(outs, cots, strict=True))
    module.zero_grad()
    loss.backward()
    want = {name: canonical.to_canonical(name, numpy(t.grad), kind, "torch")
            for name, (t, kind) in torch_weights._mapped(nested(module, path)).items()}  # noqa: SLF001
    targets = keras_weights.mapped(layer)
    with tf.GradientTape() as tape:
        outs = layer(*keras_inputs)
        loss = tf.add_n([tf.reduce_sum(o * c) for o, c in zip(outs, cots, strict=True)])
    grads = tape.gradient(loss, [var for var, _ in targets.values()])
    got = {name: canonical.to_canonical(name, numpy(grad), kind, "keras")
           for (name, (_, kind)), grad in zip(targets.items(), grads, strict=True)}
    assert list(got) == list(want)
    for name in want:
        assert np.abs(want[name]).max() > 0, f"{name}: no gradient reaches it"
        assert_close(got[name], want[name], f"d loss / d {name}")


# -- names ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("keras_cls", "path"), [(k, p) for _, k, p in LAYERS],
                         ids=[p for _, _, p in LAYERS])
def test_keras_weight_names_are_the_canonical_entries(keras_cls: type, path: str) -> None:
    layer = keras_cls(SPEC, path)
    want = [(name, shape) for name, shape in SPEC.weight_shapes().items()
            if name.startswith(f"{path}/")]
    assert want
    assert list(keras_weights.expected_entries(layer).items()) == want


# -- embedders ------------------------------------------------------------------------------
def test_input_embedder_values_and_gradients_equal_pytorch() -> None:
    module, layer = build_pair(pt.InputEmbedder, kt.InputEmbedder, "input_embedder")
    feats = reference_feats()
    keys = ("target_feat", "residue_index", "msa_feat")
    torch_in = [feats[k] for k in keys]
    keras_in = [tf.constant(numpy(feats[k])) for k in keys]
    # the chain break (+40) lies beyond the clip: both ends of the one-hot are used
    offsets = numpy(feats["residue_index"])[0]
    assert np.ptp(offsets) > SPEC.relpos_k
    with torch.no_grad():
        m_want, z_want = module(*torch_in)
    m, z = layer(*keras_in)
    assert_close(m, m_want, "m")
    assert_close(z, z_want, "z")
    assert_same_gradients(module, layer, "input_embedder", torch_in, keras_in)


def test_recycling_embedder_values_and_gradients_equal_pytorch() -> None:
    module, layer = build_pair(pt.RecyclingEmbedder, kt.RecyclingEmbedder,
                               "recycling_embedder")
    feats = reference_feats()
    g = np.random.default_rng(3)
    m0 = g.standard_normal((1, N_RES, SPEC.c_m))
    z0 = g.standard_normal((1, N_RES, N_RES, SPEC.c_z))
    x = numpy(pt.pseudo_beta(feats["aatype"], feats["template_all_atom_positions"][:, 0]))
    d = np.linalg.norm(x[0, :, None] - x[0, None], axis=-1)
    edges = np.linspace(SPEC.recycling_min_bin, SPEC.recycling_max_bin, SPEC.recycling_num_bins)
    assert len(np.unique(np.digitize(d, edges))) >= 8  # many bins hit, below and above
    torch_in = [torch.tensor(a) for a in (m0, z0, x)]
    keras_in = [tf.constant(a) for a in (m0, z0, x)]
    with torch.no_grad():
        m_want, z_want = module(*torch_in)
    m, z = layer(*keras_in)
    assert_close(m, m_want, "m0 update")
    assert_close(z, z_want, "z update")
    assert_same_gradients(module, layer, "recycling_embedder", torch_in, keras_in)


@pytest.mark.parametrize(("torch_cls", "keras_cls", "path", "feature"), [
    (pt.TemplateAngleEmbedder, kt.TemplateAngleEmbedder, "template_angle_embedder", "angle"),
    (pt.TemplatePairEmbedder, kt.TemplatePairEmbedder, "template_pair_embedder", "pair"),
    (pt.ExtraMSAEmbedder, kt.ExtraMSAEmbedder, "extra_msa_embedder", "extra")],
    ids=["template_angle", "template_pair", "extra_msa"])
def test_feature_embedders_equal_pytorch(torch_cls: type, keras_cls: type, path: str,
                                         feature: str) -> None:
    """Each on its feature builder's output for the reference batch (as the model feeds
    it)."""
    module, layer = build_pair(torch_cls, keras_cls, path)
    feats = reference_feats()
    x = {"angle": lambda: pt.template_angle_feat(feats, SPEC.template_aatype_classes),
         "pair": lambda: pt.template_pair_feat(
             {k: v[:, 0] for k, v in feats.items() if k.startswith("template_")}, SPEC, F64),
         "extra": lambda: pt.extra_msa_feat(feats, SPEC.msa_classes)}[feature]()
    with torch.no_grad():
        want = module(x)
    assert_close(layer(tf.constant(numpy(x))), want, path)


# -- feature builders -----------------------------------------------------------------------
def test_pseudo_beta_equals_pytorch() -> None:
    g = np.random.default_rng(4)
    aatype = g.integers(0, 21, (2, N_RES))
    aatype[:, ::3] = rc.RESTYPES.index("G")
    atoms = g.standard_normal((2, N_RES, 37, 3))
    want = pt.pseudo_beta(torch.tensor(aatype), torch.tensor(atoms))
    got = kt.pseudo_beta(tf.constant(aatype), tf.constant(atoms))
    np.testing.assert_array_equal(numpy(got), numpy(want))
    np.testing.assert_array_equal(numpy(got)[:, ::3], atoms[:, ::3, rc.ATOM_ORDER["CA"]])


def test_feature_builders_equal_pytorch() -> None:
    """Exactly: every channel is a copy, a one-hot entry, a bin indicator or a mask."""
    feats = reference_feats()
    feats_tf = to_tf(feats)
    np.testing.assert_array_equal(
        numpy(kt.extra_msa_feat(feats_tf, SPEC.msa_classes)),
        numpy(pt.extra_msa_feat(feats, SPEC.msa_classes)))
    np.testing.assert_array_equal(
        numpy(kt.template_angle_feat(feats_tf, SPEC.template_aatype_classes)),
        numpy(pt.template_angle_feat(feats, SPEC.template_aatype_classes)))
    for i in range(feats["template_aatype"].shape[1]):
        one = {k: v[:, i] for k, v in feats.items() if k.startswith("template_")}
        want = numpy(pt.template_pair_feat(one, SPEC, F64))
        assert np.unique(want[..., :SPEC.template_dgram_num_bins].argmax(-1)).size >= 8
        for dtype in (tf.float64, tf.float32):
            got = kt.template_pair_feat(to_tf(one), SPEC, dtype)
            assert got.dtype == dtype
            np.testing.assert_array_equal(numpy(got), want.astype(dtype.as_numpy_dtype))


def test_builders_and_input_embedder_take_dynamic_sizes() -> None:
    """Traced once with every size unknown (residues, rows, templates), then run: the
    same values as eagerly."""
    with keras_float64():
        embedder = kt.InputEmbedder(SPEC, "input_embedder")
    feats_tf = to_tf(reference_feats())
    keys = ("target_feat", "residue_index", "msa_feat", "extra_msa", "extra_has_deletion",
            "extra_deletion_value", "template_aatype", "template_torsion_angles_sin_cos",
            "template_alt_torsion_angles_sin_cos", "template_torsion_angles_mask",
            "template_pseudo_beta", "template_pseudo_beta_mask", "template_all_atom_mask")
    inputs = {k: feats_tf[k] for k in keys}

    def features(b: dict[str, tf.Tensor]) -> list[tf.Tensor]:
        first = {k: v[:, 0] for k, v in b.items() if k.startswith("template_")}
        return [*embedder(b["target_feat"], b["residue_index"], b["msa_feat"]),
                kt.extra_msa_feat(b, SPEC.msa_classes),
                kt.template_angle_feat(b, SPEC.template_aatype_classes),
                kt.template_pair_feat(first, SPEC, tf.float64)]

    signature = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in inputs.items()}
    traced: Callable = tf.function(features, input_signature=[signature])
    for got, want in zip(traced(inputs), features(inputs), strict=True):
        np.testing.assert_array_equal(numpy(got), numpy(want))


# -- heads ----------------------------------------------------------------------------------
def test_auxiliary_heads_equal_pytorch() -> None:
    module, layer = build_pair(pt_heads.AuxiliaryHeads, kt_heads.AuxiliaryHeads,
                               "auxiliary_heads")
    g = np.random.default_rng(6)
    inputs = [g.standard_normal((1, N_RES, SPEC.c_s)),
              g.standard_normal((1, N_RES, N_RES, SPEC.c_z)),
              g.standard_normal((1, N_CLUST, N_RES, SPEC.c_m)),
              g.standard_normal((1, N_RES, SPEC.c_s))]
    with torch.no_grad():
        want = module(*[torch.tensor(a) for a in inputs])
    got = layer(*[tf.constant(a) for a in inputs])
    assert list(got) == list(want)
    for key in want:
        assert_close(got[key], want[key], key)
    dist = numpy(got["distogram_logits"])
    np.testing.assert_array_equal(dist, dist.swapaxes(-2, -3))


# -- mixed precision ------------------------------------------------------------------------
def test_recycling_bins_distances_in_fp32_under_mixed_bf16() -> None:
    """Pseudo-β at ~100 Å, where bf16 coordinates are 0.5 Å apart: a distance binned from
    bf16 coordinates moves bins (checked below), one binned in float32 does not, so the
    bf16 layer's pair update equals the float32 layer's to bf16 rounding."""
    with policy("float32"):
        exact = kt.RecyclingEmbedder(SPEC, "recycling_embedder")
    with policy("mixed_bfloat16"):
        mixed = kt.RecyclingEmbedder(SPEC, "recycling_embedder")
    g = np.random.default_rng(7)
    kernel = g.standard_normal((SPEC.recycling_num_bins, SPEC.c_z))  # a bin moved: O(1)
    for layer in (exact, mixed):
        layer.linear.kernel.assign(kernel)
    x = (100.0 + np.arange(N_RES)[:, None] * 1.3 + g.random((N_RES, 3)))[None].astype(np.float32)
    m0 = np.zeros((1, N_RES, SPEC.c_m), np.float32)
    z0 = np.zeros((1, N_RES, N_RES, SPEC.c_z), np.float32)

    def bins(pos: np.ndarray) -> np.ndarray:
        d2 = ((pos[0, :, None] - pos[0, None]) ** 2).sum(-1)
        lower = np.linspace(SPEC.recycling_min_bin, SPEC.recycling_max_bin,
                            SPEC.recycling_num_bins) ** 2
        return np.searchsorted(lower, d2)

    x_bf16 = numpy(tf.cast(tf.cast(x, tf.bfloat16), tf.float32))
    assert (bins(x_bf16) != bins(x)).sum() >= 4
    _, z_exact = exact(m0, z0, tf.constant(x))
    _, z_mixed = mixed(m0, z0, tf.constant(x))
    assert z_mixed.dtype == tf.bfloat16
    np.testing.assert_allclose(numpy(tf.cast(z_mixed, tf.float32)), numpy(z_exact), atol=0.05)
