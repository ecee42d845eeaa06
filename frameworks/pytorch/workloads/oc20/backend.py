"""OC20 in PyTorch: the hooks of the one backend template (``sciperf_pytorch.backend``).

What is OC20's own (spec/oc20.md §3): DimeNet++ whose output is the forces
F = −∂E/∂pos, taken with ``create_graph=True`` in training so the force loss reaches the
weights (a double backward; in evaluation the gradient is enabled just for the forces, as
the reference's ``conditional_grad``); AdamW with torch's defaults and weight decay on every
parameter; the reference's DDP loss — Σ|F̂ − F/σ| over the xyz components of this rank's
free atoms × force coefficient × world ÷ the free atoms of the whole global batch
(all-reduced every step), so DDP's gradient mean equals the gradient of the global
50·Σ/N_free; the metric, the force MAE in eV/Å over the free atoms' components of the whole
validation split. Graph batches are dicts (``sciperf.workloads.oc20.data.collate``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import torch
from torch import nn

from sciperf.workloads.oc20 import spec
from sciperf_pytorch.backend import WorkloadBackend
from sciperf_pytorch.workloads.oc20.model import DimeNetPP, energy_and_forces

Batch = dict[str, torch.Tensor]


def force_l1_sum(forces: torch.Tensor, target: torch.Tensor, fixed: torch.Tensor,
                 scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ|forces·scale − target| over free atoms' components, free-atom count)."""
    free = fixed == 0
    diff = (forces.float() * scale - target)[free]
    return diff.abs().sum(), free.sum()


class OC20Backend(WorkloadBackend):
    """OC20's hooks: DimeNet++ forces, AdamW, the reference's force loss and MAE."""

    def build_model(self, model_spec: spec.ModelSpec) -> nn.Module:
        """DimeNet++ of `model_spec` (the reference's initialisation)."""
        return DimeNetPP(model_spec)

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """torch AdamW (betas, eps as torch's defaults), weight decay on every parameter;
        the LR is set before every step from the per-step schedule."""
        o = self.cfg.opt
        return torch.optim.AdamW(params, lr=float(o.lr), betas=spec.ADAMW_BETAS,
                                 eps=spec.ADAMW_EPS, weight_decay=float(o.weight_decay),
                                 foreach=True)

    def memory_format(self) -> None:
        """Graphs have no channels: weights stay as built."""
        return None

    def forward(self, x: Batch) -> torch.Tensor:
        """Normalised forces [N, 3]; the double-backward graph only while training.
        Evaluation runs the bare replica: DDP would prepare a reduction for the force
        gradient, which never reaches the weights there."""
        training = self.net.training and torch.is_grad_enabled()
        _, forces = energy_and_forces(self.net if training else self.model, x,
                                      create_graph=training)
        return forces

    def to_device(self, x_np: Mapping[str, np.ndarray],
                  y_np: Mapping[str, np.ndarray]) -> tuple[Batch, Batch]:
        """A collated graph batch (numpy dicts) → device tensors."""
        def move(arrays: Mapping[str, np.ndarray]) -> Batch:
            return {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device)
                    for k, v in arrays.items()}
        return move(x_np), move(y_np)

    def batch_size(self, x: Batch) -> int:
        """Structures in the batch."""
        return int(x["cell"].shape[0])

    def loss_fn(self, out: torch.Tensor, y: Batch) -> torch.Tensor:
        """The reference's DDP force loss (see the module docstring); fp32."""
        std = float(self.cfg.data.force_std)
        l1, free = force_l1_sum(out, y["force"] / std, y["fixed"])
        (global_free,) = self.comm.sum([float(free)])
        return l1 * spec.loss_scale(self.ctx.info.world, int(global_free))

    def metric_sums(self, out: torch.Tensor, y: Batch) -> tuple[torch.Tensor, int]:
        """(Σ|ΔF| in eV/Å over free atoms' components, their count)."""
        l1, free = force_l1_sum(out, y["force"], y["fixed"], float(self.cfg.data.force_std))
        return l1.double(), 3 * int(free)
