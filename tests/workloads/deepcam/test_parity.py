"""DeepCAM: PyTorch ↔ TensorFlow parity (docs/architecture.md, rule 4) and the numerics
against numpy.

Same canonical ``.npz`` weights in both models → same logits; the backends' real train
steps from the same weights and batches → same loss at every step and the same weights
after. Loss and IoU are checked against the spec's numpy references (hand-computed
cases included), the optimizers against torch.optim and a hand-written LAMB step.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from sciperf import weights  # noqa: E402
from sciperf.backends import RunContext  # noqa: E402
from sciperf.config import compose  # noqa: E402
from sciperf.errors import SciperfError  # noqa: E402
from sciperf.workloads import get  # noqa: E402
from sciperf.workloads.deepcam import data as dc_data  # noqa: E402
from sciperf.workloads.deepcam import spec as spec  # noqa: E402
from sciperf.workloads.deepcam import synthetic as climate  # noqa: E402
from sciperf_pytorch.optim import Lamb  # noqa: E402
from sciperf_pytorch.workloads.deepcam import backend as pt_dc  # noqa: E402
from sciperf_pytorch.workloads.deepcam import model as pt_model  # noqa: E402
from sciperf_tensorflow import runtime  # noqa: E402
from sciperf_tensorflow.optim import AdamFamily  # noqa: E402
from sciperf_tensorflow.workloads.deepcam import backend as tf_dc  # noqa: E402
from sciperf_tensorflow.workloads.deepcam import model as tf_model  # noqa: E402

# Tolerances (max|a − b| / max|b|); "observed" = this 2-core AVX-512 CPU, fp32.
TOLERANCES = {
    # eval-mode logits: oneDNN kernels of each framework sum in different orders. Obs. 2e-6.
    "forward_eval": 2e-5,
    # train-mode logits: batch statistics divide by small batch variances, amplifying the
    # rounding differences (and the BN running statistics they update). Obs. 1.3e-5.
    "forward_train": 2e-4,
    # losses at each of 4 micro-batches (LAMB, LR 0 → warmup → decay, changing every
    # step); rounding compounds through train-mode BN. Observed ≤ 9e-6.
    "train_loss": 1e-4,
    # every canonical weight and BN statistic after those steps. Adam-type updates are
    # normalised (m/√v): an element whose gradient is at rounding-noise level still takes
    # a full-size step whose sign the noise decides, so a few elements differ by ~lr.
    # Observed 2.4e-3 (accumulation 1), 6.4e-4 (accumulation 2).
    "train_weights": 5e-3,
    # one optimizer update for a given gradient (identical fp32 formulas).
    "optimizer": 1e-6,
}
SMALL = dict(height=32, width=48, entry_channels=[4, 8], block_channels=[8, 12, 16],
             middle_blocks=1, exit_channels=[16, 16, 16, 24], aspp_channels=8,
             low_level_channels=4, decoder_channels=8)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def assert_close(a, b, key: str, what: str = "") -> None:
    err = rel_err(a, b)
    assert err <= TOLERANCES[key], f"{what or key}: relative error {err:.3g} > {TOLERANCES[key]}"


@pytest.fixture(autouse=True)
def _fp32_policy():
    before = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy(before)


def _inputs(model: spec.ModelSpec, n: int) -> np.ndarray:
    """Normalised synthetic climate (per-batch min-max, like stats.h5 would give)."""
    x = np.stack([climate.make_sample(5, "validation", i, model.height, model.width)[0]
                  for i in range(n)])
    lo, hi = x.min(axis=(0, 1, 2)), x.max(axis=(0, 1, 2))
    return ((x - lo) / (hi - lo)).astype(np.float32)


def _pair(model: spec.ModelSpec):
    torch.manual_seed(0)
    pt = pt_model.DeepCam(model).to(memory_format=torch.channels_last)
    tfm = tf_model.DeepCam(model)
    tf_model.import_weights(tfm, pt_model.export_weights(pt))
    return pt, tfm


# --- parameter counts and weights ----------------------------------------------------------
def test_full_parameter_count_equal_in_both_frameworks() -> None:
    full = spec.ModelSpec()
    pt = pt_model.DeepCam(full)
    tfm = tf_model.DeepCam(full)
    n_pt = sum(p.numel() for p in pt.parameters())
    n_tf = sum(int(np.prod(v.shape)) for v in tfm.trainable_variables)
    assert n_pt == n_tf == full.parameter_count() == spec.FULL_PARAMETER_COUNT == 56_454_720
    want = {k: tuple(v) for k, v in full.weight_shapes().items()}
    assert {k: v.shape for k, v in pt_model.export_weights(pt).items()} == want
    assert {k: v.shape for k, v in tf_model.export_weights(tfm).items()} == want


def test_mini_parameter_count_from_the_config() -> None:
    mini = spec.ModelSpec(**compose(["workload=deepcam", "experiment=mini"]).model)
    pt, tfm = _pair(mini)
    n_tf = sum(int(np.prod(v.shape)) for v in tfm.trainable_variables)
    assert sum(p.numel() for p in pt.parameters()) == n_tf == mini.parameter_count()
    assert mini.parameter_count() < spec.FULL_PARAMETER_COUNT / 100


def test_weights_round_trip_and_keras_layout(tmp_path) -> None:
    model = spec.ModelSpec(**SMALL)
    pt, tfm = _pair(model)
    path = weights.save_npz(tmp_path / "w.npz", tf_model.export_weights(tfm))
    back = pt_model.DeepCam(model)
    pt_model.import_weights(back, weights.load_npz(path, expected_entries=model.weight_shapes()))
    for (name, a), (_, b) in zip(pt.state_dict().items(), back.state_dict().items(),
                                 strict=True):
        if "num_batches_tracked" not in name:
            assert torch.equal(a, b), name
    canon = np.load(path)
    np.testing.assert_array_equal(  # depthwise (C,1,k,k) → (k,k,C,1), deconv (in,out,k,k) →
        canon["block1_sep1_depthwise/kernel"],  # (k,k,out,in)
        pt.block1_sep1_depthwise.weight.detach().numpy().transpose(2, 3, 0, 1))
    np.testing.assert_array_equal(canon["deconv1a/kernel"],
                                  pt.deconv1a.weight.detach().numpy().transpose(2, 3, 1, 0))
    arrays = dict(canon)
    del arrays["bn1/moving_mean"]
    with pytest.raises(SciperfError, match="missing bn1/moving_mean"):
        tf_model.import_weights(tfm, arrays)


# --- forward -----------------------------------------------------------------------------
@pytest.mark.parametrize("training", [False, True])
def test_forward_parity(training: bool) -> None:
    model = spec.ModelSpec(**SMALL)
    pt, tfm = _pair(model)
    x = _inputs(model, 3)
    pt.train(training)
    with torch.no_grad():
        out_pt = pt(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    out_tf = tfm(tf.constant(x), training=training).numpy()
    assert out_pt.shape == out_tf.shape == (3, model.height, model.width, 3)
    assert np.abs(out_pt).max() > 1e-3
    assert_close(out_tf, out_pt, "forward_train" if training else "forward_eval")
    if training:  # BN running statistics (unbiased variance, momentum 0.1) agree too
        ours, theirs = pt_model.export_weights(pt), tf_model.export_weights(tfm)
        for name in (n for n in ours if "/moving_" in n):
            assert_close(theirs[name], ours[name], "forward_train", name)


def _torch_layer(layer: spec.LayerSpec, kernel: np.ndarray, bias: np.ndarray | None):
    """PyTorch's layer of a table entry with the Keras layer's weights (Keras (k, k, in,
    out) → torch (out, in, k, k); a deconv's (k, k, out, in) → (in, out, k, k))."""
    k, s, d = layer.kernel, layer.stride, layer.dilation
    if layer.kind == "deconv":
        mod = torch.nn.ConvTranspose2d(layer.cin, layer.cout, k, stride=s, padding=1,
                                       output_padding=1, bias=False)
    else:
        mod = torch.nn.Conv2d(layer.cin, layer.cout, k, stride=s, padding=d * (k // 2),
                              dilation=d, bias=bias is not None)
    with torch.no_grad():
        mod.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))))
        if bias is not None:
            mod.bias.copy_(torch.from_numpy(bias))
    return mod


def _assert_equals_torch(mod, x: np.ndarray, y, gx, gw) -> None:
    """A TensorFlow layer's output `y` on NHWC `x` and the gradients of sum(y²) for its
    input and kernel (Keras layout) equal torch module `mod`'s."""
    xp = torch.from_numpy(x).permute(0, 3, 1, 2).requires_grad_()
    yp = mod(xp)
    (yp * yp).sum().backward()
    assert_close(y.numpy(), yp.detach().permute(0, 2, 3, 1).numpy(), "forward_eval")
    assert_close(gx.numpy(), xp.grad.permute(0, 2, 3, 1).numpy(), "forward_eval")
    assert_close(gw.numpy(), mod.weight.grad.numpy().transpose(2, 3, 1, 0), "forward_eval")


@pytest.mark.parametrize("rate", [6, 18])
def test_a_dilated_convolution_is_one_kernel_with_pytorchs_values_and_gradients(rate) -> None:
    """The ASPP's dilated convolutions run as one Conv2D (no SpaceToBatchND around an
    undilated conv: GEMMs of a few rows at small feature maps), on a map smaller than the
    rate as in the mini, and equal PyTorch's forward and both gradients."""
    layer = spec.LayerSpec(name="aspp", kind="conv", cin=6, cout=5, kernel=3, dilation=rate)
    keras_layer = tf_model.build_layer(layer)
    assert isinstance(keras_layer, tf_model.AtrousConv2D)
    x = np.random.default_rng(rate).standard_normal((2, 6, 9, 6)).astype(np.float32)
    run = tf.function(lambda v: keras_layer(v))
    ops = {op.type for op in run.get_concrete_function(tf.constant(x)).graph.get_operations()}
    assert "Conv2D" in ops and "SpaceToBatchND" not in ops, ops
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = keras_layer(xt)
        loss = tf.reduce_sum(y * y)
    gx, gw = tape.gradient(loss, [xt, keras_layer.kernel])
    bias = keras_layer.bias.numpy() if layer.bias else None
    _assert_equals_torch(_torch_layer(layer, keras_layer.kernel.numpy(), bias), x, y, gx, gw)


def test_a_deconvolution_crop_has_a_pad_for_gradient_and_pytorchs_values() -> None:
    """PyTorch's ConvTranspose2d(3, stride 2, padding 1, output_padding 1) = Keras' 'valid'
    transposed convolution without its first row and column, cropped by a Slice whose
    gradient is one Pad (a StridedSliceGrad zero-fills and copies element by element);
    forward and gradients equal PyTorch's."""
    layer = spec.LayerSpec(name="deconv", kind="deconv", cin=6, cout=5, kernel=3, stride=2)
    keras_layer = tf_model.build_layer(layer)
    x = np.random.default_rng(1).standard_normal((2, 6, 9, 6)).astype(np.float32)

    def loss_and_grads(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf_model.crop_deconv(keras_layer(v))
            loss = tf.reduce_sum(y * y)
        return (y, *tape.gradient(loss, [v, keras_layer.kernel]))

    graph = tf.function(loss_and_grads).get_concrete_function(tf.constant(x)).graph
    ops = {op.type for op in graph.get_operations()}
    assert "Pad" in ops and not ops & {"StridedSlice", "StridedSliceGrad"}, ops
    y, gx, gw = loss_and_grads(tf.constant(x))
    assert tuple(y.shape) == (2, 12, 18, 5)
    _assert_equals_torch(_torch_layer(layer, keras_layer.kernel.numpy(), None), x, y, gx, gw)


LAYERS_2D = {
    "conv 3x3": spec.LayerSpec(name="c", kind="conv", cin=6, cout=5, kernel=3, bias=True),
    "conv 3x3 stride 2": spec.LayerSpec(name="c", kind="conv", cin=6, cout=5, kernel=3,
                                        stride=2),
    "dilated 3x3": spec.LayerSpec(name="c", kind="conv", cin=6, cout=5, kernel=3,
                                  dilation=6),
    "deconv": spec.LayerSpec(name="d", kind="deconv", cin=6, cout=5, kernel=3, stride=2),
}


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("kind", list(LAYERS_2D))
def test_batch_one_fp32_convolutions_run_forward_as_unit_depth_conv3d(kind: str,
                                                                      batch: int) -> None:
    """TensorFlow's oneDNN forward takes a batch-1 float32 2-D convolution's filter in HWIO
    (an im2col GEMM on AVX2 CPUs, 3× slower than the blocked kernel): at batch 1 the model's
    convolutions — plain, strided, dilated, and the deconvolution's input gradient — run
    their forward as a Conv3D over a unit depth, at batch 2 as Conv2D; either way the
    output and both gradients equal PyTorch's."""
    if not runtime.onednn():
        pytest.skip("TensorFlow's oneDNN kernels are off in this process")
    layer = LAYERS_2D[kind]
    keras_layer = tf_model.build_layer(layer)
    x = np.random.default_rng(batch).standard_normal((batch, 7, 10, 6)).astype(np.float32)

    def loss_and_grads(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = keras_layer(tf_model.pad_same(v, layer))
            if layer.kind == "deconv":
                y = tf_model.crop_deconv(y)
            loss = tf.reduce_sum(y * y)
        return (y, *tape.gradient(loss, [v, keras_layer.kernel]))

    graph = tf.function(loss_and_grads).get_concrete_function(tf.constant(x)).graph
    types = {op.type for op in graph.get_operations()}
    assert ("Conv3D" in types) == (batch == 1), types
    assert ("Conv2D" in types) == (batch == 2), types  # the deconv's: its input gradient
    y, gx, gw = loss_and_grads(tf.constant(x))
    bias = keras_layer.bias.numpy() if layer.bias else None
    _assert_equals_torch(_torch_layer(layer, keras_layer.kernel.numpy(), bias), x, y, gx, gw)


# --- loss and metric against numpy ------------------------------------------------------------
def test_weighted_cross_entropy_against_numpy() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 5, 7, 3)).astype(np.float32) * 3
    labels = rng.integers(0, 3, (2, 5, 7))
    ref = spec.weighted_cross_entropy(logits, labels)
    got_pt = float(pt_dc.weighted_cross_entropy(torch.from_numpy(logits).permute(0, 3, 1, 2),
                                                torch.from_numpy(labels)))
    got_tf = float(tf_dc.weighted_cross_entropy(tf.constant(logits),
                                                tf.constant(labels, tf.int32)))
    assert got_pt == pytest.approx(ref, rel=1e-6) and got_tf == pytest.approx(ref, rel=1e-6)
    # hand-computed: uniform logits → CE = ln 3 per pixel, weighted by w[y], plain mean
    y = np.array([[[0, 1], [2, 2]]])
    expected = np.log(3) * (spec.CLASS_WEIGHTS[0] + spec.CLASS_WEIGHTS[1]
                            + 2 * spec.CLASS_WEIGHTS[2]) / 4
    assert spec.weighted_cross_entropy(np.zeros((1, 2, 2, 3)), y) == pytest.approx(expected)


def _one_hot_logits(pred: np.ndarray) -> np.ndarray:
    return np.eye(3, dtype=np.float32)[pred] * 5.0


def test_iou_hand_computed_and_in_both_frameworks() -> None:
    label = np.array([[[0, 0, 1, 1], [0, 0, 0, 0]],     # TC present, no AR in label
                      [[0, 0, 0, 0], [0, 0, 0, 0]]])    # empty of objects
    pred = np.array([[[0, 0, 1, 0], [0, 0, 0, 2]],      # TC half found, one AR false positive
                     [[0, 0, 0, 0], [0, 0, 0, 0]]])     # perfect: all absent classes count 1
    # sample 0: bg TP 5, FP 1 (pixel 3 predicted 0, label 1), FN 1 (pixel 7) → 5/7;
    # TC 1/2; AR 0/1 → mean (5/7 + 1/2 + 0)/3. Sample 1: (1 + 1 + 1)/3.
    expected = np.array([(5 / 7 + 1 / 2 + 0) / 3, 1.0])
    np.testing.assert_allclose(spec.sample_iou(pred, label), expected)
    logits = _one_hot_logits(pred)
    got_pt = pt_dc.sample_iou(torch.from_numpy(logits).permute(0, 3, 1, 2),
                              torch.from_numpy(label)).numpy()
    got_tf = tf_dc.sample_iou(tf.constant(logits), tf.constant(label, tf.int32)).numpy()
    np.testing.assert_allclose(got_pt, expected)
    np.testing.assert_allclose(got_tf, expected)


def test_iou_random_against_numpy() -> None:
    rng = np.random.default_rng(1)
    label = rng.choice(3, size=(6, 9, 11), p=[0.9, 0.03, 0.07])
    pred = rng.choice(3, size=(6, 9, 11), p=[0.9, 0.03, 0.07])
    pred[0] = label[0]
    ref = spec.sample_iou(pred, label)
    assert ref[0] == 1.0
    logits = _one_hot_logits(pred)
    np.testing.assert_allclose(pt_dc.sample_iou(torch.from_numpy(logits).permute(0, 3, 1, 2),
                                                torch.from_numpy(label)).numpy(), ref)
    np.testing.assert_allclose(
        tf_dc.sample_iou(tf.constant(logits), tf.constant(label, tf.int32)).numpy(), ref)


# --- optimizers ------------------------------------------------------------------------------
def _run_optimizer(name: str, framework: str, lrs: list[float], grads: list[np.ndarray],
                   w0: np.ndarray) -> np.ndarray:
    kw = dict(betas=(0.9, 0.999), eps=spec.ADAM_EPS, weight_decay=0.05)
    if framework == "torch":
        w = torch.nn.Parameter(torch.from_numpy(w0.copy()))
        opt = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW,
               "LAMB": Lamb}[name]([w], lr=lrs[0], **kw)
        for lr, g in zip(lrs, grads, strict=True):
            opt.param_groups[0]["lr"] = lr
            w.grad = torch.from_numpy(g)
            opt.step()
        return w.detach().numpy()
    var = tf.Variable(w0.copy())
    opt = AdamFamily([var], name, lrs[0], kw["betas"], kw["eps"], kw["weight_decay"], 1.0)
    for lr, g in zip(lrs, grads, strict=True):
        opt.set_lr(lr)
        opt.step([tf.constant(g)])
    return var.numpy()


@pytest.mark.parametrize("name", ["Adam", "AdamW", "LAMB"])
def test_optimizers_equal_across_frameworks(name: str) -> None:
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal(20).astype(np.float32)
    grads = [rng.standard_normal(20).astype(np.float32) * s for s in (0.3, 2.0, 0.5)]
    lrs = [0.01, 0.02, 0.005]
    ours = _run_optimizer(name, "torch", lrs, grads, w0)
    theirs = _run_optimizer(name, "tf", lrs, grads, w0)
    assert rel_err(ours, w0) > 1e-3  # it moved
    assert_close(theirs - w0, ours - w0, "optimizer", name)


def test_lamb_step_by_hand() -> None:
    """One LAMB step: global norm 5 clipped to 1, moments, decoupled wd, trust ratio."""
    w0, g = np.array([3.0, 4.0], np.float32), np.array([3.0, -4.0], np.float32)
    lr, wd, eps = 0.1, 0.01, spec.ADAM_EPS
    gc = g / 5.0  # ‖g‖ = 5 > max_grad_norm 1
    m, v = 0.1 * gc, 0.001 * gc**2
    u = (m / 0.1) / (np.sqrt(v / 0.001) + eps) + wd * w0
    expected = w0 - lr * (np.linalg.norm(w0) / np.linalg.norm(u)) * u
    w = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = Lamb([w], lr=lr, eps=eps, weight_decay=wd)
    w.grad = torch.from_numpy(g.copy())
    opt.step()
    np.testing.assert_allclose(w.detach().numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(_run_optimizer("LAMB", "tf", [lr], [g], w0),
                               _run_optimizer("LAMB", "torch", [lr], [g], w0), rtol=1e-6)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_lamb_over_all_tensors_at_once_equals_tensor_by_tensor(weight_decay: float) -> None:
    """The GPU path (every op over all tensors: torch._foreach_*) takes the same steps as
    the CPU path, bit for bit, over groups (one without weight decay) and a parameter whose
    gradient is missing for a step (its own step count)."""
    torch.manual_seed(0)
    shapes = [(8, 3, 3, 3), (8,), (16, 8, 1, 1), (5,), (30, 20)]
    runs = []
    for foreach in (False, True):
        gen = torch.Generator().manual_seed(1)
        ws = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
        opt = Lamb([{"params": ws[:3]}, {"params": ws[3:], "weight_decay": 0.0}], lr=1e-2,
                   weight_decay=weight_decay, max_grad_norm=0.5, foreach=foreach)
        for step in range(5):
            for i, w in enumerate(ws):
                w.grad = None if (step, i) == (2, 1) else torch.randn(w.shape, generator=gen)
            opt.step()
        runs.append([w.detach().clone() for w in ws])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
    assert opt.state[ws[1]]["step"] == 4 and opt.state[ws[0]]["step"] == 5


# --- training through the backends ----------------------------------------------------------
@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("deepcam_parity")
    climate.generate(climate.GenerateRequest(str(root), "npy", 8, 4, SMALL["height"],
                                             SMALL["width"], 2), show_progress=False)
    return root


def _backends(root, extra: list[str]):
    train = dc_data.list_samples(root, "train", "npy")
    evals = dc_data.list_samples(root, "validation", "npy")
    model = [f"model.{k}={v}".replace(" ", "") for k, v in SMALL.items()]
    out = {}
    for name, cls in (("pytorch", pt_dc.DeepCamBackend), ("tensorflow", tf_dc.DeepCamBackend)):
        cfg = compose(["workload=deepcam", "experiment=mini", f"framework={name}",
                       "precision=fp32", f"data.dir={root}", "data.train_samples=8",
                       "data.eval_samples=4", "train.global_batch_size=2", "opt.name=LAMB",
                       "opt.lr=0.01", "opt.lr_warmup_steps=2", "opt.milestones=[1]",
                       "opt.weight_decay=0.01", *model, *extra])
        be = cls()
        be.setup(RunContext(cfg, get(cfg.workload), train, evals, 2))
        out[name] = be
    tf_model.import_weights(out["tensorflow"].model,
                            pt_model.export_weights(out["pytorch"].model))
    return out["pytorch"], out["tensorflow"]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_training_parity_step_by_step(small_data, accumulate: int) -> None:
    """4 micro-batches (LR 0 → warmup → decay under accumulation 1; 2 optimizer steps of
    2 micro-batches under 2): same loss at every step, same weights and BN stats after."""
    pt, tfb = _backends(small_data, [f"opt.gradient_accumulation_frequency={accumulate}"])
    losses: dict[str, list[float]] = {"pt": [], "tf": []}
    pt.train_epoch(0, 0.0, on_step=lambda n, loss: losses["pt"].append(loss))
    tfb.train_epoch(0, 0.0, on_step=lambda n, loss: losses["tf"].append(loss))
    assert len(losses["pt"]) == 4 and pt.opt_step == tfb.opt_step == 4 // accumulate
    for step, (a, b) in enumerate(zip(losses["tf"], losses["pt"], strict=True)):
        assert_close(a, b, "train_loss", f"loss at step {step}")
    after_pt, after_tf = pt_model.export_weights(pt.model), tf_model.export_weights(tfb.model)
    moved = max(rel_err(after_pt[n], pt_model.export_weights(
        pt_model.DeepCam(spec.ModelSpec(**SMALL)))[n]) for n in ("conv1/kernel",))
    assert moved > 0
    for name, ref in after_pt.items():
        assert_close(after_tf[name], ref, "train_weights", name)
    assert pt.evaluate() == pytest.approx(tfb.evaluate(), abs=0.02)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_pointwise_convolution_is_a_matmul_in_bf16_with_conv2ds_values_and_gradients(
        dtype: str, request) -> None:
    """Stride-1 1×1 convolutions run as one MatMul over the pixels in 16-bit floats (the
    AMX bf16 weight gradient of TensorFlow's oneDNN lags its MatMul's) and stay a Conv2D
    in float32; either way forward and both gradients equal a Conv2D's."""
    if dtype != "float32":  # TensorFlow's Eigen bf16 kernels round differently
        request.getfixturevalue("bf16_cpu")
    layer = spec.LayerSpec(name="pw", kind="conv", cin=24, cout=16, kernel=1)
    keras_layer = tf_model.build_layer(layer)
    assert isinstance(keras_layer, tf_model.Pointwise)
    assert not isinstance(tf_model.build_layer(spec.LayerSpec(
        name="skip", kind="conv", cin=24, cout=16, kernel=1, stride=2)), tf_model.Pointwise)
    x = np.random.default_rng(3).standard_normal((2, 6, 9, 24)).astype(np.float32)
    xt = tf.cast(tf.constant(x), dtype)

    def grads(conv):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = conv(xt, tf.cast(keras_layer.kernel, dtype))
            loss = tf.reduce_sum(tf.square(tf.cast(y, tf.float32)))
        return [tf.cast(t, tf.float32).numpy()
                for t in (y, *tape.gradient(loss, [xt, keras_layer.kernel]))]

    graph = tf.function(keras_layer.convolution_op).get_concrete_function(
        xt, tf.cast(keras_layer.kernel, dtype)).graph
    types = {op.type for op in graph.get_operations()}
    want, other = ("MatMul", "Conv2D") if dtype == "bfloat16" else ("Conv2D", "MatMul")
    assert want in types and other not in types, types
    ours = grads(keras_layer.convolution_op)
    theirs = grads(lambda v, k: tf.nn.conv2d(v, k, 1, "VALID"))
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-2 * np.abs(b).max())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("rate", "size"), [(2, (6, 9)), (18, (6, 9)), (3, (11, 8))])
def test_a_dilated_convolution_takes_its_weight_gradient_from_a_matmul_in_bf16(
        dtype: str, rate: int, size: tuple[int, int], request) -> None:
    """The ASPP's dilated 3×3 convolutions: in 16-bit floats the weight gradient is one
    MatMul over the shifted taps (TensorFlow's oneDNN lags there), in float32 oneDNN's
    Conv2DBackpropFilter; forward and both gradients equal the plain dilated convolution's
    either way — with the rate larger than the map (the mini's 6×9 under 18) and maps of
    odd and even sizes."""
    if dtype != "float32":  # without bf16 kernels TensorFlow has no dilated bf16 gradient
        request.getfixturevalue("bf16_cpu")
    keras_layer = tf_model.build_layer(spec.LayerSpec(name="aspp2", kind="conv", cin=12,
                                                      cout=8, kernel=3, dilation=rate))
    assert isinstance(keras_layer, tf_model.AtrousConv2D)
    x = np.random.default_rng(rate).standard_normal((2, *size, 12)).astype(np.float32)
    xt = tf.cast(tf.constant(x), dtype)

    def grads(conv):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = conv(xt, keras_layer.kernel)
            loss = tf.reduce_sum(tf.square(tf.cast(y, tf.float32)))
        return [tf.cast(t, tf.float32)
                for t in (y, *tape.gradient(loss, [xt, keras_layer.kernel]))]

    graph = tf.function(lambda: grads(keras_layer.convolution_op)).get_concrete_function().graph
    types = {op.type for op in graph.get_operations()}
    want, other = (("MatMul", "Conv2DBackpropFilter") if dtype == "bfloat16"
                   else ("Conv2DBackpropFilter", "MatMul"))
    assert want in types and other not in types, types
    ours = grads(keras_layer.convolution_op)
    theirs = grads(lambda v, k: tf.nn.conv2d(v, tf.cast(k, v.dtype), 1, "SAME",
                                             dilations=rate))
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0,
                                   atol=1e-2 * float(tf.reduce_max(tf.abs(b))))
