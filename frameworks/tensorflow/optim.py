"""Keras-semantics momentum SGD for TensorFlow, as an explicit update over variables.

The reference's rule (velocity = m·velocity + lr·grad; w -= velocity) written out here
rather than taken from ``keras.optimizers.SGD``, whose internals (lr placement, slot
handling, iteration counters) change between Keras versions. The LR lives in a
``tf.Variable`` so a compiled step sees each new LR without retracing.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


class KerasSGD:
    """velocity = momentum·velocity + lr·grad; param -= velocity (fp32 master weights)."""

    def __init__(self, variables: Sequence, lr: float = 1e-3, momentum: float = 0.9):
        if lr < 0 or not 0 <= momentum < 1:
            raise ValueError(f"invalid lr={lr} or momentum={momentum}")
        self.variables = list(variables)
        self.momentum = float(momentum)
        self.lr = tf.Variable(lr, dtype=tf.float32, trainable=False, name="lr")
        self.velocities = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                       name=f"velocity{i}") for i, v in enumerate(self.variables)]

    def set_lr(self, lr: float) -> None:
        """Set the LR (the schedule is per epoch, decided outside)."""
        self.lr.assign(lr)

    def step(self, grads: Sequence) -> None:
        """Apply one update from `grads` (aligned with `variables`; None entries are skipped)."""
        if len(grads) != len(self.variables):
            raise ValueError(f"{len(grads)} gradients for {len(self.variables)} variables")
        for var, velocity, grad in zip(self.variables, self.velocities, grads, strict=True):
            if grad is None:
                continue
            velocity.assign(self.momentum * velocity + self.lr * tf.cast(grad, velocity.dtype))
            var.assign_sub(velocity)
