"""DeepCAM in TensorFlow: the backend the common driver runs for ``workload=deepcam``.

The mirror of ``sciperf_pytorch.workloads.deepcam.backend``: a custom loop (``tf.function`` step over
``tf.GradientTape``), weighted cross-entropy (mean over pixels) in fp32, per-sample IoU,
Adam/AdamW/LAMB written out (``optim.AdamFamily``) with the spec's LR set before every
optimizer step, gradient accumulation, BN moving statistics averaged over ranks after
each epoch, ``mixed_bfloat16`` from ``runtime``. Input: ``tf.data`` over the common
format definitions in the common loader's per-epoch order (``data.loader=native``) or DALI
(``data.loader=dali``, npy only), the same batches either way (``input_functions``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from sciperf.backends import EpochResult, RunContext
from sciperf.workloads.deepcam import data as dc_data
from sciperf.data.loader import batch_sizes, epoch_order
from sciperf.errors import SciperfError
from sciperf.weights import load_npz
from sciperf.workloads.deepcam import spec as spec
from sciperf_tensorflow import dali, runtime
from sciperf_tensorflow.base import TFBackendBase
from sciperf_tensorflow.input import _reader_message
from sciperf_tensorflow.collectives import Comm
from sciperf_tensorflow.workloads.deepcam.model import DeepCam, export_weights, import_weights
from sciperf_tensorflow.optim import AdamFamily


@dataclass
class DatasetLoader:
    """The ``tf.data.Dataset`` of one epoch of one shard (`remainder`: what becomes of a
    last partial batch, as the common loader's ``batch_sizes``)."""

    files: list[Path]
    reader: dc_data.SampleReader
    batch_size: int
    seed: int = 0
    shuffle: bool = True
    prefetch: int = 4
    remainder: str = "error"
    errors: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.sizes = batch_sizes(len(self.files), self.batch_size, self.remainder)

    def __len__(self) -> int:
        return len(self.sizes)

    def _read_batch(self, paths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One batch, normalised; a bad file is recorded (raised by `batches`) instead of
        raising inside TensorFlow, which would log a traceback per reader thread."""
        h, w, c = self.reader.shape
        x = np.zeros((len(paths), h, w, c), np.float32)
        y = np.zeros((len(paths), h, w), np.uint8)
        for i, path in enumerate(paths):
            try:
                x[i], y[i] = self.reader(Path(path.decode()))
            except SciperfError as exc:
                self.errors.append(str(exc))
        return x, y

    def _load(self, paths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x, y = tf.numpy_function(self._read_batch, [paths], (tf.float32, tf.uint8),
                                 stateful=False)
        n = self.batch_size if self.remainder != "keep" else None  # a smaller last batch
        x.set_shape((n, *self.reader.shape))
        y.set_shape((n, *self.reader.shape[:2]))
        return x, tf.cast(y, tf.int32)

    def epoch(self, epoch: int) -> tf.data.Dataset:
        """(x NHWC float32, labels NHW int32) batches of `epoch` in the common order."""
        self.errors.clear()
        order = epoch_order(len(self.files), self.seed, epoch, self.shuffle)
        paths = [str(self.files[i]) for i in order]
        depth = self.prefetch if self.prefetch > 0 else tf.data.AUTOTUNE
        return (tf.data.Dataset.from_tensor_slices(paths)
                .batch(self.batch_size, drop_remainder=self.remainder != "keep")
                .map(self._load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .prefetch(depth))


def make_loader(files: list[Path], root: str, fmt: str, model: spec.ModelSpec, batch: int,
                seed: int, shuffle: bool, prefetch: int, remainder: str) -> DatasetLoader:
    """The tf.data loader over one format, normalised by `root`/stats.h5."""
    reader = dc_data.make_reader(root, fmt, (model.height, model.width, model.in_channels))
    return DatasetLoader(list(files), reader, batch, seed=seed, shuffle=shuffle,
                         prefetch=prefetch, remainder=remainder)


def batches(loader: DatasetLoader, epoch: int) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
    """Batches of one epoch; a bad sample file ends in a SciperfError naming it."""
    try:
        for x, y in loader.epoch(epoch):
            if loader.errors:
                raise SciperfError(loader.errors[0])
            yield x, y
    except tf.errors.OpError as exc:
        raise SciperfError(_reader_message(exc)) from None


def input_functions(loader: str) -> tuple[Callable[..., Any], Callable[..., Iterator]]:
    """(make_loader, batches) of `data.loader`: the native pair above or DALI's drop-ins
    (same signatures, same batches: NHWC float32, int32 labels)."""
    if loader == "dali":
        return dali.make_deepcam_loader, dali.batches
    return make_loader, batches


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


class DeepCamBackend(TFBackendBase):
    """DeepCAM for the common driver (chosen by ``TensorFlowBackend.for_benchmark``)."""

    name = "tensorflow"

    def setup(self, ctx: RunContext) -> None:
        """Threads and device first (TF fixes them at its first op), then seed, build, load."""
        cfg = self.cfg = ctx.cfg
        runtime.setup_threads(cfg.framework.threads)
        self.device = runtime.select_device(ctx.info.device)
        self.model_spec = spec.ModelSpec(**cfg.model)
        _check_config(cfg, self.model_spec)
        self.comm = Comm(ctx.info, cfg.distributed.backend, self.device,
                         cfg.distributed.timeout_s)
        runtime.seed_everything(cfg.seed)
        runtime.set_precision(cfg.precision)
        self.model = DeepCam(self.model_spec)
        if cfg.train.init_weights:
            import_weights(self.model, load_npz(cfg.train.init_weights,
                                                expected_entries=self.model_spec.weight_shapes()))
        self.comm.broadcast_variables(self.model.variables)  # replicas start as rank 0
        o = cfg.opt
        self.optimizer = AdamFamily(self.model.trainable_variables, o.name, float(o.lr),
                                    list(o.betas), spec.ADAM_EPS, float(o.weight_decay),
                                    spec.LAMB_MAX_GRAD_NORM)
        self.accumulate = int(o.gradient_accumulation_frequency)
        self.micro_step, self.opt_step = 0, 0
        self.sums = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False)
                     for v in self.model.trainable_variables] if self.accumulate > 1 else []
        jit = bool(cfg.framework.compile)
        self._train_step = tf.function(self._step, jit_compile=jit)
        self._grad_step = tf.function(self._accumulate_step, jit_compile=jit)
        self._apply = tf.function(self._apply_sums, jit_compile=jit)
        self._eval_step = tf.function(self._iou, jit_compile=jit)
        common = dict(root=str(cfg.data.dir), fmt=cfg.data.format, model=self.model_spec,
                      batch=ctx.local_batch, prefetch=cfg.data.prefetch)
        make, self.batches = input_functions(cfg.data.loader)
        self.train_loader = make(ctx.train_files, seed=cfg.seed + 1000 * ctx.rank,
                                        shuffle=cfg.data.shuffle, remainder="drop", **common)
        self.eval_loader = make(ctx.eval_files, seed=0, shuffle=False,
                                       remainder="keep", **common)

    def parameter_count(self) -> int:
        """Trainable parameters (56,454,720 for the full model)."""
        return int(sum(int(np.prod(v.shape)) for v in self.model.trainable_variables))

    def loss_fn(self, logits: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Weighted cross-entropy in fp32 (the reference's CELoss)."""
        return weighted_cross_entropy(logits, y)

    def _gradients(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list]:
        # the backing tf.Variables of the Keras 3 variables: Horovod's tape needs them
        variables = [getattr(v, "value", v) for v in self.model.trainable_variables]
        with tf.GradientTape() as tape:
            loss = self.loss_fn(self.model(x, training=True), y)
        return loss, self.comm.wrap_tape(tape).gradient(loss, variables)

    def _step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Compiled micro-batch = optimizer step (no accumulation)."""
        loss, grads = self._gradients(x, y)
        self.optimizer.step(grads)
        return loss

    def _accumulate_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Compiled micro-batch under accumulation: add grads/accumulate to the sums."""
        loss, grads = self._gradients(x, y)
        for total, g in zip(self.sums, grads, strict=True):
            total.assign_add(tf.cast(g, tf.float32) / self.accumulate)
        return loss

    def _apply_sums(self) -> None:
        """Compiled optimizer step from the accumulated gradients, then zero them."""
        self.optimizer.step([tf.convert_to_tensor(t) for t in self.sums])
        for total in self.sums:
            total.assign(tf.zeros_like(total))

    def current_lr(self) -> float:
        """LR of the next optimizer step (the spec's per-step schedule)."""
        return spec.lr_for_step(self.cfg.opt, self.opt_step)

    def train_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """One micro-batch; an optimizer step every `accumulate` micro-batches at the
        schedule's LR. Returns the (unscaled) loss."""
        self.micro_step += 1
        boundary = self.micro_step % self.accumulate == 0
        if boundary:
            self.optimizer.set_lr(self.current_lr())
        if self.accumulate == 1:
            loss = self._train_step(x, y)
        else:
            loss = self._grad_step(x, y)
            if boundary:
                self._apply()
        if boundary:
            self.opt_step += 1
        return loss

    def train_epoch(self, epoch: int, lr: float,
                    on_step: Callable[[int, float], None] | None = None) -> EpochResult:
        """One pass over the shard (`lr` is the driver's per-epoch record; the LR changes
        every optimizer step), then the BN moving statistics are averaged over ranks."""
        start, total, steps, samples = time.perf_counter(), tf.zeros(()), 0, 0
        for x, y in self.batches(self.train_loader, epoch):
            loss = self.train_step(x, y)
            total += loss
            steps, samples = steps + 1, samples + int(x.shape[0])
            if on_step:
                on_step(int(x.shape[0]), float(loss))
        total = float(total)  # waits for the last step before the clock stops
        self.comm.average(self.bn_statistics())
        seconds = time.perf_counter() - start
        loss_sum, step_sum = self.comm.sum([total, float(steps)])
        return EpochResult(samples, loss_sum / max(step_sum, 1), seconds)

    def bn_statistics(self) -> list:
        """Every BN moving mean and variance (averaged over ranks after an epoch)."""
        return [v for v in self.model.non_trainable_variables
                if v.name in ("moving_mean", "moving_variance")]

    def _iou(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(sample_iou(self.model(x, training=False), y))

    def evaluate(self) -> float:
        """Mean per-sample IoU over every validation sample (summed over ranks)."""
        iou_sum, count = 0.0, 0
        for x, y in self.batches(self.eval_loader, 0):
            iou_sum += float(self._eval_step(x, y))
            count += int(y.shape[0])
        total, n = self.comm.sum([iou_sum, float(count)])
        return total / max(n, 1)

    def export_weights(self) -> dict:
        """Canonical weights (BN moving statistics included) of this rank's replica."""
        return export_weights(self.model)


def _check_config(cfg, model: spec.ModelSpec) -> None:
    """Choices the schema cannot restrict, as one line naming the key."""
    try:
        model.check()
        spec.check_optimizer(cfg.opt)
    except ValueError as exc:
        raise SciperfError(str(exc)) from None
    if model.batchnorm_group_size != 1:
        raise SciperfError("model.batchnorm_group_size > 1 (SyncBN groups) is not supported "
                           "by the TensorFlow backend; use framework=pytorch (which has "
                           "them) or 1 (per-rank BN, statistics averaged after each epoch)")
