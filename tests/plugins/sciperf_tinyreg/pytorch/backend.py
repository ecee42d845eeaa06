"""tinyreg in PyTorch: the template's hooks, the step pieces, a starting layer from a file."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from sciperf_tinyreg.pytorch.model import TinyReg
from sciperf_tinyreg.workload.spec import ModelSpec
from torch import nn

from sciperf_pytorch.backend import WorkloadBackend
from sciperf_pytorch.optim import KerasSGD
from sciperf_pytorch.pieces import ClipGradNorm, StepPiece, WeightEMA


class TinyRegBackend(WorkloadBackend):
    """MSE training, the MAE metric on the EMA of the weights."""

    def build_model(self, model_spec: ModelSpec) -> nn.Module:
        return TinyReg(model_spec)

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        return KerasSGD(params, lr=float(self.cfg.opt.lr), momentum=float(self.cfg.opt.momentum))

    def load_initial(self) -> None:
        """train.start_from: the layer's weights, then its bias."""
        if self.cfg.train.start_from:
            row = np.load(str(self.cfg.train.start_from), allow_pickle=False)
            with torch.no_grad():
                self.model.dense.weight.copy_(torch.from_numpy(row[:-1]).view(1, -1))
                self.model.dense.bias.copy_(torch.from_numpy(row[-1:]))

    def step_pieces(self) -> Sequence[StepPiece]:
        self.ema = WeightEMA(float(self.cfg.train.ema_decay))
        bound = float(self.cfg.train.clip_norm)
        return [*([ClipGradNorm(bound)] if bound > 0 else []), self.ema]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training: the model; evaluation: the EMA of its weights."""
        if self.net.training and torch.is_grad_enabled():
            return self.net(x)
        return self.ema.model(x)

    def loss_fn(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.square(out.float() - y))

    def metric_sums(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        return torch.sum(torch.abs(out.float() - y)), int(y.numel())
