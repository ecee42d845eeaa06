"""Learning-rate schedules as plain functions: the numpy reference both frameworks follow.

Frameworks never implement a schedule themselves; they ask these functions for the LR
of the current epoch/step, so the LR sequence is identical by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def scaled_peak_lr(base_lr: float, global_batch_size: int, base_batch_size: int,
                   scaling: str = "linear") -> float:
    """Peak LR after batch-size scaling: linear, sqrt, or none."""
    ratio = global_batch_size / base_batch_size
    if scaling == "linear":
        return base_lr * ratio
    if scaling == "sqrt":
        return base_lr * math.sqrt(ratio)
    if scaling == "none":
        return base_lr
    raise ValueError(f"opt.scaling={scaling} is not one of linear, sqrt, none")


def epoch_warmup_step_lr(epoch: int, base_lr: float, peak_lr: float, warmup_epochs: int,
                 boundaries: Sequence[int], factors: Sequence[float]) -> float:
    """LR of 0-indexed `epoch`: linear warmup from base to peak, then absolute step factors.

    Warmup (e < n_warmup): base + e·(peak − base)/n_warmup. After it: peak × the factor of
    the latest boundary b with b < e (factors are absolute, not cumulative).
    """
    if len(boundaries) != len(factors):
        raise ValueError("opt.decay_boundaries and opt.decay_factors differ in length")
    if epoch < warmup_epochs:
        return base_lr + epoch * (peak_lr - base_lr) / warmup_epochs
    lr = peak_lr
    for boundary, factor in sorted(zip(boundaries, factors, strict=True)):
        if boundary < epoch:
            lr = peak_lr * factor
    return lr
