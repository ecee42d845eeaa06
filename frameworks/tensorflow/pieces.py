"""Step pieces: what a workload adds to the template's training step, composed, not hooked.

The mirror of ``sciperf_pytorch.pieces`` (same classes, same order of calls, same
numbers). A workload backend returns its pieces from ``step_pieces()``; the template calls
each at fixed points of every optimizer step:

* ``attach(backend)`` — once, after the model, the optimizer and the initial state exist;
* ``on_gradients(grads)`` — the ranks' averaged gradients of the step, before the
  optimizer applies them (traced into the compiled step; only pieces whose
  ``acts_on_gradients`` is set);
* ``after_step()`` — after every optimizer step;
* ``variables()`` — what a checkpoint keeps for the piece (``state.npz``'s ``extra``
  group, in the pieces' order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

# torch's clip_grad_norm_ adds this to the norm before dividing: the same factor here
CLIP_EPS = 1e-6


class StepPiece:
    """One composable part of every optimizer step (the methods default to nothing)."""

    acts_on_gradients = False  # on_gradients is traced into the step

    def attach(self, backend: Any) -> None:
        """Once, after the model, the optimizer and the initial weights exist."""

    def on_gradients(self, grads: list) -> list:
        """The averaged gradients of this step, before the optimizer step."""
        return grads

    def after_step(self) -> None:
        """After every optimizer step."""

    def variables(self) -> list[tf.Variable]:
        """What a checkpoint keeps for this piece."""
        return []


class ClipGradNorm(StepPiece):
    """The global L2 norm of the averaged gradients bounded to `bound`: every gradient ×
    min(bound / (norm + 1e-6), 1), torch's rule (``tf.clip_by_global_norm`` divides by
    max(norm, bound) instead, a different last digit)."""

    acts_on_gradients = True

    def __init__(self, bound: float) -> None:
        if not bound > 0:
            raise ValueError(f"gradient-norm bound {bound} must be > 0")
        self.bound = float(bound)

    def on_gradients(self, grads: list) -> list:
        present = [g for g in grads if g is not None]
        if not present:
            return grads
        norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float32)))
                                 for g in present]))
        coef = tf.minimum(self.bound / (norm + CLIP_EPS), 1.0)
        return [None if g is None else g * tf.cast(coef, g.dtype) for g in grads]


class WeightEMA(StepPiece):
    """An exponential moving average of the trainable weights, updated after every
    optimizer step (avg += (p − avg)·(1 − decay); the first update copies, as torch's
    AveragedModel) and kept in checkpoints. ``model`` is the averaged copy (what a
    workload evaluates): a second build of the workload's model with the weights copied,
    its non-trainable variables the model's at ``attach``."""

    def __init__(self, decay: float, name: str = "ema") -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay {decay} must lie in [0, 1)")
        self.decay, self.name = float(decay), name
        self.model: Any = None

    def attach(self, backend: Any) -> None:
        self.source = backend.model
        self.model = backend.build_model(backend.model_spec)
        for avg, v in zip(self.model.variables, self.source.variables, strict=True):
            avg.assign(v)
        self.started = tf.Variable(False, trainable=False, name=f"{self.name}_started")
        pairs = list(zip(self.model.trainable_variables, self.source.trainable_variables,
                         strict=True))
        self._update = tf.function(lambda: self._average(pairs))

    def _average(self, pairs: list) -> None:
        rate = 1.0 - self.decay
        for avg, p in pairs:
            p = tf.convert_to_tensor(p)
            avg.assign(tf.where(self.started, avg + (p - avg) * tf.cast(rate, avg.dtype), p))
        self.started.assign(True)

    def after_step(self) -> None:
        self._update()

    def variables(self) -> list[tf.Variable]:
        return [*self.model.trainable_variables, self.started]


class StepCallback(StepPiece):
    """A function called after every optimizer step (e.g. a schedule of the workload's
    own, a statistic)."""

    def __init__(self, after_step: Callable[[], None]) -> None:
        self._after_step = after_step

    def after_step(self) -> None:
        self._after_step()
