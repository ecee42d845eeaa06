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
from testkit import summary

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


def _copy(run_zoo, out: Path, framework: str, epochs: int) -> Path:
    """The session's run of `epochs` epochs (tests/runzoo.py), copied to `out` to tamper
    with or resume: the same words as `_train(…, framework, epochs)` with no extras."""
    return run_zoo.copy(out, *BASE, f"framework={framework}", f"train.max_epochs={epochs}").out


def _sciperf_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """sciperf's own stderr lines (TensorFlow's C++ start-up lines come first)."""
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]


def _records(out: Path) -> list[dict]:
    return [json.loads(ln[len(":::MLLOG "):])
            for ln in (out / "result_0.txt").read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(run_zoo) -> dict[str, Path]:
    """4 epochs in one go, per framework (checkpointing on, as in the resumed runs)."""
    runs = {}
    for fw in ("pytorch", "tensorflow"):
        run = run_zoo.run(*BASE, f"framework={fw}", "train.max_epochs=4")
        assert run.returncode == 1, run.stderr[-2000:]  # the target is out of reach
        runs[fw] = run.out
    return runs


def _assert_same_run(whole: Path, resumed: Path, epochs: int = 4) -> None:
    a, b = summary(whole)["history"], summary(resumed)["history"]
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
    said = summary(out)
    assert said["division"] == "open" and said["epochs"] == 4
    assert [r["from_epoch"] for r in said["resumed"]] == [2]
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
        run_zoo, sciperf_cmd, tiny_mini_data, uninterrupted, tmp_path: Path) -> None:
    out = tmp_path / "run"
    _copy(run_zoo, out, "pytorch", 2)
    newest = checkpoint.folder(out) / "epoch_0002"
    state = newest / STATE["pytorch"]
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # a killed copy
    proc = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 4, "train.resume=auto")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"skipped checkpoint {newest}: state.pt holds" in proc.stdout
    assert "resuming from" in proc.stdout and "(after epoch 1)" in proc.stdout
    _assert_same_run(uninterrupted["pytorch"], out)


def test_no_usable_checkpoint_or_another_config_is_one_line(run_zoo, sciperf_cmd,
                                                            tiny_mini_data,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "run"
    _copy(run_zoo, out, "pytorch", 1)
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
def test_a_bad_state_file_is_one_line_and_never_runs(run_zoo, sciperf_cmd, tiny_mini_data,
                                                     tmp_path: Path, content: str) -> None:
    """A state.pt replaced by a pickle that runs a command, or by random bytes (manifest
    updated to match, as an attacker would): refused in one short line, nothing run
    (torch.load weights_only), and without torch's paragraph advising to load it with
    weights_only=False — which this project never does."""
    out = tmp_path / "run"
    _copy(run_zoo, out, "pytorch", 1)
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
    # the continued log and the summary agree: the resumed epoch-1 run stopped (the log had
    # no run_stop, the summary said 0 epochs, no history, no run_start)
    records = _records(out)
    assert [r["metadata"]["status"] for r in records if r["key"] == "run_stop"] == ["aborted"]
    said = summary(out)
    assert (said["status"], said["epochs"], len(said["history"])) == ("error", 1, 1)
    assert said["run_start_unix"] is not None


def _edit_driver(folder: Path, edit) -> None:
    """Change driver.json and give the manifest its new size and hash (a foreign or
    hand-made checkpoint, not a damaged copy)."""
    driver = json.loads((folder / "driver.json").read_text())
    edit(driver)
    (folder / "driver.json").write_text(json.dumps(driver))
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    manifest["files"]["driver.json"] = {"bytes": (folder / "driver.json").stat().st_size,
                                        "sha256": checkpoint._sha256(folder / "driver.json")}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("edit", "why"), [
    (lambda d: d.pop("history"), "driver.json has no usable 'history'"),
    (lambda d: d.update(format=2), "driver.json format 2 is not 1"),
    (lambda d: d.update(epochs="3"), "driver.json has no usable 'epochs'"),
    (lambda d: d.update(epoch_progress={"steps": 1}), "driver.json has no usable "
                                                      "'epoch_progress'"),
])
def test_a_driver_that_does_not_hold_a_run_is_skipped_not_a_traceback(
        run_zoo, sciperf_cmd, tiny_mini_data, tmp_path: Path, edit, why: str) -> None:
    """A driver.json without `history` (manifest matching) was a KeyError traceback in the
    middle of the resume, after the records had been replaced."""
    out = tmp_path / "run"
    _copy(run_zoo, out, "pytorch", 1)
    folder = checkpoint.folder(out) / "epoch_0001"
    _edit_driver(folder, edit)
    proc = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 2, "train.resume=auto")
    assert proc.returncode == 2 and _sciperf_lines(proc) == [
        f"sciperf train: error: train.resume=auto: no valid checkpoint ({folder}: {why})"]


def test_progress_fields_are_the_backends(tmp_path: Path) -> None:
    from dataclasses import fields

    from sciperf.backends import EpochProgress
    assert tuple(f.name for f in fields(EpochProgress)) == checkpoint.PROGRESS_FIELDS


def test_a_finished_run_is_not_resumed(run_zoo, sciperf_cmd, tiny_mini_data,
                                       tmp_path: Path) -> None:
    """A run that met its target, resumed from its older checkpoint, trained its last
    epoch again and was rewritten as an open result; a checkpoint at max_epochs resumed
    nothing and rewrote the records all the same."""
    reached = tmp_path / "reached"
    done = _train(sciperf_cmd, tiny_mini_data, reached, "pytorch", 3, "train.target=10")
    assert done.returncode == 0 and summary(reached)["status"] == "success", done.stderr
    log = (reached / "result_0.txt").read_bytes()
    again = _train(sciperf_cmd, tiny_mini_data, reached, "pytorch", 3, "train.target=10",
                   "train.resume=auto")
    assert again.returncode == 2 and _sciperf_lines(again) == [
        f"sciperf train: error: output_dir={reached} holds a run that reached its target: "
        "train.resume=auto has nothing to continue (a new run needs a new directory or "
        "train.overwrite=true)"]
    assert (reached / "result_0.txt").read_bytes() == log
    spent = tmp_path / "spent"
    _copy(run_zoo, spent, "pytorch", 2)
    log = (spent / "result_0.txt").read_bytes()
    same = _train(sciperf_cmd, tiny_mini_data, spent, "pytorch", 2, "train.resume=auto")
    assert same.returncode == 2 and "the run already trained 2 epochs, train.max_epochs=2: " \
        "nothing left to resume" in same.stderr, same.stderr
    assert (spent / "result_0.txt").read_bytes() == log


def test_a_run_that_died_before_its_first_checkpoint_is_started_anew(
        run_zoo, sciperf_cmd, tiny_mini_data, tmp_path: Path) -> None:
    """kill -9 in epoch 1 (summary.json still `running`, no checkpoint): resume=auto said
    "starting anew" and then refused the dead run's records — a requeued job failed so
    every time."""
    out = tmp_path / "run"
    _copy(run_zoo, out, "pytorch", 1)
    shutil.rmtree(checkpoint.folder(out))
    said = summary(out)
    said["status"] = "running"  # what a SIGKILL'd run leaves
    (out / "summary.json").write_text(json.dumps(said))
    proc = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 2, "train.resume=auto")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "the earlier run (status running) ended before it; starting anew" in proc.stdout
    assert (summary(out)["status"], summary(out)["epochs"]) == ("aborted", 2)


def test_keys_that_do_not_change_the_training_may_change_on_resume(
        run_zoo, sciperf_cmd, tiny_mini_data, tmp_path: Path) -> None:
    """framework.threads, data.workers, train.term_grace_s … were refused as "another
    configuration"; a real difference is now named, not two hashes."""
    out = tmp_path / "run"
    _copy(run_zoo, out, "pytorch", 1)
    other = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 2, "train.resume=auto",
                   "opt.base_lr=0.5", "seed=3")
    assert other.returncode == 2 and "taken with another configuration (it had " \
        "opt.base_lr=" in other.stderr and "(now 0.5), seed=0 (now 3))" in other.stderr, \
        other.stderr
    proc = _train(sciperf_cmd, tiny_mini_data, out, "pytorch", 2, "train.resume=auto",
                  "framework.threads=1", "data.workers=1", "train.term_grace_s=60",
                  "train.log_every=5", "distributed.timeout_s=90")
    assert proc.returncode == 1 and "resuming from" in proc.stdout, proc.stderr[-2000:]


def test_overwrite_removes_the_old_runs_checkpoints(run_zoo, sciperf_cmd, tiny_mini_data,
                                                   tmp_path: Path) -> None:
    """A later resume must never continue a run that train.overwrite replaced."""
    out = tmp_path / "run"
    _copy(run_zoo, out, "pytorch", 2)
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
    assert summary(out)["status"] == "checkpointed"
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


def test_sigusr1_without_checkpoints_is_said_and_ignored(sciperf_cmd, tiny_mini_data,
                                                         tmp_path: Path,
                                                         stop_inside_epoch) -> None:
    """A run that writes no checkpoints cannot stop to be resumed: SIGUSR1's default
    action ended it (exit 138) with no run_stop and summary.json saying `running`."""
    out = tmp_path / "run"
    cmd = [*sciperf_cmd, *BASE, "framework=pytorch", f"data.dir={tiny_mini_data}",
           f"output_dir={out}", "train.max_epochs=3", "train.global_batch_size=8",
           "train.checkpoint_every=0"]
    ran = _stop_in_epoch_2(cmd, stop_inside_epoch, signal.SIGUSR1)
    assert ran.returncode == 1, ran.stderr[-2000:]  # all epochs, target out of reach
    assert "SIGUSR1 ignored: this run writes no checkpoints" in ran.stderr
    assert (summary(out)["status"], summary(out)["epochs"]) == ("aborted", 3)


def test_sigterm_waits_for_a_checkpoint_only_where_the_launcher_leaves_time(monkeypatch):
    """train.term_grace_s applies to checkpointing runs, and not under mpirun, which
    follows its SIGTERM with SIGKILL one second later: there the records come first."""
    from types import SimpleNamespace

    from sciperf.run import signals

    cfg = SimpleNamespace(train=SimpleNamespace(checkpoint_every=1, term_grace_s=20.0))
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    assert signals.term_grace(cfg) == 20.0
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert signals.term_grace(cfg) == 0.0
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    cfg.train.checkpoint_every = 0
    assert signals.term_grace(cfg) == 0.0


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
    assert summary(out)["status"] == "error"
    assert [r["metadata"]["status"] for r in _records(out) if r["key"] == "run_stop"] == \
        ["aborted"]
    assert [p.name for p in checkpoint.folder(out).iterdir()] == ["epoch_0001"]
