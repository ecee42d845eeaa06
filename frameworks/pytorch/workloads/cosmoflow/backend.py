"""The `pytorch` backend: builds the model and runs epochs for the common driver."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch.nn import functional as F  # noqa: N812

from sciperf.backends import Backend, EpochResult, RunContext
from sciperf.weights import load_npz
from sciperf.workloads.cosmoflow.spec import ModelSpec
from sciperf_pytorch import dali, runtime
from sciperf_pytorch import input as data
from sciperf_pytorch.base import TorchBackendBase
from sciperf_pytorch.collectives import Comm
from sciperf_pytorch.workloads.cosmoflow.model import CosmoFlow, export_weights, import_weights
from sciperf_pytorch.optim import KerasSGD


class CosmoFlowBackend(TorchBackendBase):
    """CosmoFlow in PyTorch: Keras-semantics SGD, Keras L2, bf16 autocast, channels-last.

    The registered entry point; other workloads have their own class in this package,
    picked by :meth:`for_benchmark` (``sciperf.backends.load_backend``).
    """

    name = "pytorch"

    def setup(self, ctx: RunContext) -> None:
        """Seed, place, build model/optimizer/loaders from the config and spec."""
        cfg = ctx.cfg
        self.cfg, self.ctx = cfg, ctx
        runtime.setup_threads(cfg.framework.threads)
        runtime.seed_everything(cfg.seed)
        self.device = runtime.select_device(ctx.info.device)
        self.comm = Comm(ctx.info, cfg.distributed.backend, self.device,
                         cfg.distributed.timeout_s)
        spec = ModelSpec(**cfg.model)
        self.model = CosmoFlow(spec).to(self.device)
        if cfg.framework.channels_last and cfg.distributed.backend != "horovod":
            # Horovod's collectives need contiguous tensors, so under Horovod the weights
            # stay contiguous (inputs are still channels-last in memory).
            self.model = self.model.to(memory_format=torch.channels_last_3d)
        if cfg.train.init_weights:
            import_weights(self.model, load_npz(cfg.train.init_weights,
                                                spec.layer_shapes()))
        self.net = self.comm.wrap_model(self.model)  # what runs forward (DDP or the model)
        if cfg.framework.compile:  # Inductor fuses the memory-bound pool/activation passes
            self.net = torch.compile(self.net)
        self.optimizer = self.comm.wrap_optimizer(
            KerasSGD(self.model.parameters(), lr=cfg.opt.base_lr, momentum=cfg.opt.momentum),
            self.model)
        self.io = dali if cfg.data.loader == "dali" else data  # same two functions in each
        shape = (spec.input_size,) * 3 + (spec.in_channels,)
        common = dict(fmt=cfg.data.format, shape=shape, batch=ctx.local_batch,
                      prefetch=cfg.data.prefetch)
        self.train_loader = self.io.make_loader(ctx.train_files, seed=cfg.seed + 1000 * ctx.rank,
                                        shuffle=cfg.data.shuffle, **common)
        self.eval_loader = self.io.make_loader(ctx.eval_files, seed=0, shuffle=False, **common)

    def parameter_count(self) -> int:
        """Trainable parameters (8,907,556 for the full model)."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def loss_fn(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """MSE in fp32, plus the Keras L2 term λ·Σw² when opt.weight_decay > 0."""
        loss = F.mse_loss(pred.float(), y)
        wd = float(self.cfg.opt.weight_decay)
        if wd > 0:
            loss = loss + wd * sum((k.float() ** 2).sum() for k in self.model.kernels())
        return loss

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns the (detached) loss."""
        self.optimizer.zero_grad()
        with runtime.autocast(self.device, self.cfg.precision):
            pred = self.net(x)
        loss = self.loss_fn(pred, y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def train_epoch(self, epoch: int, lr: float,
                    on_step: Callable[[int, float], None] | None = None) -> EpochResult:
        """One pass over the shard; the loss is averaged over steps."""
        self.net.train()
        for group in self.optimizer.param_groups:  # per-epoch LR from the common schedule
            group["lr"] = lr
        start, total, steps, samples = time.perf_counter(), torch.zeros(()), 0, 0
        for x, y in self.io.batches(self.train_loader, epoch, self.device):
            loss = self.train_step(x, y)
            total += loss.cpu()
            steps += 1
            samples += x.shape[0]
            if on_step:
                on_step(x.shape[0], float(loss))
        seconds = time.perf_counter() - start
        loss_sum, step_sum = self.comm.sum([float(total), float(steps)])
        return EpochResult(samples, loss_sum / max(step_sum, 1), seconds)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean absolute error over every validation sample and target."""
        self.net.eval()
        abs_sum, count = torch.zeros((), dtype=torch.float64), 0
        for x, y in self.io.batches(self.eval_loader, 0, self.device):
            with runtime.autocast(self.device, self.cfg.precision):
                pred = self.net(x)
            abs_sum += (pred.float() - y).abs().sum().double().cpu()
            count += y.numel()
        total, n = self.comm.sum([float(abs_sum), float(count)])  # whole validation set
        return total / max(n, 1)

    def export_weights(self) -> dict:
        """Canonical weights of this rank's model replica."""
        return export_weights(self.model)
