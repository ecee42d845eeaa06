"""GPT-2 in TensorFlow: the hooks of the one backend template
(``sciperf_tensorflow.backend``) — the mirror of the PyTorch backend.

What is GPT-2's own: the model's logits and the mean token cross-entropy as the loss, in
float32 (``model.loss``); AdamW written out as torch's (``optim.AdamFamily``) with the
recipe's betas and eps and the decoupled weight decay on the variables ``spec.decays``
names only (its decay flags: torch's two parameter groups), the LR of every optimizer step
from ``spec.lr_for_step``, the global gradient norm clipped to ``opt.grad_clip`` after the
ranks' average (``ClipGradNorm``); ``spec.accumulation`` forwards per optimizer step; the
metric, the cross-entropy summed over every scored target token of the validation windows
and their count. Windows have one size, so one compiled step serves every batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from sciperf.workloads.gpt2 import spec
from sciperf_tensorflow import weights
from sciperf_tensorflow.backend import WorkloadBackend
from sciperf_tensorflow.optim import AdamFamily
from sciperf_tensorflow.pieces import ClipGradNorm, StepPiece
from sciperf_tensorflow.workloads.gpt2.model import GPT2, loss


class GPT2Backend(WorkloadBackend):
    """GPT-2's hooks: the model, AdamW with decay flags, clipping, token cross-entropy."""

    def build_model(self, model_spec: spec.ModelSpec) -> keras.Model:
        """GPT-2 of `model_spec` (GPT-2's initialisation), variables built."""
        return GPT2(model_spec)

    def build_optimizer(self, variables: list) -> AdamFamily:
        """torch's AdamW, written out, decaying the variables ``spec.decays`` names (by
        their canonical names, the weight mapper's); the LR is set before every step."""
        o = self.cfg.opt
        names = {id(var): name for name, (var, _) in weights.mapped(self.model).items()}
        return AdamFamily(variables, "AdamW", spec.lr_for_step(self.cfg, 0),
                          (float(o.beta1), float(o.beta2)), float(o.eps),
                          float(o.weight_decay),
                          decays=[spec.decays(names[id(v)]) for v in variables])

    def accumulation(self) -> int:
        """Forwards per optimizer step (``spec.accumulation``)."""
        return spec.accumulation(self.cfg)

    def step_pieces(self) -> Sequence[StepPiece]:
        """The global gradient norm bounded by ``opt.grad_clip`` (0: none)."""
        bound = float(self.cfg.opt.grad_clip)
        return (ClipGradNorm(bound),) if bound > 0 else ()

    def loss_fn(self, out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Mean cross-entropy of every target token, fp32."""
        return loss(out, y)

    def metric_sums(self, out: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(Σ cross-entropy over the batch's target tokens in nats, their count)."""
        per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(y, tf.int64), logits=tf.cast(out, tf.float32))
        return tf.reduce_sum(per_token), tf.cast(tf.size(y), tf.float32)
