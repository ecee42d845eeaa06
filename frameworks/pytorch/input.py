"""PyTorch adapter over the common loader: a workload's numpy batches → tensors on the device.

Every workload reads through its own ``SampleReader`` (``Workload.dataset.reader``) into the
common prefetching ``BatchLoader``; what is left for the framework is the same for all of
them, so it is written once here: the device copy (pinned on CUDA), an optional transform
on the device (a backend's ``device_transform``: it runs after the copy, so the stored,
often smaller, dtype crosses the bus), the channels-first view of the channels-last batch
(no data shuffle: the memory stays channels-last, as the convolutions want it) and the
label dtype the losses expect (class maps → int64, float targets unchanged).
``sciperf_pytorch.dali`` has the same ``make_loader``/``batches`` contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sciperf.data.loader import BatchLoader, CollateFn, stack
from sciperf.workloads.base import SampleReader

Transform = Callable[[torch.Tensor], torch.Tensor]


def make_loader(files: Sequence[Path], reader: SampleReader, batch: int, seed: int,
                shuffle: bool, prefetch: int, remainder: str = "error",
                collate: CollateFn | None = None,
                draw: Callable[[int], Sequence[Any]] | None = None,
                draws: int = 0) -> BatchLoader:
    """The common prefetching loader over this rank's `files` read by `reader`.

    `remainder` is the rule for a last partial batch (``sciperf.data.loader.remainders``
    of the workload's sharding); `collate` turns a list of samples into one batch (None or
    the contract's default: stack fixed-size samples); `draw(epoch)` gives an epoch's
    `draws` items instead of the shuffled files (``Dataset.draw``).
    """
    return BatchLoader(files, reader, batch, seed=seed, shuffle=shuffle, prefetch=prefetch,
                       remainder=remainder, collate=collate or stack, draw=draw, draws=draws)


def channels_first(x: torch.Tensor) -> torch.Tensor:
    """(N, *spatial, C) → (N, C, *spatial) as a view: channels-last memory, no copy."""
    return x.permute(0, x.ndim - 1, *range(1, x.ndim - 1))


def labels(y: torch.Tensor) -> torch.Tensor:
    """Class maps (integer) become int64 indices for the loss; float targets stay."""
    return y if y.is_floating_point() else y.long()


def to_device(x_np: np.ndarray, y_np: np.ndarray, device: torch.device,
              transform: Transform | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One numpy batch → (x (N, C, *spatial) viewed channels-last, y) on `device`.

    The stored dtype is copied (pinned and asynchronous on CUDA), then `transform` runs on
    the device; integer labels become int64.
    """
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    if device.type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.to(device, non_blocking=True)
    if transform is not None:
        x = transform(x)
    return channels_first(x), labels(y)


def batches(loader: BatchLoader, epoch: int, device: torch.device,
            transform: Transform | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Device batches of one epoch of fixed-size samples (the template's default
    ``to_device`` per batch; tests compare other loaders against it)."""
    for x_np, y_np in loader.epoch(epoch):
        yield to_device(x_np, y_np, device, transform)
