"""TensorFlow OpenFold stacks (sciperf_tensorflow.workloads.openfold.evoformer) against the
PyTorch ones: the weight names of the table, outputs and weight gradients equal under the
same weights (float64, dropout off, masks with padding), per-block checkpointing that
changes nothing (dropout on: the recomputation draws the same masks), per-block dropout
seeds, shared row masks, the mixed bf16 policy, and shapes unknown when traced.

The stacks are the mini model's (spec §11, attention widths 4: see SPEC) on a 10-residue
crop whose last 2 residues are padding; weights are seeded and non-trivial (unlike the
init's zero output layers) and reach Keras through both frameworks' canonical mappers
(tf_parity).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from workloads.openfold.tf_parity import copy_weights, keras_float64, nested, numpy  # noqa: E402

from sciperf import weights  # noqa: E402
from sciperf.workloads.openfold.sizes import mini_spec  # noqa: E402
from sciperf_pytorch import weights as torch_weights  # noqa: E402
from sciperf_pytorch.workloads.openfold import evoformer as pt  # noqa: E402
from sciperf_tensorflow import weights as keras_weights  # noqa: E402
from sciperf_tensorflow.workloads.openfold import evoformer as tfe  # noqa: E402
from sciperf_tensorflow.workloads.openfold.primitives import (  # noqa: E402
    Block,
    Dense,
    dropout_seed,
    rowwise_dropout,
)

SPEC = mini_spec()
N_RES, PAD, N_SEQ, N_EXTRA, N_TEMPL = 10, 2, 5, 7, 3
SEED = tf.constant([11, 23], tf.int64)

# Each stack: reference path, PyTorch class, Keras class, the names of its inputs.
STACKS: dict[str, tuple[type, type, tuple[str, ...]]] = {
    "evoformer_stack": (pt.EvoformerStack, tfe.EvoformerStack,
                        ("m", "z", "msa_mask", "pair_mask")),
    "extra_msa_stack": (pt.ExtraMSAStack, tfe.ExtraMSAStack,
                        ("a", "z", "extra_mask", "pair_mask")),
    "template_pair_stack": (pt.TemplatePairStack, tfe.TemplatePairStack, ("t", "pair_mask")),
    "template_pointwise_attention": (pt.TemplatePointwiseAttention,
                                     tfe.TemplatePointwiseAttention,
                                     ("t", "z", "template_mask")),
}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """Random representations; the last PAD residues are padding in every mask, MSA masks
    drop some more entries, the last of 3 templates is absent."""
    g = np.random.default_rng(seed)
    seq = np.ones((1, N_RES))
    seq[:, N_RES - PAD:] = 0
    templates = np.ones((1, N_TEMPL))
    templates[:, -1] = 0
    return {
        "m": g.standard_normal((1, N_SEQ, N_RES, SPEC.c_m)),
        "z": g.standard_normal((1, N_RES, N_RES, SPEC.c_z)),
        "a": g.standard_normal((1, N_EXTRA, N_RES, SPEC.c_e)),
        "t": g.standard_normal((1, N_TEMPL, N_RES, N_RES, SPEC.c_t)),
        "msa_mask": (g.random((1, N_SEQ, N_RES)) > 0.2) * seq[:, None],
        "extra_mask": (g.random((1, N_EXTRA, N_RES)) > 0.3) * seq[:, None],
        "pair_mask": seq[:, :, None] * seq[:, None, :],
        "template_mask": templates,
    }


INPUTS = make_inputs()


def seed_module(module: torch.nn.Module, seed: int = 1) -> None:
    """Deterministic non-trivial weights: LayerNorm scales 1 + 0.1·N, matrices
    N/√fan_in, vectors 0.1·N (every layer active)."""
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            x = g.standard_normal(tuple(p.shape))
            if "layer_norm" in name and name.endswith("weight"):
                x = 1 + 0.1 * x
            elif x.ndim == 2:
                x = x / np.sqrt(x.shape[1])
            else:
                x = 0.1 * x
            p.copy_(torch.tensor(x))


def build(path: str, spec=SPEC) -> tuple[torch.nn.Module, keras.layers.Layer]:
    """The PyTorch stack at `path` (float64, eval, seeded) and its float64 Keras mirror
    holding the same weights."""
    torch_cls, keras_cls, _ = STACKS[path]
    torch.manual_seed(0)
    module = torch_cls(spec).to(torch.float64).eval()
    seed_module(module)
    with keras_float64():
        layer = keras_cls(spec, path)
    copy_weights(module, layer, path)
    return module, layer


@pytest.fixture(scope="module")
def stacks() -> dict[str, tuple[torch.nn.Module, keras.layers.Layer]]:
    return {path: build(path) for path in STACKS}


def as_tuple(out: object) -> tuple:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def probes(outs: tuple, seed: int = 5) -> list[np.ndarray]:
    """Fixed random weights, one array per output: the loss is Σ out·w."""
    g = np.random.default_rng(seed)
    return [g.standard_normal(tuple(o.shape)) for o in outs]


def keras_grads(layer: keras.layers.Layer, run: Callable[[], tuple],
                ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Outputs of `run` and the canonical gradients of Σ out·w by weight name."""
    found = keras_weights.mapped(layer)
    with tf.GradientTape() as tape:
        outs = as_tuple(run())
        loss = sum(tf.reduce_sum(o * w) for o, w in zip(outs, probes(outs), strict=True))
    grads = tape.gradient(loss, [var for var, _ in found.values()])
    assert all(g is not None for g in grads), "a weight got no gradient"
    return [numpy(o) for o in outs], {
        name: weights.to_canonical(name, numpy(g), kind, "keras")
        for (name, (_, kind)), g in zip(found.items(), grads, strict=True)}


def torch_grads(module: torch.nn.Module, path: str, args: tuple,
                ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    module.zero_grad()
    outs = as_tuple(module(*args))
    loss = sum((o * torch.tensor(w)).sum() for o, w in zip(outs, probes(outs), strict=True))
    loss.backward()
    found = torch_weights._mapped(nested(module, path))  # noqa: SLF001 - the mapper's names
    return [numpy(o) for o in outs], {
        name: weights.to_canonical(name, numpy(p.grad), kind, "torch")
        for name, (p, kind) in found.items()}


def tf_args(path: str, inputs: dict[str, np.ndarray] = INPUTS) -> tuple[tf.Tensor, ...]:
    return tuple(tf.constant(inputs[k], tf.float64) for k in STACKS[path][2])


# -- names --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", list(STACKS))
def test_weight_names_equal_the_table(path):
    spec = mini_spec()
    with keras_float64():
        layer = STACKS[path][1](spec, path)
    want = [(name, shape) for name, shape in spec.weight_shapes().items()
            if name.startswith(f"{path}/")]
    assert list(keras_weights.expected_entries(layer).items()) == want


# -- values and gradients against PyTorch -------------------------------------------------
@pytest.mark.parametrize("path", list(STACKS))
def test_outputs_and_gradients_equal_pytorch(stacks, path):
    module, layer = stacks[path]
    args = tf_args(path)
    got, got_grads = keras_grads(layer, lambda: layer(*args))
    want, want_grads = torch_grads(module, path, tuple(torch.tensor(numpy(a)) for a in args))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    assert sorted(got_grads) == sorted(want_grads)
    assert len(got_grads) == len([k for k in SPEC.weight_shapes() if k.startswith(path)])
    for name, grad in want_grads.items():
        assert np.abs(grad).max() > 0, name  # every weight takes part
        np.testing.assert_allclose(got_grads[name], grad, rtol=1e-8, atol=1e-8, err_msg=name)


def test_attention_scale_is_full_precision():
    module, layer = build("template_pointwise_attention", mini_spec())
    args = tf_args("template_pointwise_attention")
    got = numpy(layer(*args))
    want = numpy(module(*(torch.tensor(numpy(a)) for a in args)))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


# -- checkpointing and dropout --------------------------------------------------------------
@pytest.mark.parametrize("path", ["evoformer_stack", "template_pair_stack"])
def test_checkpointing_changes_nothing_with_dropout_on(stacks, path):
    _, layer = stacks[path]
    args = tf_args(path)

    def run(checkpointing: bool, seed: tf.Tensor = SEED) -> Callable[[], tuple]:
        return lambda: layer(*args, checkpointing=checkpointing, training=True, seed=seed)

    plain, plain_grads = keras_grads(layer, run(False))
    ckpt, ckpt_grads = keras_grads(layer, run(True))
    for a, b in zip(ckpt, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for name, grad in plain_grads.items():
        np.testing.assert_allclose(ckpt_grads[name], grad, rtol=1e-11, atol=1e-12,
                                   err_msg=name)
    # dropout was on: eval and another seed differ
    evaluated = [numpy(o) for o in as_tuple(layer(*args))]
    other = [numpy(o) for o in as_tuple(run(True, SEED + 1)())]
    assert not np.allclose(plain[0], evaluated[0])
    assert not np.allclose(plain[0], other[0])


class _Probe(Block):
    """identity(row-wise dropout(x)): the output is the mask (×1/(1−p)) on ones. Every
    probe has the same name, so only the block's seed tells their masks apart."""

    def __init__(self) -> None:
        super().__init__(name="probe")
        self.dense = Dense(4, 4, "probe__dense", init="final")
        self.dense.kernel.assign(tf.eye(4, dtype=self.dense.kernel.dtype))
        self.drop = rowwise_dropout(0.5, "probe__drop")

    def call(self, x: tf.Tensor, training: bool = False) -> tuple[tf.Tensor]:
        return (self.dense(self.drop(x, training=training)),)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_blocks_draw_their_own_shared_row_masks(checkpointing):
    with keras_float64():
        first, second = _Probe(), _Probe()
    x = tf.ones((2, 6, 7, 4), tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        (one,) = tfe.run_blocks([first], (x,), checkpointing, True, SEED)
        (two,) = tfe.run_blocks([first, second], (x,), checkpointing, True, SEED)
        loss = tf.reduce_sum(two)
    one, two = numpy(one), numpy(two)
    assert set(np.unique(one)) == {0.0, 2.0}
    assert (one == one[:, :1]).all()  # one mask for every row (dim −3) ...
    assert not (one == one[:, :, :1]).all()  # ... not for every column
    assert not ((two != 0) == (one != 0)).all()  # block 1 drew another mask than block 0
    # the gradient (through the recomputation when checkpointing) sees the forward masks
    dx, dw = tape.gradient(loss, [x, second.dense.kernel])
    np.testing.assert_array_equal(numpy(dx), two)
    assert dw is not None and np.abs(numpy(dw)).sum() > 0  # reaches the Keras variable
    assert numpy(tfe.run_blocks([first], (x,), checkpointing, False, SEED)[0]).min() == 1.0


def test_the_stack_dropouts_share_rows_and_columns(stacks):
    _, layer = stacks["evoformer_stack"]
    block = layer.blocks[0]
    rows = (block.msa_dropout_rowwise, block.core.tmo_dropout_rowwise,
            block.core.tmi_dropout_rowwise, block.core.tasn_dropout_rowwise)
    assert [d.share_dims for d in rows] == [(-3,)] * 4
    assert block.core.taen_dropout_columnwise.share_dims == (-2,)
    assert (block.msa_dropout_rowwise.p, block.core.taen_dropout_columnwise.p) == (0.15, 0.25)
    x = tf.ones((1, N_SEQ, N_RES, SPEC.c_m), tf.float64)
    with dropout_seed(SEED):
        row = numpy(block.msa_dropout_rowwise(x, training=True))
        col = numpy(block.core.taen_dropout_columnwise(x, training=True))
    assert (row == row[:, :1]).all() and not (row == row[:, :, :1]).all()
    assert (col == col[:, :, :1]).all() and not (col == col[:, :1]).all()


# -- mixed precision ---------------------------------------------------------------------
def test_mixed_bfloat16_runs_near_float64(stacks, bf16_cpu):
    """Under the mixed bf16 policy (softmax and norms in float32) every stack trains —
    checkpointed, dropout on — in bf16, with weight gradients in float32, and its eval
    outputs stay within bf16 rounding of the float64 ones."""
    saved = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        half = {path: STACKS[path][1](SPEC, path) for path in STACKS}
    finally:
        keras.mixed_precision.set_global_policy(saved)
    for path, layer in half.items():
        module, full = stacks[path]
        copy_weights(module, layer, path)
        args = tuple(tf.cast(a, tf.float32) for a in tf_args(path))
        kwargs = {} if path == "template_pointwise_attention" else \
            {"checkpointing": True, "training": True, "seed": SEED}
        with tf.GradientTape() as tape:
            outs = as_tuple(layer(*args, **kwargs))
            loss = sum(tf.reduce_sum(tf.cast(o, tf.float32)) for o in outs)
        grads = tape.gradient(loss, layer.trainable_variables)
        assert {o.dtype for o in outs} == {tf.bfloat16}, path
        assert all(g is not None and g.dtype == tf.float32 for g in grads), path
        assert all(np.isfinite(numpy(g)).all() for g in grads), path
        for a, b in zip(as_tuple(layer(*args)), as_tuple(full(*tf_args(path))), strict=True):
            a, b = residues(numpy(tf.cast(a, tf.float64))), residues(numpy(b))
            assert np.abs(a - b).max() < 0.05 * np.abs(b).max(), path


def residues(x: np.ndarray) -> np.ndarray:
    """`x` without the padding residues. Their values are arbitrary: a fully masked
    softmax row is uniform where 1e9 swamps the logits (float32) and not where it does
    not (float64), and the outer-product mean divides them by eps alone."""
    return x[tuple(slice(0, N_RES - PAD) if n == N_RES else slice(None) for n in x.shape)]


# -- shapes unknown when traced -------------------------------------------------------------
def test_unknown_sizes_when_traced(stacks):
    """Residue and sequence counts unknown to the graph, checkpointed with dropout on: the
    eager values, and weight gradients through recompute_grad in a graph."""
    layer = stacks["extra_msa_stack"][1]
    f64 = tf.float64

    @tf.function(input_signature=[tf.TensorSpec((1, None, None, SPEC.c_e), f64),
                                  tf.TensorSpec((1, None, None, SPEC.c_z), f64),
                                  tf.TensorSpec((1, None, None), f64),
                                  tf.TensorSpec((1, None, None), f64)])
    def traced(a, z, msa_mask, pair_mask):
        with tf.GradientTape() as tape:
            out = layer(a, z, msa_mask, pair_mask, checkpointing=True, training=True,
                        seed=SEED)
            loss = tf.reduce_sum(out * out)
        return out, tape.gradient(loss, layer.trainable_variables)

    args = tf_args("extra_msa_stack")
    out, grads = traced(*args)
    eager = layer(*args, training=True, seed=SEED)
    np.testing.assert_allclose(numpy(out), numpy(eager), rtol=1e-12, atol=1e-12)
    assert all(g is not None for g in grads) and np.abs(numpy(grads[-1])).sum() > 0


def test_the_template_count_must_be_known(stacks):
    templ = stacks["template_pair_stack"][1]
    traced = tf.function(lambda t, mask: templ(t, mask), input_signature=[
        tf.TensorSpec((1, None, N_RES, N_RES, SPEC.c_t), tf.float64),
        tf.TensorSpec((1, N_RES, N_RES), tf.float64)])
    with pytest.raises(ValueError, match="template count"):
        traced.get_concrete_function()
