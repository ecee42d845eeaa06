"""OpenFold in PyTorch: the hooks of the one backend template (``sciperf_pytorch.backend``).

What is OpenFold's own (spec/openfold.md §3–6):

* the batch is the reference's feature dict with a trailing recycling axis; every step
  runs ``n + 1`` passes, ``n`` drawn from the reference dataloader's stream (the same on
  every rank, :func:`sciperf.workloads.openfold.sampler.recycling_iterations`), the first
  ``n`` without gradients; dropout is reseeded every step from
  ``forward_<seed>_<rank>_<iteration>`` as the reference;
* the loss is the reference's (``loss.py``) on the last pass's slice of the batch;
* Adam (eps 1e-6), the global gradient norm clipped to 0.1 after the ranks' average, the LR
  per step, then the EMA of the weights ("SWA", decay 0.9) that validation uses;
* ``train.init_checkpoint``: the reference's resumable checkpoint (``alphafold_state_dict``
  + ``optimizer_state_dict``, or a bare state dict) loaded strictly — read with
  ``weights_only=True``, so the file never runs code; the EMA starts from it;
* the metric: each validation chain's global lDDT-Cα of the EMA model's prediction after
  all recycling passes, averaged over chains (one chain per batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sciperf.backends import RunContext
from sciperf.errors import SciperfError, first_line
from sciperf.workloads.openfold import checkpoint, sampler
from sciperf.workloads.openfold.features import seed_from_string
from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_pytorch.backend import WorkloadBackend
from sciperf_pytorch.pieces import ClipGradNorm, StepPiece, WeightEMA
from sciperf_pytorch.state import (
    check_loaded_optimizer,
    check_optimizer_tensors,
    group_settings,
    load_weights_only,
    optimizer_names,
    tensor_problem,
)
from sciperf_pytorch.workloads.openfold import loss as of_loss
from sciperf_pytorch.workloads.openfold.model import AlphaFold

Batch = dict[str, torch.Tensor]
LDDT_EVAL_EPS = 1e-8  # the reference's validation lDDT (one eps inside the root and ratio)


def load_reference_checkpoint(path: str | Path, model: nn.Module,
                              optimizer: torch.optim.Optimizer | None) -> None:
    """Load a reference-format checkpoint into `model` (strictly) and `optimizer`: the
    reference's resumable dict (``alphafold_state_dict``, ``optimizer_state_dict``,
    ``iteration``, which initialisation ignores as the reference does) or a bare state
    dict. Read with ``weights_only=True``, so the file never runs code; any disagreement is
    one line naming the file and the first mismatching parameter."""
    key = f"train.init_checkpoint={path}"
    state = load_weights_only(path, key)
    weights = checkpoint.weights_of(key, state)
    _check_state_dict(key, weights, model)
    try:  # checked above; what torch still refuses is one line too
        model.load_state_dict(weights, strict=True)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise SciperfError(f"{key}: does not load into this model ({first_line(exc)})"
                           ) from None
    if optimizer is not None and weights is not state and "optimizer_state_dict" in state:
        _load_optimizer_state(key, state["optimizer_state_dict"], optimizer, model)


def _check_state_dict(key: str, weights: Mapping[str, Any], model: nn.Module) -> None:
    """Names, order and shapes of `weights` against the model's (the common check), and
    every tensor dense, real and finite: the loss zeroes NaN terms as the reference does,
    so NaN weights would train to a loss of 0 rather than stop the run, and torch drops a
    complex tensor's imaginary part with only a warning."""
    like = model.state_dict()
    checkpoint.check_tensors(
        key, [(name, tuple(t.shape)) for name, t in like.items()],
        [(str(name), tuple(t.shape) if isinstance(t, torch.Tensor) else None)
         for name, t in weights.items()],
        lambda name: tensor_problem(weights[name], like[name]))


def _load_optimizer_state(key: str, state: Any, optimizer: torch.optim.Optimizer,
                          model: nn.Module) -> None:
    """The reference's Adam state into `optimizer`: its moments dense, real, finite and of
    each parameter's shape, its hyperparameters of the kinds Adam was built with (torch
    checks only the group sizes; a wrong moment or ``betas="xx"`` fails at the first
    step)."""
    what = "optimizer_state_dict"
    settings = group_settings(optimizer)
    check_optimizer_tensors(key, what, state, optimizer_names(optimizer, model))
    try:
        optimizer.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 (torch raises Value/Key/Type errors here)
        raise SciperfError(f"{key}: its optimizer_state_dict does not fit this model's Adam "
                           f"({first_line(exc)})") from None
    check_loaded_optimizer(key, what, optimizer, settings, model)


class OpenFoldBackend(WorkloadBackend):
    """OpenFold's hooks: AlphaFold2, Adam with clipping, the EMA, the reference's loss."""

    # a checkpoint's state.pt is also a reference resumable checkpoint (its two keys; the
    # reference ignores sciperf's others): train.init_checkpoint takes either
    state_keys = ("alphafold_state_dict", "optimizer_state_dict")

    # ------------------------------------------------------------------ the network
    def build_model(self, model_spec: ModelSpec) -> nn.Module:
        """AlphaFold2 of `model_spec` (per-block gradient checkpointing as configured)."""
        return AlphaFold(model_spec, checkpointing=bool(self.cfg.train.checkpointing))

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """torch Adam as the reference (no weight decay, no amsgrad); LR set every step."""
        o = self.cfg.opt
        return torch.optim.Adam(params, lr=float(o.lr), betas=(float(o.beta_1),
                                                               float(o.beta_2)),
                                eps=float(o.eps), weight_decay=float(o.weight_decay),
                                amsgrad=False)

    def load_initial(self) -> None:
        """train.init_checkpoint: the reference's checkpoint (weights, Adam's state)."""
        if self.cfg.train.init_checkpoint:
            load_reference_checkpoint(self.cfg.train.init_checkpoint, self.model,
                                      self.optimizer)

    def step_pieces(self) -> Sequence[StepPiece]:
        """The reference clips the averaged gradients' global norm to opt.clip_norm (0:
        none), then updates the EMA of the weights ("SWA") that validation uses."""
        self.ema = WeightEMA(float(self.cfg.opt.swa_decay))
        bound = float(self.cfg.opt.clip_norm)
        return [*([ClipGradNorm(bound)] if bound > 0 else []), self.ema]

    def setup(self, ctx: RunContext) -> None:
        """The template's setup, then the recycling counts of every step."""
        super().setup(ctx)
        steps = int(self.cfg.train.max_epochs) * self.workload.plan.steps_per_epoch(self.cfg)
        self.recycling = sampler.recycling_iterations(
            int(self.cfg.seed), max(steps, 1), int(self.model_spec.num_recycling_iters))

    def memory_format(self) -> None:
        """Feature dicts have no channels-last layout."""
        return None

    # ------------------------------------------------------------------ batches
    def to_device(self, x_np: Mapping[str, np.ndarray], y_np: Any) -> tuple[Batch, Batch]:
        """A collated feature dict → device tensors; the loss and metric read the same
        dict (inputs and supervision live together)."""
        batch = {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device)
                 for k, v in x_np.items()}
        return batch, batch

    def batch_size(self, x: Batch) -> int:
        """Chains in the batch."""
        return int(x["aatype"].shape[0])

    # ------------------------------------------------------------------ a step
    def forward(self, x: Batch) -> dict[str, Any]:
        """Training: this step's recycling count, dropout reseeded as the reference;
        evaluation: the EMA model, every recycling pass."""
        if self.net.training and torch.is_grad_enabled():
            step = self.opt_step
            n = int(self.recycling[min(step, len(self.recycling) - 1)])
            torch.manual_seed(seed_from_string(
                f"forward_{self.cfg.seed}_{self.ctx.rank}_{step + 1}"))
            self._last_pass = n
            return self.net(x, num_recycling=n)
        self._last_pass = int(x["aatype"].shape[-1]) - 1
        return self.ema.model(x, num_recycling=self._last_pass)

    def _last(self, batch: Batch) -> Batch:
        """The batch at the last pass's recycling index (what the loss and metric see)."""
        n = self._last_pass
        return {k: v[..., n] for k, v in batch.items()}

    def loss_fn(self, out: dict[str, Any], y: Batch) -> torch.Tensor:
        """The reference's loss on the last pass (fp32)."""
        total, _ = of_loss.loss(_float(out), self._last(y))
        return total

    def metric_sums(self, out: dict[str, Any], y: Batch) -> tuple[torch.Tensor, int]:
        """(Σ per-chain global lDDT-Cα, chains) of the EMA model's final structure."""
        last = self._last(y)
        scores = of_loss.lddt_ca(out["final_atom_positions"].float(),
                                 last["all_atom_positions"].float(),
                                 last["all_atom_mask"].float(), eps=LDDT_EVAL_EPS,
                                 per_residue=False)
        return scores.double().sum(), int(scores.numel())


def _float(tree: Any) -> Any:
    """Outputs in fp32 for the loss (bf16 autocast leaves some in bf16)."""
    if isinstance(tree, torch.Tensor):
        return tree.float() if tree.is_floating_point() else tree
    if isinstance(tree, Mapping):
        return {k: _float(v) for k, v in tree.items()}
    return tree
