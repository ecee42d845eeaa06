"""DeepCAM in TensorFlow: the hooks of the backend template (``sciperf_tensorflow.backend``).

The mirror of ``sciperf_pytorch.workloads.deepcam.backend``. What is DeepCAM's own:
DeepLabv3+ (``model``), Adam/AdamW/LAMB written out (``optim.AdamFamily``, the LR set by
the template before every optimizer step from the workload's per-step schedule), the
weighted cross-entropy (mean over pixels) in fp32, the per-sample IoU, gradient
accumulation, and the BN moving statistics averaged over ranks after each epoch (per-rank
BN: SyncBN groups are refused). Setup, the compiled steps, input (``tf.data`` or DALI, the
same batches either way), epochs and evaluation are the template's.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from sciperf.backends import RunContext
from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import spec as spec
from sciperf_tensorflow.backend import WorkloadBackend
from sciperf_tensorflow.optim import AdamFamily
from sciperf_tensorflow.workloads.deepcam.model import DeepCam


def weighted_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """The reference loss: per-pixel CE weighted by w[label], a plain mean over pixels."""
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                        logits=tf.cast(logits, tf.float32))
    return tf.reduce_mean(tf.gather(tf.constant(spec.CLASS_WEIGHTS, tf.float32), labels) * ce)


def sample_iou(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Per-sample IoU (N,): mean over classes of TP/(TP+FP+FN), absent classes count 1."""
    n = tf.shape(labels)[0]
    pred = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int32), (n, -1))
    y = tf.reshape(labels, (n, -1))
    total = tf.zeros((n,), tf.float64)
    for c in range(spec.NUM_CLASSES):
        p_c, y_c = tf.equal(pred, c), tf.equal(y, c)
        tp = tf.reduce_sum(tf.cast(p_c & y_c, tf.float64), axis=1)
        union = tf.reduce_sum(tf.cast(p_c | y_c, tf.float64), axis=1)
        total += tf.where(union > 0, tp / tf.maximum(union, 1.0), tf.ones_like(tp))
    return total / spec.NUM_CLASSES


class DeepCamBackend(WorkloadBackend):
    """DeepCAM for the common driver (mixed_bfloat16, NHWC input, fp32 loss)."""

    def check(self, ctx: RunContext) -> None:
        """SyncBN groups exist only in the PyTorch backend."""
        if int(ctx.cfg.model.batchnorm_group_size) != 1:
            raise SciperfError("model.batchnorm_group_size > 1 (SyncBN groups) is not "
                               "supported by the TensorFlow backend; use framework=pytorch "
                               "(which has them) or 1 (per-rank BN, statistics averaged "
                               "after each epoch)")

    def build_model(self, model_spec: spec.ModelSpec) -> keras.Model:
        """DeepLabv3+ of the spec."""
        return DeepCam(model_spec)

    def build_optimizer(self, variables: list) -> AdamFamily:
        """Adam, AdamW or LAMB (``opt.name``) with the spec's eps and LAMB clip norm."""
        o = self.cfg.opt
        return AdamFamily(variables, o.name, float(o.lr), list(o.betas), spec.ADAM_EPS,
                          float(o.weight_decay), spec.LAMB_MAX_GRAD_NORM)

    def accumulation(self) -> int:
        """``opt.gradient_accumulation_frequency`` micro-batches per optimizer step."""
        return int(self.cfg.opt.gradient_accumulation_frequency)

    def loss_fn(self, out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Weighted cross-entropy in fp32 (the reference's CELoss)."""
        return weighted_cross_entropy(out, y)

    def metric_sums(self, out: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(Σ per-sample IoU, samples): the mean per-sample IoU's parts."""
        return tf.reduce_sum(sample_iou(out, y)), tf.shape(y)[0]

    def after_epoch(self) -> None:
        """Average the BN moving statistics over ranks (per-rank BN otherwise drifts)."""
        self.comm.average(self.bn_statistics())

    def bn_statistics(self) -> list:
        """Every BN moving mean and variance."""
        return [v for v in self.model.non_trainable_variables
                if v.name in ("moving_mean", "moving_variance")]
