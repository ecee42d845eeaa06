"""PyTorch adapter over the common loader: int16 batches → float tensors on the device.

The log1p transform runs on the device (after an int16 copy, 4× fewer bytes to move),
and the NDHWC batch is viewed as NCDHW with channels-last memory — no data shuffle.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import torch

from sciperf.workloads.cosmoflow import data as cf_data
from sciperf.data.loader import BatchLoader


def make_loader(files: list[Path], fmt: str, shape: tuple[int, ...], batch: int, seed: int,
                shuffle: bool, prefetch: int) -> BatchLoader:
    """The common prefetching loader reading one format through its single definition."""
    read = partial(cf_data.read_sample, fmt=fmt, shape=shape)
    return BatchLoader(files, read, batch, seed=seed, shuffle=shuffle, prefetch=prefetch)


def to_device(x_np, y_np, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,D,H,W,C) int16 → log1p float32 (N,C,D,H,W) channels-last; targets float32."""
    x = torch.from_numpy(x_np)
    y = torch.from_numpy(y_np)
    if device.type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.to(device, non_blocking=True)
    x = torch.log1p(x.to(torch.float32))
    return x.permute(0, 4, 1, 2, 3), y


def batches(loader: BatchLoader, epoch: int,
            device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Device batches of one epoch."""
    for x_np, y_np in loader.epoch(epoch):
        yield to_device(x_np, y_np, device)
