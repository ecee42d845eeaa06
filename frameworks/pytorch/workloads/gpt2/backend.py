"""GPT-2 in PyTorch: the hooks of the one backend template (``sciperf_pytorch.backend``).

What is GPT-2's own: the model's logits and the mean token cross-entropy as the loss, in
float32 (``model.loss``); AdamW with the recipe's betas, eps and decoupled weight decay on
the tensors ``spec.decays`` names only (two parameter groups), the LR of every optimizer
step from ``spec.lr_for_step``, the global gradient norm clipped to ``opt.grad_clip`` after
the ranks' average (``ClipGradNorm``); ``spec.accumulation`` forwards per optimizer step;
the metric, the cross-entropy summed over every scored target token of the validation
windows and their count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.gpt2 import spec
from sciperf_pytorch.backend import WorkloadBackend
from sciperf_pytorch.pieces import ClipGradNorm, StepPiece
from sciperf_pytorch.workloads.gpt2.model import GPT2, loss


class GPT2Backend(WorkloadBackend):
    """GPT-2's hooks: the model, AdamW on two groups, clipping, token cross-entropy."""

    def build_model(self, model_spec: spec.ModelSpec) -> nn.Module:
        """GPT-2 of `model_spec` (GPT-2's initialisation)."""
        return GPT2(model_spec)

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """torch AdamW over two groups: the tensors ``spec.decays`` names (by their
        released names, which are the module tree's) with ``opt.weight_decay``, the rest
        with none; the LR is set before every step."""
        o = self.cfg.opt
        canonical = {spec.released_name(n): n for n in self.model_spec.weight_shapes()}
        wanted = {id(p) for p in params}
        groups: dict[bool, list[nn.Parameter]] = {True: [], False: []}
        for name, param in self.model.named_parameters():
            if id(param) in wanted:
                groups[spec.decays(canonical[name])].append(param)
        return torch.optim.AdamW(
            [{"params": groups[True], "weight_decay": float(o.weight_decay)},
             {"params": groups[False], "weight_decay": 0.0}],
            lr=spec.lr_for_step(self.cfg, 0), betas=(float(o.beta1), float(o.beta2)),
            eps=float(o.eps), foreach=True)

    def memory_format(self) -> None:
        """Token windows have no channels: weights stay as built."""
        return None

    def accumulation(self) -> int:
        """Forwards per optimizer step (``spec.accumulation``)."""
        return spec.accumulation(self.cfg)

    def step_pieces(self) -> Sequence[StepPiece]:
        """The global gradient norm bounded by ``opt.grad_clip`` (0: none)."""
        bound = float(self.cfg.opt.grad_clip)
        return (ClipGradNorm(bound),) if bound > 0 else ()

    def loss_fn(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of every target token, fp32."""
        return loss(out, y)

    def metric_sums(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(Σ cross-entropy over the batch's target tokens in nats, their count)."""
        logits = out.float()
        total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long(),
                                reduction="sum")
        return total.double(), int(y.numel())
