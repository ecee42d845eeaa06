"""Layers every part of the AlphaFold2 network is built from: initialised linears, layer
norm, dropout with shared masks, gated multi-head attention and the two-layer transition.

Initialisation (AF2 supplement §1.11.4; shared/spec/openfold.md §3), chosen per layer by
name because the checkpoint-free start of a run depends on it:

* ``default`` — LeCun: truncated normal, std √(1/fan_in)/0.87962566 (the std of a unit
  normal truncated at ±2), cut at ±2 std; ``relu`` — the same with scale 2 (He);
* ``glorot`` — Xavier uniform (attention q, k, v);
* ``gating`` — W = 0, b = 1, so a fresh gate is sigmoid(1) everywhere;
* ``normal`` — Kaiming normal for a linear layer, std √(1/fan_in) (bias projections);
* ``final`` — W = 0, b = 0, so every residual branch starts as the identity.

Biases start at zero unless ``gating``. LayerNorm: weight 1, bias 0, eps 1e-5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

__all__ = ["Attention", "Linear", "SharedDropout", "Transition", "columnwise_dropout", "layer_norm",
           "rowwise_dropout"]

TRUNC_NORMAL_STD = 0.87962566103423978  # std of N(0, 1) truncated to [-2, 2]
INITS = ("default", "relu", "glorot", "gating", "normal", "final")


class Linear(nn.Linear):
    """nn.Linear with one of the AlphaFold initialisations (:data:`INITS`)."""

    def __init__(self, fin: int, fout: int, bias: bool = True, init: str = "default",
                 device: torch.device | str | None = None) -> None:
        if init not in INITS:
            raise ValueError(f"unknown init {init!r} (one of {', '.join(INITS)})")
        self.init = init
        super().__init__(fin, fout, bias=bias, device=device)

    def reset_parameters(self) -> None:
        """Called by nn.Linear's constructor: replaces torch's default init with ours."""
        with torch.no_grad():
            if self.init in ("default", "relu"):
                scale = 2.0 if self.init == "relu" else 1.0
                std = math.sqrt(scale / max(1, self.in_features)) / TRUNC_NORMAL_STD
                nn.init.trunc_normal_(self.weight, std=std, a=-2 * std, b=2 * std)
            elif self.init == "glorot":
                nn.init.xavier_uniform_(self.weight, gain=1.0)
            elif self.init == "normal":
                nn.init.kaiming_normal_(self.weight, nonlinearity="linear")
            else:  # gating, final
                self.weight.zero_()
            if self.bias is not None:
                self.bias.fill_(1.0 if self.init == "gating" else 0.0)


def layer_norm(c: int, eps: float = 1e-5) -> nn.LayerNorm:
    """LayerNorm over the last dim (parameters ``weight`` and ``bias`` as the reference)."""
    return nn.LayerNorm(c, eps=eps)


class SharedDropout(nn.Module):
    """Dropout whose mask is shared along ``share_dims`` (AF2 supplement §1.11.6).

    "Row-wise" dropout of the pair/MSA stacks shares one mask over dim −3 (all rows of a
    column see the same mask), "column-wise" over dim −2. The mask is drawn as dropout
    of a ones tensor of the reduced shape, so the random stream is consumed exactly as
    the reference consumes it (same seed → same masks).
    """

    def __init__(self, p: float, share_dims: Sequence[int] = ()) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout rate {p} outside [0, 1]")
        self.p = p
        self.share_dims = tuple(share_dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        shape = list(x.shape)
        for d in self.share_dims:
            shape[d] = 1
        return x * F.dropout(x.new_ones(shape), p=self.p, training=True)


def rowwise_dropout(p: float) -> SharedDropout:
    return SharedDropout(p, share_dims=(-3,))


def columnwise_dropout(p: float) -> SharedDropout:
    return SharedDropout(p, share_dims=(-2,))


def _add_into(logits: torch.Tensor, term: torch.Tensor) -> torch.Tensor:
    """``logits + term``, written into `logits` when the sum keeps its dtype and shape.

    The logits are the largest tensors of the network (the extra-MSA row attention's are
    1,024 × 8 × crop² floats); adding the mask and the pair bias out of place allocated
    two more of them per call and, on a CPU, faulted their fresh pages in (the
    reference adds in place). The matmul's backward needs q and k, not its output, so
    writing into it is safe for autograd. Under bf16 autocast a float32 term promotes
    the sum, which stays out of place: the softmax keeps its float32 input.
    """
    if torch.result_type(logits, term) == logits.dtype and \
            torch.broadcast_shapes(logits.shape, term.shape) == logits.shape:
        return logits.add_(term)
    return logits + term


class Attention(nn.Module):
    """Multi-head attention with optional sigmoid gate (AF2 supplement Algorithm 7 & co.).

    q, k, v have no bias (Glorot); q is scaled by 1/√c_hidden; the logits get the mask
    bias (mask − 1)·inf and an optional additive bias; the gate sigmoid(Linear(x_q))
    multiplies each head's output before the output projection (zero-initialised).
    Masks and biases broadcast against the logits [*, heads, Q, K].
    """

    def __init__(self, c_q: int, c_kv: int, c_hidden: int, num_heads: int, inf: float,
                 gated: bool = True) -> None:
        super().__init__()
        self.c_hidden, self.num_heads, self.inf = c_hidden, num_heads, inf
        hidden = c_hidden * num_heads
        self.linear_q = Linear(c_q, hidden, bias=False, init="glorot")
        self.linear_k = Linear(c_kv, hidden, bias=False, init="glorot")
        self.linear_v = Linear(c_kv, hidden, bias=False, init="glorot")
        self.linear_o = Linear(hidden, c_q, init="final")
        self.linear_g = Linear(c_q, hidden, init="gating") if gated else None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[*, L, H·C] → [*, H, L, C]."""
        return x.view(*x.shape[:-1], self.num_heads, self.c_hidden).transpose(-2, -3)

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor, mask: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        q = self._heads(self.linear_q(x_q)) / math.sqrt(self.c_hidden)
        k = self._heads(self.linear_k(x_kv))
        v = self._heads(self.linear_v(x_kv))
        logits = _add_into(torch.matmul(q, k.transpose(-1, -2)), (mask - 1.0) * self.inf)
        if bias is not None:
            logits = _add_into(logits, bias)
        o = torch.matmul(torch.softmax(logits, dim=-1), v).transpose(-2, -3)  # [*, Q, H, C]
        if self.linear_g is not None:
            gate = torch.sigmoid(self.linear_g(x_q))
            o = o * gate.view(*gate.shape[:-1], self.num_heads, self.c_hidden)
        return self.linear_o(o.reshape(*o.shape[:-2], self.num_heads * self.c_hidden))


class Transition(nn.Module):
    """LN → Linear(c, n·c) → ReLU → Linear(n·c, c); the MSA and pair transitions.

    Unmasked, as the reference (DeepMind's code never applies the mask here either).
    """

    def __init__(self, c: int, n: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.layer_norm = layer_norm(c, eps)
        self.linear_1 = Linear(c, n * c, init="relu")
        self.linear_2 = Linear(n * c, c, init="final")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(torch.relu(self.linear_1(self.layer_norm(x))))
