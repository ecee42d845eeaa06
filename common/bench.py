"""`sciperf bench` / `make bench`: measured throughput on this machine, as JSON.

`workload=cosmoflow` (default) or `workload=deepcam` (`make bench WORKLOAD=deepcam`).

Training samples/s for the mini and the full-size model in fp32 and bf16 through the
real backend (same code path as `sciperf train`), input-pipeline samples/s for each
on-disk format, and the machine's measured matmul peak beside them. Speed targets are
reported here, never asserted in timed tests.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sciperf.backends import RunContext, load_backend
from sciperf.config import compose
from sciperf.data import synthetic
from sciperf.data.cosmoflow import list_samples, read_sample
from sciperf.data.loader import BatchLoader
from sciperf.data.staging import stage_files
from sciperf.workloads import get_spec

# What the issue quotes for scale: the reference TF implementation, full model, fp32,
# on this 2-core machine.
REFERENCE_FULL_FP32_SAMPLES_PER_S = 1.3

CASES = {  # experiment → (train samples, global batch, timed epochs)
    "mini": (64, 16, 2),
    "full": (8, 4, 1),
}
DEEPCAM_CASES = {  # full: one sample per epoch, one warm-up step and one timed step
    "mini": (32, 8, 2),
    "full": (1, 1, 1),
}


def _dataset(root: Path, size: int, fmt: str, n_train: int) -> Path:
    """A small synthetic set for timing (re-used when already complete)."""
    folder = root / f"{size}" / fmt
    req = synthetic.GenerateRequest(str(folder), fmt, n_train, n_train // 2, size, 0)
    if not synthetic.dataset_complete(req):
        synthetic.generate(req, show_progress=False)
    return folder


def _deepcam_dataset(root: Path, height: int, width: int, fmt: str, n_train: int) -> Path:
    """Synthetic climate for timing (re-used when already complete)."""
    from sciperf.data import climate

    folder = root / f"{height}x{width}" / fmt
    req = climate.GenerateRequest(str(folder), fmt, n_train, max(n_train // 2, 1), height,
                                  width, 0)
    if not climate.dataset_complete(req):
        climate.generate(req, show_progress=False)
    return folder


def train_case(framework: str, experiment: str, precision: str, root: Path,
               extra: list[str]) -> dict[str, Any]:
    """Samples/s of train_epoch after one warm-up epoch (the real backend path)."""
    base = compose([f"experiment={experiment}", f"framework={framework}"] + extra)
    deepcam = base.benchmark == "deepcam"
    n, gbs, epochs = (DEEPCAM_CASES if deepcam else CASES)[experiment]
    n_eval = max(n // 2, 1)
    if deepcam:
        folder = _deepcam_dataset(root, int(base.model.height), int(base.model.width), "npy", n)
    else:
        folder = _dataset(root, int(base.model.input_size), "npy", n)
    cfg = compose([f"experiment={experiment}", f"framework={framework}", f"data.dir={folder}",
                   "data.format=npy", f"data.train_samples={n}", f"data.eval_samples={n_eval}",
                   f"train.global_batch_size={gbs}", f"precision={precision}"] + extra)
    spec = get_spec(cfg.benchmark)
    backend = load_backend(framework, cfg.benchmark)
    data = importlib.import_module(f"sciperf.data.{cfg.benchmark}")
    train = data.list_samples(folder, "train", "npy", n)
    evals = data.list_samples(folder, "validation", "npy", n_eval)
    backend.setup(RunContext(cfg, spec, train, evals, gbs))
    backend.train_epoch(0, spec.lr_for_epoch(cfg, 0))  # warm-up: allocations, kernels
    samples, seconds = 0, 0.0
    for epoch in range(1, epochs + 1):
        result = backend.train_epoch(epoch, spec.lr_for_epoch(cfg, epoch))
        samples, seconds = samples + result.samples, seconds + result.seconds
    size = [int(cfg.model.height), int(cfg.model.width)] if deepcam else \
        int(cfg.model.input_size)
    return {"framework": framework, "model": experiment, "precision": precision,
            "input_size": size, "global_batch_size": gbs,
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


def deepcam_input_case(height: int, width: int, fmt: str, root: Path,
                       n: int) -> dict[str, Any]:
    """Samples/s of the common loader over one DeepCAM format (read, normalise, batch)."""
    from sciperf.data import deepcam as dc

    folder = _deepcam_dataset(root, height, width, fmt, n)
    files = dc.list_samples(folder, "train", fmt, n)
    loader = BatchLoader(files, dc.make_reader(folder, fmt, (height, width, 16)),
                         batch_size=4, workers=2)
    start = time.perf_counter()
    count = sum(x.shape[0] for x, _ in loader.epoch(0))
    seconds = time.perf_counter() - start
    mb = sum(f.stat().st_size for p in files for f in dc.sample_files(p, fmt)) / 1e6
    return {"format": fmt, "input_size": [height, width], "samples": count,
            "seconds": round(seconds, 3), "samples_per_s": round(count / seconds, 2),
            "MB_per_s": round(mb / seconds, 1)}


def deepcam_dali_case(height: int, width: int, root: Path, n: int) -> dict[str, Any]:
    """Samples/s of the DALI pipeline over the DeepCAM npy format (read, normalise, batch:
    what `data.loader=dali` feeds the frameworks), pipeline build included."""
    from sciperf.data import dali
    from sciperf.data import deepcam as dc

    row: dict[str, Any] = {"format": "npy", "loader": "dali", "input_size": [height, width]}
    if not dali.available():
        return {**row, "skipped": dali.MISSING}
    folder = _deepcam_dataset(root, height, width, "npy", n)
    files = dc.list_samples(folder, "train", "npy", n)
    start = time.perf_counter()
    p = dali.plan(files, 4, 0, True, workload="deepcam", root=folder,
                  shape=(height, width, 16))
    pipe = dali.build_pipeline(p, 0)
    pipe.build()
    count = 0
    for _ in range(p.steps):
        x, _y = pipe.run()
        count += int(x.as_array().shape[0])
    seconds = time.perf_counter() - start
    return {**row, "samples": count, "seconds": round(seconds, 3),
            "samples_per_s": round(count / seconds, 2)}


def deepcam_bench(frameworks: list[str], extra: list[str], root: Path,
                  result: dict[str, Any]) -> None:
    """DeepCAM: training samples/s (mini, full) per framework/precision, hdf5 vs npy input."""
    for fw in frameworks:
        for experiment in DEEPCAM_CASES:
            for precision in ("fp32", "bf16"):
                row = train_case(fw, experiment, precision, root, extra)
                result["train"].append(row)
                print(f"train {fw:<10} {experiment:<4} {precision:<4} "
                      f"{row['samples_per_s']:8.3f} samples/s", flush=True)
    for (h, w), n in (((96, 144), 64), ((768, 1152), 8)):
        for fmt in ("hdf5", "npy"):
            row = deepcam_input_case(h, w, fmt, root, n)
            result["input"].append(row)
            print(f"input {fmt:<8} {h}×{w} {row['samples_per_s']:8.2f} samples/s "
                  f"({row['MB_per_s']} MB/s on disk)", flush=True)
        row = deepcam_dali_case(h, w, root, n)
        result["input"].append(row)
        print(f"input npy/dali {h}×{w} {row.get('samples_per_s', row.get('skipped'))} "
              "samples/s", flush=True)


def staging_case(folder: Path, repeats: int = 3) -> dict[str, Any]:
    """Staging a dataset (verify=size and =checksum) against `cp -r` of the same files.

    Each method copies into a fresh directory on the same file system, in rotating order,
    `repeats` times; medians are reported, plus the rerun that finds every file intact.
    """
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.parent != folder)
    total = sum(p.stat().st_size for p in files)
    times: dict[str, list[float]] = {"cp -r": [], "stage size": [], "stage checksum": []}
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".stage-bench-") as tmp:
        for i in range(repeats):
            for name in list(times)[i % 3:] + list(times)[:i % 3]:
                dst = Path(tmp) / name.replace(" ", "_")
                shutil.rmtree(dst, ignore_errors=True)
                start = time.perf_counter()
                if name == "cp -r":
                    subprocess.run(["cp", "-r", str(folder), str(dst)], check=True)
                else:
                    stage_files(files, folder, dst, workers=4, verify=name.split()[1],
                                progress=False)
                times[name].append(time.perf_counter() - start)
        start = time.perf_counter()
        rerun = stage_files(files, folder, Path(tmp) / "stage_size", progress=False)
        rerun_s = time.perf_counter() - start
    rows = {name: {"median_s": round(statistics.median(t), 3),
                   "MB_per_s": round(total / 1e6 / statistics.median(t), 1)}
            for name, t in times.items()}
    return {"files": len(files), "MB": round(total / 1e6, 1), "repeats": repeats,
            "methods": rows, "rerun_all_intact_s": round(rerun_s, 3),
            "rerun_skipped": rerun.skipped}


def scaling_case(framework: str, root: Path, epochs: int = 4) -> dict[str, Any]:
    """Mini training samples/s with 1 rank (2 threads) vs 2 ranks (1 thread each) on this
    host, through the real launcher; the first epoch (warm-up) is left out."""
    n = 256
    folder = _dataset(root, 32, "npy", n)
    rows = []
    for ranks in (1, 2):
        with tempfile.TemporaryDirectory(prefix="sciperf-scaling-") as out:
            # TensorFlow's multi-rank path is Horovod, which needs MPI's rank environment
            launcher = (["launcher=mpirun", f"launcher.tasks_per_node={ranks}"]
                        if framework == "tensorflow" and ranks > 1
                        else ["launcher=local", f"launcher.nprocs={ranks}"])
            cmd = [sys.executable, "-m", "sciperf.cli", "launch", *launcher,
                   "experiment=mini", f"framework={framework}",
                   f"data.dir={folder}", f"data.train_samples={n}",
                   f"data.eval_samples={n // 2}", f"train.max_epochs={epochs}",
                   "train.target=0.0001", f"framework.threads={2 // ranks}",
                   f"output_dir={out}"]
            if framework == "tensorflow" and ranks > 1:
                cmd.append("distributed.backend=horovod")
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            summary_path = Path(out) / "summary.json"
            if not summary_path.is_file():
                rows.append({"ranks": ranks, "error": (proc.stderr.strip().splitlines()
                                                       or ["no summary"])[-1]})
                continue
            hist = json.loads(summary_path.read_text())["history"][1:]
            seconds = sum(h["train_s"] for h in hist)
            if not seconds:
                rows.append({"ranks": ranks, "error": "no timed epochs"})
                continue
            rows.append({"ranks": ranks, "threads_per_rank": 2 // ranks,
                         "samples_per_s": round(n * len(hist) / seconds, 2)})
    rates = [r.get("samples_per_s") for r in rows]
    speedup = rates[1] / rates[0] if all(rates) else None
    return {"framework": framework, "train_samples": n, "epochs_timed": epochs - 1,
            "runs": rows, "speedup_2_vs_1": round(speedup, 3) if speedup else None}


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
    if workload == "deepcam":
        del result["reference_full_fp32_samples_per_s"]  # a CosmoFlow figure
        deepcam_bench(frameworks, extra, root, result)
        return _write(out, workload, result)
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
    row = staging_case(_dataset(root, 128, "npy", 8))
    result["staging"] = row
    for name, m in row["methods"].items():
        print(f"staging {name:<15} {row['MB']} MB: {m['median_s']:.3f} s "
              f"({m['MB_per_s']} MB/s)", flush=True)
    result["scaling"] = []
    for fw in frameworks:
        row = scaling_case(fw, root)
        result["scaling"].append(row)
        print(f"scaling {fw:<10} 1 vs 2 ranks: {row['runs']} speedup {row['speedup_2_vs_1']}",
              flush=True)
    return _write(out, workload, result)


def _write(out: Path, workload: str, result: dict[str, Any]) -> int:
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
