"""GPT-2 (Radford et al. 2019) as released, built from
``sciperf.workloads.gpt2.spec.ModelSpec``: token and learned position embeddings,
``n_layer`` pre-LayerNorm blocks (causal multi-head self-attention with a fused QKV
projection, then a 4·d MLP with the exact erf GELU), a final LayerNorm, and logits
through the token embedding itself (tied: one tensor, ``wte``).

Names: the module tree is the released checkpoint's (``h.0.attn.c_attn``), declared
``NESTED_WEIGHTS``, so the one weight mapper (``sciperf_pytorch.weights``) writes exactly
the entries of ``ModelSpec.weight_shapes()`` — ``nn.Linear`` weights transposed to the
canonical (in, out) — and the TensorFlow mirror names its layers by the same paths.
There are no buffers: causality is the attention kernel's ``is_causal``.

Initialisation is GPT-2's (HF ``GPT2PreTrainedModel._init_weights``, nanoGPT): every
matrix and both tables N(0, 0.02²), the residual projections (``c_proj`` of attention and
MLP) N(0, (0.02/√(2·n_layer))²), zero biases, LayerNorms γ 1, β 0.

Dropout (``spec.dropout``) sits where the released model has it — after the embeddings'
sum, on the attention probabilities, after each residual projection — and acts only in
``train()`` mode. Precision is applied from outside (``torch.autocast``); :func:`loss`
computes in float32 at least.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.gpt2 import spec as gpt2
from sciperf.workloads.gpt2.spec import ModelSpec
from sciperf_pytorch.weights import export_weights, import_weights

__all__ = ["GPT2", "MLP", "Attention", "Block", "export_weights", "import_weights", "init_std",
           "loss"]

INIT_STD = gpt2.INIT_STD
init_std = gpt2.init_std  # the spec's, called by both frameworks


class Attention(nn.Module):
    """Causal multi-head self-attention with biases: ``c_attn`` (d → 3d: q, k, v in that
    order, head h in columns h·d_head…(h+1)·d_head of each), ``c_proj`` (d → d)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        d = spec.d_model
        self.n_head, self.dropout = spec.n_head, float(spec.dropout)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.resid_dropout = nn.Dropout(self.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d] → [B, T, d]; position t attends to positions ≤ t."""
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=-1)
        heads = [y.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for y in (q, k, v)]
        y = F.scaled_dot_product_attention(
            *heads, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))


class MLP(nn.Module):
    """``c_fc`` (d → 4d), exact GELU, ``c_proj`` (4d → d)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.c_fc = nn.Linear(spec.d_model, spec.d_mlp)
        self.c_proj = nn.Linear(spec.d_mlp, spec.d_model)
        self.dropout = nn.Dropout(spec.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="none")))


class Block(nn.Module):
    """x + attn(ln_1(x)), then + mlp(ln_2(·)): the pre-norm residual block."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(spec.d_model, eps=spec.layer_norm_eps)
        self.attn = Attention(spec)
        self.ln_2 = nn.LayerNorm(spec.d_model, eps=spec.layer_norm_eps)
        self.mlp = MLP(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """``forward(tokens [B, T] integer, T ≤ context)`` → logits [B, T, vocab_size], the
    logits at t predicting token t + 1."""

    # canonical weights map every module of the tree by its released path
    # (sciperf_pytorch.weights; ModelSpec.weight_shapes lists the entries)
    NESTED_WEIGHTS = True

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        gpt2.check_model(spec)
        self.spec = spec
        self.wte = nn.Embedding(spec.vocab_size, spec.d_model)
        self.wpe = nn.Embedding(spec.context, spec.d_model)
        self.drop = nn.Dropout(spec.dropout)
        self.h = nn.ModuleList(Block(spec) for _ in range(spec.n_layer))
        self.ln_f = nn.LayerNorm(spec.d_model, eps=spec.layer_norm_eps)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2's initialisation (module docstring)."""
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0,
                                init_std(name.replace(".", "/"), self.spec.n_layer))
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, INIT_STD)
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[-1]
        if t > self.spec.context:
            raise ValueError(f"{t} tokens exceed the context of {self.spec.context}")
        positions = torch.arange(t, device=tokens.device)
        x = self.drop(self.wte(tokens.long()) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of every target token (nats/token), in float32 at least."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())
