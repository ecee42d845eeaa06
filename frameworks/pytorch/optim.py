"""Optimizers torch lacks: Keras-semantics momentum SGD and apex-style LAMB.

A workload backend builds its optimizer from these or torch's own (``build_optimizer``).

torch.optim.SGD keeps lr outside the velocity (v = m·v + g; w -= lr·v); Keras, and so the
reference, keeps it inside (v = m·v + lr·g; w -= v). The two differ whenever the LR
changes between steps, as it does every warmup/decay epoch, hence this optimizer.
"""

from __future__ import annotations

from typing import Any

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
        loss = _closure_loss(closure)
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


class Lamb(torch.optim.Optimizer):
    """LAMB as apex's FusedLAMB (the reference's): bias-corrected Adam moments with grad
    averaging, the global gradient norm clipped to `max_grad_norm` first, decoupled weight
    decay inside the update u = m̂/(√v̂ + eps) + wd·w, and the layer-wise trust ratio
    ‖w‖/‖u‖ (1 when either norm is 0) applied where weight decay is on."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, max_grad_norm: float = 1.0):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay, "max_grad_norm": max_grad_norm})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch API
        loss = _closure_loss(closure)
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return loss
        norm = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g.float()) for g in grads]))
        for group in self.param_groups:
            clip = torch.clamp(norm / group["max_grad_norm"], min=1.0)
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                self._update(p, p.grad.float() / clip, group, beta1, beta2)
        return loss

    def _update(self, p: torch.Tensor, grad: torch.Tensor, group: dict, beta1: float,
                beta2: float) -> None:
        """One parameter's LAMB update (fp32 state)."""
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
        m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        update = (m / (1.0 - beta1**t)) / ((v / (1.0 - beta2**t)).sqrt() + group["eps"])
        wd = group["weight_decay"]
        ratio = torch.ones((), device=p.device)
        if wd != 0:
            update.add_(p, alpha=wd)
            w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, ratio)
        p.sub_(update * (group["lr"] * ratio))


def _closure_loss(closure: Any) -> Any:
    """The loss of torch's optional step closure, evaluated with gradients on."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
