"""Step pieces: what a workload adds to the template's training step, composed, not hooked.

A workload backend returns its pieces from ``step_pieces()`` (docs/architecture.md, "The
backend template"); the template calls each at fixed points of every optimizer step, so
gradient clipping, an average of the weights or a per-step callback is written once here
and used by any workload, in the same order in both frameworks (the mirror of
``sciperf_tensorflow.pieces``, class for class):

* ``attach(backend)`` — once, after the model, the optimizer and the initial state exist;
* ``on_gradients(backend)`` — after the ranks' gradients are averaged, before the
  optimizer step (only pieces whose ``acts_on_gradients`` is set);
* ``after_step()`` — after every optimizer step;
* ``state()`` / ``load_state(state)`` — the tensors a checkpoint keeps for the piece
  (merged into ``state.pt``'s ``extra``; the keys of all pieces are distinct).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from sciperf_pytorch.state import tensor_problem


class StepPiece:
    """One composable part of every optimizer step (the methods default to nothing)."""

    acts_on_gradients = False  # on_gradients is called (Horovod then synchronises first)

    def attach(self, backend: Any) -> None:
        """Once, after the model, the optimizer and the initial weights exist."""

    def on_gradients(self, backend: Any) -> None:
        """The averaged gradients of this step, before the optimizer step (in place)."""

    def after_step(self) -> None:
        """After every optimizer step."""

    def state(self) -> dict[str, Any]:
        """Tensors a checkpoint keeps for this piece (keys distinct across pieces)."""
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` from a checkpoint (raise ValueError naming the tensor)."""


class ClipGradNorm(StepPiece):
    """The global L2 norm of the averaged gradients bounded to `bound` (taken after the
    ranks' average: every replica clips the same gradients by the same factor)."""

    acts_on_gradients = True

    def __init__(self, bound: float) -> None:
        if not bound > 0:
            raise ValueError(f"gradient-norm bound {bound} must be > 0")
        self.bound = float(bound)

    def on_gradients(self, backend: Any) -> None:
        """torch's rule: every gradient × min(bound / (norm + 1e-6), 1)."""
        torch.nn.utils.clip_grad_norm_(backend.model.parameters(), self.bound)


class WeightEMA(StepPiece):
    """An exponential moving average of the trainable weights, updated after every
    optimizer step (avg += (p − avg)·(1 − decay); the first update copies, as torch's
    AveragedModel) and kept in checkpoints. ``model`` is the averaged copy (what a
    workload evaluates); its buffers are the model's at ``attach``."""

    def __init__(self, decay: float, name: str = "ema") -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay {decay} must lie in [0, 1)")
        self.decay, self.name = float(decay), name
        self.model: torch.nn.Module | None = None
        self.started = False

    def attach(self, backend: Any) -> None:
        self.source = backend.model
        self.model = copy.deepcopy(backend.model).eval().requires_grad_(False)
        self.started = False

    @torch.no_grad()
    def after_step(self) -> None:
        assert self.model is not None, "WeightEMA used before attach"
        for avg, p in zip(self.model.parameters(), self.source.parameters(), strict=True):
            if self.started:
                avg.add_((p.detach() - avg) * (1.0 - self.decay))
            else:
                avg.copy_(p.detach())
        self.started = True

    def state(self) -> dict[str, Any]:
        assert self.model is not None, "WeightEMA used before attach"
        return {self.name: self.model.state_dict(),
                f"{self.name}_started": torch.tensor(self.started)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        assert self.model is not None, "WeightEMA used before attach"
        like = self.model.state_dict()
        for name, value in state[self.name].items():
            if name in like and (problem := tensor_problem(value, like[name])):
                raise ValueError(f"{self.name} parameter {name} {problem}")
        self.model.load_state_dict(state[self.name])
        self.started = bool(state[f"{self.name}_started"])


class StepCallback(StepPiece):
    """A function called after every optimizer step (e.g. a schedule of the workload's
    own, a statistic)."""

    def __init__(self, after_step: Callable[[], None]) -> None:
        self._after_step = after_step

    def after_step(self) -> None:
        self._after_step()


def merged_state(pieces: Sequence[StepPiece]) -> dict[str, Any]:
    """Every piece's checkpoint tensors in one dict; a key two pieces claim is a bug."""
    merged: dict[str, Any] = {}
    for piece in pieces:
        part = piece.state()
        if clash := set(part) & set(merged):
            raise ValueError(f"step pieces share the checkpoint key(s) {sorted(clash)}")
        merged |= part
    return merged
