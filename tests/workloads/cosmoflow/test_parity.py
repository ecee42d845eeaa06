"""PyTorch ↔ TensorFlow parity for CosmoFlow (docs/architecture.md, rule 4), asserted at every step.

Both frameworks run in this one process (they import side by side cleanly, see
ENVIRONMENT.md). The same canonical ``.npz`` weights are loaded into both models and
the same batches (the spec's synthetic universes, through the common loader and each
framework's own input adapter) are fed to the backends' real train/eval code.
Tolerances and every known deviation live in TOLERANCES below, each with its reason.
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
from sciperf.data.loader import BatchLoader  # noqa: E402
from sciperf.errors import SciperfError  # noqa: E402
from sciperf.schedules import epoch_warmup_step_lr, scaled_peak_lr  # noqa: E402
from sciperf.workloads import get  # noqa: E402
from sciperf.workloads.cosmoflow import spec as spec  # noqa: E402
from sciperf.workloads.cosmoflow import synthetic  # noqa: E402
from sciperf.workloads.cosmoflow.data import list_samples, read_sample  # noqa: E402
from sciperf_pytorch import input as pt_data  # noqa: E402
from sciperf_pytorch.optim import KerasSGD as TorchSGD  # noqa: E402
from sciperf_pytorch.workloads.cosmoflow import model as pt_model  # noqa: E402
from sciperf_pytorch.workloads.cosmoflow.backend import CosmoFlowBackend as TorchBackend  # noqa: E402,E501
from sciperf_pytorch.workloads.cosmoflow.model import CosmoFlow as TorchCosmoFlow  # noqa: E402
from sciperf_tensorflow.optim import KerasSGD as TfSGD  # noqa: E402
from sciperf_tensorflow.workloads.cosmoflow import model as tf_model  # noqa: E402
from sciperf_tensorflow.workloads.cosmoflow.backend import CosmoFlowBackend as TFCosmoFlow  # noqa: E402,E501

# ---------------------------------------------------------------------------------------
# Tolerances and known deviations: the ONE place. Errors are measured as
# max|a − b| / max|b| (relative to the largest magnitude), so near-zero outputs of a
# tanh head do not make a relative test meaningless. "observed" = this 2-core AVX-512 CPU.
TOLERANCES = {
    # fp32 CPU forward, mini model: both run oneDNN convolutions, but with different
    # kernels/blocking, so the 3·3·3·C_in products are summed in different orders.
    # Observed 1.1e-6; the spec's target is ~1e-5 relative.
    "forward_mini": 1e-5,
    # fp32 CPU forward, full 128³ model: the same summation-order effect over 5 convs and
    # a 32,768-long dense0 dot product. Observed 9.5e-7.
    "forward_full": 1e-5,
    # Gradients of the backends' own loss (MSE + Keras L2) from identical weights and one
    # batch, every layer. Without a tie the forward's rounding passes through: observed
    # ≤ 2.1e-6. But a max-pool window whose two largest values lie within the ~1e-6
    # rounding difference picks a different argmax in each framework and routes that
    # gradient element to a neighbouring voxel (an 8-sample batch has 2.6e5 windows):
    # observed 4e-4 on conv0's kernel for one such batch (torch fp32 itself differs from
    # its own fp64 gradient by 3e-4 there). A wrong pooling-gradient rule (TF's Eigen
    # tie rule below) gives 1.3e-2 to 2.1e-2 on the conv kernels of that batch.
    "gradients": 1e-3,
    # Per-step loss over 6 steps of the backends' train_step (fp32, dropout 0, L2 on, LR
    # changing every step). Rounding differences enter the weights and compound, and an
    # argmax flip in a near-tied max-pool window (values within ~1e-6, 10^5 windows a
    # batch) sends one gradient element to a neighbouring voxel. Observed 7.4e-6; a 1 %
    # LR error in one step gives 4e-3, so a real deviation cannot hide under this bound.
    "train_loss": 5e-4,
    # Every canonical weight after those 6 steps (biases start at 0, so the relative error
    # of a bias is large for its size). Observed 1.7e-5; a 1 % LR error gives 2.7e-2.
    "train_weights": 1e-3,
    # Per-step losses and the final validation MAE over 9 steps of the driver path
    # (train_epoch with the backends' own tf.data/torch loaders, 3 schedule epochs at the
    # mini LR, ≤ 0.008): more steps at a larger LR, so more compounding and flips.
    # Observed 8.3e-4; a 1 % LR error in the second epoch gives 1e-2.
    "driver": 3e-3,
    # Validation MAE of identical weights before any step (evaluate() of each backend,
    # fp32 batch sums accumulated in float64 by both). Observed 7e-8.
    "eval_mae": 1e-5,
    # One optimizer update for a given gradient: identical fp32 operations
    # (m·v + lr·g; w − v); only fused multiply-add contraction can differ (≤ 1 ulp).
    "optimizer": 1e-6,
}
# Known deviations (not covered by a tolerance above, so not asserted as equal):
# * Dropout masks: each framework draws its own random mask, so parity runs use
#   dropout = 0 (the mini experiment's value). Dropout is a no-op at evaluation in both.
# * bf16: the frameworks round to bf16 at different points (torch autocast keeps
#   pooling/activations in the conv's output dtype, the Keras policy casts layer inputs),
#   so parity is asserted in fp32; bf16 is checked by time-to-target runs instead.
# * log1p of the input: TensorFlow's float32 log1p differs from numpy/torch by up to
#   2 ulp, so loader-equality tests (test_tensorflow_backend.py) allow 2 ulp on x.
# * Max-pool gradient ties: TensorFlow's plain CPU MaxPool3DGrad (Eigen; used in eager
#   mode or with TF_ENABLE_ONEDNN_OPTS=0) gives the gradient to EVERY window element
#   within 1e-5 (absolute) of the max; torch gives it to one element. The backends run
#   compiled steps where oneDNN's exact-argmax kernel is used on x86, which the
#   gradient test below checks; with oneDNN off the two frameworks train differently
#   (gradient errors ~1e-2 on the conv layers).
# ---------------------------------------------------------------------------------------

MINI = dict(input_size=32, conv_filters=[8, 16, 32, 64], dense_sizes=[64, 32], dropout=0.0)
PARITY_STEPS = 6
PARITY_BATCH = 8


def rel_err(a, b) -> float:
    """max|a − b| / max|b| (see TOLERANCES)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def assert_close(a, b, key: str, what: str = "") -> float:
    err = rel_err(a, b)
    assert err <= TOLERANCES[key], f"{what or key}: relative error {err:.3g} > {TOLERANCES[key]}"
    return err


def _torch_mapped(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, str]]:
    """Canonical name → (parameter, kind), by the PyTorch package's generic layer kinds."""
    out = {}
    for layer, module in model.named_children():
        kind = pt_model.layer_kind(module)
        for param, tensor in module.named_parameters(recurse=False) if kind else ():
            out[weights.canonical_name(layer, param, "torch")] = (tensor, kind)
    return out


# --- fixtures ------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _fp32_policy():
    """Parity is fp32; leave the process-global Keras policy as it was found."""
    before = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture(scope="module")
def mini_data(tmp_path_factory):
    """The spec's synthetic universes at the mini size: 6 train batches, 2 validation."""
    root = tmp_path_factory.mktemp("cosmoflow_parity")
    synthetic.generate(synthetic.GenerateRequest(
        root=str(root), fmt="npy", train_samples=PARITY_STEPS * PARITY_BATCH,
        eval_samples=2 * PARITY_BATCH, size=MINI["input_size"], seed=3), show_progress=False)
    return root


def _universes(size: int, n: int) -> np.ndarray:
    """(n, size³, 4) log1p float32 NDHWC inputs from the spec's generator."""
    xs = [synthetic.make_universe(7, "validation", i, size)[0] for i in range(n)]
    return np.log1p(np.stack(xs).astype(np.float32))


def _forward_pair(model_spec: spec.ModelSpec, x: np.ndarray):
    """Same canonical weights in both models (torch init → .npz → TF); both outputs."""
    torch.manual_seed(0)
    pt = TorchCosmoFlow(model_spec).to(memory_format=torch.channels_last_3d).eval()
    tfm = tf_model.CosmoFlow(model_spec)
    tf_model.import_weights(tfm, pt_model.export_weights(pt))
    with torch.no_grad():
        out_pt = pt(torch.from_numpy(x).permute(0, 4, 1, 2, 3)).numpy()
    out_tf = tfm(tf.constant(x), training=False).numpy()
    return out_pt, out_tf


# --- (0) weights move losslessly between the frameworks ------------------------------------
def test_weights_round_trip_torch_npz_tf_torch(tmp_path):
    model_spec = spec.ModelSpec(**MINI)
    pt = TorchCosmoFlow(model_spec)
    path = weights.save_npz(tmp_path / "w.npz", pt_model.export_weights(pt))
    tfm = tf_model.CosmoFlow(model_spec)
    tf_model.import_weights(tfm, weights.load_npz(path, model_spec.layer_shapes()))
    back = TorchCosmoFlow(model_spec)
    pt_model.import_weights(back, tf_model.export_weights(tfm))
    for (name, a), (_, b) in zip(pt.state_dict().items(), back.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    # the canonical file really is the Keras layout of the TF variables
    np.testing.assert_array_equal(tfm.conv1.kernel.numpy(), np.load(path)["conv1/kernel"])
    np.testing.assert_array_equal(tfm.conv1.kernel.numpy(),
                                  pt.conv1.weight.detach().numpy().transpose(2, 3, 4, 1, 0))


def test_import_rejects_foreign_weights():
    tfm = tf_model.CosmoFlow(spec.ModelSpec(**MINI))
    arrays = tf_model.export_weights(tfm)
    arrays["dense0/kernel"] = arrays["dense0/kernel"][:-1]
    del arrays["conv3/bias"]
    with pytest.raises(SciperfError, match="missing conv3/bias.*dense0/kernel has shape"):
        tf_model.import_weights(tfm, arrays)


# --- (1) forward parity ----------------------------------------------------------------
def test_forward_parity_mini():
    out_pt, out_tf = _forward_pair(spec.ModelSpec(**MINI), _universes(MINI["input_size"], 4))
    assert out_pt.shape == out_tf.shape == (4, spec.TARGET_SIZE)
    assert np.abs(out_pt).max() > 1e-3  # a real signal, not two zero vectors
    assert_close(out_tf, out_pt, "forward_mini")


def test_forward_parity_full_size():
    model_spec = spec.ModelSpec(dropout=0.0)  # the reference model, 128³ input
    out_pt, out_tf = _forward_pair(model_spec, _universes(model_spec.input_size, 1))
    assert out_pt.shape == out_tf.shape == (1, spec.TARGET_SIZE)
    assert np.abs(out_pt).max() > 1e-3
    assert_close(out_tf, out_pt, "forward_full")


# --- (2) training parity through the backends -----------------------------------------------
def _backends(mini_data, overrides: list[str], batch: int):
    """Both backends set up from the composed mini config; TF gets the torch weights."""
    files = list_samples(mini_data, "train", "npy")
    evals = list_samples(mini_data, "validation", "npy")
    out = {}
    for name, cls in (("pytorch", TorchBackend), ("tensorflow", TFCosmoFlow)):
        cfg = compose([f"framework={name}", "experiment=mini", "precision=fp32",
                       f"data.dir={mini_data}", f"train.global_batch_size={batch}",
                       "model.dropout=0.0", *overrides])
        be = cls()
        be.setup(RunContext(cfg, get(cfg.workload), files, evals, batch))
        out[name] = be
    tf_model.import_weights(out["tensorflow"].model,
                            pt_model.export_weights(out["pytorch"].model))
    return out["pytorch"], out["tensorflow"], cfg


def test_gradient_parity_from_identical_weights(mini_data):
    """One batch, the backends' own loss (MSE + L2): every layer's gradient agrees."""
    pt, tfb, _ = _backends(mini_data, ["opt.weight_decay=0.0001"], PARITY_BATCH)
    reader = BatchLoader(list_samples(mini_data, "train", "npy"),
                         lambda p: read_sample(p, "npy", (32, 32, 32, 4)), PARITY_BATCH, seed=2)
    x_np, y_np = next(iter(reader.epoch(0)))
    pt.model.zero_grad(set_to_none=True)
    pt.loss_fn(pt.model(*pt_data.to_device(x_np, y_np, pt.device, pt.device_transform)[:1]),
               torch.from_numpy(y_np)).backward()
    grads_pt = {name: weights.to_canonical(name, t.grad.numpy(), kind, "torch")
                for name, (t, kind) in _torch_mapped(pt.model).items()}

    @tf.function
    def tf_gradients(x, y):
        with tf.GradientTape() as tape:
            loss = tfb.loss_fn(tfb.model(x, training=True), y)
        return tape.gradient(loss, tfb.model.trainable_variables)

    grads = tf_gradients(tfb.device_transform(tf.constant(x_np)), tf.constant(y_np))
    grads_tf = {"/".join(v.path.split("/")[-2:]): g.numpy()
                for v, g in zip(tfb.model.trainable_variables, grads, strict=True)}
    assert sorted(grads_tf) == sorted(grads_pt)
    for name, ref in grads_pt.items():
        assert np.abs(ref).max() > 0, name
        assert_close(grads_tf[name], ref, "gradients", f"gradient of {name}")


def test_training_parity_step_by_step(mini_data):
    """6 steps, the schedule's LR changing at every step, L2 on: same losses and weights."""
    pt, tfb, cfg = _backends(mini_data, ["opt.weight_decay=0.0001"], PARITY_BATCH)
    o = cfg.opt
    peak = scaled_peak_lr(o.base_lr, 4 * cfg.train.global_batch_size, o.base_batch_size)
    # each step plays one epoch of a warmup-then-decay schedule: 6 distinct LRs
    lrs = [epoch_warmup_step_lr(i, o.base_lr, peak, 4, [4], [0.25]) for i in range(PARITY_STEPS)]
    assert len(set(lrs)) == PARITY_STEPS
    reader = BatchLoader(list_samples(mini_data, "train", "npy"),
                         lambda p: read_sample(p, "npy", (32, 32, 32, 4)), PARITY_BATCH,
                         seed=11)
    losses_pt, losses_tf = [], []
    for lr, (x_np, y_np) in zip(lrs, reader.epoch(0), strict=True):
        pt.optimizer.set_lr(lr)
        tfb.optimizer.set_lr(lr)
        losses_pt.append(float(pt.train_step(*pt_data.to_device(x_np, y_np, pt.device,
                                                                 pt.device_transform))))
        x_tf, y_tf = tfb.device_transform(tf.constant(x_np)), tf.constant(y_np)
        losses_tf.append(float(tfb.train_step(x_tf, y_tf)))
    assert losses_pt[-1] < losses_pt[0]  # it trained
    for i, (a, b) in enumerate(zip(losses_tf, losses_pt, strict=True)):
        assert_close(a, b, "train_loss", f"loss of step {i}: tf {a:.8f} vs torch {b:.8f}")
    after_pt = pt_model.export_weights(pt.model)
    after_tf = tf_model.export_weights(tfb.model)
    for name, ref in after_pt.items():
        assert_close(after_tf[name], ref, "train_weights", f"{name} after {PARITY_STEPS} steps")
    # the compiled TF step was traced once: new LRs did not retrace it
    assert tfb._train_step.experimental_get_tracing_count() == 1


def test_training_parity_through_driver_path(mini_data):
    """train_epoch/evaluate as the driver calls them: LR per epoch, per-step losses, MAE."""
    pt, tfb, cfg = _backends(mini_data, ["opt.warmup_epochs=2", "opt.base_batch_size=8",
                                         "opt.decay_boundaries=[1,2]"], 2 * PARITY_BATCH)
    assert_close(tfb.evaluate(), pt.evaluate(), "eval_mae", "validation MAE before training")
    seen = {"pytorch": [], "tensorflow": []}
    lrs = [get("cosmoflow").lr_for_epoch(cfg, epoch) for epoch in range(3)]
    assert len(set(lrs)) == 3  # warmup, peak, decayed
    for epoch, lr in enumerate(lrs):
        for name, be in (("pytorch", pt), ("tensorflow", tfb)):
            be.train_epoch(epoch, lr, on_step=lambda n, loss, name=name: seen[name].append(loss))
        # (3) the schedule's LR is what each optimizer holds for this epoch
        assert pt.optimizer.param_groups[0]["lr"] == lr
        assert float(tfb.optimizer.lr.numpy()) == pytest.approx(lr, rel=1e-7)
    assert len(seen["pytorch"]) == len(seen["tensorflow"]) == 3 * len(pt.train_loader) == 9
    for i, (a, b) in enumerate(zip(seen["tensorflow"], seen["pytorch"], strict=True)):
        assert_close(a, b, "driver", f"driver-path loss of step {i}")
    mae_pt, mae_tf = pt.evaluate(), tfb.evaluate()
    assert 0 < mae_pt < 2
    assert_close(mae_tf, mae_pt, "driver", "validation MAE after 3 epochs")


# --- (3) schedule and optimizer parity -------------------------------------------------------
def test_schedule_lr_sequence_is_shared():
    """Both backends get their LR from the spec; the sequence is the schedule's numbers."""
    cfg = compose(["framework=tensorflow", "experiment=full", "train.global_batch_size=512"])
    lrs = [get("cosmoflow").lr_for_epoch(cfg, e) for e in range(70)]
    assert lrs[0] == pytest.approx(0.001)
    assert lrs[4] == pytest.approx(0.008)  # peak = 0.001 · 512 / 64 after 4 warmup epochs
    assert lrs[33] == pytest.approx(0.008 * 0.25) and lrs[65] == pytest.approx(0.008 * 0.125)
    sgd_pt = TorchSGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sgd_tf = TfSGD([tf.Variable([0.0])], lr=1.0)
    for lr in lrs:
        sgd_pt.set_lr(lr)
        sgd_tf.set_lr(lr)
        assert sgd_pt.param_groups[0]["lr"] == lr
        assert float(sgd_tf.lr.numpy()) == pytest.approx(lr, rel=1e-7)


def test_optimizer_parity_for_given_gradients():
    """Same gradients, LR changing every step: torch and TF updates equal a numpy reference."""
    rng = np.random.default_rng(5)
    shapes = [(3, 3, 3, 4, 8), (8,), (64, 4)]
    w0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(5)]
    lrs = [0.001, 0.0025, 0.004, 0.004, 0.001]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in w0]
    tf_vars = [tf.Variable(w) for w in w0]
    sgd_pt = TorchSGD(params, lr=lrs[0], momentum=0.9)
    sgd_tf = TfSGD(tf_vars, lr=lrs[0], momentum=0.9)
    step_tf = tf.function(sgd_tf.step)
    ref_w = [w.astype(np.float64) for w in w0]
    ref_v = [np.zeros(s) for s in shapes]
    for lr, gs in zip(lrs, grads, strict=True):
        sgd_pt.set_lr(lr)
        sgd_tf.set_lr(lr)
        for p, g in zip(params, gs, strict=True):
            p.grad = torch.from_numpy(g)
        sgd_pt.step()
        step_tf([tf.constant(g) for g in gs])
        for i, g in enumerate(gs):
            ref_v[i] = 0.9 * ref_v[i] + lr * g
            ref_w[i] = ref_w[i] - ref_v[i]
        for p, v, ref in zip(params, tf_vars, ref_w, strict=True):
            assert_close(p.detach().numpy(), ref, "optimizer", "torch KerasSGD vs reference")
            assert_close(v.numpy(), ref, "optimizer", "TF KerasSGD vs reference")
            assert_close(v.numpy(), p.detach().numpy(), "optimizer", "TF vs torch")
    assert step_tf.experimental_get_tracing_count() == 1
    # and it is not torch.optim.SGD's rule (lr outside the velocity) once the LR changes
    plain = torch.nn.Parameter(torch.from_numpy(w0[0].copy()))
    sgd = torch.optim.SGD([plain], lr=lrs[0], momentum=0.9)
    for lr, gs in zip(lrs, grads, strict=True):
        sgd.param_groups[0]["lr"] = lr
        plain.grad = torch.from_numpy(gs[0])
        sgd.step()
    assert rel_err(plain.detach().numpy(), ref_w[0]) > 100 * TOLERANCES["optimizer"]
