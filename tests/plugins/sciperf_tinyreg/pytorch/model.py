"""tinyreg's model in PyTorch: one dense layer, named as its canonical layer."""

from __future__ import annotations

import torch
from sciperf_tinyreg.workload.spec import ModelSpec
from torch import nn


class TinyReg(nn.Module):
    """x (N, inputs) → (N, 1)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.dense = nn.Linear(int(spec.inputs), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x)
