"""CosmoFlow in TensorFlow: the hooks of the backend template (``sciperf_tensorflow.backend``).

What is CosmoFlow's own: the 3-D CNN, Keras-semantics SGD (``optim.KerasSGD``) at the
driver's per-epoch LR, MSE in fp32 plus the Keras L2 term, the validation MAE, and the
reference's ``log1p`` of the int16 counts — in the ``tf.data`` graph for the native
loader (the DALI pipeline applies it itself). Setup, the compiled step, input, epochs
and evaluation are the template's, the mirror of ``sciperf_pytorch``'s. XLA
(``framework.compile=true``) was measured ~20× slower than the default on a 2-core CPU,
so it stays off by default.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from sciperf.workloads.cosmoflow.spec import ModelSpec
from sciperf_tensorflow.backend import WorkloadBackend
from sciperf_tensorflow.optim import KerasSGD
from sciperf_tensorflow.workloads.cosmoflow.model import CosmoFlow


def log1p(x: tf.Tensor) -> tf.Tensor:
    """Reference input transform log(1 + x) to float32, in the graph."""
    return tf.math.log1p(tf.cast(x, tf.float32))


class CosmoFlowBackend(WorkloadBackend):
    """CosmoFlow for the common driver: mixed_bfloat16 on fp32 variables, NDHWC input."""

    def build_model(self, model_spec: ModelSpec) -> keras.Model:
        """The 3-D CNN of the spec."""
        return CosmoFlow(model_spec)

    def build_optimizer(self, variables: list) -> KerasSGD:
        """Keras-semantics SGD with momentum; weight decay is the L2 term of the loss."""
        self.weight_decay = float(self.cfg.opt.weight_decay)
        return KerasSGD(variables, lr=self.cfg.opt.base_lr, momentum=self.cfg.opt.momentum)

    def loss_fn(self, out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """MSE in fp32, plus the Keras L2 term λ·Σw² when opt.weight_decay > 0."""
        loss = tf.reduce_mean(tf.square(tf.cast(out, tf.float32) - y))
        if self.weight_decay > 0:
            l2 = tf.add_n([tf.reduce_sum(tf.square(tf.cast(k, tf.float32)))
                           for k in self.model.kernels()])
            loss = loss + self.weight_decay * l2
        return loss

    def metric_sums(self, out: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(Σ|pred − y| in fp32, number of targets): the mean absolute error's parts."""
        return tf.reduce_sum(tf.abs(tf.cast(out, tf.float32) - y)), tf.size(y)

    def device_transform(self, x: tf.Tensor) -> tf.Tensor:
        """log1p of the stored counts (native loader; DALI's pipeline does it)."""
        return log1p(x)
