"""The ONE TensorFlow backend template: everything a workload backend would otherwise repeat.

The common driver (``sciperf.run.driver``) sees every workload through the same calls
(``setup``, ``train_epoch``, ``evaluate``, …); what differs between workloads is small —
the model, the optimizer, the loss, the metric and a few optional steps — so a workload
backend (``sciperf_tensorflow.workloads.<name>.backend``) is a subclass of
:class:`WorkloadBackend` that implements only those hooks, the mirror image of
``sciperf_pytorch.backend`` (same class, same hook names). Everything else is written
once here, from the workload contract (``sciperf.workloads.base.Workload``):

* setup in TensorFlow's order: threads and device before the first op, collectives, one
  seed, the precision policy, the config checks (one line naming the key), the model,
  ``train.init_weights`` (canonical ``.npz``), rank 0's variables broadcast, the optimizer;
* a custom loop — a ``tf.function`` step over ``tf.GradientTape`` (Horovod's tape averages
  gradients), not ``model.fit`` — so the step is the same sequence of operations as the
  PyTorch backend's; ``framework.compile`` turns on XLA (``jit_compile``);
* gradient accumulation into fp32 ``tf.Variable`` sums, an optimizer step every
  ``accumulation()`` micro-batches at the contract's LR (per step when the workload's LR
  moves inside an epoch, else the driver's epoch LR);
* input from ``input`` (``tf.data``) or ``dali`` by ``data.loader``, seeds from
  ``shuffle_seed``, last-batch rules and drawn items from the workload's data plan;
* the epoch loss averaged over steps and ranks, the metric reduced from per-batch sums,
  parameters counted and weights exported the same way for every model.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import keras
import numpy as np
import tensorflow as tf

from sciperf import heartbeat, precision, threads
from sciperf.backends import EpochProgress, EpochResult, FrameworkBackend, RunContext
from sciperf.data.loader import BatchLoader, shuffle_seed, stack
from sciperf.errors import SciperfError
from sciperf.weights import load_npz
from sciperf_tensorflow import dali, runtime, state, weights
from sciperf_tensorflow import input as native
from sciperf_tensorflow.collectives import Comm
from sciperf_tensorflow.pieces import StepPiece
from sciperf_tensorflow.state import STATE_FILE


class Optimizer(Protocol):
    """What the template needs of a workload's optimizer (``sciperf_tensorflow.optim``)."""

    lr: tf.Variable

    def set_lr(self, lr: float) -> None: ...

    def state(self) -> list: ...

    def step(self, grads: list) -> None: ...


class WorkloadBackend(FrameworkBackend):
    """A workload in TensorFlow for the common driver; subclasses implement the hooks.

    Hooks: :meth:`build_model`, :meth:`build_optimizer`, :meth:`loss_fn`,
    :meth:`metric_sums` (required); :meth:`device_transform`, :meth:`accumulation`,
    :meth:`after_epoch`, :meth:`check`, :meth:`forward`, :meth:`batch_size`,
    :meth:`input_signature`, :meth:`load_initial`, :meth:`step_pieces` (optional). They
    may read ``self.cfg``, ``self.model_spec``, ``self.comm`` and (from
    ``build_optimizer`` on) ``self.model``.
    """

    name = "tensorflow"
    runtime = runtime

    # --- hooks ----------------------------------------------------------------------------
    def build_model(self, model_spec: Any) -> keras.Model:
        """The workload's Keras model for `model_spec` (built: every variable exists)."""
        raise NotImplementedError

    def build_optimizer(self, variables: list) -> Optimizer:
        """The optimizer over the model's trainable `variables` (LR in a ``tf.Variable``)."""
        raise NotImplementedError

    def loss_fn(self, out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """The fp32 training loss of one batch (model output `out`, labels `y`)."""
        raise NotImplementedError

    def metric_sums(self, out: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(sum, count) of the quality metric over one validation batch; the metric is
        Σ sums / Σ counts over every batch of every rank."""
        raise NotImplementedError

    def device_transform(self, x: tf.Tensor) -> tf.Tensor:
        """The workload's input transform, in the graph (native loader only: the DALI
        pipeline has applied it already). Not overridden: none."""
        return x

    def accumulation(self) -> int:
        """Micro-batches per optimizer step (gradient accumulation)."""
        return 1

    def after_epoch(self) -> None:
        """Work after each training epoch, before the clock stops (e.g. averaging
        non-trainable state over ranks)."""

    def check(self, ctx: RunContext) -> None:
        """Choices this framework's implementation refuses, beyond the workload's own
        ``check_config`` (raise SciperfError or ValueError naming the key)."""

    def forward(self, x: Any, training: bool) -> Any:
        """The output the loss and the metric take (OC20: forces, −∂E/∂pos)."""
        return self.model(x, training=training)

    def batch_size(self, x: Any) -> int:
        """Samples in batch `x` (graphs: structures)."""
        return int(x.shape[0])

    def input_signature(self) -> list | None:
        """(x, y) TensorSpecs of the compiled steps; variable-size batches give theirs
        with open sizes so one trace serves every batch. None: traced from the batches."""
        return None

    def load_initial(self) -> None:
        """The initial state beyond ``train.init_weights`` (model and optimizer built)."""

    def step_pieces(self) -> Sequence[StepPiece]:
        """What every optimizer step adds (``sciperf_tensorflow.pieces``); none by default."""
        return ()

    # --- setup ----------------------------------------------------------------------------
    def setup(self, ctx: RunContext) -> None:
        """Threads and device first (TF fixes them at its first op), then checks, seed,
        precision, model, weights, optimizer, compiled steps, loaders."""
        cfg = ctx.cfg
        self.cfg, self.ctx, self.workload = cfg, ctx, ctx.workload
        self.threads = threads.apply(cfg, runtime, ctx.local_batch)
        self.device = runtime.select_device(ctx.info.device)
        cfg = self.cfg = precision.concrete(cfg, runtime, self.workload.cost.hot_op)
        try:
            self.workload.check_config(cfg)
            self.check(ctx)
        except ValueError as exc:
            raise SciperfError(str(exc)) from None
        self.model_spec = self.workload.model_spec(cfg)
        self.comm = Comm(ctx.info, cfg.distributed.backend, self.device,
                         cfg.distributed.timeout_s)
        runtime.seed_everything(cfg.seed)
        runtime.set_precision(cfg.precision, self.device)
        self.model = self.build_model(self.model_spec)
        if cfg.train.init_weights:
            path = str(cfg.train.init_weights)
            weights.import_weights(self.model, load_npz(
                path, expected_entries=self.model_spec.weight_shapes()), source=path)
        self.comm.broadcast_variables(self.model.variables)  # replicas start as rank 0
        self.optimizer = self.build_optimizer(self.model.trainable_variables)
        self.load_initial()
        self.pieces = list(self.step_pieces())
        for piece in self.pieces:
            piece.attach(self)
        self.accumulate = int(self.accumulation())
        if self.accumulate < 1:
            raise SciperfError(f"gradient accumulation {self.accumulate} < 1")
        self.micro_step, self.opt_step = 0, 0
        self.sums = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False)
                     for v in self.model.trainable_variables] if self.accumulate > 1 else []
        jit, sig = bool(cfg.framework.compile), self.input_signature()
        self._train_step = tf.function(self._step, jit_compile=jit, input_signature=sig)
        self._grad_step = tf.function(self._accumulate_step, jit_compile=jit,
                                      input_signature=sig)
        self._apply = tf.function(self._apply_sums, jit_compile=jit)
        self._eval_step = tf.function(self._metric_step, jit_compile=jit, input_signature=sig)
        self._setup_input(ctx)

    def _setup_input(self, ctx: RunContext) -> None:
        """Train and eval loaders of this rank's files, native or DALI by ``data.loader``:
        the workload's plan fixes the remainder rules, the validation batch and any drawn
        training items."""
        cfg, workload, plan = ctx.cfg, self.workload, self.workload.plan
        root = str(cfg.data.dir)
        reader = workload.dataset.reader(root, cfg.data.format, self.model_spec)
        drawn = plan.draws(ctx.train_files, cfg, ctx.rank, ctx.world, ctx.local_batch)
        if cfg.data.loader == "dali":
            if drawn is not None:
                raise SciperfError(f"data.loader=dali: {workload.name} draws its training "
                                   "samples, which DALI's readers cannot; use "
                                   "data.loader=native")

            def make(files, seed, shuffle, remainder, batch, drawn=None):
                return dali.make_loader(files, reader, workload.name, root, batch, seed,
                                        shuffle, cfg.data.prefetch, remainder)
            self._batches: Callable[..., Iterator] = dali.batches
            self._transform = None
        elif workload.dataset.collate is not stack or drawn is not None:
            # variable-size samples (graphs) or drawn items: the common threaded loader
            # collates them into dicts of arrays, converted to tensors as they are consumed
            def make(files, seed, shuffle, remainder, batch, drawn=None):
                return BatchLoader(files, reader, batch, seed=seed, shuffle=shuffle,
                                   prefetch=cfg.data.prefetch, workers=cfg.data.workers,
                                   remainder=remainder, collate=workload.dataset.collate,
                                   **({} if drawn is None else
                                      {"draw": drawn.items, "draws": drawn.count}))
            self._batches = native.collated_batches
            self._transform = None
        else:
            def make(files, seed, shuffle, remainder, batch, drawn=None):
                return native.make_loader(files, reader, batch, seed, shuffle,
                                          cfg.data.prefetch, remainder, cfg.data.workers)
            self._batches = native.batches
            overridden = type(self).device_transform is not WorkloadBackend.device_transform
            self._transform = self.device_transform if overridden else None
        self.train_loader = make(ctx.train_files, shuffle_seed(cfg.seed, ctx.rank),
                                 bool(cfg.data.shuffle), plan.train_remainder,
                                 ctx.local_batch, drawn)
        self.eval_loader = make(ctx.eval_files, 0, False, plan.eval_remainder,
                                plan.eval_batch(ctx.local_batch))
        self.steps_per_epoch = max(len(self.train_loader) // self.accumulate, 1)

    # --- training -------------------------------------------------------------------------
    def _gradients(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list]:
        """Forward, fp32 loss and (rank-averaged) gradients of one micro-batch."""
        # the backing tf.Variables of the Keras 3 variables: Horovod's tape needs them
        variables = [getattr(v, "value", v) for v in self.model.trainable_variables]
        with tf.GradientTape() as tape:
            loss = self.loss_fn(self.forward(x, training=True), y)
        return loss, self.comm.wrap_tape(tape).gradient(loss, variables)

    def _optimizer_step(self, grads: list) -> None:
        """The pieces that act on the averaged gradients, then the optimizer's step."""
        for piece in self.pieces:
            if piece.acts_on_gradients:
                grads = piece.on_gradients(grads)
        self.optimizer.step(grads)

    def _step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Compiled micro-batch = optimizer step (no accumulation)."""
        loss, grads = self._gradients(x, y)
        self._optimizer_step(grads)
        return loss

    def _accumulate_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """Compiled micro-batch under accumulation: add grads/accumulate to the sums."""
        loss, grads = self._gradients(x, y)
        for total, g in zip(self.sums, grads, strict=True):
            total.assign_add(tf.cast(tf.convert_to_tensor(g), tf.float32) / self.accumulate)
        return loss

    def _apply_sums(self) -> None:
        """Compiled optimizer step from the accumulated gradients, then zero them."""
        self._optimizer_step([tf.convert_to_tensor(t) for t in self.sums])
        for total in self.sums:
            total.assign(tf.zeros_like(total))

    def current_lr(self) -> float:
        """LR of the next optimizer step under the workload's per-step schedule."""
        return float(self.workload.lr_for_step(self.cfg, self.opt_step, self.steps_per_epoch))

    def train_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """One micro-batch; an optimizer step every `accumulate` micro-batches (at the
        schedule's LR when it moves per step). Returns the (unscaled) loss."""
        self.micro_step += 1
        boundary = self.micro_step % self.accumulate == 0
        if boundary and self.workload.per_step_lr:
            self.optimizer.set_lr(self.current_lr())
        if self.accumulate == 1:
            loss = self._train_step(x, y)
        else:
            loss = self._grad_step(x, y)
            if boundary:
                self._apply()
        if boundary:
            self.opt_step += 1
            for piece in self.pieces:
                piece.after_step()
        return loss

    def batches(self, loader: Any, epoch: int) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        """(x, y) batches of one epoch of `loader`, transformed as the model wants them."""
        return self._batches(loader, epoch, self._transform)

    def train_epoch(self, epoch: int, lr: float,
                    on_step: Callable[[int, float], None] | None = None,
                    resume: EpochProgress | None = None,
                    stop: Callable[[], bool] | None = None) -> EpochResult:
        """One pass over the shard at `lr` (the driver's epoch LR; a per-step schedule
        sets its own at every optimizer step); the loss is averaged over steps and ranks.
        From `resume`, the batches already trained are read and skipped."""
        if not self.workload.per_step_lr:
            self.optimizer.set_lr(lr)
        done = resume or EpochProgress()
        world = self.ctx.world  # a resumed epoch's global sums, spread over the ranks
        start, total = time.perf_counter(), tf.constant(done.loss_sum / world, tf.float32)
        steps, samples = done.steps, done.samples
        for x, y in itertools.islice(self.batches(self.train_loader, epoch), done.steps, None):
            loss = self.train_step(x, y)
            heartbeat.beat()
            total += loss
            n = self.batch_size(x)
            steps, samples = steps + 1, samples + n
            if on_step:
                on_step(n, float(loss))
            if self.stop_agreed(stop, self.micro_step, self.accumulate):
                return self.epoch_result(float(total), steps, samples,
                                         done.seconds + time.perf_counter() - start, True)
        total = float(total)  # waits for the last step before the clock stops
        self.after_epoch()
        return self.epoch_result(total, steps, samples,
                                 done.seconds + time.perf_counter() - start)

    # --- evaluation -----------------------------------------------------------------------
    def _metric_step(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Compiled (sum, count) of one validation batch in inference mode."""
        return self.metric_sums(self.forward(x, training=False), y)

    def evaluate(self) -> float:
        """The quality metric over every validation sample of every rank."""
        metric_sum, count = tf.zeros((), tf.float64), tf.zeros((), tf.float64)
        for x, y in self.batches(self.eval_loader, 0):
            s, n = self._eval_step(x, y)
            heartbeat.beat()
            metric_sum += tf.cast(s, tf.float64)
            count += tf.cast(n, tf.float64)
        total, n = self.comm.sum([float(metric_sum), float(count)])  # whole validation set
        return total / max(n, 1)

    # --- the model ------------------------------------------------------------------------
    def parameter_count(self) -> int:
        """Trainable parameters of the built model."""
        return int(sum(int(np.prod(v.shape)) for v in self.model.trainable_variables))

    def _state_variables(self) -> dict[str, list]:
        """Model variables (Keras' dropout seed state included), the optimizer's and the
        step pieces', in creation order: what a checkpoint holds."""
        groups = {"model": list(self.model.variables),
                  "optimizer": list(self.optimizer.state())}
        extra = [v for piece in self.pieces for v in piece.variables()]
        return groups | ({"extra": extra} if extra else {})

    def save_state(self, folder: Path) -> None:
        """``state.npz``: every variable by group and index, step counters (no pickles)."""
        state.save(folder / STATE_FILE, self._state_variables(),
                   (self.micro_step, self.opt_step))

    def load_state(self, folder: Path) -> None:
        """Restore ``state.npz`` strictly (``sciperf_tensorflow.state``: everything checked
        before the first variable is assigned)."""
        self.micro_step, self.opt_step = state.load(folder / STATE_FILE,
                                                    self._state_variables())

    def export_weights(self) -> dict[str, np.ndarray]:
        """Canonical weights (norm moving statistics included) of this rank's replica."""
        return weights.export_weights(self.model)
