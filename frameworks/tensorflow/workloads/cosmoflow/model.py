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

__all__ = ["CosmoFlow", "conv_block", "export_weights", "import_weights"]


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
        for i, name in enumerate(self.conv_names):
            x = conv_block(getattr(self, name), x, slope, input_grad=i > 0)
        x = ops.reshape(x, (-1, self.spec.flat_size()))  # channels-last flatten, as Keras
        for name, dropout in zip(self.dense_names[:-1], self.dropouts, strict=True):
            x = ops.leaky_relu(getattr(self, name)(x), negative_slope=slope)
            x = dropout(x, training=training)
        x = ops.cast(getattr(self, self.dense_names[-1])(x), "float32")
        return ops.tanh(x) * self.spec.output_scale


def conv_block(conv: keras.layers.Conv3D, x, slope: float, input_grad: bool = True):
    """The reference's Conv3D → LeakyReLU → MaxPool3D(2), as Conv3D → MaxPool3D → LeakyReLU
    with a hand-written gradient (the PyTorch model's order; ``conv_block`` there).

    For slope ≥ 0 LeakyReLU is monotone, so max and LeakyReLU commute: the values are
    bit-identical. The gradient then does on the pooled map, 1/8 of the convolution's
    output, what autodiff of the reference order does on all of it: LeakyReluGrad, and the
    bias gradient — the sum of the pooled gradient, which MaxPool3DGrad only scatters (the
    same sum; summed in float32 width, not in bf16, see ``sciperf_tensorflow.gradients``).
    Full model, bf16, batch 4, 2-vCPU Zen 5: LeakyReluGrad 60 ms and the bias sums 46 ms a
    step become a few ms. `input_grad`: whether the block's input needs a gradient (not
    for the first block, whose input is data). The kernel and bias are the layer's, cast
    to its compute dtype as Keras does.
    """
    dtype = conv.compute_dtype
    kernel, bias = ops.cast(conv.kernel, dtype), ops.cast(conv.bias, dtype)
    x = ops.cast(x, dtype)
    if slope < 0:  # not monotone: keep the reference order, autodiff's gradient
        y = tf.nn.leaky_relu(tf.nn.bias_add(_conv(x, kernel), bias), alpha=slope)
        return tf.raw_ops.MaxPool3D(input=y, **POOL)
    return _pooled_block(slope, input_grad)(x, kernel, bias)


# The layer's 'same'-padded, stride-1 Conv3D and the 2× max-pool, one set of arguments
# for the forward ops and their hand-written gradients
CONV = dict(strides=[1] * 5, padding="SAME")
POOL = dict(ksize=[1, 2, 2, 2, 1], strides=[1, 2, 2, 2, 1], padding="VALID")


def _conv(x, kernel):
    """The layer's Conv3D (grappler fuses it with the bias add)."""
    return tf.raw_ops.Conv3D(input=x, filter=kernel, **CONV)


def _pooled_block(slope: float, input_grad: bool):
    """conv + bias → max-pool 2 → LeakyReLU, and its gradient computed on the pooled map."""

    @tf.custom_gradient
    def block(x, kernel, bias):
        y = tf.nn.bias_add(_conv(x, kernel), bias)
        pooled = tf.raw_ops.MaxPool3D(input=y, **POOL)
        out = tf.nn.leaky_relu(pooled, alpha=slope)

        def grad(g):
            # For slope > 0, out > 0 ⇔ pooled > 0: the gradient may read the output.
            g = tf.raw_ops.LeakyReluGrad(gradients=g, features=out, alpha=slope)
            dy = tf.raw_ops.MaxPool3DGrad(orig_input=y, orig_output=pooled, grad=g, **POOL)
            dkernel = tf.raw_ops.Conv3DBackpropFilterV2(
                input=x, filter_sizes=tf.shape(kernel), out_backprop=dy, **CONV)
            dbias = tf.reduce_sum(g, axis=[0, 1, 2, 3])
            dx = tf.raw_ops.Conv3DBackpropInputV2(
                input_sizes=tf.shape(x), filter=kernel, out_backprop=dy,
                **CONV) if input_grad else None
            return dx, dkernel, dbias

        return out, grad

    return block
