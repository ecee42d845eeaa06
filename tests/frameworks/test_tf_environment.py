"""What the TensorFlow package sets before TensorFlow loads: its C++ INFO lines stay out of a
run's stderr, its oneDNN kernels are on on every x86 CPU (TensorFlow's own default leaves them
off without AVX-512, where DeepCAM's dilated weight gradient has no kernel); a value the user
exported wins, and DeepCAM still trains without oneDNN."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

CHILD = (
    "import os, sciperf_tensorflow.backend, tensorflow as tf; "
    "from sciperf_tensorflow import runtime; "
    "tf.reduce_sum(tf.ones([3])).numpy(); "
    "print(os.environ['TF_CPP_MIN_LOG_LEVEL'], os.environ['TF_ENABLE_ONEDNN_OPTS'], "
    "runtime.onednn())"
)
# TensorFlow's INFO lines; its oneDNN notice (port.cc) is written as its libraries load,
# before any log level applies, so it stays — as it does on CPUs where oneDNN is on anyway
INFO_LINE = re.compile(r"^I\d{4} (?!.*port\.cc:\d+\] oneDNN custom operations are on)|"
                       r"cpu_feature_guard", re.M)
KEYS = ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")


def run_child(code: str, **exported: str) -> subprocess.CompletedProcess:
    """A fresh interpreter runs `code` with only `exported` of the package's keys set."""
    env = {k: v for k, v in os.environ.items() if k not in KEYS} | exported
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, check=True)


def test_info_lines_are_dropped_and_onednn_is_on() -> None:
    done = run_child(CHILD)
    assert done.stdout.split() == ["1", "1", "True"]  # INFO off (warnings, errors print)
    assert not INFO_LINE.search(done.stderr), done.stderr


def test_values_the_user_exported_win() -> None:
    done = run_child(CHILD, TF_CPP_MIN_LOG_LEVEL="0", TF_ENABLE_ONEDNN_OPTS="0")
    assert done.stdout.split() == ["0", "0", "False"]


DILATED = textwrap.dedent("""
    import numpy as np, tensorflow as tf, torch
    from sciperf.workloads.deepcam import spec
    from sciperf_tensorflow import runtime
    from sciperf_tensorflow.workloads.deepcam import model
    assert not runtime.onednn()
    layer = model.build_layer(spec.LayerSpec(name="aspp", kind="conv", cin=6, cout=5,
                                             kernel=3, dilation=6))
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 12, 18, 6)), tf.float32)

    @tf.function  # the graph's Conv2DBackpropFilter is the kernel Eigen lacks for rate > 1
    def grads(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            loss = tf.reduce_sum(layer(v) ** 2)
        return tape.gradient(loss, [v, layer.kernel])

    gx, gw = grads(x)
    conv = torch.nn.Conv2d(6, 5, 3, padding=6, dilation=6, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(layer.kernel.numpy().transpose(3, 2, 0, 1)))
    xp = torch.from_numpy(x.numpy()).permute(0, 3, 1, 2).requires_grad_()
    (conv(xp) ** 2).sum().backward()
    np.testing.assert_allclose(gx.numpy(), xp.grad.permute(0, 2, 3, 1).numpy(), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(gw.numpy(), conv.weight.grad.numpy().transpose(2, 3, 1, 0),
                               rtol=1e-4, atol=1e-3)
    print("ok")
""")


def test_deepcams_dilated_convolution_trains_without_onednn() -> None:
    pytest.importorskip("torch")
    assert run_child(DILATED, TF_ENABLE_ONEDNN_OPTS="0").stdout.split()[-1] == "ok"
