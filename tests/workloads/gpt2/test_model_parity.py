"""GPT-2: the PyTorch model and its Keras mirror (docs/architecture.md, rules 3 and 4).

The same canonical weights (exported by PyTorch's mapper, imported by TensorFlow's) and
the same token batch (the spec's synthetic Markov stream) give the same logits, loss and
gradient of every weight, in float64 and in float32; four AdamW steps (torch's semantics:
β (0.9, 0.95), decay 0.1 on ``spec.decays`` tensors only, the global norm clipped to 1.0,
the spec's LR at each step) give the same losses and weights. A released checkpoint
(an HF state dict written here with numpy) read by ``checkpoint.from_released`` gives
both models the logits of a direct numpy forward. Both build GPT-2 small with exactly
``spec.FULL_PARAMETER_COUNT`` parameters under the spec's canonical names.

Tolerances (``TOLERANCES``): max|a − b| / max|b| per tensor, the worst tensor of each
row; observed on a 2-core Zen 4 CPU, one thread.

| key | bound | observed | compares |
|---|---|---|---|
| ``f64`` | 1e-10 | 1.8e-15 | float64 logits, loss and every gradient (a) |
| ``numpy`` | 1e-10 | 5.9e-16 | float64 logits and loss of a released checkpoint vs numpy (a) |
| ``f32_logits`` | 1e-5 | 4.3e-7 | float32 logits (b) |
| ``f32_loss`` | 1e-5 | 0 | float32 loss (b) |
| ``f32_grads`` | 1e-4 | 9.5e-7 | float32 gradients (c) |
| ``train_loss`` | 1e-5 | 6.5e-8 | the loss at each of 4 AdamW steps, float32 (b) |
| ``train_weights`` | 1e-4 | 2.1e-5 | every weight after 4 AdamW steps, float32 (d) |

(a) sums in different orders, at float64's rounding. (b) float32 GEMMs and reductions in
different orders. (c) the same through backward, relative to each tensor's largest
gradient, so a tensor's small entries keep fewer digits. (d) Adam divides by √v: an
element whose gradient is small and differs in its last digits moves by a different part
of the LR. Not compared after the steps: the key third of each ``c_attn`` bias, whose
exact gradient is 0 (:func:`_without_key_bias`).
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import erf

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from sciperf import weights  # noqa: E402
from sciperf.workloads.gpt2 import checkpoint, spec, synthetic  # noqa: E402
from sciperf.workloads.gpt2.spec import ModelSpec, OptimizerSpec  # noqa: E402
from sciperf_pytorch import pieces as pt_pieces  # noqa: E402
from sciperf_pytorch import weights as pt_weights  # noqa: E402
from sciperf_pytorch.workloads.gpt2 import model as pt_model  # noqa: E402
from sciperf_tensorflow import optim as tf_optim  # noqa: E402
from sciperf_tensorflow import pieces as tf_pieces  # noqa: E402
from sciperf_tensorflow import weights as tf_weights  # noqa: E402
from sciperf_tensorflow.workloads.gpt2 import model as tf_model  # noqa: E402

TOLERANCES = {"f64": 1e-10, "numpy": 1e-10, "f32_logits": 1e-5, "f32_loss": 1e-5,
              "f32_grads": 1e-4, "train_loss": 1e-5, "train_weights": 1e-4}
TINY = ModelSpec(n_layer=2, n_head=2, d_model=32, context=16, vocab_size=97)
BATCH = 4
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def assert_close(a, b, key: str, what: str) -> float:
    err = rel_err(a, b)
    assert err <= TOLERANCES[key], f"{what}: relative error {err:.3g} > {TOLERANCES[key]}"
    return err


def _tokens(model: ModelSpec, sequences: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of `sequences` windows of the spec's synthetic stream."""
    chain = synthetic.make_chain(model.vocab_size, end_prob=1 / 8, seed=seed)
    stream = synthetic.sample(chain, sequences * (model.context + 1), seed, "train")
    windows = stream.astype(np.int64).reshape(sequences, model.context + 1)
    return windows[:, :-1], windows[:, 1:]


def _random_canonical(model: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Canonical float32 weights with every tensor non-trivial (biases and LayerNorm
    shifts non-zero, scales off 1), so a framework that ignored one would differ."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in model.weight_shapes().items():
        param = name.rpartition("/")[2]
        scale = {"kernel": 0.15, "embeddings": 0.5, "bias": 0.05, "beta": 0.1}.get(param, 0.1)
        value = rng.standard_normal(shape) * scale + (1.0 if param == "gamma" else 0.0)
        out[name] = value.astype(np.float32)
    return out


def _pair(model: ModelSpec, arrays: dict[str, np.ndarray], dtype: str):
    """The PyTorch model holding `arrays`, and the Keras model holding what PyTorch's
    mapper exports of it (the path a weight file takes), both in `dtype`."""
    pt = pt_model.GPT2(model).to(DTYPES[dtype])
    pt_model.import_weights(pt, arrays)
    tfm = tf_model.GPT2(model, dtype=dtype)
    tf_model.import_weights(tfm, pt_model.export_weights(pt))
    return pt, tfm


def _pt_grads(pt, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, dict]:
    """Logits, loss and canonical gradients of the PyTorch model."""
    pt.zero_grad(set_to_none=True)
    logits = pt(torch.from_numpy(x))
    loss = pt_model.loss(logits, torch.from_numpy(y))
    loss.backward()
    grads = {name: weights.to_canonical(name, t.grad.numpy(), kind, "torch")
             for name, (t, kind) in pt_weights._mapped(pt).items()}  # noqa: SLF001
    return logits.detach().numpy(), float(loss.detach()), grads


def _tf_grads(tfm, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, dict]:
    """Logits, loss and canonical gradients of the Keras model."""
    mapped = tf_weights.mapped(tfm)
    with tf.GradientTape() as tape:
        logits = tfm(tf.constant(x), training=True)
        loss = tf_model.loss(logits, tf.constant(y))
    grads = tape.gradient(loss, [var for var, _ in mapped.values()])
    out = {name: weights.to_canonical(name, tf.convert_to_tensor(g).numpy(), kind, "keras")
           for (name, (_, kind)), g in zip(mapped.items(), grads, strict=True)}
    return logits.numpy(), float(loss), out


def test_both_write_the_spec_s_canonical_entries_and_one_table_for_wte() -> None:
    pt, tfm = pt_model.GPT2(TINY), tf_model.GPT2(TINY, dtype="float32")
    want = TINY.weight_shapes()
    for exported in (pt_model.export_weights(pt), tf_model.export_weights(tfm)):
        assert {n: a.shape for n, a in exported.items()} == want
    assert sum(p.numel() for p in pt.parameters()) == TINY.parameter_count()
    assert tfm.count_params() == TINY.parameter_count()


def test_gpt2_small_has_the_spec_s_parameters_in_both() -> None:
    """The full model: PyTorch's on the meta device (shapes, no memory), Keras' built."""
    full = ModelSpec()
    with torch.device("meta"):
        pt = pt_model.GPT2(full)
    assert sum(p.numel() for p in pt.parameters()) == spec.FULL_PARAMETER_COUNT
    shapes = {name: weights.canonical_shape(name, tuple(t.shape), kind, "torch")
              for name, (t, kind) in pt_weights._mapped(pt).items()}  # noqa: SLF001
    assert shapes == full.weight_shapes()
    tfm = tf_model.GPT2(full, dtype="float32")
    assert tfm.count_params() == spec.FULL_PARAMETER_COUNT
    assert tf_weights.expected_entries(tfm) == full.weight_shapes()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_same_weights_same_logits_loss_and_gradients(dtype: str) -> None:
    x, y = _tokens(TINY, BATCH)
    pt, tfm = _pair(TINY, _random_canonical(TINY, seed=1), dtype)
    logits_pt, loss_pt, grads_pt = _pt_grads(pt, x, y)
    logits_tf, loss_tf, grads_tf = _tf_grads(tfm, x, y)
    assert logits_pt.dtype == logits_tf.dtype == np.dtype(dtype)
    assert 1.0 < loss_pt < 20.0
    key = "f64" if dtype == "float64" else None
    assert_close(logits_tf, logits_pt, key or "f32_logits", "logits")
    assert_close(loss_tf, loss_pt, key or "f32_loss", "loss")
    assert grads_tf.keys() == grads_pt.keys() == TINY.weight_shapes().keys()
    for name, ref in grads_pt.items():
        assert float(np.abs(ref).max()) > 0, name  # every weight takes part
        assert_close(grads_tf[name], ref, key or "f32_grads", f"gradient of {name}")


def test_adamw_steps_give_the_same_losses_and_weights() -> None:
    """Four float32 steps, the LR of spec.lr_at on a short schedule (2 warm-up steps,
    cosine to step 5): each framework's optimizer as a backend builds it."""
    o = OptimizerSpec(warmup_steps=2, decay_steps=5)
    lrs = [spec.lr_at(step, o.peak_lr, o.min_lr, o.warmup_steps, o.decay_steps)
           for step in range(4)]
    x, y = _tokens(TINY, BATCH, seed=2)
    start = _random_canonical(TINY, seed=3)
    pt, tfm = _pair(TINY, start, "float32")

    mapped_pt = pt_weights._mapped(pt)  # noqa: SLF001
    groups = [{"params": [t for n, (t, _) in mapped_pt.items() if spec.decays(n) == decay],
               "weight_decay": o.weight_decay if decay else 0.0} for decay in (True, False)]
    opt_pt = torch.optim.AdamW(groups, lr=lrs[0], betas=(o.beta1, o.beta2), eps=o.eps)
    clip_pt = pt_pieces.ClipGradNorm(o.grad_clip)

    mapped_tf = tf_weights.mapped(tfm)
    variables = [var for var, _ in mapped_tf.values()]
    decays = [spec.decays(name) for name in mapped_tf]
    opts_tf = {decay: tf_optim.AdamFamily(
        [v for v, d in zip(variables, decays, strict=True) if d == decay], "AdamW", lrs[0],
        (o.beta1, o.beta2), o.eps, o.weight_decay if decay else 0.0) for decay in (True, False)}
    clip_tf = tf_pieces.ClipGradNorm(o.grad_clip)

    norms = []
    for step, lr in enumerate(lrs):
        for group in opt_pt.param_groups:
            group["lr"] = lr
        opt_pt.zero_grad(set_to_none=True)
        loss_pt = pt_model.loss(pt(torch.from_numpy(x)), torch.from_numpy(y))
        loss_pt.backward()
        norms.append(float(torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in pt.parameters()]))))
        clip_pt.on_gradients(SimpleNamespace(model=pt))
        opt_pt.step()

        with tf.GradientTape() as tape:
            loss_tf = tf_model.loss(tfm(tf.constant(x), training=True), tf.constant(y))
        grads = clip_tf.on_gradients(tape.gradient(loss_tf, variables))
        for decay, opt in opts_tf.items():
            opt.set_lr(lr)
            opt.step([g for g, d in zip(grads, decays, strict=True) if d == decay])
        assert_close(float(loss_tf), float(loss_pt.detach()), "train_loss", f"loss at step {step}")
    assert max(norms) > o.grad_clip  # the clip acts

    after_pt, after_tf = pt_model.export_weights(pt), tf_model.export_weights(tfm)
    assert rel_err(after_pt["h/0/attn/c_attn/kernel"], start["h/0/attn/c_attn/kernel"]) > 1e-3
    for name, ref in after_pt.items():
        assert_close(_without_key_bias(name, after_tf[name]), _without_key_bias(name, ref),
                     "train_weights", name)


def _without_key_bias(name: str, array: np.ndarray) -> np.ndarray:
    """`array` less the key third of a fused QKV bias: that bias shifts every score of a
    query's row alike, which the softmax ignores, so its exact gradient is 0 — each
    framework's is rounding noise, which Adam's m/√v turns into steps of ~lr."""
    if not name.endswith("/attn/c_attn/bias"):
        return array
    d = array.shape[0] // 3
    return np.concatenate([array[:d], array[2 * d:]])


def _numpy_forward(w: dict[str, np.ndarray], model: ModelSpec, x: np.ndarray) -> np.ndarray:
    """GPT-2's forward in float64 numpy, written from the paper's description."""
    def norm(h: np.ndarray, layer: str) -> np.ndarray:
        mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        return (h - mu) / np.sqrt(var + model.layer_norm_eps) * w[f"{layer}/gamma"] \
            + w[f"{layer}/beta"]

    def linear(h: np.ndarray, layer: str) -> np.ndarray:
        return h @ w[f"{layer}/kernel"] + w[f"{layer}/bias"]

    b, t = x.shape
    heads, d = model.n_head, model.d_model
    h = w["wte/embeddings"][x] + w["wpe/embeddings"][:t]
    future = np.triu(np.ones((t, t), bool), k=1)
    for i in range(model.n_layer):
        qkv = linear(norm(h, f"h/{i}/ln_1"), f"h/{i}/attn/c_attn")
        q, k, v = (a.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
                   for a in np.split(qkv, 3, axis=-1))
        scores = np.where(future, -np.inf, q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads))
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        y = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        h = h + linear(y, f"h/{i}/attn/c_proj")
        f = linear(norm(h, f"h/{i}/ln_2"), f"h/{i}/mlp/c_fc")
        h = h + linear(0.5 * f * (1.0 + erf(f / math.sqrt(2.0))), f"h/{i}/mlp/c_proj")
    return norm(h, "ln_f") @ w["wte/embeddings"].T


def test_a_released_checkpoint_gives_the_numpy_forward_s_logits() -> None:
    """An HF GPT2LMHeadModel state dict (Conv1D (in, out) weights, mask buffers, the tied
    head), one layer, read by checkpoint.from_released into both models (float64)."""
    one = ModelSpec(n_layer=1, n_head=4, d_model=32, context=16, vocab_size=97)
    canon = _random_canonical(one, seed=4)
    state = {f"transformer.{spec.released_name(n)}": a for n, a in canon.items()}
    state["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.float32))
    state["lm_head.weight"] = canon["wte/embeddings"].copy()
    arrays = checkpoint.from_released(state, one, "conv1d", "hf-state-dict")
    x, y = _tokens(one, 3, seed=5)
    want = _numpy_forward({n: a.astype(np.float64) for n, a in canon.items()}, one, x)

    pt = pt_model.GPT2(one).double()
    pt_model.import_weights(pt, arrays)
    tfm = tf_model.GPT2(one, dtype="float64")
    tf_model.import_weights(tfm, arrays)
    with torch.no_grad():
        got_pt = pt(torch.from_numpy(x))
    got_tf = tfm(tf.constant(x))
    assert_close(got_pt.numpy(), want, "numpy", "PyTorch logits")
    assert_close(got_tf.numpy(), want, "numpy", "TensorFlow logits")
    # the loss is the mean token cross-entropy of those logits
    log_probs = want - want.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, y[..., None], -1).mean()
    assert_close(float(pt_model.loss(got_pt, torch.from_numpy(y))), nll, "numpy", "PyTorch loss")
    assert_close(float(tf_model.loss(got_tf, tf.constant(y))), nll, "numpy", "TF loss")


def test_initialisation_is_gpt2_s_in_both() -> None:
    """N(0, 0.02²) matrices and tables, c_proj 0.02/√(2·n_layer), zero biases, γ 1, β 0."""
    model = ModelSpec(n_layer=8, n_head=2, d_model=64, context=64, vocab_size=512)
    torch.manual_seed(0)
    keras.utils.set_random_seed(0)
    residual = 0.02 / math.sqrt(2 * model.n_layer)
    for exported in (pt_model.export_weights(pt_model.GPT2(model)),
                     tf_model.export_weights(tf_model.GPT2(model, dtype="float32"))):
        for name, array in exported.items():
            layer, _, param = name.rpartition("/")
            if param in ("bias", "beta"):
                assert not array.any(), name
            elif param == "gamma":
                assert (array == 1).all(), name
            else:
                std = residual if layer.endswith("c_proj") else 0.02
                assert abs(array.mean()) < 0.1 * std, name
                assert array.std() == pytest.approx(std, rel=0.05), name


def test_dropout_acts_in_training_only() -> None:
    """With dropout, training calls differ from the evaluation call, which equals the
    same weights' model without dropout."""
    dropped = dataclasses.replace(TINY, dropout=0.5)
    arrays = _random_canonical(TINY, seed=6)
    x, _ = _tokens(TINY, 2)
    pt_plain, tf_plain = _pair(TINY, arrays, "float32")
    pt_drop, tf_drop = _pair(dropped, arrays, "float32")
    with torch.no_grad():
        plain = pt_plain(torch.from_numpy(x)).numpy()
        evaluated = pt_drop.eval()(torch.from_numpy(x)).numpy()
        trained = pt_drop.train()(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(evaluated, plain)
    assert rel_err(trained, plain) > 0.05
    plain = tf_plain(tf.constant(x)).numpy()
    np.testing.assert_array_equal(tf_drop(tf.constant(x), training=False).numpy(), plain)
    assert rel_err(tf_drop(tf.constant(x), training=True).numpy(), plain) > 0.05
