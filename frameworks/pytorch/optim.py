"""Keras-semantics momentum SGD for PyTorch.

torch.optim.SGD keeps lr outside the velocity (v = m·v + g; w -= lr·v); Keras, and so the
reference, keeps it inside (v = m·v + lr·g; w -= v). The two differ whenever the LR
changes between steps, as it does every warmup/decay epoch, hence this optimizer.
"""

from __future__ import annotations

import torch


class KerasSGD(torch.optim.Optimizer):
    """velocity = momentum·velocity + lr·grad; param -= velocity (fp32 master weights)."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.9):
        if lr < 0 or not 0 <= momentum < 1:
            raise ValueError(f"invalid lr={lr} or momentum={momentum}")
        super().__init__(params, {"lr": lr, "momentum": momentum})

    def set_lr(self, lr: float) -> None:
        """Set the LR of every group (the schedule is per epoch, decided outside)."""
        for group in self.param_groups:
            group["lr"] = lr

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch API
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            velocities = []
            for p in params:
                state = self.state[p]
                if "velocity" not in state:
                    state["velocity"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                velocities.append(state["velocity"])
            grads = [p.grad for p in params]
            torch._foreach_mul_(velocities, group["momentum"])
            torch._foreach_add_(velocities, grads, alpha=group["lr"])
            torch._foreach_sub_(params, velocities)
        return loss
