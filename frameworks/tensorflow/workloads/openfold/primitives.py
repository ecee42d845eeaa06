"""Layers every part of the AlphaFold2 network is built from, in Keras 3: initialised
dense layers, layer norm, dropout with shared masks, gated multi-head attention, the
two-layer transition — the mirror of ``sciperf_pytorch.workloads.openfold.primitives``.

Names: every weight layer is named with its reference module path, ``.`` spelled ``__``
(``evoformer_stack__blocks__0__msa_att_row__mha__linear_q``), so the one Keras weight
mapper (``sciperf_tensorflow.weights``) writes exactly the entries of
``ModelSpec.weight_shapes()`` without a table. A layer is given its parent's path and
names its children with :func:`child`.

Initialisation (AF2 supplement §1.11.4; shared/spec/openfold.md §3), per layer by name:
``default`` LeCun truncated normal (std √(1/fan_in)/0.87962566, cut at ±2 std), ``relu``
the same with scale 2, ``glorot`` Xavier uniform, ``gating`` W = 0 and b = 1, ``normal``
Kaiming normal √(1/fan_in), ``final`` W = 0 and b = 0. LayerNorm: γ 1, β 0, eps 1e-5.

Dropout is stateless: a mask is a function of the step's dropout seed (a tensor the
model passes down, :func:`dropout_seed`) and the layer's name, so the recomputation of a
checkpointed block (``tf.recompute_grad``) draws the very same masks.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Iterator, Sequence

import keras
import tensorflow as tf

__all__ = ["Attention", "Block", "Dense", "FreeVector", "SharedDropout", "Transition",
           "at_least_fp32", "child", "columnwise_dropout", "current_seed", "dropout_seed",
           "full_precision", "layer_norm", "rowwise_dropout"]

TRUNC_NORMAL_STD = 0.87962566103423978  # std of N(0, 1) truncated to [-2, 2]
INITS = ("default", "relu", "glorot", "gating", "normal", "final")
NEST = "__"  # Keras 3 names cannot hold "/" or "."; the mapper reads "__" as "/"


def child(path: str, name: str) -> str:
    """The Keras name of `name` under the module at `path` ("" for the root)."""
    return f"{path}{NEST}{name}" if path else name


class FreeVector(keras.layers.Layer):
    """A module's own trainable vector (IPA's ``head_weights``), the canonical kind
    ``basis``: one weight named ``frequencies`` in a layer named by the vector's path."""

    def __init__(self, size: int, value: float, name: str, dtype: str | None = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.frequencies = self.add_weight(
            shape=(size,), initializer=keras.initializers.Constant(value),
            name="frequencies", dtype=self.variable_dtype)

    def call(self) -> tf.Tensor:
        return tf.convert_to_tensor(self.frequencies)


def full_precision() -> str:
    """The variable dtype of the global policy (float32 under mixed bf16, float64 under
    a float64 policy): what a part kept out of half precision computes in."""
    return keras.mixed_precision.global_policy().variable_dtype


class Block(keras.layers.Layer):
    """A layer holding layers; ``layers`` lets the weight mapper walk into it (and
    :class:`FreeVector`, declared here, maps as a basis wherever it sits)."""

    WEIGHT_KINDS = ((FreeVector, "basis"),)

    @property
    def layers(self) -> list[keras.layers.Layer]:
        return list(self._flatten_layers(include_self=False, recursive=False))


def _kernel_init(init: str, fan_in: int) -> keras.initializers.Initializer:
    if init in ("default", "relu"):
        scale = 2.0 if init == "relu" else 1.0
        return keras.initializers.TruncatedNormal(
            stddev=math.sqrt(scale / max(1, fan_in)) / TRUNC_NORMAL_STD)
    if init == "glorot":
        return keras.initializers.GlorotUniform()
    if init == "normal":
        return keras.initializers.VarianceScaling(1.0, "fan_in", "untruncated_normal")
    return keras.initializers.Zeros()


def Dense(fin: int, fout: int, name: str, bias: bool = True,  # noqa: N802 - a layer
          init: str = "default", dtype: str | None = None) -> keras.layers.Dense:
    """A built Dense layer (kernel (fin, fout)) with one of the AlphaFold inits; `dtype`
    (a policy name) overrides the global policy."""
    if init not in INITS:
        raise ValueError(f"unknown init {init!r} (one of {', '.join(INITS)})")
    layer = keras.layers.Dense(
        fout, use_bias=bias, kernel_initializer=_kernel_init(init, fin),
        bias_initializer="ones" if init == "gating" else "zeros", name=name, dtype=dtype)
    layer.build((None, fin))
    return layer


def layer_norm(c: int, name: str, eps: float = 1e-5,
               dtype: str | None = None) -> keras.layers.LayerNormalization:
    """A built LayerNorm over the last dim (γ, β as the reference's weight, bias)."""
    layer = keras.layers.LayerNormalization(axis=-1, epsilon=eps, name=name, dtype=dtype)
    layer.build((None, c))
    return layer


# --------------------------------------------------------------------------- dropout
_SEED: list[tf.Tensor | None] = [None]


@contextlib.contextmanager
def dropout_seed(seed: tf.Tensor | None) -> Iterator[None]:
    """Within the block, training dropout draws from `seed` (int64 [2]; None: dropout
    off). A checkpointed block takes the seed as an input and sets it inside, so its
    recomputation sees it too."""
    saved = _SEED[0]
    _SEED[0] = seed
    try:
        yield
    finally:
        _SEED[0] = saved


def current_seed() -> tf.Tensor | None:
    """The dropout seed of the enclosing :func:`dropout_seed` block (None: no dropout)."""
    return _SEED[0]


class SharedDropout(keras.layers.Layer):
    """Dropout whose mask is shared along ``share_dims`` (AF2 supplement §1.11.6):
    row-wise shares one mask over dim −3, column-wise over dim −2. Stateless: the mask
    is drawn from (the current :func:`dropout_seed`, a hash of the layer's name)."""

    def __init__(self, p: float, name: str, share_dims: Sequence[int] = ()) -> None:
        super().__init__(name=name)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout rate {p} outside [0, 1]")
        self.p = float(p)
        self.share_dims = tuple(share_dims)
        self.salt = zlib.crc32(name.encode()) & 0x7FFFFFFF

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        seed = _SEED[0]
        if not training or self.p == 0.0 or seed is None:
            return x
        shape = tf.unstack(tf.shape(x))
        for d in self.share_dims:
            shape[d] = 1
        keep = tf.random.stateless_uniform(tf.stack(shape), seed=seed + [0, self.salt]) >= self.p
        return x * tf.cast(keep, x.dtype) / tf.cast(1.0 - self.p, x.dtype)


def rowwise_dropout(p: float, name: str) -> SharedDropout:
    return SharedDropout(p, name, share_dims=(-3,))


def columnwise_dropout(p: float, name: str) -> SharedDropout:
    return SharedDropout(p, name, share_dims=(-2,))


# --------------------------------------------------------------------------- attention
class Attention(Block):
    """Multi-head attention with optional sigmoid gate (AF2 supplement Algorithm 7 & co.):
    q, k, v without bias (Glorot), q scaled by 1/√c_hidden, logits + (mask − 1)·inf + an
    optional bias, softmax in fp32, the gate sigmoid(Dense(x_q)) per head before the
    zero-initialised output projection. Masks and biases broadcast against [*, H, Q, K]."""

    def __init__(self, c_q: int, c_kv: int, c_hidden: int, num_heads: int, inf: float,
                 path: str, gated: bool = True) -> None:
        super().__init__(name=path)
        self.c_hidden, self.num_heads, self.inf = c_hidden, num_heads, inf
        hidden = c_hidden * num_heads
        self.linear_q = Dense(c_q, hidden, child(path, "linear_q"), bias=False, init="glorot")
        self.linear_k = Dense(c_kv, hidden, child(path, "linear_k"), bias=False,
                              init="glorot")
        self.linear_v = Dense(c_kv, hidden, child(path, "linear_v"), bias=False,
                              init="glorot")
        self.linear_o = Dense(hidden, c_q, child(path, "linear_o"), init="final")
        self.linear_g = Dense(c_q, hidden, child(path, "linear_g"), init="gating") \
            if gated else None

    def _heads(self, x: tf.Tensor) -> tf.Tensor:
        """[*, L, H·C] → [*, H, L, C]."""
        x = tf.reshape(x, tf.concat([tf.shape(x)[:-1], [self.num_heads, self.c_hidden]], 0))
        return _swap(x, -2, -3)

    def call(self, x_q: tf.Tensor, x_kv: tf.Tensor, mask: tf.Tensor,
             bias: tf.Tensor | None = None) -> tf.Tensor:
        q = self._heads(self.linear_q(x_q))
        q = q / tf.constant(math.sqrt(self.c_hidden), q.dtype)  # √c in q's own precision
        k = self._heads(self.linear_k(x_kv))
        v = self._heads(self.linear_v(x_kv))
        wide = at_least_fp32(q.dtype)
        logits = tf.cast(tf.matmul(q, k, transpose_b=True), wide)
        logits = logits + (tf.cast(mask, wide) - 1.0) * self.inf
        if bias is not None:
            logits = logits + tf.cast(bias, wide)
        a = tf.cast(tf.nn.softmax(logits, axis=-1), v.dtype)
        o = _swap(tf.matmul(a, v), -2, -3)  # [*, Q, H, C]
        if self.linear_g is not None:
            gate = tf.sigmoid(self.linear_g(x_q))
            o = o * tf.reshape(gate, tf.shape(o))
        flat = tf.reshape(o, tf.concat([tf.shape(o)[:-2], [self.num_heads * self.c_hidden]],
                                       0))
        return self.linear_o(flat)


def at_least_fp32(dtype: tf.DType) -> tf.DType:
    """float32 for a half-precision `dtype` (softmax, norms), else `dtype` itself."""
    return tf.float32 if dtype in (tf.bfloat16, tf.float16) else dtype


def _swap(x: tf.Tensor, a: int, b: int) -> tf.Tensor:
    """`x` with axes `a` and `b` (negative) exchanged."""
    rank = x.shape.rank
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    return tf.transpose(x, perm)


class Transition(Block):
    """LN → Dense(c, n·c) → ReLU → Dense(n·c, c); the MSA and pair transitions (unmasked,
    as the reference)."""

    def __init__(self, c: int, n: int, path: str, eps: float = 1e-5) -> None:
        super().__init__(name=path)
        self.layer_norm = layer_norm(c, child(path, "layer_norm"), eps)
        self.linear_1 = Dense(c, n * c, child(path, "linear_1"), init="relu")
        self.linear_2 = Dense(n * c, c, child(path, "linear_2"), init="final")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.linear_2(tf.nn.relu(self.linear_1(self.layer_norm(x))))
