"""End to end through the real CLI: mini DeepCAM reaches its IoU target in both frameworks,
is logged as division `open` (synthetic data cannot have the fixed sample counts) and
passes the official checker; bad input ends in one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import mllog

SCIPERF = [sys.executable, "-m", "sciperf.cli"]


def sciperf(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*SCIPERF, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"sciperf {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def mini_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("deepcam-mini")
    sciperf("prepare", "workload=deepcam", "experiment=mini", f"data.dir={root}")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_mini_reaches_iou_target_and_passes_checker(mini_data: Path, tmp_path: Path,
                                                    framework: str, bf16_cpu: None) -> None:
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    out = tmp_path / framework
    proc = sciperf("train", "workload=deepcam", f"framework={framework}", "experiment=mini",
                   "precision=bf16", f"data.dir={mini_data}", f"output_dir={out}")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success" and summary["final_metric"] >= 0.82
    assert summary["division"] == "open" and summary["precision"] == "bf16"
    assert summary["epochs"] < summary["config"]["train"]["max_epochs"]
    events = mllog(out / "result_0.txt")
    values = {e["key"]: e["value"] for e in events}
    assert values["submission_division"] == "open" and values["submission_benchmark"] == "deepcam"
    assert values["train_samples"] == 512 and values["opt_name"] == "AdamW"
    accs = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert len(accs) == summary["epochs"] and accs[-1] >= 0.82 > max(accs[:-1], default=0)
    assert "eval_accuracy" in proc.stdout
    verdict = sciperf("check", str(out / "result_0.txt"))
    assert verdict.stdout.startswith("PASS") and "open deepcam" in verdict.stdout


def test_unmet_target_is_aborted_and_corrupt_sample_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    data = tmp_path / "d"
    small = ["workload=deepcam", "experiment=mini", "data.train_samples=8",
             "data.eval_samples=8", "model.height=32", "model.width=48", f"data.dir={data}"]
    sciperf("prepare", *small)
    proc = sciperf("train", *small, "train.max_epochs=1", f"output_dir={tmp_path / 'o'}",
                   check=False)
    assert proc.returncode == 1
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["status"] == "aborted" and summary["epochs"] == 1
    victim = sorted((data / "train").glob("*.data.npy"))[3]
    victim.write_bytes(victim.read_bytes()[:500])
    proc = sciperf("train", *small, f"output_dir={tmp_path / 'p'}", check=False)
    assert proc.returncode == 2
    assert str(victim) in proc.stderr and "Traceback" not in proc.stderr
