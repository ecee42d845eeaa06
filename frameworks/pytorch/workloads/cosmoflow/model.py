"""CosmoFlow 3-D CNN, built from ``sciperf.workloads.cosmoflow.ModelSpec``.

Layer names are the spec's canonical names (conv0…, dense0…), shared with the
TensorFlow model so weights map by rule. Inputs are NCDHW tensors whose memory is
channels-last (NDHWC), exactly the reference's layout; the flatten is taken in
channels-last order so dense0 sees features in the Keras order. Weights map through the
package's one mapper (``sciperf_pytorch.weights``, re-exported here).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.cosmoflow.spec import ModelSpec
from sciperf_pytorch.weights import export_weights, import_weights, layer_kind

__all__ = ["CosmoFlow", "conv_block", "export_weights", "import_weights", "layer_kind"]


class CosmoFlow(nn.Module):
    """5 × [Conv3D → LeakyReLU → MaxPool3D] → 3 dense layers → tanh × 1.2 (reference)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        shapes = spec.layer_shapes()
        self.conv_names = [n for n in shapes if n.startswith("conv")]
        self.dense_names = [n for n in shapes if n.startswith("dense")]
        for name in self.conv_names:
            k, _, _, cin, cout = shapes[name]
            # slope ≥ 0: the block gives the bias its gradient from the pooled map
            conv = nn.Conv3d if spec.leaky_slope < 0 else _PooledBiasConv3d
            self.add_module(name, conv(cin, cout, k, padding="same"))
        for name in self.dense_names:
            fin, fout = shapes[name]
            self.add_module(name, nn.Linear(fin, fout))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform kernels and zero biases, the Keras defaults of the reference."""
        for module in self.modules():
            if isinstance(module, nn.Conv3d | nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def kernels(self) -> list[torch.Tensor]:
        """Weights that carry the Keras L2 penalty (kernels, not biases)."""
        return [getattr(self, n).weight for n in self.conv_names + self.dense_names]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, C, D, H, W), ideally channels_last_3d in memory."""
        slope = self.spec.leaky_slope
        for name in self.conv_names:
            conv = getattr(self, name)
            bias = conv.bias if isinstance(conv, _PooledBiasConv3d) else None
            x = conv_block(conv(x), slope, bias=bias)
        x = x.permute(0, 2, 3, 4, 1).flatten(1)  # channels-last flatten, as Keras
        for name in self.dense_names[:-1]:
            x = F.leaky_relu(getattr(self, name)(x), slope)
            x = F.dropout(x, self.spec.dropout, self.training)
        x = getattr(self, self.dense_names[-1])(x)
        return torch.tanh(x) * self.spec.output_scale


def _autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """Autocast off for the block's pool and activation (a no-op on a device autocast does
    not know, e.g. the meta tensors a FLOP counter runs on)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


class _PooledBiasConv3d(nn.Conv3d):
    """A Conv3d that adds its bias without differentiating it: its block's pooled map gives
    the bias its gradient (``_PooledBiasGrad``). Still an ``nn.Conv3d`` called as a module,
    so forward hooks, weight mapping and FLOP counting see it as one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.detach()
        return self._conv_forward(x, self.weight, bias)


class _PooledBiasGrad(torch.autograd.Function):
    """The identity on a block's pooled map whose backward also gives the bias's gradient.

    The bias is added inside the convolution (the forward is the reference's, bit for
    bit) but detached there, so oneDNN's weight-gradient call does not sum the full-size
    output gradient for it: with AVX2 only its gemm kernel does that slowly (conv0 1.85 s
    with the bias, 0.81 s without, batch 4 on a 2-vCPU Zen 3; the step 1.1–1.3× faster).
    Max-pooling routes each pooled gradient to one output element, so the bias gradient
    — the sum of the output gradient over batch and space — is the sum of the pooled
    gradient: 1/8 of the data.
    """

    @staticmethod
    def forward(ctx: Any, pooled: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.bias_dtype = bias.dtype
        return pooled.view_as(pooled)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dims = [d for d in range(grad.dim()) if d != 1]
        return grad, grad.sum(dims, dtype=torch.float32).to(ctx.bias_dtype)


def conv_block(x: torch.Tensor, slope: float, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The reference's LeakyReLU → MaxPool3D(2), computed as MaxPool3D → LeakyReLU.

    For slope ≥ 0 LeakyReLU is monotone non-decreasing, so max and LeakyReLU commute:
    the values are bit-identical and the gradient reaches the same window element, but
    the activation and its backward touch 1/8 of the memory — on a CPU the first block's
    LeakyReLU over the full 128³×32 tensor cost as much as its convolution.

    Under bf16 autocast both run in the convolution's bf16 (autocast would cast max_pool3d's
    input to float32 and the next convolution's input back): a max is exact in any dtype,
    and LeakyReLU of a bf16 value computed in float32 rounds to the bf16 the next
    convolution's cast would make, so the values are unchanged while two casts of each
    block's largest tensor (forward and backward) are gone: full model, batch 4, 2-vCPU
    Zen 5, 1.12 → 1.05 s a step, peak resident 4.6 → 2.7 GB.

    `bias`: the convolution's bias, added in its forward but detached there; the pooled
    map's gradient then gives its gradient (``_PooledBiasGrad``).
    """
    with _autocast_off(x.device.type):
        if slope < 0:  # not monotone: keep the reference order
            if bias is not None:
                raise ValueError("conv_block: a pooled bias gradient needs leaky_slope >= 0")
            return F.max_pool3d(F.leaky_relu(x, slope), 2)
        pooled = F.max_pool3d(x, 2)
        if bias is not None:
            pooled = _PooledBiasGrad.apply(pooled, bias)
        return F.leaky_relu(pooled, slope)
