"""DeepCAM's DALI format: float32 H×W×16 fields + uint8 class maps, min-max in the pipeline.

x' = (x − shift)·scale per channel with the float32 (shift, scale) of
``data.normalisation`` — the native reader's two float32 ops in the same order, so the
values are bit-identical to it (no fused multiply-add can form: the subtraction comes
first).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data.dali import NPY_ONLY
from sciperf.workloads.base import DaliFormat
from sciperf.workloads.deepcam import data as dc_data

NOT_NPY = f"{NPY_ONLY}; convert with sciperf prepare workload=deepcam data.source=convert"


@dataclass(frozen=True)
class MinMax:
    """Per-channel (x − shift)·scale in float32, as the native reader."""

    shift: tuple[float, ...]
    scale: tuple[float, ...]

    @classmethod
    def from_stats(cls, root: str | Path, channels: int) -> MinMax:
        """The normalisation of `root`/stats.h5 for the first `channels` channels (float32
        values kept exactly: a Python float holds every float32)."""
        shift, scale = dc_data.normalisation(dc_data.stats_path(root))
        return cls(tuple(shift[:channels].tolist()), tuple(scale[:channels].tolist()))

    def apply(self, x: Any) -> Any:
        """The DALI ops on the data node `x`; the (C,) constants broadcast over H, W."""
        from nvidia.dali import types

        shift = types.Constant(np.asarray(self.shift, np.float32))
        scale = types.Constant(np.asarray(self.scale, np.float32))
        return (x - shift) * scale


def transform(root: str | Path | None, sample_shape: tuple[int, ...]) -> MinMax:
    """The normalisation of the dataset at `root` (its stats.h5)."""
    if root is None:
        raise ValueError("DeepCAM's DALI plan needs the dataset root (stats.h5)")
    return MinMax.from_stats(root, sample_shape[-1])


FORMAT = DaliFormat(suffix=dc_data.SUFFIX["npy"], label_path=dc_data.label_path,
                    x_dtype=np.float32, ndim=3, label_dtype=np.uint8,
                    label_shape=lambda data: data[:2], not_npy=NOT_NPY, transform=transform)
