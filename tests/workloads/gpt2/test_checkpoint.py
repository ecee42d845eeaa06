"""A released GPT-2 checkpoint's three layouts → canonical weights, on state dicts the
test writes for a small GPT-2."""

from __future__ import annotations

import numpy as np
import pytest

from sciperf.workloads.gpt2 import checkpoint, spec
from testkit import refused

MODEL = spec.ModelSpec(n_layer=2, n_head=2, d_model=8, context=5, vocab_size=11)


def _canonical(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32)
            for n, s in MODEL.weight_shapes().items()}


def _hf(canon: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An HF GPT2LMHeadModel state dict: prefix, Conv1D (in, out), mask buffers, tied head."""
    out = {f"transformer.{spec.released_name(n)}": a for n, a in canon.items()}
    for i in range(MODEL.n_layer):
        out[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 5, 5), np.float32))
        out[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    out["lm_head.weight"] = canon["wte/embeddings"].copy()
    return out


def _openai(canon: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """OpenAI's TF checkpoint names: model/h0/attn/c_attn/w as (1, in, out), g and b."""
    out = {}
    for name, a in canon.items():
        parts = name.split("/")
        if parts[-1] == "embeddings":
            out[f"model/{parts[0]}"] = a
            continue
        param = {"kernel": "w", "bias": "b", "gamma": "g", "beta": "b"}[parts[-1]]
        layer = (f"h{parts[1]}/{'/'.join(parts[2:-1])}" if parts[0] == "h"
                 else "/".join(parts[:-1]))
        out[f"model/{layer}/{param}"] = a[None] if param == "w" else a
    return out


@pytest.mark.parametrize("layout", checkpoint.LAYOUTS)
def test_each_layout_gives_the_canonical_weights(layout: str) -> None:
    canon = _canonical()
    if layout == "conv1d":
        released = _hf(canon)
    elif layout == "linear":  # nn.Linear keeps (out, in): every kernel transposed
        released = {k: (a.T if k.endswith("weight") and a.ndim == 2 and "wte" not in k
                        and "wpe" not in k and "lm_head" not in k else a)
                    for k, a in _hf(canon).items()}
    else:
        released = _openai(canon)
    got = checkpoint.from_released(released, MODEL, layout)
    assert got.keys() == canon.keys()
    for name, array in canon.items():
        np.testing.assert_array_equal(got[name], array, err_msg=name)
    back = checkpoint.to_released(got)
    np.testing.assert_array_equal(back["h.1.mlp.c_fc.weight"], canon["h/1/mlp/c_fc/kernel"])


def test_refusals_are_one_line() -> None:
    canon = _canonical()
    untied = _hf(canon) | {"lm_head.weight": np.zeros((11, 8), np.float32)}
    assert "lm_head.weight differs from wte.weight" in refused(
        checkpoint.from_released, untied, MODEL, source="gpt2.bin")
    linear_as_conv = {k: (a.T if k.endswith("c_fc.weight") else a) for k, a in _hf(canon).items()}
    line = refused(checkpoint.from_released, linear_as_conv, MODEL, source="gpt2.bin")
    assert line.startswith("gpt2.bin: weights do not fit the model")
    assert "h/0/mlp/c_fc/kernel has shape (32, 8), expected (8, 32)" in line
    extra = _hf(canon) | {"transformer.h.2.ln_1.weight": np.zeros(8, np.float32)}
    assert "not a GPT-2 tensor of this model: transformer.h.2.ln_1.weight" in refused(
        checkpoint.from_released, extra, MODEL, source="gpt2.bin")
    missing = {k: a for k, a in _hf(canon).items() if "ln_f" not in k}
    assert "missing ln_f/beta, ln_f/gamma" in refused(checkpoint.from_released, missing, MODEL)
