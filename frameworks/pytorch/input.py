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
                draws: int = 0, workers: int = 2, pin: bool = False) -> BatchLoader:
    """The common prefetching loader over this rank's `files` read by `reader`.

    `remainder` is the rule for a last partial batch (the workload's data plan's);
    `collate` turns a list of samples into one batch (None or the contract's default:
    stack fixed-size samples); `draw(epoch)` gives an epoch's `draws` items instead of the
    shuffled files (``DataPlan.draws``). `pin` (a CUDA device): fixed-size batches are
    stacked straight into page-locked memory by the loader's thread, so the training loop
    only starts the copy to the GPU.
    """
    collate = collate or stack
    if pin and collate is stack:
        collate = pinned_stack
    return BatchLoader(files, reader, batch, seed=seed, shuffle=shuffle, prefetch=prefetch,
                       workers=workers, remainder=remainder, collate=collate, draw=draw,
                       draws=draws)


def pinned_stack(samples: list[tuple[np.ndarray, np.ndarray]]) -> tuple[torch.Tensor,
                                                                         np.ndarray]:
    """Fixed-size samples stacked into one page-locked tensor (the copy `stack` and then
    `pin_memory` would make twice, made once, off the training thread). The tensor comes
    from PyTorch's pinned allocator, which keeps the block until the asynchronous copy to
    the GPU that reads it has finished."""
    first = samples[0][0]
    x = torch.empty((len(samples), *first.shape), pin_memory=True,
                    dtype=torch.from_numpy(first[:0].reshape(-1)).dtype)
    np.stack([s[0] for s in samples], out=x.numpy())
    return x, np.stack([s[1] for s in samples])


def channels_first(x: torch.Tensor) -> torch.Tensor:
    """(N, *spatial, C) → (N, C, *spatial) as a view: channels-last memory, no copy."""
    return x.permute(0, x.ndim - 1, *range(1, x.ndim - 1))


def labels(y: torch.Tensor) -> torch.Tensor:
    """Class maps (integer) become int64 indices for the loss; float targets stay."""
    return y if y.is_floating_point() else y.long()


def to_device(x_np: np.ndarray | torch.Tensor, y_np: np.ndarray, device: torch.device,
              transform: Transform | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch (numpy, or the pinned tensor of :func:`pinned_stack`) → (x (N, C,
    *spatial) viewed channels-last, y) on `device`.

    The stored dtype is copied (pinned and asynchronous on CUDA), then `transform` runs on
    the device; integer labels become int64.
    """
    x = x_np if isinstance(x_np, torch.Tensor) else torch.from_numpy(x_np)
    y = torch.from_numpy(y_np)
    if device.type == "cuda":
        x = x if x.is_pinned() else x.pin_memory()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    if transform is not None:
        x = transform(x)
    return channels_first(x), labels(y)


def batches(loader: BatchLoader, epoch: int, device: torch.device,
            transform: Transform | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Device batches of one epoch of fixed-size samples (the template's default
    ``to_device`` per batch; tests compare other loaders against it)."""
    for x_np, y_np in loader.epoch(epoch):
        yield to_device(x_np, y_np, device, transform)
