"""Gradients TensorFlow gets wrong in bf16, replaced once per process.

``BiasAdd``: Keras adds every Dense/Conv bias with ``tf.nn.bias_add``, and the gradient
TensorFlow registers for it is the ``BiasAddGrad`` kernel, whose CPU version sums a
bfloat16 gradient in bfloat16: once the running sum reaches 256 adding 1 no longer changes
it, so the bias gradient of a convolution over a 4×64³ map of ones comes out as 256 or 512
instead of 1,048,576 (TensorFlow 2.21; ``tf.reduce_sum`` of the same tensor accumulates
wider and returns 1,048,576). Under ``mixed_bfloat16`` every bias of a sciperf TensorFlow
model was trained on such sums — 92–98% relative error against the float32 gradient on a
CosmoFlow block — while PyTorch's oneDNN kernel sums in float32. :func:`install` routes
bfloat16/float16 bias gradients through ``Sum`` and keeps ``BiasAddGrad`` (exact, fast)
for float32 and float64.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

_LOW_PRECISION = (tf.bfloat16, tf.float16)
_installed: dict[str, object] = {}


def bias_add_grad(op: tf.Operation, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(grad, Σ grad over every axis but the channel one), the sum accumulated wider than
    bfloat16 where the gradient is low-precision."""
    if grad.dtype not in _LOW_PRECISION:
        return _installed["BiasAdd"](op, grad)
    fmt = op.get_attr("data_format")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    rank = grad.shape.rank
    channel = 1 if fmt.startswith("NC") else rank - 1
    axes = [a for a in range(rank) if a != channel]
    return grad, tf.reduce_sum(grad, axis=axes)


def install() -> None:
    """Replace the registered ``BiasAdd`` gradient (idempotent; before any model traces).

    TensorFlow offers no public way to override a built-in op's gradient, so this edits
    its gradient registry; a TensorFlow whose registry no longer looks as expected fails
    here in one line rather than training biases on saturated sums.
    """
    if "BiasAdd" in _installed:
        return
    registry = getattr(tf_ops, "_gradient_registry", None)
    entry = getattr(registry, "_registry", {}).get("BiasAdd") if registry else None
    if not isinstance(entry, dict) or not callable(entry.get("type")):
        raise RuntimeError(f"tensorflow {tf.__version__}: no BiasAdd gradient in its registry "
                           "to replace (sciperf_tensorflow.gradients needs updating)")
    _installed["BiasAdd"] = entry["type"]
    entry["type"] = bias_add_grad
