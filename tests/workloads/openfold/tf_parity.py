"""Shared by the TensorFlow OpenFold tests: the same weights in a PyTorch module and its
Keras mirror, through the canonical ``.npz`` mappers of both frameworks (the path a
weight file takes), and float64 Keras layers for tight tolerances."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras
import numpy as np
import torch
from torch import nn

from sciperf import weights
from sciperf_pytorch import weights as torch_weights
from sciperf_tensorflow import weights as keras_weights


def nested(module: nn.Module, path: str) -> nn.Module:
    """A root whose module at reference `path` (``evoformer_stack.blocks.0``) is
    `module`, declared nested: the PyTorch mapper names its weights by full path."""
    root = nn.Module()
    root.NESTED_WEIGHTS = True
    node = root
    *parents, last = path.split(".")
    for part in parents:
        node.add_module(part, nn.Module())
        node = getattr(node, part)
    node.add_module(last, module)
    return root


def copy_weights(torch_module: nn.Module, keras_layer: keras.layers.Layer, path: str) -> int:
    """Every weight of `torch_module` (at reference `path`) into `keras_layer` (built at
    the same path), strictly: an entry either side lacks is an error. Returns the count."""
    # the mapper's own names, the tensors' own precision (export_weights writes float32)
    mapped = torch_weights._mapped(nested(torch_module, path))  # noqa: SLF001
    arrays = {name: weights.to_canonical(name, t.detach().cpu().numpy(), kind, "torch")
              for name, (t, kind) in mapped.items()}
    keras_weights.import_weights(keras_layer, arrays, source=path)
    return len(arrays)


@contextlib.contextmanager
def keras_float64() -> Iterator[None]:
    """Keras layers built inside compute in float64."""
    saved = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float64")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(saved)


def numpy(x: object) -> np.ndarray:
    """A torch or TF tensor as numpy."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)
