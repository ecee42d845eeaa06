"""GPT-2's counted layers for `sciperf characterize` (the convention is there: dense
multiply-adds × 2, backward = 2 × forward − the first layer's forward).

A sample is one window of ``context`` tokens. Per block: the fused QKV projection, the two
attention matmuls — the scores Q·Kᵀ and the mix of the values, each T·T·d multiply-adds
over all heads, counted over the whole T × T square as the PaLM paper's appendix B and
Chinchilla's appendix F count them (the causal mask's zeros included) — the output
projection and the MLP; then the output projection onto the vocabulary, which reuses the
token table (tied: no parameters of its own). The embedding lookups, LayerNorms, GELU,
softmax and the loss are left out, as the convention leaves them out everywhere.

The first layer is the token table (0 multiply-adds), so a training token costs 3 × its
forward: :func:`training_flops_per_token` = 6·N_mm + 12·L·T·d, with N_mm the matmul weights
(12·L·d² + V·d). That is nanoGPT's ``estimate_mfu`` (6N + 12·L·H·Q·T, after PaLM) with N the
matmul weights alone: nanoGPT's N also holds the biases and LayerNorms (0.09 % more).
"""

from __future__ import annotations

from sciperf.workloads.base import Layer
from sciperf.workloads.gpt2.spec import ModelSpec


def layers(model: ModelSpec) -> list[Layer]:
    """Every counted layer of `model` for one window of ``model.context`` tokens, in the
    order of the forward."""
    t, d, f, v = int(model.context), int(model.d_model), int(model.d_mlp), int(model.vocab_size)
    out = [Layer("wte", "embedding", 0, v * d, t * d), Layer("wpe", "embedding", 0, t * d)]
    for i in range(int(model.n_layer)):
        h = f"h/{i}"
        out += [
            Layer(f"{h}/ln_1", "layernorm", 0, 2 * d, t * d),
            Layer(f"{h}/attn/c_attn", "dense", t * d * 3 * d, 3 * d * d + 3 * d, t * 3 * d),
            Layer(f"{h}/attn/scores", "attention", t * t * d, 0, int(model.n_head) * t * t),
            Layer(f"{h}/attn/mix", "attention", t * t * d, 0, t * d),
            Layer(f"{h}/attn/c_proj", "dense", t * d * d, d * d + d, t * d),
            Layer(f"{h}/ln_2", "layernorm", 0, 2 * d, t * d),
            Layer(f"{h}/mlp/c_fc", "dense", t * d * f, d * f + f, t * f),
            Layer(f"{h}/mlp/c_proj", "dense", t * f * d, f * d + d, t * d),
        ]
    out += [Layer("ln_f", "layernorm", 0, 2 * d, t * d),
            Layer("lm_head", "dense", t * d * v, 0, t * v)]  # tied to wte
    return out


def matmul_weights(model: ModelSpec) -> int:
    """N_mm: the weights every token multiplies through (the blocks' four projections and
    the tied output projection), 12·L·d² + V·d."""
    d = int(model.d_model)
    return 12 * int(model.n_layer) * d * d + int(model.vocab_size) * d


def training_flops_per_token(model: ModelSpec) -> int:
    """6·N_mm + 12·L·T·d: forward and backward of one token in a full window."""
    return 6 * matmul_weights(model) + 12 * int(model.n_layer) * int(model.context) \
        * int(model.d_model)
