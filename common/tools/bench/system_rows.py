"""The bench's rows about the host rather than the model: staging a dataset against
`cp -r`, and mini training with 1 rank against 2 ranks through the real launcher.

Both run whole external steps (file copies, `sciperf launch` subprocesses) and time them
from outside; the 1-vs-2-rank rows take the bench's config overrides but for the keys
they set themselves (:data:`SCALING_SETS`).
"""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sciperf.config import compose
from sciperf.data import atomic
from sciperf.data.staging import stage_files
from sciperf.errors import SciperfError
from sciperf.results.check import scratch
from sciperf.tools.bench.rows import _cases, _device
from sciperf.workloads.base import Workload


def staging_case(folder: Path, repeats: int = 3) -> dict[str, Any]:
    """Staging a dataset (verify=size and =checksum) against `cp -r` of the same files.

    Each method copies into a fresh directory on the same file system, in rotating order,
    `repeats` times; medians are reported, plus the rerun that finds every file intact.
    """
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.parent != folder)
    total = sum(p.stat().st_size for p in files)
    times: dict[str, list[float]] = {"cp -r": [], "stage size": [], "stage checksum": []}
    with scratch(".stage-bench-", within=folder.parent) as tmp:
        for i in range(repeats):
            for name in list(times)[i % 3:] + list(times)[:i % 3]:
                dst = tmp / name.replace(" ", "_")
                shutil.rmtree(dst, ignore_errors=True)
                start = time.perf_counter()
                if name == "cp -r":
                    _copy_tree(folder, dst)
                else:
                    stage_files(files, folder, dst, workers=4, verify=name.split()[1],
                                progress=False)
                times[name].append(time.perf_counter() - start)
        start = time.perf_counter()
        rerun = stage_files(files, folder, tmp / "stage_size", progress=False)
        rerun_s = time.perf_counter() - start
    rows = {name: {"median_s": round(statistics.median(t), 3),
                   "MB_per_s": round(total / 1e6 / statistics.median(t), 1)}
            for name, t in times.items()}
    return {"files": len(files), "MB": round(total / 1e6, 1), "repeats": repeats,
            "methods": rows, "rerun_all_intact_s": round(rerun_s, 3),
            "rerun_skipped": rerun.skipped}


def _copy_tree(folder: Path, dst: Path) -> None:
    """`cp -r FOLDER DST`, the baseline staging is timed against; a copy the disk refuses
    is one line naming `dst` in atomic.why's words (cp's last line carries the reason)."""
    done = subprocess.run(["cp", "-r", str(folder), str(dst)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        # a negative status is a signal's (SIGXFSZ: a write past a file-size limit)
        ended = (f"killed by {signal.Signals(-done.returncode).name}" if done.returncode < 0
                 else f"exit status {done.returncode}")
        said = (done.stderr.strip().splitlines() or [ended])[-1]
        raise SciperfError(f"{dst}: cannot be written ({atomic.why(OSError(said))})")


# what a 1-vs-2-rank row sets itself (a bench override of these is not taken there)
SCALING_SETS = ("experiment", "framework", "framework.threads", "train.max_epochs",
                "train.target", "distributed.backend")


def scaling_overrides(extra: list[str]) -> tuple[list[str], list[str]]:
    """The bench's config overrides split into those the 1-vs-2-rank rows take and those
    they set themselves (thread layout, epochs, target, launcher): the rows ran the
    default config whatever was given (`framework.malloc=…` timed the training rows
    only)."""
    def key(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")

    def own(override: str) -> bool:
        return key(override) in SCALING_SETS or key(override).split(".")[0] == "launcher"
    extra = [o for o in extra if key(o) != "workload"]  # how the bench picked the rows'
    return [o for o in extra if not own(o)], [o for o in extra if own(o)]


def scaling_case(workload: Workload, framework: str, root: Path, epochs: int = 4,
                 extra: list[str] | None = None) -> dict[str, Any]:
    """Mini training samples/s with 1 rank (2 threads) vs 2 ranks (1 thread each) on this
    host, through the real launcher; the first epoch (warm-up) is left out. The target is
    out of reach (every epoch runs). The bench's config overrides are taken, but for the
    keys the row sets itself (recorded as `overrides_replaced`)."""
    taken, replaced = scaling_overrides(extra or [])
    n = 256
    mini = compose([f"workload={workload.name}", "experiment=mini", *taken])
    folder = _cases(workload).dataset(root, workload.model_spec(mini), "npy", n)
    # met only by a perfect model (a target outside the metric's values is refused)
    never = workload.metric.span[1 if workload.metric.higher_is_better else 0]
    rows = []
    for ranks in (1, 2):
        with scratch("sciperf-scaling-") as out:
            # TensorFlow's multi-rank path is Horovod, which needs MPI's rank environment
            launcher = (["launcher=mpirun", f"launcher.tasks_per_node={ranks}"]
                        if framework == "tensorflow" and ranks > 1
                        else ["launcher=local", f"launcher.nprocs={ranks}"])
            cmd = [sys.executable, "-m", "sciperf.cli", "launch", *launcher, *taken,
                   f"workload={workload.name}", "experiment=mini", f"framework={framework}",
                   f"data.dir={folder}", f"data.train_samples={n}",
                   f"data.eval_samples={n // 2}", f"train.max_epochs={epochs}",
                   f"train.target={never}", f"framework.threads={2 // ranks}",
                   f"output_dir={out}"]
            if framework == "tensorflow" and ranks > 1:
                cmd.append("distributed.backend=horovod")
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            summary_path = Path(out) / "summary.json"
            if not summary_path.is_file():
                rows.append({"ranks": ranks, "error": (proc.stderr.strip().splitlines()
                                                       or ["no summary"])[-1]})
                continue
            summary = json.loads(summary_path.read_text())
            hist = summary["history"][1:]
            seconds = sum(h["train_s"] for h in hist)
            if not seconds:
                rows.append({"ranks": ranks, "error": "no timed epochs"})
                continue
            rows.append({"ranks": ranks, "threads_per_rank": 2 // ranks,
                         # precision=auto, as a run takes it: what it chose and where
                         "precision": summary.get("precision"),
                         "device": _device(summary.get("versions", {}).get("device", "cpu")),
                         "samples_per_s": round(n * len(hist) / seconds, 2)})
    rates = [r.get("samples_per_s") for r in rows]
    speedup = rates[1] / rates[0] if all(rates) else None
    return {"framework": framework, "precision_asked": "auto", "train_samples": n,
            "epochs_timed": epochs - 1, "overrides": taken, "overrides_replaced": replaced,
            "runs": rows,
            "speedup_2_vs_1": round(speedup, 3) if speedup else None}
