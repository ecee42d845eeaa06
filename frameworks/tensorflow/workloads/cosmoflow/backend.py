"""The `tensorflow` backend: builds the model and runs epochs for the common driver."""

from __future__ import annotations

import time
from collections.abc import Callable

import tensorflow as tf

from sciperf.backends import Backend, EpochResult, RunContext
from sciperf.weights import load_npz
from sciperf.workloads.cosmoflow.spec import ModelSpec
from sciperf_tensorflow import dali, runtime
from sciperf_tensorflow import input as data
from sciperf_tensorflow.base import TFBackendBase
from sciperf_tensorflow.collectives import Comm
from sciperf_tensorflow.workloads.cosmoflow.model import CosmoFlow, export_weights, import_weights
from sciperf_tensorflow.optim import KerasSGD


class CosmoFlowBackend(TFBackendBase):
    """CosmoFlow in TensorFlow: Keras-semantics SGD, Keras L2, mixed_bfloat16, NDHWC.

    A custom loop (``tf.function`` step over ``tf.GradientTape``), not ``model.fit``, so the
    step is the same sequence of operations as the PyTorch backend's and works under
    Horovod. ``framework.compile=true`` turns on XLA (``jit_compile``): measured ~20×
    slower than the default on this 2-core CPU, so it stays off by default. This is the
    registered entry point; other workloads have their own class in this package, picked
    by :meth:`for_benchmark`.
    """

    name = "tensorflow"

    def setup(self, ctx: RunContext) -> None:
        """Threads and device first (TF fixes them at its first op), then seed, build, load."""
        cfg = ctx.cfg
        self.cfg, self.ctx = cfg, ctx
        runtime.setup_threads(cfg.framework.threads)
        self.device = runtime.select_device(ctx.info.device)
        self.comm = Comm(ctx.info, cfg.distributed.backend, self.device,
                         cfg.distributed.timeout_s)
        runtime.seed_everything(cfg.seed)
        runtime.set_precision(cfg.precision)
        spec = ModelSpec(**cfg.model)
        self.model = CosmoFlow(spec)
        if cfg.train.init_weights:
            import_weights(self.model, load_npz(cfg.train.init_weights, spec.layer_shapes()))
        self.comm.broadcast_variables(self.model.trainable_variables)  # replicas start as rank 0
        self.optimizer = KerasSGD(self.model.trainable_variables, lr=cfg.opt.base_lr,
                                  momentum=cfg.opt.momentum)
        self.weight_decay = float(cfg.opt.weight_decay)
        jit = bool(cfg.framework.compile)
        self._train_step = tf.function(self._step, jit_compile=jit)
        self._eval_step = tf.function(self._abs_error, jit_compile=jit)
        self.io = dali if cfg.data.loader == "dali" else data  # same two functions in each
        shape = (spec.input_size,) * 3 + (spec.in_channels,)
        common = dict(fmt=cfg.data.format, shape=shape, batch=ctx.local_batch,
                      prefetch=cfg.data.prefetch)
        self.train_loader = self.io.make_loader(ctx.train_files, seed=cfg.seed + 1000 * ctx.rank,
                                                shuffle=cfg.data.shuffle, **common)
        self.eval_loader = self.io.make_loader(ctx.eval_files, seed=0, shuffle=False, **common)

    def parameter_count(self) -> int:
        """Trainable parameters (8,907,556 for the full model)."""
        return int(sum(v.numpy().size for v in self.model.trainable_variables))

    def loss_fn(self, pred: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """MSE in fp32, plus the Keras L2 term λ·Σw² when opt.weight_decay > 0."""
        loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))
        if self.weight_decay > 0:
            l2 = tf.add_n([tf.reduce_sum(tf.square(tf.cast(k, tf.float32)))
                           for k in self.model.kernels()])
            loss = loss + self.weight_decay * l2
        return loss

    def _step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Body of the compiled train step: forward, fp32 loss, (averaged) gradients, update."""
        # the backing tf.Variables of the Keras 3 variables: Horovod's tape needs them
        variables = [getattr(v, "value", v) for v in self.model.trainable_variables]
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = self.loss_fn(pred, y)
        grads = self.comm.wrap_tape(tape).gradient(loss, variables)
        self.optimizer.step(grads)
        return loss

    def train_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """One optimizer step; returns the loss."""
        return self._train_step(x, y)

    def train_epoch(self, epoch: int, lr: float,
                    on_step: Callable[[int, float], None] | None = None) -> EpochResult:
        """One pass over the shard; the loss is averaged over steps (and ranks)."""
        self.optimizer.set_lr(lr)  # per-epoch LR from the common schedule
        start, total, steps, samples = time.perf_counter(), tf.zeros(()), 0, 0
        for x, y in self.io.batches(self.train_loader, epoch):
            loss = self.train_step(x, y)
            total += loss
            steps += 1
            samples += int(x.shape[0])
            if on_step:
                on_step(int(x.shape[0]), float(loss))
        total = float(total)  # waits for the last step before the clock stops
        seconds = time.perf_counter() - start
        loss_sum, step_sum = self.comm.sum([total, float(steps)])
        return EpochResult(samples, loss_sum / max(step_sum, 1), seconds)

    def _abs_error(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Σ|pred − y| of one batch (inference mode), summed in fp32 like the PyTorch side."""
        pred = self.model(x, training=False)
        return tf.reduce_sum(tf.abs(tf.cast(pred, tf.float32) - y))

    def evaluate(self) -> float:
        """Mean absolute error over every validation sample and target (all ranks)."""
        abs_sum, count = tf.zeros((), tf.float64), 0
        for x, y in self.io.batches(self.eval_loader, 0):
            abs_sum += tf.cast(self._eval_step(x, y), tf.float64)
            count += int(tf.size(y))
        total, n = self.comm.sum([float(abs_sum), float(count)])  # whole validation set
        return total / max(n, 1)

    def export_weights(self) -> dict:
        """Canonical weights of this rank's model replica."""
        return export_weights(self.model)
