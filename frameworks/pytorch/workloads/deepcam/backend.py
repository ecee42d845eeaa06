"""DeepCAM in PyTorch: the hooks of the one backend template (``sciperf_pytorch.backend``).

What is DeepCAM's own: the DeepLabv3+ model with optional SyncBN groups
(``model.batchnorm_group_size``: BN statistics of G consecutive ranks, from ``syncbn``),
Adam/AdamW/LAMB (the per-step LR comes from the contract), gradient accumulation,
weighted cross-entropy (mean over pixels) in fp32, per-sample IoU as the metric, and BN
running statistics that stay per rank during an epoch (no DDP buffer broadcast, as the
reference) and are averaged over ranks after it. Normalisation happens in the reader (or
the DALI pipeline), so there is no device transform.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.backends import RunContext
from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import spec as spec
from sciperf_pytorch.backend import WorkloadBackend
from sciperf_pytorch.collectives import Comm
from sciperf_pytorch.optim import Lamb
from sciperf_pytorch.syncbn import convert_batchnorm
from sciperf_pytorch.workloads.deepcam.model import DeepCam


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


def deepcam_optimizer(params: Iterable[nn.Parameter], o) -> torch.optim.Optimizer:
    """Adam / AdamW (torch's own, as the reference) or LAMB, eps 1e-6, from `opt.*`."""
    kw = {"lr": float(o.lr), "betas": tuple(float(b) for b in o.betas), "eps": spec.ADAM_EPS,
          "weight_decay": float(o.weight_decay)}
    if o.name == "Adam":
        return torch.optim.Adam(params, foreach=True, **kw)
    if o.name == "AdamW":
        return torch.optim.AdamW(params, foreach=True, **kw)
    return Lamb(params, max_grad_norm=spec.LAMB_MAX_GRAD_NORM, **kw)


class DeepCamBackend(WorkloadBackend):
    """DeepCAM's hooks: model (+ SyncBN), optimizer, accumulation, loss, metric, BN merge."""

    broadcast_buffers = False  # each rank's BN running statistics; merged in after_epoch

    def check(self, ctx: RunContext) -> None:
        """SyncBN groups must partition this run's ranks."""
        _check_group_size(self.model_spec.batchnorm_group_size, ctx.info.world,
                          self.cfg.distributed.backend)

    def build_model(self, model_spec: spec.ModelSpec) -> nn.Module:
        """The reference network on the device, its BatchNorms grouped when G > 1."""
        return sync_batchnorm(DeepCam(model_spec).to(self.device), self.comm,
                              model_spec.batchnorm_group_size)

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """Adam / AdamW / LAMB from ``opt.*``."""
        return deepcam_optimizer(params, self.cfg.opt)

    def accumulation(self) -> int:
        """``opt.gradient_accumulation_frequency`` micro-batches per optimizer step."""
        return int(self.cfg.opt.gradient_accumulation_frequency)

    def loss_fn(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Weighted cross-entropy in fp32 (the reference's CELoss)."""
        return weighted_cross_entropy(out, y)

    def metric_sums(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Per-sample IoUs of the batch (the mean IoU's sum and count)."""
        return sample_iou(out, y).sum(), y.shape[0]

    def after_epoch(self) -> None:
        """BN running statistics averaged over ranks (the reference's merge)."""
        self.comm.average(self.bn_statistics())

    def bn_statistics(self) -> list[torch.Tensor]:
        """Every BN running mean and variance (the buffers averaged after an epoch)."""
        return [b for n, b in self.model.named_buffers() if n.endswith(("running_mean",
                                                                         "running_var"))]


def sync_batchnorm(model: DeepCam, comm: Comm, group_size: int) -> DeepCam:
    """SyncBN groups: every BatchNorm's training statistics over `group_size` consecutive
    ranks (the reference's ``batchnorm_group_size``); 1 keeps plain per-rank BatchNorm."""
    if group_size == 1:
        return model
    return convert_batchnorm(model, comm.subgroup(group_size))


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
