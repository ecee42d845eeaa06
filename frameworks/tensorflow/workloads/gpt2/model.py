"""GPT-2 (Radford et al. 2019) as released, in Keras 3, built from
``sciperf.workloads.gpt2.spec.ModelSpec`` — the mirror of
``sciperf_pytorch.workloads.gpt2.model``: token and learned position embeddings,
``n_layer`` pre-LayerNorm blocks (causal multi-head self-attention with a fused QKV
projection, then a 4·d MLP with the exact erf GELU), a final LayerNorm, and logits
through the token embedding itself (tied: one variable, ``wte``).

Names: every weight layer is named with its released module path, ``.`` spelled ``__``
(``h__0__attn__c_attn``), so the one Keras weight mapper (``sciperf_tensorflow.weights``)
writes exactly the entries of ``ModelSpec.weight_shapes()`` without a table; Dense
kernels are (in, out), the canonical layout.

Initialisation is GPT-2's (HF ``GPT2PreTrainedModel._init_weights``, nanoGPT): every
matrix and both tables N(0, 0.02²), the residual projections (``c_proj`` of attention and
MLP) N(0, (0.02/√(2·n_layer))²), zero biases, LayerNorms γ 1, β 0.

Attention is an explicit causal softmax: scores of later positions are −∞ before the
softmax, which runs in the variable dtype (float32 under a mixed policy, float64 under a
float64 one). Dropout (``spec.dropout``) sits where the released model has it — after the
embeddings' sum, on the attention probabilities, after each residual projection — and acts
only with ``training=True``. Layers follow the Keras dtype policy; :func:`loss` computes
in float32 at least.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from sciperf.workloads.gpt2 import spec as gpt2
from sciperf.workloads.gpt2.spec import ModelSpec
from sciperf_tensorflow.weights import export_weights, import_weights

__all__ = ["GPT2", "MLP", "Attention", "Block", "export_weights", "gelu", "import_weights",
           "init_std", "loss"]

NEST = "__"  # Keras 3 names cannot hold "/" or "."; the mapper reads "__" as "/"
INIT_STD = gpt2.INIT_STD
init_std = gpt2.init_std  # the spec's, called by both frameworks
SQRT_HALF = math.sqrt(0.5)  # exact GELU: x·Φ(x) = x/2·erfc(−x/√2), the constant in float64


def _keras_name(path: str) -> str:
    return path.replace("/", NEST)


def dense(path: str, fan_in: int, units: int, n_layer: int, dtype) -> keras.layers.Dense:
    """A built Dense layer named by canonical layer `path`, GPT-2's init."""
    layer = keras.layers.Dense(
        units, kernel_initializer=keras.initializers.RandomNormal(
            stddev=init_std(path, n_layer)),
        bias_initializer="zeros", name=_keras_name(path), dtype=dtype)
    layer.build((None, fan_in))
    return layer


def layer_norm(path: str, spec: ModelSpec, dtype) -> keras.layers.LayerNormalization:
    """A built LayerNorm (γ 1, β 0) named by canonical layer `path`."""
    layer = keras.layers.LayerNormalization(epsilon=spec.layer_norm_eps,
                                            name=_keras_name(path), dtype=dtype)
    layer.build((None, spec.d_model))
    return layer


def embedding(name: str, rows: int, spec: ModelSpec, dtype) -> keras.layers.Embedding:
    """A built table of `rows` × d, N(0, 0.02²)."""
    layer = keras.layers.Embedding(
        rows, spec.d_model, embeddings_initializer=keras.initializers.RandomNormal(
            stddev=INIT_STD), name=name, dtype=dtype)
    layer.build()
    return layer


def gelu(x: tf.Tensor) -> tf.Tensor:
    """The exact GELU, x·Φ(x) = ½·x·erfc(−x/√2), with 1/√2 in `x`'s own dtype
    (``tf.nn.gelu`` rounds that constant to float32 first, which is off by ~1e-8 in
    float64)."""
    return 0.5 * x * tf.math.erfc(-x * SQRT_HALF)


class _Parent(keras.layers.Layer):
    """A layer holding layers; ``layers`` lets the weight mapper walk into it."""

    @property
    def layers(self) -> list[keras.layers.Layer]:
        return list(self._flatten_layers(include_self=False, recursive=False))


class Attention(_Parent):
    """Causal multi-head self-attention with biases: ``c_attn`` (d → 3d: q, k, v in that
    order, head h in columns h·d_head…(h+1)·d_head of each), ``c_proj`` (d → d)."""

    def __init__(self, spec: ModelSpec, path: str, dtype) -> None:
        super().__init__(name=_keras_name(path), dtype=dtype)
        d = spec.d_model
        self.n_head, self.d_head = spec.n_head, d // spec.n_head
        self.c_attn = dense(f"{path}/c_attn", d, 3 * d, spec.n_layer, dtype)
        self.c_proj = dense(f"{path}/c_proj", d, d, spec.n_layer, dtype)
        self.attn_dropout = keras.layers.Dropout(spec.dropout, dtype=dtype)
        self.resid_dropout = keras.layers.Dropout(spec.dropout, dtype=dtype)
        self.built = True

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        """[B, T, d] → [B, T, d]; position t attends to positions ≤ t."""
        b, t, d = tf.shape(x)[0], tf.shape(x)[1], self.n_head * self.d_head
        q, k, v = (tf.transpose(tf.reshape(y, [b, t, self.n_head, self.d_head]), [0, 2, 1, 3])
                   for y in tf.split(self.c_attn(x), 3, axis=-1))
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(self.d_head))
        scores = tf.cast(scores, self.dtype_policy.variable_dtype)
        positions = tf.range(t)
        causal = positions[:, None] >= positions[None, :]
        scores = tf.where(causal, scores, tf.constant(-math.inf, scores.dtype))
        probs = self.attn_dropout(tf.cast(tf.nn.softmax(scores, axis=-1), v.dtype),
                                  training=training)
        y = tf.reshape(tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3]), [b, t, d])
        return self.resid_dropout(self.c_proj(y), training=training)


class MLP(_Parent):
    """``c_fc`` (d → 4d), exact GELU, ``c_proj`` (4d → d)."""

    def __init__(self, spec: ModelSpec, path: str, dtype) -> None:
        super().__init__(name=_keras_name(path), dtype=dtype)
        self.c_fc = dense(f"{path}/c_fc", spec.d_model, spec.d_mlp, spec.n_layer, dtype)
        self.c_proj = dense(f"{path}/c_proj", spec.d_mlp, spec.d_model, spec.n_layer, dtype)
        self.dropout = keras.layers.Dropout(spec.dropout, dtype=dtype)
        self.built = True

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        h = gelu(self.c_fc(x))
        return self.dropout(self.c_proj(h), training=training)


class Block(_Parent):
    """x + attn(ln_1(x)), then + mlp(ln_2(·)): the pre-norm residual block."""

    def __init__(self, spec: ModelSpec, path: str, dtype) -> None:
        super().__init__(name=_keras_name(path), dtype=dtype)
        self.ln_1 = layer_norm(f"{path}/ln_1", spec, dtype)
        self.attn = Attention(spec, f"{path}/attn", dtype)
        self.ln_2 = layer_norm(f"{path}/ln_2", spec, dtype)
        self.mlp = MLP(spec, f"{path}/mlp", dtype)
        self.built = True

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = x + self.attn(self.ln_1(x), training=training)
        return x + self.mlp(self.ln_2(x), training=training)


class GPT2(keras.Model):
    """``call(tokens (B, T) integer, T ≤ context)`` → logits (B, T, vocab_size), the
    logits at t predicting token t + 1.

    Built eagerly (weights exist after the constructor); ``dtype`` is a Keras dtype policy
    (default: the global one).
    """

    def __init__(self, spec: ModelSpec, **kwargs) -> None:
        super().__init__(**{"name": "gpt2", **kwargs})
        gpt2.check_model(spec)
        self.spec = spec
        policy = self.dtype_policy
        self.wte = embedding("wte", spec.vocab_size, spec, policy)
        self.wpe = embedding("wpe", spec.context, spec, policy)
        self.drop = keras.layers.Dropout(spec.dropout, dtype=policy)
        self.h = [Block(spec, f"h/{i}", policy) for i in range(spec.n_layer)]
        self.ln_f = layer_norm("ln_f", spec, policy)
        self.built = True

    def call(self, tokens: tf.Tensor, training: bool = False) -> tf.Tensor:
        t = tokens.shape[-1]
        if t is not None and t > self.spec.context:
            raise ValueError(f"{t} tokens exceed the context of {self.spec.context}")
        tokens = tf.cast(tokens, tf.int32)
        x = self.wte(tokens) + self.wpe(tf.range(tf.shape(tokens)[-1]))
        x = self.drop(x, training=training)
        for block in self.h:
            x = block(x, training=training)
        x = self.ln_f(x)
        table = tf.cast(self.wte.embeddings, x.dtype)
        logits = tf.matmul(tf.reshape(x, [-1, self.spec.d_model]), table, transpose_b=True)
        return tf.reshape(logits, tf.concat([tf.shape(tokens), [self.spec.vocab_size]], 0))


def loss(logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy of every target token (nats/token), in float32 at least."""
    if logits.dtype != tf.float64:
        logits = tf.cast(logits, tf.float32)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(targets, tf.int64), logits=logits))
