"""CosmoFlow in PyTorch: the hooks of the one backend template (``sciperf_pytorch.backend``).

What is CosmoFlow's own: the 3-D CNN, Keras-semantics momentum SGD (the LR set per epoch by
the driver), MSE plus the Keras L2 term on kernels, mean absolute error as the metric, and
log1p of the int16 counts on the device (after the copy: 2 bytes a voxel cross the bus,
not 4). Everything else — placement, wrapping, loaders, the step — is the template's.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.cosmoflow.spec import ModelSpec
from sciperf_pytorch.backend import WorkloadBackend
from sciperf_pytorch.optim import KerasSGD
from sciperf_pytorch.workloads.cosmoflow.model import CosmoFlow


class CosmoFlowBackend(WorkloadBackend):
    """CosmoFlow's hooks: model, optimizer, loss, metric, input transform."""

    def build_model(self, model_spec: ModelSpec) -> nn.Module:
        """The reference network (Glorot init from the seeded RNG)."""
        return CosmoFlow(model_spec)

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """Keras-semantics SGD from ``opt.base_lr``/``opt.momentum``."""
        return KerasSGD(params, lr=self.cfg.opt.base_lr, momentum=self.cfg.opt.momentum)

    def device_transform(self, x: torch.Tensor) -> torch.Tensor:
        """The reference's log(1 + counts) in float32, on the device."""
        return torch.log1p(x.to(torch.float32))

    def loss_fn(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """MSE in fp32, plus the Keras L2 term λ·Σw² when opt.weight_decay > 0."""
        loss = F.mse_loss(out.float(), y)
        wd = float(self.cfg.opt.weight_decay)
        if wd > 0:
            loss = loss + wd * sum((k.float() ** 2).sum() for k in self.model.kernels())
        return loss

    def metric_sums(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Absolute errors over every target of the batch (the MAE's sum and count)."""
        return (out.float() - y).abs().sum(), y.numel()
