"""`sciperf bench` / `make bench`: measured throughput on this machine, as JSON.

Training samples/s for the mini and the full-size model in fp32 and bf16 through the
real backend (same code path as `sciperf train`), input-pipeline samples/s for each
on-disk format, and the machine's measured matmul peak beside them. Speed targets are
reported here, never asserted in timed tests.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from sciperf.backends import RunContext, load_backend
from sciperf.config import compose
from sciperf.data import synthetic
from sciperf.data.cosmoflow import list_samples, read_sample
from sciperf.data.loader import BatchLoader
from sciperf.workloads import get_spec

# What the issue quotes for scale: the reference TF implementation, full model, fp32,
# on this 2-core machine.
REFERENCE_FULL_FP32_SAMPLES_PER_S = 1.3

CASES = {  # experiment → (train samples, global batch, timed epochs)
    "mini": (64, 16, 2),
    "full": (8, 4, 1),
}


def _dataset(root: Path, size: int, fmt: str, n_train: int) -> Path:
    """A small synthetic set for timing (re-used when already complete)."""
    folder = root / f"{size}" / fmt
    req = synthetic.GenerateRequest(str(folder), fmt, n_train, n_train // 2, size, 0)
    if not synthetic.dataset_complete(req):
        synthetic.generate(req, show_progress=False)
    return folder


def train_case(framework: str, experiment: str, precision: str, root: Path,
               extra: list[str]) -> dict[str, Any]:
    """Samples/s of train_epoch after one warm-up epoch (the real backend path)."""
    n, gbs, epochs = CASES[experiment]
    base = compose([f"experiment={experiment}", f"framework={framework}"] + extra)
    folder = _dataset(root, int(base.model.input_size), "npy", n)
    cfg = compose([f"experiment={experiment}", f"framework={framework}", f"data.dir={folder}",
                   "data.format=npy", f"data.train_samples={n}", f"data.eval_samples={n // 2}",
                   f"train.global_batch_size={gbs}", f"precision={precision}"] + extra)
    spec = get_spec(cfg.benchmark)
    backend = load_backend(framework)
    train = list_samples(folder, "train", "npy", n)
    evals = list_samples(folder, "validation", "npy", n // 2)
    backend.setup(RunContext(cfg, spec, train, evals, gbs))
    backend.train_epoch(0, spec.lr_for_epoch(cfg, 0))  # warm-up: allocations, kernels
    samples, seconds = 0, 0.0
    for epoch in range(1, epochs + 1):
        result = backend.train_epoch(epoch, spec.lr_for_epoch(cfg, epoch))
        samples, seconds = samples + result.samples, seconds + result.seconds
    return {"framework": framework, "model": experiment, "precision": precision,
            "input_size": int(cfg.model.input_size), "global_batch_size": gbs,
            "parameters": backend.parameter_count(), "samples": samples,
            "seconds": round(seconds, 3), "samples_per_s": round(samples / seconds, 3),
            "peak_flops": backend.peak_flops(precision)}


def input_case(size: int, fmt: str, root: Path, n: int) -> dict[str, Any]:
    """Samples/s of the common prefetching loader alone (read + decode + batch)."""
    folder = _dataset(root, size, fmt, n)
    files = list_samples(folder, "train", fmt, n)
    shape = (size, size, size, 4)
    loader = BatchLoader(files, lambda p: read_sample(p, fmt, shape), batch_size=4,
                         workers=2)
    start = time.perf_counter()
    count = sum(x.shape[0] for x, _ in loader.epoch(0))
    seconds = time.perf_counter() - start
    mb = sum(f.stat().st_size for f in files) / 1e6
    return {"format": fmt, "input_size": size, "samples": count, "seconds": round(seconds, 3),
            "samples_per_s": round(count / seconds, 2), "MB_per_s": round(mb / seconds, 1)}


def bench(overrides: list[str]) -> int:
    """Run every case for the frameworks asked (framework=a,b) and write the JSON."""
    opts = dict(o.split("=", 1) for o in overrides if "=" in o)
    frameworks = opts.pop("framework", "pytorch").split(",")
    out = Path(opts.pop("output", "bench"))
    workload = opts.get("workload", "cosmoflow")
    extra = [f"{k}={v}" for k, v in opts.items()]
    root = out / "data" / workload
    result: dict[str, Any] = {"workload": workload, "machine": machine(), "train": [],
                              "input": [], "reference_full_fp32_samples_per_s":
                              REFERENCE_FULL_FP32_SAMPLES_PER_S}
    for fw in frameworks:
        for experiment in CASES:
            for precision in ("fp32", "bf16"):
                row = train_case(fw, experiment, precision, root, extra)
                result["train"].append(row)
                print(f"train {fw:<10} {experiment:<4} {precision:<4} "
                      f"{row['samples_per_s']:8.2f} samples/s", flush=True)
    for size, n in ((32, 64), (128, 8)):
        for fmt in get_spec(workload).DATA_FORMATS:
            row = input_case(size, fmt, root, n)
            result["input"].append(row)
            print(f"input {fmt:<8} {size}³ {row['samples_per_s']:8.2f} samples/s "
                  f"({row['MB_per_s']} MB/s on disk)", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{workload}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return 0


def machine() -> dict[str, Any]:
    """CPU model, cores and ISA flags relevant to bf16 (AMX/AVX-512)."""
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "host": platform.node(),
            "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags}
