"""CosmoFlow 3-D CNN in Keras 3, built from ``sciperf.workloads.cosmoflow.ModelSpec``.

Layer names are the spec's canonical names (conv0…, dense0…), shared with the PyTorch
model so weights map by rule. Inputs are channels-last NDHWC tensors, the reference's
layout, so the flatten is naturally in the Keras order. Under a ``mixed_bfloat16`` policy
(set by ``runtime``) the layers compute in bf16 on fp32 variables; the final tanh runs in
float32 so predictions and the loss are fp32.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from sciperf.workloads.cosmoflow.spec import ModelSpec
from sciperf_tensorflow.weights import export_weights, import_weights

__all__ = ["CosmoFlow", "export_weights", "import_weights", "leaky_relu"]


class CosmoFlow(keras.Model):
    """5 × [Conv3D → LeakyReLU → MaxPool3D] → 3 dense layers → tanh × 1.2 (reference)."""

    def __init__(self, spec: ModelSpec, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        shapes = spec.layer_shapes()
        self.conv_names = [n for n in shapes if n.startswith("conv")]
        self.dense_names = [n for n in shapes if n.startswith("dense")]
        init = dict(kernel_initializer="glorot_uniform", bias_initializer="zeros")
        for name in self.conv_names:
            k, _, _, _, cout = shapes[name]
            setattr(self, name, keras.layers.Conv3D(cout, k, padding="same", name=name, **init))
        for name in self.dense_names:
            setattr(self, name, keras.layers.Dense(shapes[name][1], name=name, **init))
        self.dropouts = [keras.layers.Dropout(spec.dropout, name=f"dropout{i}")
                         for i in range(len(self.dense_names) - 1)]
        self.build((None, *(spec.input_size,) * 3, spec.in_channels))

    def build(self, input_shape) -> None:
        """Create every variable from the spec's shapes (no dummy forward pass)."""
        shapes = self.spec.layer_shapes()
        side = self.spec.input_size
        for name in self.conv_names:
            getattr(self, name).build((None, side, side, side, shapes[name][3]))
            side //= 2
        for name in self.dense_names:
            getattr(self, name).build((None, shapes[name][0]))
        self.built = True

    def kernels(self) -> list:
        """Weights that carry the Keras L2 penalty (kernels, not biases)."""
        return [getattr(self, n).kernel for n in self.conv_names + self.dense_names]

    def call(self, x, training: bool = False):
        """x: (N, D, H, W, C) float; returns (N, outputs) float32."""
        slope = self.spec.leaky_slope
        for name in self.conv_names:
            x = leaky_relu(getattr(self, name)(x), slope)
            x = ops.max_pool(x, pool_size=2, strides=2, padding="valid")
        x = ops.reshape(x, (-1, self.spec.flat_size()))  # channels-last flatten, as Keras
        for name, dropout in zip(self.dense_names[:-1], self.dropouts, strict=True):
            x = ops.leaky_relu(getattr(self, name)(x), negative_slope=slope)
            x = dropout(x, training=training)
        x = ops.cast(getattr(self, self.dense_names[-1])(x), "float32")
        return ops.tanh(x) * self.spec.output_scale


def leaky_relu(x, slope: float):
    """LeakyReLU whose gradient reads its output instead of its input.

    Identical values and gradients to ``tf.nn.leaky_relu`` (for slope > 0, y > 0 ⇔ x > 0,
    and LeakyReluGrad only tests the sign), but the backward no longer holds on to the
    conv's BiasAdd output, so grappler can fuse Conv3D + BiasAdd + LeakyReLU in the train
    step instead of failing its remapper pass (a logged error on every run).
    """

    @tf.custom_gradient
    def _leaky(x):
        y = tf.nn.leaky_relu(x, alpha=slope)

        def grad(dy):
            return tf.raw_ops.LeakyReluGrad(gradients=dy, features=y, alpha=slope)

        return y, grad

    return _leaky(x)

