"""The ONE torch ↔ canonical weight mapper of this package (docs/architecture.md, rule 3).

Every model keeps its weight layers as direct children named by its spec's canonical layer
names, so a layer's weights map by its module *type* alone: this module decides the
canonical kind (``conv``, ``depthwise``, ``deconv``, ``dense``, ``norm``, ``layernorm``,
``embedding``) and ``sciperf.weights`` the names and transposes. A model with module types
of its own declares their kinds in a class attribute ``WEIGHT_KINDS`` — a tuple of
``(module type, kind)`` pairs checked before the built-in rules — instead of a mapper of
its own.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sciperf import weights

# built-in module types → canonical kind (subclasses first); grouped convs: see layer_kind
KINDS: tuple[tuple[type[nn.Module], str], ...] = (
    (nn.ConvTranspose2d, "deconv"), (nn.ConvTranspose3d, "deconv"),
    (nn.Conv2d, "conv"), (nn.Conv3d, "conv"), (nn.Linear, "dense"),
    (nn.modules.batchnorm._BatchNorm, "norm"), (nn.LayerNorm, "layernorm"),
    (nn.Embedding, "embedding"),
)
RUNNING_STATS = ("running_mean", "running_var")  # norm buffers exported with the weights


def layer_kind(module: nn.Module,
               declared: tuple[tuple[type[nn.Module], str], ...] = ()) -> str | None:
    """The canonical kind of a module's weights, None for modules without mapped weights.

    `declared` (a model's ``WEIGHT_KINDS``) wins over the built-in types; a convolution
    with one group per input channel and as many outputs as inputs is ``depthwise``
    (Keras layout ``(k…, channels, 1)``).
    """
    for cls, kind in (*declared, *KINDS):
        if isinstance(module, cls):
            if kind == "conv" and _depthwise(module):
                return "depthwise"
            return kind
    return None


def _depthwise(conv: nn.Module) -> bool:
    """groups == in_channels == out_channels > 1 (channel multiplier 1)."""
    groups = getattr(conv, "groups", 1)
    return groups > 1 and groups == conv.in_channels == conv.out_channels


def _mapped(model: nn.Module) -> dict[str, tuple[torch.Tensor, str]]:
    """Canonical name → (parameter or norm running buffer, kind) of every mapped child —
    or, for a model that declares ``NESTED_WEIGHTS`` (a deep module tree whose names are a
    reference's: OpenFold), of every module at any depth, its path the layer name (``.`` →
    ``/``), a module's own parameter of no kind a basis vector named after it."""
    declared = tuple(getattr(model, "WEIGHT_KINDS", ()))
    nested = bool(getattr(model, "NESTED_WEIGHTS", False))
    out = {}
    for layer, module in model.named_modules() if nested else model.named_children():
        layer = layer.replace(".", "/")
        kind = layer_kind(module, declared)
        if kind is None:
            for param, tensor in module.named_parameters(recurse=False) if nested else ():
                out[weights.canonical_name(f"{layer}/{param}", "frequencies", "torch",
                                           "basis")] = (tensor, "basis")
            continue
        tensors = list(module.named_parameters(recurse=False))
        if kind == "norm":
            tensors += [(n, b) for n, b in module.named_buffers(recurse=False)
                        if n in RUNNING_STATS and b is not None]
        for param, tensor in tensors:
            out[weights.canonical_name(layer, param, "torch", kind)] = (tensor, kind)
    return out


def export_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """Canonical ``{"<layer>/<param>": array}`` (Keras layout), norm moving stats included."""
    return {name: weights.to_canonical(name, t.detach().cpu().float().numpy(), kind, "torch")
            for name, (t, kind) in _mapped(model).items()}


@torch.no_grad()
def import_weights(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    """Load canonical weights; an error names every missing, extra or mis-shaped entry."""
    targets = _mapped(model)
    want = {name: weights.canonical_shape(name, tuple(t.shape), kind, "torch")
            for name, (t, kind) in targets.items()}
    weights.check_entries(arrays, want, "weights")
    for name, (t, kind) in targets.items():
        t.copy_(torch.from_numpy(weights.from_canonical(name, arrays[name], kind, "torch")))
