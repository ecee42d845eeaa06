"""A released GPT-2 checkpoint's tensors ↔ sciperf's canonical weights (numpy only).

Three layouts hold the same tensors under the released names (``spec.released_name``):

* ``conv1d`` — HF transformers' ``GPT2Model``/``GPT2LMHeadModel`` state dict: every
  projection a ``Conv1D`` whose weight is stored (in, out), which is already the
  canonical kernel layout (``sciperf.weights``: dense kernels (in, out));
* ``linear`` — a model built from ``nn.Linear`` (nanoGPT): weights (out, in), transposed;
* ``openai`` — OpenAI's original TensorFlow checkpoint: ``model/h0/attn/c_attn/w`` of
  shape (1, in, out), LayerNorm ``g``/``b``, tables ``model/wte``/``model/wpe``.

A ``transformer.`` prefix is dropped, the causal-mask buffers (``h.N.attn.bias``,
``h.N.attn.masked_bias``) are not weights, and an ``lm_head.weight`` must equal ``wte``
(the tie) — anything else is one line naming the checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from sciperf import weights
from sciperf.errors import SciperfError
from sciperf.workloads.gpt2.spec import ModelSpec, released_name

LAYOUTS = ("conv1d", "linear", "openai")
_MASK_BUFFER = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")
_OPENAI_PARAMS = {"w": "kernel", "b": "bias", "g": "gamma"}


def from_released(arrays: Mapping[str, np.ndarray], model: ModelSpec, layout: str = "conv1d",
                  source: str = "checkpoint") -> dict[str, np.ndarray]:
    """The canonical weights of `model` from a released checkpoint's `arrays` in `layout`
    (module docstring); every missing, extra or mis-shaped tensor named in one line."""
    if layout not in LAYOUTS:
        raise SciperfError(f"{source}: layout {layout} is not one of {', '.join(LAYOUTS)}")
    want = model.weight_shapes()
    by_released = {released_name(name): name for name in want}
    out: dict[str, np.ndarray] = {}
    tied = None
    unknown = []
    for raw, value in arrays.items():
        array = np.asarray(value)
        name = raw.removeprefix("transformer.")
        if layout == "openai":
            canonical = _openai_name(raw)
            if canonical is not None and canonical.endswith("/kernel") and array.ndim == 3:
                array = array.reshape(array.shape[1:])  # (1, in, out): a 1×1 convolution
        elif name == "lm_head.weight":
            tied = array
            continue
        elif _MASK_BUFFER.fullmatch(name):
            continue
        else:
            canonical = by_released.get(name)
            if canonical is not None and layout == "linear" and canonical.endswith("/kernel"):
                array = array.T
        if canonical is None or canonical not in want:
            unknown.append(raw)
            continue
        out[canonical] = np.ascontiguousarray(array)
    if unknown:
        raise SciperfError(f"{source}: not a GPT-2 tensor of this model: "
                           f"{', '.join(sorted(unknown)[:5])}"
                           + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
    weights.check_entries(out, want, source)
    if tied is not None and not np.array_equal(tied, out["wte/embeddings"]):
        raise SciperfError(f"{source}: lm_head.weight differs from wte.weight; GPT-2 ties "
                           "its output projection to the token embeddings")
    return out


def to_released(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Canonical weights as an HF ``GPT2Model`` state dict (layout ``conv1d``): the same
    arrays under the released names."""
    return {released_name(name): np.asarray(a) for name, a in arrays.items()}


def _openai_name(name: str) -> str | None:
    """``model/h3/mlp/c_fc/w`` → ``h/3/mlp/c_fc/kernel``; ``model/wte`` →
    ``wte/embeddings``; a LayerNorm's ``b`` → ``beta``; None for any other name."""
    if name in ("model/wte", "model/wpe"):
        return f"{name[len('model/'):]}/embeddings"
    match = re.fullmatch(r"model/(?:h(\d+)/)?((?:ln_[12f])|(?:attn|mlp)/c_\w+)/([wbg])", name)
    if match is None:
        return None
    block, layer, param = match.groups()
    canonical = _OPENAI_PARAMS[param]
    if layer.startswith("ln_") and canonical == "bias":
        canonical = "beta"
    prefix = f"h/{block}/" if block is not None else ""
    return f"{prefix}{layer}/{canonical}"

