"""CosmoFlow 3-D CNN, built from ``sciperf.workloads.cosmoflow.ModelSpec``.

Layer names are the spec's canonical names (conv0…, dense0…), shared with the
TensorFlow model so weights map by rule. Inputs are NCDHW tensors whose memory is
channels-last (NDHWC), exactly the reference's layout; the flatten is taken in
channels-last order so dense0 sees features in the Keras order.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf import weights
from sciperf.workloads.cosmoflow.spec import ModelSpec


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
            x = conv_block(getattr(self, name)(x), slope)
        x = x.permute(0, 2, 3, 4, 1).flatten(1)  # channels-last flatten, as Keras
        for name in self.dense_names[:-1]:
            x = F.leaky_relu(getattr(self, name)(x), slope)
            x = F.dropout(x, self.spec.dropout, self.training)
        x = getattr(self, self.dense_names[-1])(x)
        return torch.tanh(x) * self.spec.output_scale


def conv_block(x: torch.Tensor, slope: float) -> torch.Tensor:
    """The reference's LeakyReLU → MaxPool3D(2), computed as MaxPool3D → LeakyReLU.

    For slope ≥ 0 LeakyReLU is monotone non-decreasing, so max and LeakyReLU commute:
    the values are bit-identical and the gradient reaches the same window element, but
    the activation and its backward touch 1/8 of the memory — on a CPU the first block's
    LeakyReLU over the full 128³×32 tensor cost as much as its convolution.
    """
    if slope < 0:  # not monotone: keep the reference order
        return F.max_pool3d(F.leaky_relu(x, slope), 2)
    return F.leaky_relu(F.max_pool3d(x, 2), slope)


KINDS = ((nn.Conv3d, "conv"), (nn.Linear, "dense"))  # module type → canonical layer kind


def layer_kind(module: nn.Module) -> str | None:
    """``conv``/``dense`` for modules that hold mapped weights, None for the rest."""
    return next((kind for cls, kind in KINDS if isinstance(module, cls)), None)


def _mapped(model: nn.Module) -> dict[str, tuple[torch.Tensor, str]]:
    """Canonical name → (parameter, kind) for every weight of every conv/dense layer."""
    out = {}
    for layer, module in model.named_children():
        kind = layer_kind(module)
        if kind is None:
            continue
        for param, tensor in module.named_parameters(recurse=False):
            out[weights.canonical_name(layer, param, "torch")] = (tensor, kind)
    return out


def export_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """Canonical ``{"<layer>/kernel|bias": array}`` (Keras layout) of the model's weights."""
    return {name: weights.to_canonical(name, t.detach().cpu().float().numpy(), kind, "torch")
            for name, (t, kind) in _mapped(model).items()}


@torch.no_grad()
def import_weights(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    """Load canonical weights; an error names every missing, extra or mis-shaped entry."""
    targets = _mapped(model)
    kernels = {name.split("/")[0]: weights.canonical_shape(name, tuple(t.shape), kind, "torch")
               for name, (t, kind) in targets.items() if name.endswith("/kernel")}
    weights.check_arrays(arrays, kernels, "weights")
    for name, (t, kind) in targets.items():
        t.copy_(torch.from_numpy(weights.from_canonical(name, arrays[name], kind, "torch")))
