"""CosmoFlow 3-D CNN, built from ``sciperf.workloads.cosmoflow.ModelSpec``.

Layer names are the spec's canonical names (conv0…, dense0…), shared with the
TensorFlow model so weights map by rule. Inputs are NCDHW tensors whose memory is
channels-last (NDHWC), exactly the reference's layout; the flatten is taken in
channels-last order so dense0 sees features in the Keras order. Weights map through the
package's one mapper (``sciperf_pytorch.weights``, re-exported here).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.cosmoflow.spec import ModelSpec
from sciperf_pytorch.weights import export_weights, import_weights, layer_kind

__all__ = ["CosmoFlow", "conv_block", "conv_pool_block", "export_weights", "import_weights",
           "layer_kind"]


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
            self.add_module(name, nn.Conv3d(cin, cout, k, padding="same"))
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
            x = conv_pool_block(getattr(self, name), x, slope)
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


def conv_block(x: torch.Tensor, slope: float) -> torch.Tensor:
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
    """
    with _autocast_off(x.device.type):
        if slope < 0:  # not monotone: keep the reference order
            return F.max_pool3d(F.leaky_relu(x, slope), 2)
        return F.leaky_relu(F.max_pool3d(x, 2), slope)


def conv_pool_block(conv: nn.Conv3d, x: torch.Tensor, slope: float) -> torch.Tensor:
    """``conv_block(conv(x), slope)``, whose backward takes the convolution's bias gradient
    from the pooled gradient (:class:`_ConvPool`); layers it does not cover (an even kernel,
    a negative slope) take the plain path."""
    k = conv.kernel_size
    if slope < 0 or any(n % 2 == 0 for n in k) or conv.stride != (1, 1, 1) or \
            conv.dilation != (1, 1, 1) or conv.groups != 1 or conv.bias is None:
        return conv_block(conv(x), slope)
    dtype = None
    if torch.amp.is_autocast_available(x.device.type) and torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
    pooled = _ConvPool.apply(x, conv.weight, conv.bias, dtype)
    with _autocast_off(x.device.type):
        return F.leaky_relu(pooled, slope)


class _ConvPool(torch.autograd.Function):
    """Conv3d ('same', bias fused) → MaxPool3d(2), forward as autograd would run it.

    The backward differs in one place: the bias gradient is the sum of the *pooled*
    gradient — the same sum, since the max-pool's backward only scatters each pooled
    element to one element of its window — so the convolution's backward skips its pass
    over the full-size gradient (the TensorFlow block does the same). Full model, fp32,
    batch 4, 2-vCPU Zen 5: conv0's backward 233 → 206 ms with the bias gradient left out.
    `dtype`: autocast's compute dtype, or None; gradients return in the parameters' dtype.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, dtype):  # noqa: ANN001, ANN205 - autograd's signature
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        if dtype is not None:
            x, weight, bias = x.to(dtype), weight.to(dtype), bias.to(dtype)
        padding = [n // 2 for n in weight.shape[2:]]
        with _autocast_off(x.device.type):
            y = F.conv3d(x, weight, bias, padding=padding)
            pooled, index = torch.ops.aten.max_pool3d_with_indices(y, [2] * 3, [2] * 3)
        ctx.save_for_backward(x, weight, index)
        ctx.y = (y.shape, y.stride(), y.dtype)
        ctx.padding = padding
        return pooled

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        x, weight, index = ctx.saved_tensors
        shape, stride, dtype = ctx.y
        like = torch.empty_strided(shape, stride, dtype=dtype, device=grad.device)  # sizes
        dy = torch.ops.aten.max_pool3d_with_indices_backward(
            grad, like, [2] * 3, [2] * 3, [0] * 3, [1] * 3, False, index)
        gx, gw, _ = torch.ops.aten.convolution_backward(
            dy, x, weight, None, [1] * 3, ctx.padding, [1] * 3, False, [0] * 3, 1,
            [ctx.needs_input_grad[0], True, False])
        gb = grad.sum((0, 2, 3, 4), dtype=torch.float32)
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        return (None if gx is None else gx.to(x_dtype), gw.to(w_dtype), gb.to(b_dtype), None)
