"""Gradients sciperf_tensorflow replaces: a bf16 bias gradient must be the float sum.

TensorFlow's CPU ``BiasAddGrad`` sums bfloat16 in bfloat16 (a running sum of ones stops at
256), and Keras adds every Dense/Conv bias with ``tf.nn.bias_add``; these tests train
nothing, they take the gradient a model would get and compare it with the exact sum.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from sciperf_tensorflow import gradients, runtime  # noqa: E402

ROWS = 4 * 32 * 32 * 32  # 131,072 positions: far past where a bf16 running sum stalls


@pytest.fixture(autouse=True)
def _keep_policy():
    """set_precision switches the process-global Keras policy; restore it."""
    before = keras.mixed_precision.global_policy().name
    yield
    keras.mixed_precision.set_global_policy(before)


def _bias_grad(layer, shape, upstream) -> np.ndarray:
    """d(Σ upstream·layer(x))/d bias in a traced step, as training takes it."""
    layer.build(shape)
    x = tf.random.stateless_normal(shape, (1, 2))

    @tf.function
    def grad():
        with tf.GradientTape() as tape:
            y = tf.cast(layer(x), tf.float32)
            loss = tf.reduce_sum(y * upstream(y.shape))
        return tape.gradient(loss, layer.bias)

    return grad().numpy().astype(np.float64)


@pytest.mark.parametrize("make,shape", [
    (lambda: keras.layers.Conv3D(4, 3, padding="same"), (4, 32, 32, 32, 2)),
    (lambda: keras.layers.Conv2D(4, 3, padding="same"), (8, 128, 128, 2)),
    (lambda: keras.layers.Dense(4), (ROWS, 2)),
])
def test_bf16_bias_gradient_of_keras_layers_is_the_full_sum(make, shape):
    runtime.set_precision("bf16")
    ones = _bias_grad(make(), shape, lambda s: tf.ones(s))
    np.testing.assert_array_equal(ones, np.full(4, ROWS))  # TensorFlow's own kernel: 256
    upstream = np.random.default_rng(0).standard_normal((ROWS, 4)).astype(np.float32) + 0.5
    exact = tf.cast(tf.cast(upstream, tf.bfloat16), tf.float64).numpy().sum(axis=0)
    got = _bias_grad(make(), shape, lambda s: tf.reshape(tf.constant(upstream), s))
    np.testing.assert_allclose(got, exact, rtol=1e-2)  # bf16 rounding of the result only


def test_fp32_bias_gradient_keeps_tensorflows_kernel():
    runtime.set_precision("fp32")
    layer = keras.layers.Dense(3)
    layer.build((ROWS, 2))

    @tf.function
    def grad():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(tf.ones((ROWS, 2))))
        return tape.gradient(loss, layer.bias)

    graph = grad.get_concrete_function().graph.as_graph_def()
    assert "BiasAddGrad" in {n.op for n in graph.node}
    np.testing.assert_array_equal(grad().numpy(), np.full(3, ROWS))


def test_install_is_idempotent_and_keeps_the_original():
    gradients.install()
    gradients.install()
    from tensorflow.python.framework import ops as tf_ops
    assert tf_ops._gradient_registry.lookup("BiasAdd") is gradients.bias_add_grad
    assert gradients._installed["BiasAdd"] is not gradients.bias_add_grad


def test_nchw_bias_gradient_sums_over_the_other_axes():
    gradients.install()
    x = tf.ones((2, 3, 128, 128), tf.bfloat16)
    b = tf.zeros((3,), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(b)
        y = tf.nn.bias_add(x, b, data_format="NCHW")
    np.testing.assert_array_equal(tape.gradient(y, b).numpy(), np.full(3, 2 * 128 * 128))
