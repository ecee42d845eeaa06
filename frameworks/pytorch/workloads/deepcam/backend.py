"""DeepCAM in PyTorch: the backend the common driver runs for ``workload=deepcam``.

Weighted cross-entropy (mean over pixels) in fp32, per-sample IoU, Adam/AdamW/LAMB with
the spec's LR applied at every optimizer step, gradient accumulation, BN running
statistics averaged over ranks after each epoch, optional SyncBN groups
(``model.batchnorm_group_size``: BN statistics of G consecutive ranks, from ``syncbn``),
bf16 autocast and channels-last memory from ``runtime`` (the model stays single-device and
precision-agnostic). Input: the common prefetching loader (``data.loader=native``) or DALI
(``data.loader=dali``, npy only), the same batches either way (``input_functions``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812

from sciperf.backends import EpochResult, RunContext
from sciperf.workloads.deepcam import data as dc_data
from sciperf.data.loader import BatchLoader
from sciperf.errors import SciperfError
from sciperf.weights import load_npz
from sciperf.workloads.deepcam import spec as spec
from sciperf_pytorch import dali, runtime
from sciperf_pytorch.base import TorchBackendBase
from sciperf_pytorch.collectives import Comm
from sciperf_pytorch.workloads.deepcam.model import DeepCam, export_weights, import_weights
from sciperf_pytorch.optim import deepcam_optimizer
from sciperf_pytorch.syncbn import convert_batchnorm


def make_loader(files: list[Path], root: str, fmt: str, model: spec.ModelSpec, batch: int,
                seed: int, shuffle: bool, prefetch: int, remainder: str) -> BatchLoader:
    """The common prefetching loader over one format, normalised by `root`/stats.h5."""
    shape = (model.height, model.width, model.in_channels)
    reader = dc_data.make_reader(root, fmt, shape)
    return BatchLoader(files, reader, batch, seed=seed, shuffle=shuffle, prefetch=prefetch,
                       remainder=remainder)


def to_device(x_np: np.ndarray, y_np: np.ndarray,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, H, W, C) float32 → (N, C, H, W) viewed channels-last (no copy); labels int64."""
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    if device.type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.to(device, non_blocking=True)
    return x.permute(0, 3, 1, 2), y.long()


def batches(loader: BatchLoader, epoch: int,
            device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Device batches of one epoch."""
    for x_np, y_np in loader.epoch(epoch):
        yield to_device(x_np, y_np, device)


def input_functions(loader: str) -> tuple[Callable[..., Any], Callable[..., Iterator]]:
    """(make_loader, batches) of `data.loader`: the native pair above or DALI's drop-ins
    (same signatures, same batches: NCHW channels-last float32, int64 labels)."""
    if loader == "dali":
        return dali.make_deepcam_loader, dali.batches
    return make_loader, batches


def weighted_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The reference loss: per-pixel CE weighted by w[label], a plain mean over pixels."""
    weight = torch.tensor(spec.CLASS_WEIGHTS, dtype=torch.float32, device=logits.device)
    return F.cross_entropy(logits.float(), labels, weight=weight, reduction="none").mean()


def sample_iou(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-sample IoU (N,): mean over classes of TP/(TP+FP+FN), absent classes count 1."""
    pred = logits.argmax(dim=1).flatten(1)
    y = labels.flatten(1)
    total = torch.zeros(pred.shape[0], dtype=torch.float64, device=pred.device)
    for c in range(spec.NUM_CLASSES):
        p_c, y_c = pred == c, y == c
        tp = (p_c & y_c).sum(1).double()
        union = (p_c | y_c).sum(1).double()
        total += torch.where(union > 0, tp / union.clamp(min=1), torch.ones_like(tp))
    return total / spec.NUM_CLASSES


class DeepCamBackend(TorchBackendBase):
    """DeepCAM for the common driver (chosen by ``PyTorchBackend.for_benchmark``)."""

    name = "pytorch"

    def setup(self, ctx: RunContext) -> None:
        """Seed, place, build model/optimizer/loaders from the config and spec."""
        cfg = self.cfg = ctx.cfg
        runtime.setup_threads(cfg.framework.threads)
        runtime.seed_everything(cfg.seed)
        self.device = runtime.select_device(ctx.info.device)
        self.model_spec = spec.ModelSpec(**cfg.model)
        _check_config(cfg, self.model_spec, ctx.info.world)
        self.comm = Comm(ctx.info, cfg.distributed.backend, self.device,
                         cfg.distributed.timeout_s)
        self.model = sync_batchnorm(DeepCam(self.model_spec).to(self.device), self.comm,
                                    self.model_spec.batchnorm_group_size)
        if cfg.framework.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        if cfg.train.init_weights:
            import_weights(self.model, load_npz(cfg.train.init_weights,
                                                expected_entries=self.model_spec.weight_shapes()))
        self.net = self.comm.wrap_model(self.model, broadcast_buffers=False)
        if cfg.framework.compile:
            self.net = torch.compile(self.net)
        self.accumulate = int(cfg.opt.gradient_accumulation_frequency)
        self.optimizer = self.comm.wrap_optimizer(
            deepcam_optimizer(self.model.parameters(), cfg.opt), self.model,
            backward_passes=self.accumulate)
        self.micro_step = 0  # micro-batches seen (the reference's `step`)
        self.opt_step = 0  # optimizer steps taken: the LR schedule's position
        common = dict(root=str(cfg.data.dir), fmt=cfg.data.format, model=self.model_spec,
                      batch=ctx.local_batch, prefetch=cfg.data.prefetch)
        # the reference's rules: training in full batches, every validation sample once
        make, self.batches = input_functions(cfg.data.loader)
        self.train_loader = make(ctx.train_files, seed=cfg.seed + 1000 * ctx.rank,
                                        shuffle=cfg.data.shuffle, remainder="drop", **common)
        self.eval_loader = make(ctx.eval_files, seed=0, shuffle=False,
                                       remainder="keep", **common)

    def parameter_count(self) -> int:
        """Trainable parameters (56,454,720 for the full model)."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def loss_fn(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Weighted cross-entropy in fp32 (the reference's CELoss)."""
        return weighted_cross_entropy(logits, y)

    def current_lr(self) -> float:
        """LR of the next optimizer step (the spec's per-step schedule)."""
        return spec.lr_for_step(self.cfg.opt, self.opt_step)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One micro-batch: backward of loss/accumulate; an optimizer step every
        `accumulate` micro-batches at the schedule's LR. Returns the unscaled loss."""
        boundary = (self.micro_step + 1) % self.accumulate == 0
        # DDP: all-reduce only on the micro-batch that ends an optimizer step (the mean of
        # the summed local gradients is the same number, one collective instead of k)
        local = not boundary and hasattr(self.net, "no_sync")
        with self.net.no_sync() if local else contextlib.nullcontext():
            with runtime.autocast(self.device, self.cfg.precision):
                logits = self.net(x)
            loss = self.loss_fn(logits, y)
            (loss / self.accumulate).backward()
        self.micro_step += 1
        if self.micro_step % self.accumulate == 0:
            for group in self.optimizer.param_groups:
                group["lr"] = self.current_lr()
            self.optimizer.step()
            self.optimizer.zero_grad()  # set_to_none (the default); Horovod takes no args
            self.opt_step += 1
        return loss.detach()

    def train_epoch(self, epoch: int, lr: float,
                    on_step: Callable[[int, float], None] | None = None) -> EpochResult:
        """One pass over the shard (`lr` is the driver's per-epoch record; the LR changes
        every optimizer step), then the BN running statistics are averaged over ranks."""
        self.net.train()
        start, total, steps, samples = time.perf_counter(), torch.zeros(()), 0, 0
        for x, y in self.batches(self.train_loader, epoch, self.device):
            loss = self.train_step(x, y)
            total += loss.cpu()
            steps, samples = steps + 1, samples + x.shape[0]
            if on_step:
                on_step(x.shape[0], float(loss))
        self.comm.average(self.bn_statistics())
        seconds = time.perf_counter() - start
        loss_sum, step_sum = self.comm.sum([float(total), float(steps)])
        return EpochResult(samples, loss_sum / max(step_sum, 1), seconds)

    def bn_statistics(self) -> list[torch.Tensor]:
        """Every BN running mean and variance (the buffers averaged after an epoch)."""
        return [b for n, b in self.model.named_buffers() if n.endswith(("running_mean",
                                                                         "running_var"))]

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean per-sample IoU over every validation sample (summed over ranks)."""
        self.net.eval()
        iou_sum, count = torch.zeros((), dtype=torch.float64), 0
        for x, y in self.batches(self.eval_loader, 0, self.device):
            with runtime.autocast(self.device, self.cfg.precision):
                logits = self.net(x)
            iou_sum += sample_iou(logits, y).sum().cpu()
            count += y.shape[0]
        total, n = self.comm.sum([float(iou_sum), float(count)])
        return total / max(n, 1)

    def export_weights(self) -> dict:
        """Canonical weights (BN moving statistics included) of this rank's replica."""
        return export_weights(self.model)


def sync_batchnorm(model: DeepCam, comm: Comm, group_size: int) -> DeepCam:
    """SyncBN groups: every BatchNorm's training statistics over `group_size` consecutive
    ranks (the reference's ``batchnorm_group_size``); 1 keeps plain per-rank BatchNorm."""
    if group_size == 1:
        return model
    return convert_batchnorm(model, comm.subgroup(group_size))


def _check_config(cfg, model: spec.ModelSpec, world: int) -> None:
    """Choices the schema cannot restrict, as one line naming the key."""
    try:
        model.check()
        spec.check_optimizer(cfg.opt)
    except ValueError as exc:
        raise SciperfError(str(exc)) from None
    _check_group_size(model.batchnorm_group_size, world, cfg.distributed.backend)


def _check_group_size(size: int, world: int, backend: str) -> None:
    """SyncBN groups partition the ranks, so G must divide the world: a single process
    with G > 1 is refused (silently training with per-rank BN would log a group size the
    run never had). Horovod runs have no process groups here."""
    key = f"model.batchnorm_group_size={size}"
    if size < 1:
        raise SciperfError(f"{key} must be >= 1 (1: per-rank BatchNorm)")
    if size > 1 and backend == "horovod":
        raise SciperfError(f"{key}: SyncBN groups need distributed.backend=native "
                           f"(not supported under Horovod); use 1 or the native backend")
    if world % size:
        raise SciperfError(f"{key}: BatchNorm statistics are shared by groups of {size} "
                           f"consecutive ranks, so the rank count must divide by {size}; "
                           f"this run has {world} (1: per-rank BatchNorm)")
