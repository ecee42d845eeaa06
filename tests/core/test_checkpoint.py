"""Checkpoint and resume through the real console script (issue 13): a run stopped after 2
epochs and resumed to 4 ends exactly where an uninterrupted 4-epoch run ends, in both
frameworks; a corrupt newest checkpoint is skipped in one line; a checkpoint never runs
code; the resumed log and summary say the run is not a closed result."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sciperf import checkpoint

BASE = ["train", "experiment=mini", "data.train_samples=64", "data.eval_samples=32",
        "train.global_batch_size=32", "train.target=0.0001", "train.save_weights=true",
        "train.checkpoint_every=1"]
STATE = {"pytorch": "state.pt", "tensorflow": "state.npz"}


def _train(cmd: list[str], data: Path, out: Path, framework: str, epochs: int,
           *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    proc = subprocess.run([*cmd, *BASE, f"framework={framework}", f"data.dir={data}",
                           f"output_dir={out}", f"train.max_epochs={epochs}", *extra],
                          capture_output=True, text=True, timeout=600, check=False, env=env)
    return proc


def _sciperf_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """sciperf's own stderr lines (TensorFlow's C++ start-up lines come first)."""
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _records(out: Path) -> list[dict]:
    return [json.loads(ln[len(":::MLLOG "):])
            for ln in (out / "result_0.txt").read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, sciperf_cmd, tiny_mini_data) -> dict[str, Path]:
    """4 epochs in one go, per framework (checkpointing on, as in the resumed runs)."""
    runs = {}
    for fw in ("pytorch", "tensorflow"):
        out = tmp_path_factory.mktemp(f"whole-{fw}")
        shutil.rmtree(out)
        proc = _train(sciperf_cmd, tiny_mini_data, out, fw, 4)
        assert proc.returncode == 1, proc.stderr[-2000:]  # the target is out of reach
        runs[fw] = out
    return runs


def _assert_same_run(whole: Path, resumed: Path, epochs: int = 4) -> None:
    a, b = _summary(whole)["history"], _summary(resumed)["history"]
    assert [h["epoch"] for h in b] == list(range(1, epochs + 1))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose([y["loss"], y["metric"]], [x["loss"], x["metric"]],
                                   rtol=1e-6, err_msg=f"epoch {x['epoch']}")
    wa, wb = np.load(whole / "weights_rank0.npz"), np.load(resumed / "weights_rank0.npz")
    for name in wa.files:
        np.testing.assert_allclose(wb[name], wa[name], rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_a_resumed_run_ends_where_an_uninterrupted_one_does(
        sciperf_cmd, tiny_mini_data, uninterrupted, tmp_path: Path, framework: str) -> None:
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    out = tmp_path / "run"
    first = _train(sciperf_cmd, tiny_mini_data, out, framework, 2, "train.resume=auto")
    assert first.returncode == 1, first.stderr[-2000:]
    assert "no checkpoint" in first.stdout and "starting anew" in first.stdout
    assert sorted(p.name for p in checkpoint.folder(out).iterdir()) == \
        ["epoch_0001", "epoch_0002"]
    assert sorted(p.name for p in (checkpoint.folder(out) / "epoch_0002").iterdir()) == \
        sorted(["MANIFEST.json", "driver.json", "result.txt", STATE[framework]])
    second = _train(sciperf_cmd, tiny_mini_data, out, framework, 4, "train.resume=auto")
    assert second.returncode == 1, second.stderr[-2000:]
    assert f"resuming from {checkpoint.folder(out) / 'epoch_0002'} (after epoch 2)" \
        in second.stdout
    _assert_same_run(uninterrupted[framework], out)
    # honest records: one log, one run_start, every epoch once, division open
    summary = _summary(out)
    assert summary["division"] == "open" and summary["epochs"] == 4
    assert [r["from_epoch"] for r in summary["resumed"]] == [2]
    records = _records(out)
    assert sum(r["key"] == "run_start" for r in records) == 1
    assert [r["metadata"]["epoch_num"] for r in records if r["key"] == "epoch_start"] == \
        [1, 2, 3, 4]
    assert next(r["value"] for r in records if r["key"] == "submission_division") == "open"
    assert records[-1]["key"] == "run_stop"
    # the newest two are kept (train.checkpoint_keep=2)
    assert sorted(p.name for p in checkpoint.folder(out).iterdir()) == \
        ["epoch_0003", "epoch_0004"]


def test_a_corrupt_newest_checkpoint_is_skipped_in_one_line(
        sciperf_cmd, tiny_mini_data, uninterrupted, tmp_path: Path) -> None:
    out = tmp_path / "run"
    _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 2)
    newest = checkpoint.folder(out) / "epoch_0002"
    state = newest / STATE["pytorch"]
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # a killed copy
    proc = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 4, "train.resume=auto")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"skipped checkpoint {newest}: state.pt holds" in proc.stdout
    assert "resuming from" in proc.stdout and "(after epoch 1)" in proc.stdout
    _assert_same_run(uninterrupted["pytorch"], out)


def test_no_usable_checkpoint_or_another_config_is_one_line(sciperf_cmd, tiny_mini_data,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "run"
    _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 1)
    other = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 3, "train.resume=auto",
                   "opt.base_lr=0.5")
    assert other.returncode == 2 and len(_sciperf_lines(other)) == 1, other.stderr
    assert "taken with another configuration" in other.stderr
    (checkpoint.folder(out) / "epoch_0001" / "MANIFEST.json").write_text("{")
    broken = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 3, "train.resume=auto")
    assert broken.returncode == 2, broken.stderr
    assert _sciperf_lines(broken) == [
        f"sciperf train: error: train.resume=auto: no valid checkpoint "
        f"({checkpoint.folder(out) / 'epoch_0001'}: no readable MANIFEST.json (JSONDecodeError))"]


class _Payload:
    """Unpickling this calls os.system: what a planted checkpoint would try."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("content", ["command-pickle", "random-bytes"])
def test_a_bad_state_file_is_one_line_and_never_runs(sciperf_cmd, tiny_mini_data,
                                                     tmp_path: Path, content: str) -> None:
    """A state.pt replaced by a pickle that runs a command, or by random bytes (manifest
    updated to match, as an attacker would): refused in one short line, nothing run
    (torch.load weights_only), and without torch's paragraph advising to load it with
    weights_only=False — which this project never does."""
    out = tmp_path / "run"
    _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 1)
    folder = checkpoint.folder(out) / "epoch_0001"
    marker = tmp_path / "pwned"
    state = folder / "state.pt"
    state.write_bytes(pickle.dumps(_Payload(marker)) if content == "command-pickle"
                      else os.urandom(4096))
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    manifest["files"]["state.pt"] = {"bytes": state.stat().st_size,
                                     "sha256": checkpoint._sha256(state)}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    proc = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 2, "train.resume=auto")
    assert proc.returncode == 2, proc.stderr
    lines = _sciperf_lines(proc)
    assert len(lines) == 1 and f"{state}: not a checkpoint torch loads with " \
        "weights_only=True (" in lines[0], lines
    assert "weights_only=False" not in proc.stderr and "succeed" not in proc.stderr
    assert len(lines[0]) < 400, lines[0]
    assert not marker.exists()


def test_overwrite_removes_the_old_runs_checkpoints(sciperf_cmd, tiny_mini_data,
                                                   tmp_path: Path) -> None:
    """A later resume must never continue a run that train.overwrite replaced."""
    out = tmp_path / "run"
    _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 2)
    refused = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 1,
                     "train.checkpoint_every=0")
    assert refused.returncode == 2 and "already holds a run" in refused.stderr
    proc = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 1, "train.checkpoint_every=0",
                  "train.overwrite=true")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert not checkpoint.folder(out).exists()


def _stop_in_epoch_2(cmd: list[str], stop_inside_epoch, sig: signal.Signals = signal.SIGUSR1
                     ) -> subprocess.CompletedProcess:
    """Run `cmd`; `sig` (SIGUSR1: Slurm's --signal) reaches it inside epoch 2."""
    out = Path(next(a for a in cmd if a.startswith("output_dir="))[len("output_dir="):])
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        stop_inside_epoch(out / "result_0.txt", [proc.pid], 2,
                          lambda: proc.send_signal(sig), sig)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


@pytest.mark.parametrize(("framework", "sig"), [("pytorch", signal.SIGUSR1),
                                              ("tensorflow", signal.SIGUSR1),
                                              ("pytorch", signal.SIGTERM)])
def test_a_stop_request_checkpoints_mid_epoch_and_the_resume_is_exact(
        sciperf_cmd, tiny_mini_data, tmp_path: Path, framework: str, sig,
        stop_inside_epoch) -> None:
    """8 steps per epoch; the request — SIGUSR1 (Slurm's --signal), or SIGTERM (preemption,
    time limit) within train.term_grace_s — lands inside epoch 2: every rank stops at the
    next optimizer step, the checkpoint holds the epoch's progress, exit 75 (EX_TEMPFAIL),
    and the resumed run skips the batches already trained — the same run as one never
    stopped."""
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    small = ("train.global_batch_size=8",)
    whole = tmp_path / "whole"
    assert _train(sciperf_cmd, tiny_mini_data, whole, framework, 3, *small).returncode == 1
    out = tmp_path / "run"
    cmd = [*sciperf_cmd, *BASE, f"framework={framework}", f"data.dir={tiny_mini_data}",
           f"output_dir={out}", "train.max_epochs=3", *small]
    stopped = _stop_in_epoch_2(cmd, stop_inside_epoch, sig)
    assert stopped.returncode == 75, stopped.stderr[-2000:]
    assert _summary(out)["status"] == "checkpointed"
    inside = sorted(checkpoint.folder(out).glob("epoch_0001_step_*"))
    assert len(inside) == 1, list(checkpoint.folder(out).iterdir())
    progress = json.loads((inside[0] / "driver.json").read_text())["epoch_progress"]
    assert 1 <= progress["steps"] <= 8 and progress["samples"] == 8 * progress["steps"]
    resumed = _train(sciperf_cmd, tiny_mini_data, out, framework, 3, *small,
                     "train.resume=auto")
    assert resumed.returncode == 1, resumed.stderr[-2000:]
    assert f"{progress['steps']} steps into epoch 2" in resumed.stdout
    _assert_same_run(whole, out, epochs=3)
    starts = [r["metadata"]["epoch_num"] for r in _records(out) if r["key"] == "epoch_start"]
    assert starts == [1, 2, 3]  # the interrupted epoch is logged once


def test_sigterm_waits_for_a_checkpoint_only_where_the_launcher_leaves_time(monkeypatch):
    """train.term_grace_s applies to checkpointing runs, and not under mpirun, which
    follows its SIGTERM with SIGKILL one second later: there the records come first."""
    from types import SimpleNamespace

    from sciperf import train

    cfg = SimpleNamespace(train=SimpleNamespace(checkpoint_every=1, term_grace_s=20.0))
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    assert train._term_grace(cfg) == 20.0
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert train._term_grace(cfg) == 0.0
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    cfg.train.checkpoint_every = 0
    assert train._term_grace(cfg) == 0.0


def test_sigterm_without_grace_ends_at_once_with_the_records(sciperf_cmd, tiny_mini_data,
                                                             tmp_path: Path,
                                                             stop_inside_epoch) -> None:
    """train.term_grace_s=0: a SIGTERM in epoch 2 ends the run at once (exit 143) with
    run_stop aborted and summary.json status error; no mid-epoch checkpoint, the epoch-1
    one stays for a resume."""
    out = tmp_path / "run"
    cmd = [*sciperf_cmd, *BASE, "framework=pytorch", f"data.dir={tiny_mini_data}",
           f"output_dir={out}", "train.max_epochs=3", "train.global_batch_size=8",
           "train.term_grace_s=0"]
    stopped = _stop_in_epoch_2(cmd, stop_inside_epoch, signal.SIGTERM)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert any("terminated by SIGTERM" in ln for ln in _sciperf_lines(stopped)), stopped.stderr
    assert _summary(out)["status"] == "error"
    assert [r["metadata"]["status"] for r in _records(out) if r["key"] == "run_stop"] == \
        ["aborted"]
    assert [p.name for p in checkpoint.folder(out).iterdir()] == ["epoch_0001"]
