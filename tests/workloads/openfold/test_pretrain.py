"""The mini's starting checkpoint through the real CLI: `sciperf run workload=openfold` makes
the data, pre-trains the checkpoint, and the timed run starts from it as the benchmark
starts from the reference's — its MLLOG names the file's SHA-256 and its first evaluation
is the checkpoint's model, not a fresh one; a second prepare re-uses the checkpoint while
its recipe matches and makes a new one when it does not.

Lean: 16 chains, 2 steps a cycle, 1 pre-training cycle, 1 timed cycle."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")

SMALL = ["workload=openfold", "experiment=mini", "data.train_samples=16", "data.eval_samples=2",
         "train.global_batch_size=2", "train.val_every_iters=2", "framework.threads=1",
         "data.pretrain_epochs=1", "train.max_epochs=1", "train.target=0.99"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)


def _records(log: Path) -> list[dict]:
    return [json.loads(ln[len(":::MLLOG "):]) for ln in log.read_text().splitlines()]


def test_the_timed_run_starts_from_the_checkpoint_prepare_pretrains(sciperf_cmd, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    run = _run([*sciperf_cmd, "run", *SMALL, f"data.dir={data}", f"output_dir={out}"])
    # the target is out of reach: the run ends aborted after its cycle (exit 1), checked
    assert run.returncode == 1, run.stderr[-3000:]
    assert "pre-training the starting checkpoint: 1 cycles" in run.stdout
    start = data / "pretrained.pt"
    assert start.is_file() and (data / "pretrained.json").is_file()
    records = _records(out / "result_0.txt")
    logged = [r["value"] for r in records if r["key"] == "init_checkpoint_sha256sum"]
    assert logged == [hashlib.sha256(start.read_bytes()).hexdigest()]
    pre = [r["value"] for r in _records(data / "pretrain" / "result_0.txt")
           if r["key"] == "eval_accuracy"]
    assert len(pre) == 1  # the pre-training's records stay beside the data

    again = _run([*sciperf_cmd, "prepare", *SMALL, f"data.dir={data}"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "starting checkpoint ready" in again.stdout  # the same recipe: re-used
    changed = _run([*sciperf_cmd, "prepare", *SMALL, f"data.dir={data}", "seed=3"])
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert "pre-training the starting checkpoint" in changed.stdout  # another recipe: remade
    assert hashlib.sha256(start.read_bytes()).hexdigest() != logged[0]
    # chains regenerated with other settings (same model and seed): the checkpoint trained
    # on the old chains was "ready"
    deeper = _run([*sciperf_cmd, "prepare", *SMALL, f"data.dir={data}", "seed=3",
                   "data.msa_depth=8"])
    assert deeper.returncode == 0, deeper.stderr[-3000:]
    assert "pre-training the starting checkpoint" in deeper.stdout, deeper.stdout


def test_a_missing_starting_checkpoint_says_how_to_make_it(sciperf_cmd, tmp_path):
    """train without the prepared checkpoint: one line naming train.init_checkpoint."""
    data = tmp_path / "data"
    made = _run([*sciperf_cmd, "prepare", *SMALL, f"data.dir={data}", "data.pretrain_epochs=0"])
    assert made.returncode == 0, made.stderr[-3000:]
    run = _run([*sciperf_cmd, "train", *SMALL, f"data.dir={data}",
                f"output_dir={tmp_path / 'out'}"])
    assert run.returncode == 2
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("sciperf train:")]
    assert len(lines) == 1 and "train.init_checkpoint=" in lines[0] and \
        "pretrained.pt: no such file" in lines[0] and "sciperf prepare" in lines[0], \
        run.stderr[-2000:]
