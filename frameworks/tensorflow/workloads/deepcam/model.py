"""DeepLabv3+ on the modified aligned Xception (output stride 16) in Keras 3, built from
``sciperf.workloads.deepcam.ModelSpec``.

Layer names are the spec's flat layer table, shared with the PyTorch model, so weights
map by the generic rules of ``sciperf.weights``. Inputs are NHWC. Where Keras' 'same'
padding differs from the reference (stride 2: Keras pads bottom/right only, PyTorch pads
1 on each side; transposed convs with PyTorch's padding 1 + output padding 1) the layers
pad or crop explicitly, so both frameworks compute the same function. BatchNorm is
written out with PyTorch's semantics (eps 1e-5, momentum 0.1, unbiased running variance)
instead of Keras' (eps 1e-3, biased). Under ``mixed_bfloat16`` the logits are cast to
float32, so the loss is fp32.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from sciperf.workloads.deepcam.spec import BlockSpec, LayerSpec, ModelSpec, SepConvSpec
from sciperf_tensorflow import runtime
from sciperf_tensorflow.weights import export_weights, import_weights

__all__ = ["Affine", "AtrousConv2D", "BatchNorm", "Conv", "Deconv", "DeepCam", "Pointwise",
           "build_layer", "conv2d", "crop_deconv", "dilated_same", "export_weights",
           "import_weights", "unit_batch_fp32"]

BN_EPS, BN_MOMENTUM = 1e-5, 0.1  # PyTorch's BatchNorm2d defaults (the reference)


class BatchNorm(keras.layers.Layer):
    """Batch normalisation with PyTorch semantics, statistics computed in float32.

    One fused kernel (FusedBatchNormV3, forward and gradient) on a float32 copy of the
    activations: it normalises with the biased batch variance and returns the unbiased one
    for the running average, as PyTorch does; equal to the written-out form it replaces
    (moments, then the affine) to 5e-6. Measured side by side, mini DeepCAM training on a
    2-vCPU Xeon with AMX: fp32 41.6–50.3 → 54.9–57.1 samples/s, bf16 32.8 → 52.3–55.2; the
    kernel's own bf16 path (no float32 copy) was slower there (29–36).
    """

    def __init__(self, channels: int, **kwargs):
        super().__init__(**kwargs)
        self.channels = channels

    def build(self, input_shape=None) -> None:
        c, f32 = (self.channels,), {"autocast": False}  # float32 statistics under bf16
        self.gamma = self.add_weight(shape=c, initializer="ones", name="gamma", **f32)
        self.beta = self.add_weight(shape=c, initializer="zeros", name="beta", **f32)
        self.moving_mean = self.add_weight(shape=c, initializer="zeros", name="moving_mean",
                                           trainable=False, **f32)
        self.moving_variance = self.add_weight(shape=c, initializer="ones",
                                               name="moving_variance", trainable=False, **f32)
        self.built = True

    def call(self, x, training: bool = False):
        x = ops.cast(x, "float32")
        if training:
            empty = tf.constant([], tf.float32)
            y, mean, unbiased, *_ = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=self.gamma, offset=self.beta, mean=empty, variance=empty,
                epsilon=BN_EPS, exponential_avg_factor=1.0, data_format="NHWC",
                is_training=True)
            self.moving_mean.assign((1 - BN_MOMENTUM) * self.moving_mean + BN_MOMENTUM * mean)
            self.moving_variance.assign((1 - BN_MOMENTUM) * self.moving_variance
                                        + BN_MOMENTUM * unbiased)
            return ops.cast(y, self.compute_dtype)
        y, *_ = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=self.gamma, offset=self.beta, mean=self.moving_mean,
            variance=self.moving_variance, epsilon=BN_EPS, data_format="NHWC",
            is_training=False)
        return ops.cast(y, self.compute_dtype)


class Affine(keras.layers.Layer):
    """Per-channel γ·x + β after the ASPP image-pooling conv (the reference's
    TrainableAffine)."""

    def __init__(self, channels: int, **kwargs):
        super().__init__(**kwargs)
        self.channels = channels

    def build(self, input_shape=None) -> None:
        self.gamma = self.add_weight(shape=(self.channels,), initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=(self.channels,), initializer="zeros", name="beta")
        self.built = True

    def call(self, x):
        return x * ops.cast(self.gamma, x.dtype) + ops.cast(self.beta, x.dtype)


class AtrousConv2D(keras.layers.Conv2D):
    """A dilated convolution (the ASPP's rates 6, 12, 18) as ONE Conv2D kernel.

    Keras computes a dilated convolution through ``tf.nn.convolution``, which runs it as
    SpaceToBatchND → an undilated convolution → BatchToSpaceND: at stride-16 feature maps
    smaller than the rate (the mini's 6×9 under rate 18) that makes batches of 2,592 3×3
    images, so oneDNN ran GEMMs of a few rows — 1.4–6.3 ms a call where PyTorch's dilated
    kernel takes 0.02–0.06 ms. ``tf.nn.conv2d`` with ``dilations`` hands the rate to the
    kernel itself; forward and both gradients equal PyTorch's exactly (tested). The
    depthwise layers keep Keras' path: the CPU gradient kernels of a dilated
    DepthwiseConv2dNative ignore the rate. In 16-bit floats the weight gradient is a
    MatMul (`dilated_same`). Without oneDNN (TF_ENABLE_ONEDNN_OPTS=0) TensorFlow's Eigen
    kernels have no dilated gradients, so the layer takes Keras' path there.
    """

    def convolution_op(self, inputs, kernel):
        if not runtime.onednn():
            return super().convolution_op(inputs, kernel)
        if inputs.dtype in (tf.bfloat16, tf.float16) and self.strides == (1, 1) \
                and self.padding == "same":
            return dilated_same(inputs, tf.cast(kernel, inputs.dtype), self.dilation_rate)
        return conv2d(inputs, kernel, self.strides, self.padding, self.dilation_rate)


def unit_batch_fp32(x) -> bool:
    """Whether TensorFlow's oneDNN would run this 2-D convolution's forward on a filter in
    the stored HWIO layout: a float32 map of (static) batch 1 on a CPU with oneDNN on.

    Why it matters: TensorFlow 2.21's oneDNN forward asks for the filter in HWIO, not in
    the kernel's preferred blocked layout, exactly then (a heuristic for batch-1
    inference; 3-D filters keep "any"), and on an AVX2 CPU oneDNN then takes its im2col +
    GEMM kernel instead of the blocked direct one (``x64:gemm:jit`` against
    ``brg_conv_fwd:avx2``): the decoder's 304→256 3×3 at 192×288 took 2.0 s a step
    against PyTorch's 0.63 (2-vCPU Zen 3, full DeepCAM, batch 1, fp32).
    """
    return (x.dtype == tf.float32 and x.shape.rank == 4 and x.shape[0] == 1
            and runtime.onednn() and not tf.config.list_logical_devices("GPU"))


def conv2d(x, kernel, strides, padding: str, dilations=(1, 1)):
    """``tf.nn.conv2d`` (NHWC, HWIO, Keras' 'same'/'valid'); where `unit_batch_fp32`
    holds, the forward runs as a 3-D convolution over a depth of 1 — the same sums, but
    oneDNN picks the filter's layout and its direct kernel — and the gradients are the 2-D
    ones TensorFlow would take. Measured side by side for the 304→256 3×3 at 192×288
    (2-vCPU Zen 3): forward 1.59–1.67 → 0.56 s, forward + both gradients 6.7–7.1 →
    5.3–6.1 s. Outputs equal the 2-D convolution's to float32 rounding (tested)."""
    pad = padding.upper()
    if not unit_batch_fp32(x):
        return tf.nn.conv2d(x, kernel, strides, pad, dilations=dilations)
    stride4, dilation4 = [1, *strides, 1], [1, *dilations, 1]

    @tf.custom_gradient
    def conv(x, k):
        def grad(dy):
            dx = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.shape(x), filter=k, out_backprop=dy, strides=stride4,
                padding=pad, dilations=dilation4)
            dk = tf.raw_ops.Conv2DBackpropFilter(
                input=x, filter_sizes=tf.shape(k), out_backprop=dy, strides=stride4,
                padding=pad, dilations=dilation4)
            return dx, dk
        return _depth1_conv(x, k, stride4, pad, dilation4), grad
    return conv(x, tf.convert_to_tensor(kernel))


def _depth1_conv(x, k, stride4, pad: str, dilation4):
    """The 2-D convolution of NHWC `x` with HWIO `k` as a Conv3D over a unit depth."""
    y = tf.nn.conv3d(x[:, None], k[None], [1, 1, *stride4[1:]], pad,
                     dilations=[1, 1, *dilation4[1:]])
    return y[:, 0]


class Conv(keras.layers.Conv2D):
    """A plain convolution whose forward takes `conv2d` (TensorFlow's batch-1 fp32 filter
    layout on CPUs, above); otherwise Keras' Conv2D."""

    def convolution_op(self, inputs, kernel):
        return conv2d(inputs, kernel, self.strides, self.padding, self.dilation_rate)


class Deconv(keras.layers.Conv2DTranspose):
    """Keras' transposed convolution ('valid', no bias: the decoder's) whose input
    gradient — a forward convolution — takes `conv2d`'s route where `unit_batch_fp32`
    holds: there it was the same HWIO im2col kernel (the 256→256 at 384×576: 2.2 s a step
    against 0.51 for PyTorch's, 2-vCPU Zen 3). Forward and weight gradient stay the ops
    TensorFlow's own gradient of ``conv2d_transpose`` takes."""

    def call(self, inputs):
        if not unit_batch_fp32(inputs) or self.padding != "valid" or self.use_bias:
            return super().call(inputs)
        stride4 = [1, *self.strides, 1]
        kh, kw, cout, _ = self.kernel.shape
        n, h, w, _ = inputs.shape
        out = [n, (h - 1) * self.strides[0] + kh, (w - 1) * self.strides[1] + kw, cout]

        @tf.custom_gradient
        def deconv(x, k):
            def grad(dy):
                dx = _depth1_conv(dy, k, stride4, "VALID", [1, 1, 1, 1])
                dk = tf.raw_ops.Conv2DBackpropFilter(
                    input=dy, filter_sizes=tf.shape(k), out_backprop=x, strides=stride4,
                    padding="VALID")
                return dx, dk
            return tf.nn.conv2d_transpose(x, k, out, stride4, "VALID"), grad
        return deconv(inputs, tf.convert_to_tensor(self.kernel))


def dilated_same(inputs, kernel, rate: tuple[int, int]):
    """A stride-1, 'same'-padded dilated convolution whose weight gradient is one MatMul
    over the input's shifted taps (im2col), in 16-bit floats; forward and input gradient
    stay oneDNN's convolution.

    Why: TensorFlow 2.21's oneDNN 3.7.3 computes the AMX bf16 weight gradient of a
    dilated convolution far behind the one in torch's oneDNN 3.12 (the ASPP's rates 18 /
    12 / 6: 580 / 413 / 266 against 132 / 114 / 97 ms a step), while its bf16 MatMul
    does not lag. Measured side by side, one ASPP branch (2048→256, 3×3, 48×72, batch
    1) forward + both gradients on a 2-vCPU Xeon with AMX: rate 18 703 → 393 ms, 12
    502 → 289, 6 498 → 293 (the whole layer as im2col, the forward and input gradient
    too, was slower: 832–987 ms). The taps' matrix holds k² copies of the input (127 MB
    for that branch), alive only inside the gradient."""
    dilations = [1, *rate, 1]

    @tf.custom_gradient
    def conv(x, k):
        def grad(dy):
            dx = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.shape(x), filter=k, out_backprop=dy, strides=[1, 1, 1, 1],
                padding="SAME", dilations=dilations)
            kh, kw, cin, cout = k.shape
            taps = tf.reshape(_taps(x, (kh, kw), rate), [-1, kh * kw * cin])
            dk = tf.matmul(taps, tf.reshape(dy, [-1, cout]), transpose_a=True)
            return dx, tf.reshape(dk, k.shape)
        return tf.nn.conv2d(x, k, 1, "SAME", dilations=dilations), grad
    return conv(inputs, kernel)


def _taps(x, size: tuple[int, int], rate: tuple[int, int]):
    """The input under each kernel tap of a 'same'-padded dilated convolution, stacked on
    the channels in the kernel's (row, column, channel) order: (N, H, W, kh·kw·C)."""
    (kh, kw), (dh, dw) = size, rate
    ph, pw = dh * (kh - 1), dw * (kw - 1)  # TensorFlow's SAME: the odd pixel after
    padded = tf.pad(x, [[0, 0], [ph // 2, ph - ph // 2], [pw // 2, pw - pw // 2], [0, 0]])
    h, w = tf.shape(x)[1], tf.shape(x)[2]
    return tf.concat([padded[:, i * dh:i * dh + h, j * dw:j * dw + w, :]
                      for i in range(kh) for j in range(kw)], axis=-1)


class Pointwise(keras.layers.Conv2D):
    """A 1×1, stride-1 convolution that, in 16-bit floats, runs as one MatMul over the
    map's pixels: (N·H·W, C_in) × (C_in, C_out), the same sums as the convolution.

    Why: TensorFlow 2.21 bundles oneDNN 3.7.3, whose AMX bf16 weight gradient for 1×1
    convolutions (``brgconv_bwd_w:avx10_1_512_amx``) runs far behind the one in torch's
    oneDNN 3.12 — for the middle flow's 728→728 at 48×72, 37.9 against 10.6 ms on one
    thread (same primitive, formats and shape; 2-vCPU Xeon with AMX) — while its bf16
    MatMul and MatMul gradients do not lag: forward + both gradients of that layer 33 →
    19 ms, of 2048→256 39 → 21 ms, equal at 192×288 (measured side by side, TF 2.21).
    DeepCAM has 69 such layers (51 of them 728→728). fp32 keeps the convolution (the
    MatMul was no faster there: 40–53 against 39–48 ms, 110–122 against 130 ms at
    192×288). Forward and both gradients equal Conv2D's (tested); the kernel variable
    stays (1, 1, C_in, C_out), so weights and checkpoints are unchanged.
    """

    def convolution_op(self, inputs, kernel):
        if inputs.dtype not in (tf.bfloat16, tf.float16):
            return super().convolution_op(inputs, kernel)
        cin = kernel.shape[2]
        pixels = tf.reshape(inputs, [-1, cin])
        y = tf.matmul(pixels, tf.reshape(kernel, [cin, kernel.shape[3]]))
        return tf.reshape(y, tf.concat([tf.shape(inputs)[:3], [kernel.shape[3]]], 0))


def _init(spec: LayerSpec):
    """The spec's init distribution (shared with PyTorch) as a Keras initializer."""
    scale = spec.init_scale()
    if spec.init == "he_normal":
        return keras.initializers.RandomNormal(0.0, scale)
    return keras.initializers.RandomUniform(-scale, scale)


def build_layer(spec: LayerSpec) -> keras.layers.Layer:
    """The Keras layer of one table entry, built for its input channels."""
    k, s, d, name = spec.kernel, spec.stride, spec.dilation, spec.name
    if spec.kind == "norm":
        layer = BatchNorm(spec.cout, name=name)
    elif spec.kind == "affine":
        layer = Affine(spec.cout, name=name)
    elif spec.kind == "depthwise":
        layer = keras.layers.DepthwiseConv2D(
            k, strides=s, padding="valid" if s > 1 else "same", dilation_rate=d,
            use_bias=False, depthwise_initializer=_init(spec), name=name)
    elif spec.kind == "deconv":
        layer = Deconv(spec.cout, k, strides=s, padding="valid", use_bias=False,
                       kernel_initializer=_init(spec), name=name)
    else:
        conv = Conv
        if d > 1:
            conv = AtrousConv2D
        elif k == 1 and s == 1:
            conv = Pointwise
        layer = conv(
            spec.cout, k, strides=s, padding="valid" if s > 1 or k == 1 else "same",
            dilation_rate=d, use_bias=spec.bias, kernel_initializer=_init(spec),
            bias_initializer=_init(spec), name=name)
    layer.build((None, None, None, spec.cin))
    return layer


def pad_same(x, layer: LayerSpec):
    """PyTorch's symmetric padding (dilation·(k//2) per side) before a strided k>1 conv."""
    if layer.stride == 1 or layer.kernel == 1 or layer.kind == "deconv":
        return x
    p = layer.dilation * (layer.kernel // 2)
    return ops.pad(x, [[0, 0], [p, p], [p, p], [0, 0]])


def crop_deconv(y):
    """PyTorch's padding=1, output_padding=1 of a stride-2 transposed convolution: Keras'
    'valid' output without its first row and column.

    A ``Slice``, not ``y[:, 1:, 1:]`` (StridedSlice): the gradient of a Slice is one Pad,
    a StridedSliceGrad zero-fills and copies element-wise — 210 ms against 10 ms for the
    192×288×256 → 384×576 deconvolution's backward on a 2-vCPU Zen 5 (TF 2.21), 283 ms of
    the full model's 4.5 s bf16 step. (Padding the convolution explicitly instead avoids the
    crop, but oneDNN has no bf16 kernel for it: 10× slower there.)
    """
    return tf.slice(y, [0, 1, 1, 0], [-1, -1, -1, -1])


class DeepCam(keras.Model):
    """Xception encoder → ASPP → deconvolution decoder with a low-level skip (reference)."""

    # this model's own weight-holding layers, for the generic mapper (sciperf_tensorflow.weights)
    WEIGHT_KINDS = ((BatchNorm, "norm"), (Affine, "affine"))

    def __init__(self, spec: ModelSpec, **kwargs):
        super().__init__(**kwargs)
        spec.check()
        self.spec = spec
        self.table = {layer.name: layer for layer in spec.layers()}
        self.named = {name: build_layer(layer) for name, layer in self.table.items()}
        for name, layer in self.named.items():
            setattr(self, name, layer)
        self.blocks = spec.blocks()
        self.exit = spec.exit_convs()
        self.built = True

    def _apply(self, name: str, x, training: bool = False):
        layer, spec = self.named[name], self.table[name]
        if spec.kind == "norm":
            return layer(x, training=training)
        y = layer(pad_same(x, spec))
        if spec.kind == "deconv":
            y = crop_deconv(y)
        return y

    def _sep(self, x, sep: SepConvSpec, training: bool):
        x = self._apply(f"{sep.name}_pointwise", self._apply(f"{sep.name}_depthwise", x))
        if sep.norm:
            x = self._apply(sep.norm, x, training)
        return ops.relu(x) if sep.relu else x

    def _block(self, x, block: BlockSpec, training: bool):
        out = x
        for sep in block.convs:
            out = self._sep(out, sep, training)
        skip = x
        if block.skip:
            skip = self._apply(f"{block.name}_skipbn", self._apply(f"{block.name}_skip", x),
                               training)
        out = out + skip
        return ops.relu(out) if block.end_with_relu else out

    def _conv_bn_relu(self, x, conv: str, norm: str, training: bool):
        return ops.relu(self._apply(norm, self._apply(conv, x), training))

    def encoder(self, x, training: bool = False):
        """(features at stride 16, low-level features at stride 4)."""
        x = self._conv_bn_relu(x, "conv1", "bn1", training)
        x = self._conv_bn_relu(x, "conv2", "bn2", training)
        x = low = ops.relu(self._block(x, self.blocks[0], training))
        for block in self.blocks[1:]:
            x = self._block(x, block, training)
        for sep in self.exit:
            x = self._sep(x, sep, training)
        return x, low

    def aspp(self, x, training: bool = False):
        """Four atrous branches + image pooling, concatenated → 1×1 → BN → ReLU."""
        branches = [self._conv_bn_relu(x, f"aspp{i}", f"aspp{i}_bn", training)
                    for i in range(1, 5)]
        pooled = self._apply("gpool_conv", ops.mean(x, axis=(1, 2), keepdims=True))
        pooled = ops.relu(self.named["gpool_affine"](pooled))
        pooled = pooled * ops.ones_like(branches[0][..., :1])  # broadcast to H×W
        x = ops.concatenate([*branches, pooled], axis=-1)
        return self._conv_bn_relu(x, "aspp_conv", "aspp_bn", training)

    def decoder(self, x, low, training: bool = False):
        """Two deconvs to stride 4, concat the projected low-level features, 3 convs,
        two more deconvs to full resolution (the last without BN)."""
        low = self._conv_bn_relu(low, "low_conv", "low_bn", training)
        x = self._conv_bn_relu(x, "deconv1a", "deconv1a_bn", training)
        x = self._conv_bn_relu(x, "deconv1b", "deconv1b_bn", training)
        x = ops.concatenate([x, low], axis=-1)
        x = self._conv_bn_relu(x, "dec_conv1", "dec_bn1", training)
        x = self._conv_bn_relu(x, "dec_conv2", "dec_bn2", training)
        x = self._apply("dec_conv3", x)
        x = self._conv_bn_relu(x, "deconv2", "deconv2_bn", training)
        return self._apply("last_deconv", x)

    def call(self, x, training: bool = False):
        """x: (N, H, W, C) normalised climate fields → (N, H, W, classes) float32 logits."""
        features, low = self.encoder(x, training)
        logits = self.decoder(self.aspp(features, training), low, training)
        return ops.cast(logits, "float32")

