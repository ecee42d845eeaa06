"""Optimizers for TensorFlow as explicit updates: Keras-semantics SGD, Adam/AdamW/LAMB.

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

    def state(self) -> list:
        """The variables a checkpoint keeps: LR and velocities."""
        return [self.lr, *self.velocities]

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


class AdamFamily:
    """Adam, AdamW and LAMB as explicit updates, mirroring the PyTorch side op for op.

    * Adam (torch.optim.Adam): g += wd·w (L2), then the bias-corrected step
      w −= (lr/bc1)·m / (√v/√bc2 + eps);
    * AdamW (torch.optim.AdamW): w ·= 1 − lr·wd, then the same step without L2;
    * LAMB (apex FusedLAMB, the reference's): grads divided by max(‖g‖/max_norm, 1)
      (global norm), u = m̂/(√v̂ + eps) + wd·w, w −= lr·(‖w‖/‖u‖)·u where wd ≠ 0.

    Moments are fp32 variables; the LR is a variable so a compiled step never retraces.
    `decays` (one flag per variable; None: all) says which variables the weight decay
    applies to — torch's parameter groups of decay and no decay.
    """

    def __init__(self, variables: Sequence, name: str, lr: float, betas: Sequence[float],
                 eps: float, weight_decay: float, max_grad_norm: float = 1.0,
                 decays: Sequence[bool] | None = None):
        if name not in ("Adam", "AdamW", "LAMB"):
            raise ValueError(f"opt.name={name} is not one of Adam, AdamW, LAMB")
        self.variables, self.name = list(variables), name
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.eps, self.wd, self.max_norm = float(eps), float(weight_decay), float(max_grad_norm)
        self.decays = [True] * len(self.variables) if decays is None else list(decays)
        if len(self.decays) != len(self.variables):
            raise ValueError(f"{len(self.decays)} decay flags for {len(self.variables)} "
                             "variables")
        self.lr = tf.Variable(lr, dtype=tf.float32, trainable=False, name="lr")
        self.t = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="step")
        self.m = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name=f"m{i}")
                  for i, v in enumerate(self.variables)]
        self.v = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name=f"v{i}")
                  for i, v in enumerate(self.variables)]

    def state(self) -> list:
        """The variables a checkpoint keeps: LR, step count, first and second moments."""
        return [self.lr, self.t, *self.m, *self.v]

    def set_lr(self, lr: float) -> None:
        """Set the LR of the next step (the schedule is per step, decided outside)."""
        self.lr.assign(lr)

    def step(self, grads: Sequence) -> None:
        """Apply one update from `grads` (aligned with `variables`; None entries skipped)."""
        if len(grads) != len(self.variables):
            raise ValueError(f"{len(grads)} gradients for {len(self.variables)} variables")
        self.t.assign_add(1.0)
        # embedding lookups give IndexedSlices: made dense (the moments are dense anyway)
        grads = [None if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32)
                 for g in grads]
        if self.name == "LAMB":
            norm = tf.linalg.global_norm([g for g in grads if g is not None])
            clip = tf.maximum(norm / self.max_norm, 1.0)
            grads = [None if g is None else g / clip for g in grads]
        # bias corrections in float64, as torch computes them from a Python step count
        # (1 − 0.999 in float32 is off by 5e-5 relative)
        bc1 = tf.cast(1.0 - tf.constant(self.beta1, tf.float64) ** self.t, tf.float32)
        bc2 = tf.cast(1.0 - tf.constant(self.beta2, tf.float64) ** self.t, tf.float32)
        for var, m, v, g, decay in zip(self.variables, self.m, self.v, grads, self.decays,
                                       strict=True):
            if g is not None:
                self._update(var, m, v, g, bc1, bc2, self.wd if decay else 0.0)

    def _update(self, var, m, v, g, bc1, bc2, wd: float) -> None:
        w = tf.cast(var, tf.float32)
        if self.name == "Adam" and wd:
            g = g + wd * w
        if self.name == "AdamW" and wd:
            w = w * (1.0 - self.lr * wd)
        m.assign(self.beta1 * m + (1.0 - self.beta1) * g)
        v.assign(self.beta2 * v + (1.0 - self.beta2) * g * g)
        if self.name == "LAMB":
            update = (m / bc1) / (tf.sqrt(v / bc2) + self.eps)
            ratio = 1.0
            if wd:
                update = update + wd * w
                w_norm, u_norm = tf.norm(w), tf.norm(update)
                ratio = tf.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            var.assign(w - self.lr * ratio * update)
            return
        denom = tf.sqrt(v) / tf.sqrt(bc2) + self.eps
        var.assign(w - (self.lr / bc1) * m / denom)
