"""tinyreg in TensorFlow: the template's hooks, the step pieces, a starting layer from a
file — the mirror of the PyTorch backend."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
from sciperf_tinyreg.tensorflow.model import TinyReg
from sciperf_tinyreg.workload.spec import ModelSpec

from sciperf_tensorflow.backend import WorkloadBackend
from sciperf_tensorflow.optim import KerasSGD
from sciperf_tensorflow.pieces import ClipGradNorm, StepPiece, WeightEMA


class TinyRegBackend(WorkloadBackend):
    """MSE training, the MAE metric on the EMA of the weights."""

    def build_model(self, model_spec: ModelSpec) -> keras.Model:
        return TinyReg(model_spec)

    def build_optimizer(self, variables: list) -> KerasSGD:
        return KerasSGD(variables, lr=float(self.cfg.opt.lr),
                        momentum=float(self.cfg.opt.momentum))

    def load_initial(self) -> None:
        """train.start_from: the layer's weights, then its bias."""
        if self.cfg.train.start_from:
            row = np.load(str(self.cfg.train.start_from), allow_pickle=False)
            self.model.dense.kernel.assign(row[:-1].reshape(-1, 1))
            self.model.dense.bias.assign(row[-1:])

    def step_pieces(self) -> Sequence[StepPiece]:
        self.ema = WeightEMA(float(self.cfg.train.ema_decay))
        bound = float(self.cfg.train.clip_norm)
        return [*([ClipGradNorm(bound)] if bound > 0 else []), self.ema]

    def forward(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        """Training: the model; evaluation: the EMA of its weights."""
        return self.model(x, training=True) if training else self.ema.model(x, training=False)

    def loss_fn(self, out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.square(tf.cast(out, tf.float32) - y))

    def metric_sums(self, out: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.reduce_sum(tf.abs(tf.cast(out, tf.float32) - y)), tf.size(y)
