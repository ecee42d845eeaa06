"""The TensorFlow backend (`sciperf_tensorflow`): model, optimizer, tf.data input, runtime,
the backend as the driver uses it, and an end-to-end mini run through the real CLI.

Cross-framework equality (same weights → same outputs/losses) lives in test_parity.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from sciperf.backends import RunContext, load_backend  # noqa: E402
from sciperf.config import compose  # noqa: E402
from sciperf.data.loader import BatchLoader  # noqa: E402
from sciperf.errors import SciperfError  # noqa: E402
from sciperf.workloads import get  # noqa: E402
from sciperf.workloads.cosmoflow import spec as spec  # noqa: E402
from sciperf.workloads.cosmoflow import synthetic  # noqa: E402
from sciperf.workloads.cosmoflow.data import SampleReader, list_samples, read_sample, transform  # noqa: E402,E501
from sciperf_tensorflow import input as tf_data  # noqa: E402
from sciperf_tensorflow import runtime  # noqa: E402
from sciperf_tensorflow.optim import KerasSGD  # noqa: E402
from sciperf_tensorflow.workloads.cosmoflow.backend import CosmoFlowBackend, log1p  # noqa: E402
from sciperf_tensorflow.workloads.cosmoflow.model import CosmoFlow, conv_block, export_weights  # noqa: E402,E501

SIZE = 16  # small universes keep the loader tests fast
SHAPE = (SIZE, SIZE, SIZE, 4)
# TensorFlow's float32 log1p differs from numpy's by up to 2 ulp (see test_parity.py).
LOG1P_MAX_ULP = 2


def _mini_model_spec() -> spec.ModelSpec:
    """The mini experiment's model, read from the composed config (not retyped here)."""
    return spec.ModelSpec(**compose(["framework=tensorflow", "experiment=mini"]).model)


@pytest.fixture(autouse=True)
def _keep_policy():
    """Tests below may switch the process-global Keras precision policy; restore it."""
    before = keras.mixed_precision.global_policy().name
    yield
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture(scope="module", params=["npy", "tfrecord"])
def dataset(request, tmp_path_factory):
    """The spec's synthetic universes in each on-disk format: 24 train, 8 validation."""
    root = tmp_path_factory.mktemp(f"cosmoflow_{request.param}")
    synthetic.generate(synthetic.GenerateRequest(
        root=str(root), fmt=request.param, train_samples=24, eval_samples=8, size=SIZE,
        seed=1), show_progress=False)
    return root, request.param


# --- model -------------------------------------------------------------------------------
def test_full_model_parameter_count_and_layers():
    keras.mixed_precision.set_global_policy("float32")
    model = CosmoFlow(spec.ModelSpec())
    assert model.count_params() == spec.FULL_PARAMETER_COUNT == 8_907_556
    shapes = spec.ModelSpec().layer_shapes()
    kernels = {layer.name: tuple(layer.kernel.shape) for layer in model.layers
               if hasattr(layer, "kernel")}
    assert kernels == shapes  # canonical names, Keras layout, in order
    assert list(kernels) == ["conv0", "conv1", "conv2", "conv3", "conv4",
                             "dense0", "dense1", "dense2"]


def test_mini_model_parameter_count_matches_spec():
    model_spec = _mini_model_spec()
    model = CosmoFlow(model_spec)
    assert model.count_params() == model_spec.parameter_count()
    assert model_spec.parameter_count() < spec.FULL_PARAMETER_COUNT / 10


def test_init_is_glorot_uniform_with_zero_bias():
    keras.utils.set_random_seed(0)
    arrays = export_weights(CosmoFlow(spec.ModelSpec()))
    for name, arr in arrays.items():
        if name.endswith("/bias"):
            assert not arr.any(), name
            continue
        fan_in = int(np.prod(arr.shape[:-1]))
        fan_out = int(np.prod(arr.shape[:-2])) * arr.shape[-1] if arr.ndim > 2 else arr.shape[-1]
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        assert np.abs(arr).max() <= limit, name
        assert np.abs(arr).max() > 0.9 * limit, name  # spread over the whole range
        assert abs(float(arr.std()) - limit / np.sqrt(3)) < 0.05 * limit, name


def test_forward_shape_range_and_dropout_modes():
    keras.mixed_precision.set_global_policy("float32")
    model_spec = spec.ModelSpec(input_size=SIZE, conv_filters=[4, 8], dense_sizes=[16, 8],
                                dropout=0.5)
    model = CosmoFlow(model_spec)
    x = tf.constant(np.log1p(np.stack([synthetic.make_universe(0, "train", i, SIZE)[0]
                                       for i in range(3)]).astype(np.float32)))
    out = model(x, training=False).numpy()
    assert out.shape == (3, spec.TARGET_SIZE) and out.dtype == np.float32
    assert np.abs(out).max() <= model_spec.output_scale
    np.testing.assert_array_equal(model(x, training=False).numpy(), out)  # eval: no dropout
    assert not np.array_equal(model(x, training=True).numpy(), out)  # train: dropout on


def test_bf16_policy_keeps_fp32_variables_and_output():
    runtime.set_precision("bf16")
    model = CosmoFlow(spec.ModelSpec(input_size=SIZE, conv_filters=[4, 8], dense_sizes=[8]))
    assert model.conv0.compute_dtype == "bfloat16"
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    out = model(tf.ones((2, *SHAPE)), training=False)
    assert out.dtype == tf.float32
    runtime.set_precision("fp32")
    assert CosmoFlow(spec.ModelSpec(input_size=SIZE, conv_filters=[4], dense_sizes=[])) \
        .conv0.compute_dtype == "float32"
    with pytest.raises(ValueError, match="precision=fp16"):
        runtime.set_precision("fp16")


def _reference_block(conv, x, slope):
    """The reference's Conv3D → LeakyReLU → MaxPool3D, differentiated by TensorFlow."""
    y = tf.nn.bias_add(tf.nn.conv3d(x, conv.kernel, [1] * 5, "SAME"), conv.bias)
    return tf.nn.max_pool3d(tf.nn.leaky_relu(y, alpha=slope), 2, 2, "VALID")


@pytest.mark.parametrize("slope", [0.3, -0.5])
def test_conv_block_equals_the_reference_order_values_and_gradients(slope):
    """Pool-then-LeakyReLU with its hand-written gradient: forward bit-identical, input,
    kernel and bias gradients equal to autodiff of the reference order (float32)."""
    runtime.set_precision("fp32")
    conv = keras.layers.Conv3D(4, 3, padding="same", bias_initializer="random_normal")
    conv.build((None, 8, 8, 8, 3))
    x = tf.random.stateless_normal((2, 8, 8, 8, 3), (3, 4))
    upstream = tf.random.stateless_normal((2, 4, 4, 4, 4), (5, 6))
    results = []
    for block in (lambda x: conv_block(conv, x, slope), lambda x: _reference_block(conv, x, slope)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = block(x)
            loss = tf.reduce_sum(out * upstream)
        results.append([out, *tape.gradient(loss, [x, conv.kernel, conv.bias])])
    np.testing.assert_array_equal(results[0][0].numpy(), results[1][0].numpy())
    for ours, ref in zip(results[0][1:], results[1][1:], strict=True):
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_first_conv_block_computes_no_input_gradient():
    runtime.set_precision("fp32")
    conv = keras.layers.Conv3D(2, 3, padding="same")
    conv.build((None, 4, 4, 4, 1))
    x = tf.ones((1, 4, 4, 4, 1))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(conv_block(conv, x, 0.3, input_grad=False))
    dx, dkernel = tape.gradient(loss, [x, conv.kernel])
    assert dx is None and dkernel is not None


def test_bf16_conv_block_bias_gradient_is_the_float_sum():
    """Under mixed_bfloat16 the block's bias gradient is the float32 one to bf16 rounding
    (autodiff's BiasAddGrad summed 8×24³ values in bf16: 92–98% off)."""
    grads = {}
    for precision in ("fp32", "bf16"):
        runtime.set_precision(precision)
        conv = keras.layers.Conv3D(4, 3, padding="same", kernel_initializer="ones")
        conv.build((None, 48, 48, 48, 1))
        x = tf.cast(tf.cast(tf.random.stateless_uniform((8, 48, 48, 48, 1), (7, 8)),
                            tf.bfloat16), tf.float32)  # bf16-exact input: same max positions
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(conv_block(conv, x, 0.3, input_grad=False), tf.float32))
        grads[precision] = tape.gradient(loss, conv.bias).numpy()
    np.testing.assert_allclose(grads["bf16"], grads["fp32"], rtol=1e-2)
    assert grads["fp32"][0] > 8 * 24 ** 3 * 0.9  # mostly positive activations: a large sum


# --- optimizer ---------------------------------------------------------------------------
def test_keras_sgd_matches_hand_computed_updates():
    """v = m·v + lr·g; w -= v, with the LR changed between steps (3 steps by hand)."""
    w = tf.Variable([1.0, -2.0])
    sgd = KerasSGD([w], lr=0.1, momentum=0.9)
    step = tf.function(sgd.step)
    expected = [
        # lr,  grad,        velocity after,       weight after
        (0.1, [0.5, 1.0], [0.05, 0.1], [0.95, -2.1]),
        (0.2, [-1.0, 0.0], [0.045 - 0.2, 0.09], [1.105, -2.19]),
        (0.05, [2.0, -4.0], [-0.1395 + 0.1, 0.081 - 0.2], [1.1445, -2.071]),
    ]
    for lr, grad, velocity, weight in expected:
        sgd.set_lr(lr)
        step([tf.constant(grad)])
        np.testing.assert_allclose(sgd.velocities[0].numpy(), velocity, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(w.numpy(), weight, rtol=1e-6)
    assert step.experimental_get_tracing_count() == 1  # a new LR does not retrace


def test_keras_sgd_skips_missing_gradients_and_checks_arguments():
    a, b = tf.Variable([1.0]), tf.Variable([2.0])
    sgd = KerasSGD([a, b], lr=0.5)
    sgd.step([None, tf.constant([1.0])])
    assert a.numpy()[0] == 1.0 and b.numpy()[0] == 1.5
    with pytest.raises(ValueError, match="1 gradients for 2 variables"):
        sgd.step([tf.constant([1.0])])
    with pytest.raises(ValueError, match="momentum"):
        KerasSGD([a], lr=0.1, momentum=1.0)


# --- tf.data input -------------------------------------------------------------------------
def _common_batches(files, fmt, batch, seed, epoch, shuffle):
    """The framework-free reference: the common BatchLoader plus the numpy transform."""
    loader = BatchLoader(files, lambda p: read_sample(p, fmt, SHAPE), batch, seed=seed,
                         shuffle=shuffle)
    return [(transform(x), y) for x, y in loader.epoch(epoch)]


def _tf_batches(files, fmt, batch, seed, epoch, shuffle):
    loader = tf_data.make_loader(files, SampleReader(fmt, SHAPE), batch=batch, seed=seed,
                                 shuffle=shuffle, prefetch=2)
    return [(x.numpy(), y.numpy()) for x, y in tf_data.batches(loader, epoch, log1p)]


def _assert_same_batches(got, want):
    assert len(got) == len(want)
    for (x, y), (x_ref, y_ref) in zip(got, want, strict=True):
        assert x.dtype == np.float32 and x.shape == x_ref.shape
        np.testing.assert_array_equal(y, y_ref)  # targets identify the samples exactly
        np.testing.assert_array_max_ulp(x, x_ref, maxulp=LOG1P_MAX_ULP)


@pytest.mark.parametrize("shuffle", [True, False])
def test_tf_data_batches_equal_common_loader(dataset, shuffle):
    root, fmt = dataset
    files = list_samples(root, "train", fmt)
    epochs = {}
    for epoch in (0, 1):
        got = _tf_batches(files, fmt, 8, seed=5, epoch=epoch, shuffle=shuffle)
        _assert_same_batches(got, _common_batches(files, fmt, 8, 5, epoch, shuffle))
        epochs[epoch] = np.concatenate([y for _, y in got])
    order_differs = not np.array_equal(epochs[0], epochs[1])
    assert order_differs == shuffle  # a new permutation each epoch, only when shuffling
    assert sorted(map(tuple, epochs[0])) == sorted(map(tuple, epochs[1]))  # same samples


def _pipeline_settings(data: tf.data.Dataset) -> dict[str, list[int]]:
    """The constants a pipeline's graph feeds its parallel maps (num_parallel_calls) and
    its prefetch (buffer_size): -1 is tf.data.AUTOTUNE."""
    graph = tf.compat.v1.GraphDef.FromString(data._as_serialized_graph().numpy())
    nodes = {n.name: n for n in graph.node}
    found: dict[str, list[int]] = {"ParallelMapDatasetV2": [], "PrefetchDataset": []}
    for node in graph.node:
        if node.op in found:
            value = nodes[node.input[-1].split(":")[0]].attr["value"].tensor
            found[node.op].append(int(tf.make_ndarray(value)))
    return found


def test_tf_data_pipeline_reads_workers_batches_at_once_without_autotuning(dataset):
    """`workers` batches at once and `prefetch` ready, fixed: tf.data's autotuning thread
    (its wake-ups 5.11 and 10.23 s after an iterator starts) made whole epochs end late."""
    root, fmt = dataset
    loader = tf_data.make_loader(list_samples(root, "train", fmt), SampleReader(fmt, SHAPE),
                                 batch=8, seed=0, shuffle=False, prefetch=2, workers=3)
    data = loader.epoch(0, log1p)
    assert data.options().autotune.enabled is False
    assert _pipeline_settings(data) == {"ParallelMapDatasetV2": [3, 3], "PrefetchDataset": [2]}


def test_tf_data_batches_equal_pytorch_loader(dataset):
    torch = pytest.importorskip("torch")
    pt_data = pytest.importorskip("sciperf_pytorch.input")
    pt_backend = pytest.importorskip("sciperf_pytorch.workloads.cosmoflow.backend")
    root, fmt = dataset
    files = list_samples(root, "train", fmt)
    kw = dict(reader=SampleReader(fmt, SHAPE), batch=4, seed=9, shuffle=True, prefetch=2)
    pt_transform = pt_backend.CosmoFlowBackend().device_transform
    for epoch in (0, 3):
        want = [(x.permute(0, 2, 3, 4, 1).numpy(), y.numpy()) for x, y in
                pt_data.batches(pt_data.make_loader(files, **kw), epoch, torch.device("cpu"),
                                pt_transform)]
        _assert_same_batches(_tf_batches(files, fmt, 4, 9, epoch, True), want)


def test_tf_data_rejects_partial_batches_and_names_bad_files(tmp_path, dataset):
    root, fmt = dataset
    files = list_samples(root, "train", fmt)
    with pytest.raises(ValueError, match="do not divide"):
        tf_data.make_loader(files[:5], SampleReader(fmt, SHAPE), batch=4, seed=0,
                            shuffle=False, prefetch=1)
    bad = tmp_path / f"broken{Path(files[0]).name}"
    bad.write_bytes(b"\x00garbage")
    loader = tf_data.make_loader([bad, *files[:3]], SampleReader(fmt, SHAPE), batch=4,
                                 seed=0, shuffle=False, prefetch=1)
    with pytest.raises(SciperfError, match=str(bad.name)) as err:
        list(tf_data.batches(loader, 0))
    assert "\n" not in str(err.value)


# --- the backend as the driver uses it -----------------------------------------------------
def test_backend_entry_point_setup_train_evaluate(dataset):
    root, fmt = dataset
    cfg = compose(["framework=tensorflow", "experiment=mini", f"data.dir={root}",
                   f"data.format={fmt}", "precision=fp32", f"model.input_size={SIZE}",
                   "model.conv_filters=[4,8]", "model.dense_sizes=[16,8]",
                   "train.global_batch_size=8", "opt.weight_decay=0.001", "data.workers=3"])
    backend = load_backend("tensorflow", "cosmoflow")
    assert isinstance(backend, CosmoFlowBackend) and backend.name == "tensorflow"
    files, evals = list_samples(root, "train", fmt), list_samples(root, "validation", fmt)
    backend.setup(RunContext(cfg, get(cfg.workload), files, evals, 8))
    assert backend.parameter_count() == spec.ModelSpec(**cfg.model).parameter_count()
    assert backend.train_loader.workers == backend.eval_loader.workers == 3  # data.workers
    before = backend.evaluate()
    steps = []
    result = backend.train_epoch(0, 0.002, on_step=lambda n, loss: steps.append((n, loss)))
    assert result.samples == 24 and len(steps) == 3 and all(n == 8 for n, _ in steps)
    assert result.loss == pytest.approx(np.mean([loss for _, loss in steps]), rel=1e-6)
    assert result.seconds > 0 and np.isfinite(result.loss)
    assert float(backend.optimizer.lr.numpy()) == pytest.approx(0.002)
    after = backend.evaluate()
    assert 0 < after < 2 * spec.ModelSpec().output_scale and after != before
    # evaluate() is the MAE over every validation sample and target (numpy reference)
    x = np.stack([transform(read_sample(p, fmt, SHAPE)[0]) for p in evals])
    y = np.stack([read_sample(p, fmt, SHAPE)[1] for p in evals])
    pred = backend.model(tf.constant(x), training=False).numpy()
    assert after == pytest.approx(float(np.abs(pred - y).mean()), rel=1e-5)
    info = backend.info()
    assert info["framework"] == "tensorflow" and info["tensorflow"] == tf.__version__
    assert backend.peak_flops("fp32") > 1e9  # a measured matmul rate, in FLOP/s


def test_runtime_threads_and_device():
    n = runtime.setup_threads(0)  # TF already runs here: the existing pools are reported
    assert n >= 1
    assert runtime.select_device() in ("/CPU:0", "/GPU:0")
    assert runtime.cpu_count() >= 1


def test_threads_are_set_before_tensorflow_starts():
    """In a fresh process setup_threads really fixes TF's pools (the backend's first call)."""
    code = ("from sciperf_tensorflow import runtime; import tensorflow as tf; "
            "runtime.setup_threads(1); tf.constant(1.0) + 1; "
            "print(tf.config.threading.get_intra_op_parallelism_threads(), "
            "tf.config.threading.get_inter_op_parallelism_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split()[-2:] == ["1", "1"]


# --- end to end through the CLI ------------------------------------------------------------
@pytest.mark.slow
def test_cli_mini_run_reaches_target_and_passes_checker(tmp_path, bf16_cpu,
                                                       cosmoflow_mini_data):
    """`sciperf train framework=tensorflow experiment=mini` + check, on the session's mini
    set (`sciperf prepare`, once for both frameworks' runs to target)."""
    data, out = cosmoflow_mini_data, tmp_path / "out"
    common = ["workload=cosmoflow", "framework=tensorflow", "experiment=mini",
              "precision=bf16", f"data.dir={data}", f"output_dir={out}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def sciperf(*args: str, timeout: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sciperf.cli", *args], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=tmp_path)

    run = sciperf("train", *common, timeout=1500)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success" and summary["target_reached"] is True
    assert summary["framework"] == "tensorflow" and summary["precision"] == "bf16"
    assert summary["final_metric"] <= spec.TARGET
    assert summary["parameter_count"] == _mini_model_spec().parameter_count()
    assert summary["versions"]["tensorflow"] == tf.__version__
    check = sciperf("check", str(out / "result_0.txt"), timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("PASS")


def test_backend_starts_from_canonical_init_weights(dataset, tmp_path):
    """train.init_weights: the same .npz file starts a run in any framework."""
    from sciperf import weights

    root, fmt = dataset
    overrides = ["framework=tensorflow", "experiment=mini", f"data.dir={root}",
                 f"data.format={fmt}", "precision=fp32", f"model.input_size={SIZE}",
                 "model.conv_filters=[4,8]", "model.dense_sizes=[16,8]",
                 "train.global_batch_size=8"]
    model_spec = spec.ModelSpec(**compose(overrides).model)
    rng = np.random.default_rng(4)
    start = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             weights.expected_arrays(model_spec.layer_shapes()).items()}
    path = weights.save_npz(tmp_path / "init.npz", start)
    cfg = compose([*overrides, f"train.init_weights={path}"])
    backend = CosmoFlowBackend()
    files, evals = list_samples(root, "train", fmt), list_samples(root, "validation", fmt)
    backend.setup(RunContext(cfg, get(cfg.workload), files, evals, 8))
    got = backend.export_weights()
    assert sorted(got) == sorted(start)
    for name, arr in start.items():
        np.testing.assert_array_equal(got[name], arr, err_msg=name)
    backend.barrier()  # one process: no-ops that must not fail
    backend.close()
    wrong = weights.save_npz(tmp_path / "wrong.npz", {k: v for k, v in start.items()
                                                      if k != "dense1/bias"})
    with pytest.raises(SciperfError, match="missing dense1/bias"):
        CosmoFlowBackend().setup(RunContext(compose([*overrides,
                                                      f"train.init_weights={wrong}"]),
                                             get("cosmoflow"), files, evals, 8))
