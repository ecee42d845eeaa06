"""The one shape of every PyTorch workload backend: the driver's protocol, written once.

The common driver (``sciperf.run.driver``) calls ``setup``, then per epoch ``train_epoch`` and
``evaluate``. What that takes — threads, seed, device, the data-parallel group, the model
placed channels-last, initial weights, DDP/Horovod wrapping, ``torch.compile``, gradient
accumulation with one all-reduce per optimizer step, the LR of each step, bf16 autocast,
the input pipeline (native or DALI), losses and metrics reduced over ranks — does not
depend on the workload, so it lives here and nowhere else. A workload backend
(``workloads/<name>/backend.py``) is a small subclass answering the hooks below from its
spec; everything a workload *is* (numbers, formats, schedule, data plan) comes from its
contract, ``ctx.workload`` (``sciperf.workloads.base.Workload``).

Hooks (abstract: the first four):

* ``build_model(model_spec) -> nn.Module`` — the single-device model (``self.comm`` and
  ``self.device`` are set; moved to the device afterwards);
* ``build_optimizer(params) -> Optimizer`` — from ``self.cfg.opt``;
* ``loss_fn(out, y) -> Tensor`` — the scalar training loss (fp32);
* ``metric_sums(out, y) -> (Tensor, int)`` — the quality metric's sum over a validation
  batch and the count it is averaged over (both summed over ranks);
* ``device_transform(x) -> Tensor`` — on the device after the copy, native loader only
  (a DALI pipeline already transformed); identity by default;
* ``accumulation() -> int`` — micro-batches per optimizer step (1);
* ``check(ctx)`` — run checks beyond ``workload.check_config`` (raise SciperfError);
* ``after_epoch()`` — after the last step of an epoch (e.g. merge per-rank buffers);
* ``broadcast_buffers`` — DDP's flag (True);
* ``memory_format()`` — the channels-last format of the weights (from the sample rank);
* ``forward(x)`` — the model's output the loss and metric see (``self.net(x)``; OC20:
  forces, −∂E/∂pos);
* ``to_device(x_np, y_np)`` — a native loader's numpy batch on the device (tensors;
  variable-size workloads: dicts of them);
* ``batch_size(x)`` — samples in a batch (``x.shape[0]``; graphs: structures);
* ``load_initial()`` — the initial state beyond ``train.init_weights`` (e.g. a reference
  checkpoint with its optimizer state), after the model and optimizer are built;
* ``step_pieces()`` — what every optimizer step adds (``sciperf_pytorch.pieces``: gradient
  clipping after the ranks' average, an EMA of the weights, per-step callbacks), each
  keeping its own checkpoint state.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from sciperf import heartbeat, precision, threads
from sciperf.backends import EpochProgress, EpochResult, FrameworkBackend, RunContext
from sciperf.data.loader import shuffle_seed
from sciperf.errors import SciperfError, first_line
from sciperf.weights import load_npz
from sciperf_pytorch import dali, runtime, weights
from sciperf_pytorch import input as native
from sciperf_pytorch.collectives import Comm
from sciperf_pytorch.pieces import StepPiece, merged_state
from sciperf_pytorch.state import (
    STATE_FILE,
    check_loaded_optimizer,
    check_optimizer_tensors,
    check_tensors,
    group_settings,
    load_weights_only,
    optimizer_names,
)

# spatial dimensions of a channels-last sample → the weights' memory format
CHANNELS_LAST = {2: torch.channels_last, 3: torch.channels_last_3d}


class WorkloadBackend(FrameworkBackend):
    """A workload's PyTorch backend: the driver's protocol over the hooks of a subclass."""

    name = "pytorch"
    runtime: ClassVar[Any] = runtime  # FrameworkBackend: matmul_flops, versions
    broadcast_buffers: ClassVar[bool] = True  # DDP: rank 0's buffers before every forward
    # state.pt's names of the model's and the optimizer's state dicts (a workload may use
    # its reference's, so that a checkpoint is also the reference's format: OpenFold)
    state_keys: ClassVar[tuple[str, str]] = ("model", "optimizer")

    # ------------------------------------------------------------------ hooks
    def build_model(self, model_spec: Any) -> nn.Module:
        """The workload's single-device model of `model_spec`."""
        raise NotImplementedError

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """The workload's optimizer over `params`, from ``self.cfg.opt``."""
        raise NotImplementedError

    def loss_fn(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The scalar training loss of one batch."""
        raise NotImplementedError

    def metric_sums(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(sum of the quality metric over the batch, the count it is averaged over)."""
        raise NotImplementedError

    def device_transform(self, x: torch.Tensor) -> torch.Tensor:
        """The input transform on the device (native loader); identity by default."""
        return x

    def accumulation(self) -> int:
        """Micro-batches per optimizer step."""
        return 1

    def check(self, ctx: RunContext) -> None:
        """Run checks beyond the contract's ``check_config`` (raise SciperfError)."""

    def after_epoch(self) -> None:
        """Called after the last training step of every epoch."""

    def forward(self, x: Any) -> Any:
        """The output the loss and the metric take (under autocast, grad as the caller's)."""
        return self.net(x)

    def to_device(self, x_np: Any, y_np: Any) -> tuple[Any, Any]:
        """A native loader's numpy batch → device tensors (the workload's device transform
        applied)."""
        return native.to_device(x_np, y_np, self.device, self.device_transform)

    def batch_size(self, x: Any) -> int:
        """Samples in batch `x`."""
        return int(x.shape[0])

    def load_initial(self) -> None:
        """The initial state beyond ``train.init_weights`` (model and optimizer built)."""

    def step_pieces(self) -> Sequence[StepPiece]:
        """What every optimizer step adds (``sciperf_pytorch.pieces``); none by default."""
        return ()

    def memory_format(self) -> torch.memory_format | None:
        """Channels-last format for the weights, from the samples' spatial rank (None:
        leave them as built)."""
        return CHANNELS_LAST.get(len(self.reader.x_shape) - 1)

    # ------------------------------------------------------------------ the protocol
    def setup(self, ctx: RunContext) -> None:
        """Check, seed, place, build model/optimizer/loaders from the config and spec."""
        cfg = self.cfg = ctx.cfg
        self.ctx, self.workload = ctx, ctx.workload
        try:
            self.workload.check_config(cfg)
        except ValueError as exc:
            raise SciperfError(str(exc)) from None
        self.model_spec = self.workload.model_spec(cfg)
        self.check(ctx)
        self.threads = threads.apply(cfg, runtime, ctx.local_batch)
        runtime.seed_everything(cfg.seed)
        self.device = runtime.select_device(ctx.info.device)
        cfg = self.cfg = precision.concrete(cfg, runtime, self.workload.cost.hot_op)
        runtime.set_precision(self.device, cfg.precision)
        self.comm = Comm(ctx.info, cfg.distributed.backend, self.device,
                         cfg.distributed.timeout_s, cfg.distributed.single_rank_group)
        self.reader = self.workload.dataset.reader(cfg.data.dir, cfg.data.format,
                                                   self.model_spec)
        self.model = self._place(self.build_model(self.model_spec).to(self.device))
        if cfg.train.init_weights:
            weights.import_weights(self.model, load_npz(
                cfg.train.init_weights, expected_entries=self.model_spec.weight_shapes()))
        self.net = self.comm.wrap_model(self.model,  # what runs forward (DDP or the model)
                                        broadcast_buffers=self.broadcast_buffers)
        if cfg.framework.compile:  # Inductor fuses the memory-bound elementwise passes
            self.net = torch.compile(self.net)
        self.accumulate = int(self.accumulation())
        self.optimizer = self.comm.wrap_optimizer(
            self.build_optimizer(self.model.parameters()), self.model,
            backward_passes=self.accumulate)
        self.load_initial()
        self.pieces = list(self.step_pieces())
        for piece in self.pieces:
            piece.attach(self)
        self.micro_step = 0  # micro-batches seen
        self.opt_step = 0  # optimizer steps taken: the LR schedule's position
        self._make_loaders(ctx)
        # optimizer steps this rank takes per epoch (the per-step schedule's epoch length)
        self.steps_per_epoch = max(len(self.train_loader) // self.accumulate, 1)

    def _place(self, model: nn.Module) -> nn.Module:
        """Channels-last weights when configured — except under Horovod, whose collectives
        need dense tensors (``Comm.wrap_model`` keeps them so; inputs stay channels-last)."""
        fmt = self.memory_format()
        if self.cfg.framework.channels_last and fmt is not None \
                and self.cfg.distributed.backend != "horovod":
            model = model.to(memory_format=fmt)
        return model

    def _make_loaders(self, ctx: RunContext) -> None:
        """This rank's training and validation loaders over the workload's reader, by
        ``data.loader``: the workload's plan fixes the remainder rules, the validation
        batch and any drawn training items; the run seed and the rank the shuffle."""
        cfg, plan = self.cfg, self.workload.plan
        self.dali = cfg.data.loader == "dali"
        drawn = plan.draws(ctx.train_files, cfg, ctx.rank, ctx.world, ctx.local_batch)
        if self.dali:
            if drawn is not None:
                raise SciperfError(f"data.loader=dali: {self.workload.name} draws its "
                                   "training samples, which DALI's readers cannot; use "
                                   "data.loader=native")
            make: Callable[..., Any] = partial(dali.make_loader, workload=self.workload.name,
                                               root=str(cfg.data.dir))
        else:
            make = partial(native.make_loader, collate=self.workload.dataset.collate)
        common = dict(reader=self.reader, prefetch=cfg.data.prefetch)
        if not self.dali:
            common |= dict(workers=cfg.data.workers,
                           pin=cfg.data.pinned_batches and self.device.type == "cuda")
        draws = dict(draw=drawn.items, draws=drawn.count) if drawn is not None else {}
        self.train_loader = make(ctx.train_files, seed=shuffle_seed(cfg.seed, ctx.rank),
                                 shuffle=cfg.data.shuffle, remainder=plan.train_remainder,
                                 batch=ctx.local_batch, **draws, **common)
        self.eval_loader = make(ctx.eval_files, seed=0, shuffle=False,
                                remainder=plan.eval_remainder,
                                batch=plan.eval_batch(ctx.local_batch), **common)

    def batches(self, loader: Any, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Device batches of one epoch (the same tensors from either loader)."""
        if self.dali:
            return dali.batches(loader, epoch, self.device)
        return (self.to_device(x_np, y_np) for x_np, y_np in loader.epoch(epoch))

    def parameter_count(self) -> int:
        """Trainable parameters of the built model."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def current_lr(self) -> float:
        """LR of the next optimizer step (the workload's per-step schedule)."""
        return self.workload.lr_for_step(self.cfg, self.opt_step, self.steps_per_epoch)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One micro-batch: backward of loss/accumulate; an optimizer step every
        `accumulate` micro-batches (at the schedule's LR when it moves per step, else at
        the epoch's). Returns the unscaled, detached loss."""
        boundary = (self.micro_step + 1) % self.accumulate == 0
        # DDP: all-reduce only on the micro-batch that ends an optimizer step (the mean of
        # the summed local gradients is the same number, one collective instead of k)
        local = not boundary and hasattr(self.net, "no_sync")
        with self.net.no_sync() if local else contextlib.nullcontext():
            with runtime.autocast(self.device, self.cfg.precision):
                out = self.forward(x)
            loss = self.loss_fn(out, y)
            (loss / self.accumulate if self.accumulate > 1 else loss).backward()
        self.micro_step += 1
        if self.micro_step % self.accumulate == 0:
            if self.workload.per_step_lr:
                lr = self.current_lr()
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
            self._step()
            self.optimizer.zero_grad()  # set_to_none (the default); Horovod takes no args
            self.opt_step += 1
            for piece in self.pieces:
                piece.after_step()
        return loss.detach()

    def _step(self) -> None:
        """The optimizer step, after the pieces that act on the averaged gradients
        (Horovod averages inside the optimizer: synchronise first)."""
        acting = [piece for piece in self.pieces if piece.acts_on_gradients]
        if not acting:
            self.optimizer.step()
            return
        horovod = hasattr(self.optimizer, "synchronize")
        if horovod:
            self.optimizer.synchronize()
        for piece in acting:
            piece.on_gradients(self)
        if horovod:
            with self.optimizer.skip_synchronize():
                self.optimizer.step()
        else:
            self.optimizer.step()

    def train_epoch(self, epoch: int, lr: float,
                    on_step: Callable[[int, float], None] | None = None,
                    resume: EpochProgress | None = None,
                    stop: Callable[[], bool] | None = None) -> EpochResult:
        """One pass over the shard at the driver's `lr` (a record only when the LR moves
        every step); the loss is averaged over steps and ranks. From `resume`, the batches
        already trained are read and skipped (the order is fixed by seed and epoch)."""
        self.net.train()
        if not self.workload.per_step_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        done = resume or EpochProgress()
        world = self.ctx.world  # a resumed epoch's global sums, spread over the ranks
        start, total = time.perf_counter(), torch.tensor(done.loss_sum / world)
        steps, samples = done.steps, done.samples
        for x, y in itertools.islice(self.batches(self.train_loader, epoch), done.steps, None):
            loss = self.train_step(x, y)
            heartbeat.beat()
            total += loss.cpu()
            n = self.batch_size(x)
            steps, samples = steps + 1, samples + n
            if on_step:
                on_step(n, float(loss))
            if self.stop_agreed(stop, self.micro_step, self.accumulate):
                return self.epoch_result(float(total), steps, samples,
                                         done.seconds + time.perf_counter() - start, True)
        self.after_epoch()
        return self.epoch_result(float(total), steps, samples,
                                 done.seconds + time.perf_counter() - start)

    @torch.no_grad()
    def evaluate(self) -> float:
        """The quality metric over every validation sample (sums reduced over ranks)."""
        self.net.eval()
        metric_sum, count = torch.zeros((), dtype=torch.float64), 0
        for x, y in self.batches(self.eval_loader, 0):
            with runtime.autocast(self.device, self.cfg.precision):
                out = self.forward(x)
            part, n = self.metric_sums(out, y)
            heartbeat.beat()
            metric_sum += part.double().cpu()
            count += int(n)
        total, n = self.comm.sum([float(metric_sum), float(count)])
        return total / max(n, 1)

    def export_weights(self) -> dict[str, np.ndarray]:
        """Canonical weights of this rank's model replica."""
        return weights.export_weights(self.model)

    def save_state(self, folder: Path) -> None:
        """``state.pt``: model and optimizer state dicts, step counters, torch's RNG (the
        dropout masks to come) — tensors and plain containers only."""
        model, optimizer = self.state_keys
        torch.save({model: self.model.state_dict(), optimizer: self.optimizer.state_dict(),
                    "micro_step": self.micro_step, "opt_step": self.opt_step,
                    "torch_rng": torch.get_rng_state(), "extra": merged_state(self.pieces)},
                   folder / STATE_FILE)

    def load_state(self, folder: Path) -> None:
        """Restore ``state.pt`` strictly (every name and shape), read with
        ``weights_only=True``: a checkpoint file never runs code. Tensors must be dense,
        real and finite and the optimizer's settings of the types it was built with —
        torch accepts NaN weights, ``momentum="x"`` or a sparse moment here and fails (or
        trains on NaN) only at the first step, after "resuming from" was printed."""
        path = folder / STATE_FILE
        key = str(path)
        state = load_weights_only(path, key, map_location=self.device)
        model, optimizer = self.state_keys
        try:
            check_tensors(key, state[model], self.model.state_dict())
            settings = group_settings(self.optimizer)
            check_optimizer_tensors(key, "optimizer", state[optimizer],
                                    optimizer_names(self.optimizer, self.model))
            self.model.load_state_dict(state[model])
            self.optimizer.load_state_dict(state[optimizer])
            check_loaded_optimizer(key, "optimizer", self.optimizer, settings, self.model)
            self.micro_step, self.opt_step = int(state["micro_step"]), int(state["opt_step"])
            torch.set_rng_state(state["torch_rng"])
            for piece in self.pieces:
                piece.load_state(state.get("extra", {}))
        except (RuntimeError, KeyError, TypeError, ValueError, IndexError,
                AttributeError) as exc:
            raise SciperfError(f"{path}: not a checkpoint of this model ({first_line(exc)})"
                               ) from None
