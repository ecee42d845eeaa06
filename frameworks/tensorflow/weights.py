"""The one Keras weight mapper: canonical ``.npz`` entries ↔ a Keras model's variables.

A weight file names entries ``"<layer>/<param>"`` (``sciperf.weights``); the mapping of a
framework array to that layout depends only on the layer's *kind* (conv, dense, norm…)
and the framework's layout (``keras``). So one mapper serves every model: it walks the
model's layers, decides each layer's kind from its Keras type, and lets
``sciperf.weights`` name, transpose and check. A model whose own layer classes hold
weights (a hand-written norm, an affine) declares them in a ``WEIGHT_KINDS`` attribute —
``((LayerClass, kind), …)``, looked up before the built-in Keras types — instead of
shipping its own mapper. Layer names are the spec's canonical names, shared with the
PyTorch models.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import keras
import numpy as np

from sciperf import weights

# Keras layer type → canonical kind; subclasses before their bases (DepthwiseConv2D and
# Conv2DTranspose derive from the conv base classes in some Keras versions).
KERAS_KINDS: tuple[tuple[type, str], ...] = (
    (keras.layers.DepthwiseConv2D, "depthwise"),
    (keras.layers.Conv2DTranspose, "deconv"),
    (keras.layers.Conv3DTranspose, "deconv"),
    (keras.layers.Conv2D, "conv"),
    (keras.layers.Conv3D, "conv"),
    (keras.layers.Conv1D, "conv"),
    (keras.layers.Dense, "dense"),
    (keras.layers.BatchNormalization, "norm"),
    (keras.layers.LayerNormalization, "layernorm"),
    (keras.layers.Embedding, "embedding"),
)

Kinds = Sequence[tuple[type, str]]


def model_kinds(model: keras.Model) -> tuple[tuple[type, str], ...]:
    """The model's own declared layer kinds (``WEIGHT_KINDS``) first, then Keras'."""
    return (*tuple(getattr(model, "WEIGHT_KINDS", ())), *KERAS_KINDS)


def layer_kind(layer: keras.layers.Layer, kinds: Kinds = KERAS_KINDS) -> str | None:
    """The canonical kind of a layer, None for layers without mapped weights."""
    return next((kind for cls, kind in kinds if isinstance(layer, cls)), None)


def _layers(layer: keras.layers.Layer, kinds: Kinds,
            seen: set[int]) -> Iterator[tuple[keras.layers.Layer, str]]:
    """(layer, kind) of every mapped layer under `layer`, depth first, each once.

    A layer of a known kind is a leaf (its weights are its own); any other layer that
    holds layers (a block, a nested model) is walked into.
    """
    for child in getattr(layer, "layers", ()):
        if id(child) in seen:
            continue
        seen.add(id(child))
        kind = layer_kind(child, kinds)
        if kind is not None:
            yield child, kind
        else:
            yield from _layers(child, kinds, seen)


def mapped(model: keras.Model) -> dict[str, tuple[object, str]]:
    """Canonical name → (variable, kind) of every weight (norm moving statistics included)."""
    out: dict[str, tuple[object, str]] = {}
    for layer, kind in _layers(model, model_kinds(model), set()):
        for var in layer.weights:
            out[weights.canonical_name(layer.name, var.name, "keras", kind)] = (var, kind)
    return out


def export_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """Canonical ``{"<layer>/<param>": array}`` (Keras layout) of the model's weights."""
    return {name: weights.to_canonical(name, np.asarray(var.numpy()), kind, "keras")
            for name, (var, kind) in mapped(model).items()}


def expected_entries(model: keras.Model) -> dict[str, tuple[int, ...]]:
    """Canonical entry → shape the model's weight file must have."""
    return {name: weights.canonical_shape(name, tuple(var.shape), kind, "keras")
            for name, (var, kind) in mapped(model).items()}


def import_weights(model: keras.Model, arrays: Mapping[str, np.ndarray],
                   source: str = "weights") -> None:
    """Load canonical weights; one error (naming `source`) lists every missing, extra or
    mis-shaped entry, before any variable changes."""
    targets = mapped(model)
    want = {name: weights.canonical_shape(name, tuple(var.shape), kind, "keras")
            for name, (var, kind) in targets.items()}
    weights.check_entries(arrays, want, source)
    for name, (var, kind) in targets.items():
        var.assign(weights.from_canonical(name, arrays[name], kind, "keras").astype(var.dtype))
