"""Where a full-model training step's time goes on a GPU: torch.profiler over the timed
epochs of the bench's full row (the real backend path, bf16 AMP), top kernels by GPU time.

    python scripts/gpu_profile.py WORKLOAD DATA_ROOT [PRECISION] [SAMPLES BATCH]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from sciperf.tools import bench


def profiled(load: Any) -> Any:
    """`load_backend` whose backend profiles every epoch after the warm-up one."""
    def wrapped(framework: str, workload: str) -> Any:
        backend = load(framework, workload)
        epoch_fn = backend.train_epoch

        def train_epoch(epoch: int, lr: float) -> Any:
            if epoch == 0:
                return epoch_fn(epoch, lr)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                result = epoch_fn(epoch, lr)
                torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))
            return result
        backend.train_epoch = train_epoch
        return backend
    return wrapped


def main(argv: list[str]) -> None:
    workload, root = argv[0], Path(argv[1])
    precision = argv[2] if len(argv) > 2 else "bf16"
    samples, batch = (int(argv[3]), int(argv[4])) if len(argv) > 4 else (16, 8)
    bench.load_backend = profiled(bench.load_backend)
    row = bench.train_case("pytorch", "full", precision, root, [f"workload={workload}"],
                           {"samples": samples, "batch": batch, "epochs": 1})
    print({k: row[k] for k in ("samples_per_s", "seconds", "peak_device_MB") if k in row})


if __name__ == "__main__":
    main(sys.argv[1:])
