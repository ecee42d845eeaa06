"""CosmoFlow's DALI format: int16 counts + float32 targets, log1p inside the pipeline.

DALI has no log1p, and its CPU ``math.log`` is scalar (5× slower here than a table). The
counts are int16, so log1p is a 32,768-entry lookup table (:func:`log1p_table`):
correctly rounded float32, within 1 ulp of torch.log1p and 2 ulp of tf.math.log1p. A
negative count (not a valid file) becomes NaN.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data.dali import NPY_ONLY
from sciperf.workloads.base import DaliFormat
from sciperf.workloads.cosmoflow import data, spec

NOT_NPY = f"{NPY_ONLY}; convert with sciperf prepare data.format=npy"


@functools.lru_cache(maxsize=1)
def log1p_table() -> tuple[float, ...]:
    """log1p of every non-negative int16, computed in float64, rounded once to float32."""
    counts = np.arange(np.iinfo(np.int16).max + 1, dtype=np.float64)
    return tuple(np.log1p(counts).astype(np.float32).tolist())


@dataclass(frozen=True)
class Log1p:
    """int16 counts → correctly rounded float32 log1p (a table)."""

    def apply(self, x: Any) -> Any:
        """The DALI ops on the data node `x` (inside a pipeline definition)."""
        from nvidia.dali import fn, types

        table = log1p_table()
        return fn.lookup_table(x, keys=list(range(len(table))), values=list(table),
                               default_value=float("nan"), dtype=types.FLOAT)


def transform(root: str | Path | None, sample_shape: tuple[int, ...]) -> Log1p:
    """The same table for every dataset."""
    return Log1p()


FORMAT = DaliFormat(suffix=data.SUFFIX["npy"], label_path=data.label_path, x_dtype=np.int16,
                    ndim=4, label_dtype=np.float32,
                    label_shape=lambda _: (spec.TARGET_SIZE,), not_npy=NOT_NPY,
                    transform=transform)
