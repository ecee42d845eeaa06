"""End to end through the real CLI: mini CosmoFlow in PyTorch reaches its target.

These are the slow tests: each trains the mini model on freshly generated synthetic
universes and checks the log with the official mlperf-logging checker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runzoo import ZooRun
from testkit import cli, events, mllog, summary

pytest.importorskip("torch")

pytestmark = pytest.mark.slow
SCIPERF = [sys.executable, "-m", "sciperf.cli"]


def sciperf(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*SCIPERF, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"sciperf {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


# A finished 2-epoch run on the session's 64 + 32 universes, short of the target: the
# run_zoo's, shared with the package and full-disk tests (the same words, seed 0 and 1).
SHORT = ("train", "experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=2", "framework.threads=1")


@pytest.fixture(scope="module")
def mini_data(cosmoflow_mini_data) -> Path:
    return cosmoflow_mini_data


def test_make_run_equivalent_reaches_target_and_passes_checker(tmp_path):
    """`sciperf run` = prepare (data missing) + train + check, as `make run`: in the
    precision `auto` measured faster here, named with its reason."""
    data, out = tmp_path / "data", tmp_path / "out"
    proc = sciperf("run", "workload=cosmoflow", "framework=pytorch", "experiment=mini",
                   f"data.dir={data}", f"output_dir={out}")
    assert "PASS" in proc.stdout and "closed cosmoflow" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success" and summary["target_reached"]
    assert summary["final_metric"] <= 0.124
    choice = summary["precision_choice"]
    assert choice["asked"] == "auto" and summary["precision"] == choice["precision"]
    assert f"precision=auto: {choice['precision']} (conv3d" in proc.stdout
    assert summary["malloc"] == "reuse"  # the default host allocator mode, in force
    assert summary["epochs"] < summary["config"]["train"]["max_epochs"]  # stopped at target
    events = mllog(out / "result_0.txt")
    stop = [e for e in events if e["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "success"
    errors = [e["value"] for e in events if e["key"] == "eval_error"]
    assert len(errors) == summary["epochs"] and errors[-1] <= 0.124
    assert all(e > 0.124 for e in errors[:-1])  # stops at the first epoch on target
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_start"] == list(
        range(1, summary["epochs"] + 1))


def test_mini_run_reaches_target_in_the_precision_auto_did_not_pick(mini_data, tmp_path,
                                                                    request):
    """Whichever precision `auto` picks on a machine, the mini converges in it: the `make run`
    test above covers auto's pick (trained again here it would be the same run twice, ~7 min
    on an AVX2 CPU); this trains the other one, where this CPU has kernels for it."""
    from sciperf import precision as choice
    from sciperf.workloads import get
    from sciperf_pytorch import runtime

    runtime.setup_threads(0)  # as the run probes: every core (the cache key is the same)
    picked = choice.on_this_machine("auto", get("cosmoflow").cost.hot_op, runtime).precision
    precision = "bf16" if picked == "fp32" else "fp32"
    if precision == "bf16":
        request.getfixturevalue("bf16_cpu")
    out = tmp_path / precision
    sciperf("train", "experiment=mini", f"precision={precision}", f"data.dir={mini_data}",
            f"output_dir={out}")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success" and summary["final_metric"] <= 0.124
    assert summary["precision"] == precision and summary["precision_choice"]["asked"] == precision
    assert sciperf("check", str(out / "result_0.txt")).stdout.startswith("PASS")


def test_unmet_target_is_logged_aborted_and_fails(run_zoo):
    short = run_zoo.run(*SHORT, "seed=0")
    out = short.out
    assert short.returncode == 1
    said = summary(out)
    assert said["status"] == "aborted" and not said["target_reached"]
    stop = events(out / "result_0.txt", "run_stop")
    assert stop[0]["metadata"]["status"] == "aborted"
    verdict = cli("check", str(out / "result_0.txt"))
    assert verdict.returncode == 1 and "eval_error" in verdict.stdout


def _losses(run: ZooRun) -> list[float]:
    return [h["loss"] for h in summary(run.out)["history"]]


def test_same_seed_same_losses(run_zoo, tiny_mini_data, tmp_path):
    """The same words train the same losses in a process of their own; another seed does
    not. Two of the three runs are the session's (run_zoo), the third is this test's."""
    a = _losses(run_zoo.run(*SHORT, "seed=0"))
    sciperf(*SHORT, "seed=0", f"data.dir={tiny_mini_data}", f"output_dir={tmp_path / 'b'}",
            check=False)
    b = [h["loss"] for h in summary(tmp_path / "b")["history"]]
    c = _losses(run_zoo.run(*SHORT, "seed=1"))
    assert len(a) == 2 and a == b
    assert a != c


def test_reference_tfrecord_format_trains(tmp_path):
    data, out = tmp_path / "tfr", tmp_path / "out"
    sciperf("prepare", "experiment=mini", "data.format=tfrecord", "data.train_samples=32",
            "data.eval_samples=16", f"data.dir={data}")
    assert len(list((data / "train").glob("*.tfrecord"))) == 32
    proc = sciperf("train", "experiment=mini", "data.format=tfrecord", "data.train_samples=32",
                   "data.eval_samples=16", "train.max_epochs=1", f"data.dir={data}",
                   f"output_dir={out}", check=False)
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == 1 and summary["epochs"] == 1  # ran, target not expected
    assert summary["samples_per_s"] > 0


def test_corrupt_sample_is_one_clear_line(tmp_path):
    data = tmp_path / "bad"
    assert cli("prepare", "experiment=mini", "data.train_samples=16", "data.eval_samples=16",
               f"data.dir={data}").returncode == 0
    victim = sorted((data / "train").glob("*.data.npy"))[3]
    victim.write_bytes(victim.read_bytes()[:1000])  # truncated
    proc = sciperf("train", "experiment=mini", "data.train_samples=16", "data.eval_samples=16",
                   f"data.dir={data}", f"output_dir={tmp_path / 'o'}", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and victim.name in lines[0] and "Traceback" not in proc.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["status"] == "error"
