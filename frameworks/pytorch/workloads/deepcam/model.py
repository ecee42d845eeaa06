"""DeepLabv3+ on the modified aligned Xception (output stride 16), built from
``sciperf.workloads.deepcam.ModelSpec``.

Every weight layer is a direct child named by the spec's flat layer table (``conv1``,
``block4_sep2_depthwise``, ``aspp3_bn``, ``last_deconv``…), the same names the TensorFlow
model uses, so weights map by the generic rules of ``sciperf.weights`` through the
package's one mapper (``sciperf_pytorch.weights``, re-exported here; ``Affine`` is declared
in ``DeepCam.WEIGHT_KINDS``). Inputs are NCHW
tensors with channels-last memory; padding follows the reference exactly (symmetric
``dilation`` padding of the 3×3 depthwise convs, transposed convs with padding 1 and
output padding 1).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.deepcam.spec import BlockSpec, LayerSpec, ModelSpec, SepConvSpec
from sciperf_pytorch.weights import export_weights, import_weights, layer_kind

__all__ = ["Affine", "DeepCam", "DepthwiseConv2d", "build_layer", "export_weights",
           "import_weights", "layer_kind"]


class DepthwiseConv2d(nn.Conv2d):
    """A depthwise 3×3 conv (groups = channels); its own type so the weight kind is explicit."""


class Affine(nn.Module):
    """Per-channel γ·x + β after the ASPP image-pooling conv (the reference's
    TrainableAffine; stored as (C,) vectors instead of (C, 1, 1))."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight[:, None, None] + self.bias[:, None, None]


def build_layer(spec: LayerSpec) -> nn.Module:
    """The torch module of one table entry (BN: torch defaults, eps 1e-5, momentum 0.1)."""
    k, s, d = spec.kernel, spec.stride, spec.dilation
    if spec.kind == "norm":
        return nn.BatchNorm2d(spec.cout)
    if spec.kind == "affine":
        return Affine(spec.cout)
    if spec.kind == "depthwise":
        return DepthwiseConv2d(spec.cin, spec.cin, k, s, padding=d, dilation=d,
                               groups=spec.cin, bias=False)
    if spec.kind == "deconv":
        return nn.ConvTranspose2d(spec.cin, spec.cout, k, s, padding=1, output_padding=1,
                                  bias=False)
    return nn.Conv2d(spec.cin, spec.cout, k, s, padding=d * (k // 2), dilation=d,
                     bias=spec.bias)


class DeepCam(nn.Module):
    """Xception encoder → ASPP → deconvolution decoder with a low-level skip (reference)."""

    WEIGHT_KINDS = ((Affine, "affine"),)  # this model's own module types (weights.layer_kind)

    def __init__(self, spec: ModelSpec):
        super().__init__()
        spec.check()
        self.spec = spec
        self.table = spec.layers()
        for layer in self.table:
            self.add_module(layer.name, build_layer(layer))
        self.blocks = spec.blocks()
        self.exit = spec.exit_convs()
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Reference init: kaiming-normal (fan-in) for the Xception and ASPP convs,
        PyTorch's default U(±1/√fan_in) for the layers the reference leaves alone, BN
        γ=1 β=0 (the scales come from the spec, shared with TensorFlow)."""
        for layer in self.table:
            module = getattr(self, layer.name)
            if layer.kind in ("norm", "affine"):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
                continue
            scale = layer.init_scale()
            if layer.init == "he_normal":
                nn.init.normal_(module.weight, 0.0, scale)
            else:
                nn.init.uniform_(module.weight, -scale, scale)
            if module.bias is not None:
                nn.init.uniform_(module.bias, -scale, scale)

    def _sep(self, x: torch.Tensor, sep: SepConvSpec) -> torch.Tensor:
        x = getattr(self, f"{sep.name}_pointwise")(getattr(self, f"{sep.name}_depthwise")(x))
        if sep.norm:
            x = getattr(self, sep.norm)(x)
        return F.relu(x) if sep.relu else x

    def _block(self, x: torch.Tensor, block: BlockSpec) -> torch.Tensor:
        out = x
        for sep in block.convs:
            out = self._sep(out, sep)
        skip = getattr(self, f"{block.name}_skipbn")(getattr(self, f"{block.name}_skip")(x)) \
            if block.skip else x
        out = out + skip
        return F.relu(out) if block.end_with_relu else out

    def encoder(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(features at stride 16, low-level features at stride 4)."""
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self._block(x, self.blocks[0])
        x = low = F.relu(x)  # the reference's in-place ReLU also rectifies the skip
        for block in self.blocks[1:]:
            x = self._block(x, block)
        for sep in self.exit:
            x = self._sep(x, sep)
        return x, low

    def aspp(self, x: torch.Tensor) -> torch.Tensor:
        """Four atrous branches + image pooling, concatenated → 1×1 → BN → ReLU."""
        branches = [F.relu(getattr(self, f"aspp{i}_bn")(getattr(self, f"aspp{i}")(x)))
                    for i in range(1, 5)]
        pooled = self.gpool_conv(x.mean(dim=(2, 3), keepdim=True))
        pooled = F.relu(self.gpool_affine(pooled)).expand(-1, -1, *x.shape[2:])
        x = torch.cat([*branches, pooled], dim=1)
        return F.relu(self.aspp_bn(self.aspp_conv(x)))

    def decoder(self, x: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
        """Two deconvs to stride 4, concat the projected low-level features, 3 convs,
        two more deconvs to full resolution (the last without BN)."""
        low = F.relu(self.low_bn(self.low_conv(low)))
        x = F.relu(self.deconv1a_bn(self.deconv1a(x)))
        x = F.relu(self.deconv1b_bn(self.deconv1b(x)))
        x = torch.cat([x, low], dim=1)
        x = F.relu(self.dec_bn1(self.dec_conv1(x)))
        x = F.relu(self.dec_bn2(self.dec_conv2(x)))
        x = self.dec_conv3(x)
        x = F.relu(self.deconv2_bn(self.deconv2(x)))
        return self.last_deconv(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, C, H, W) normalised climate fields → (N, classes, H, W) logits."""
        features, low = self.encoder(x)
        return self.decoder(self.aspp(features), low)
