"""A run's output directory, through the real command line: an earlier run is never
replaced silently, stale records of a larger run never stay beside a new one, unusable
paths are one line, and a diverging run stops with valid records (issue 13).

The CLI runs in process (`testkit.cli`) wherever the process's own exit is not what is
tested: a refusal costs milliseconds there and seconds as a new interpreter. The earlier
run a second one must not touch is the session's run (tests/runzoo.py); only the run killed
by SIGKILL keeps processes of its own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sciperf import output
from sciperf.distributed import RankInfo
from sciperf.run.summary import records_line
from testkit import cli

TRAIN = ["train", "experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=1", "train.global_batch_size=32"]
# the session's finished 2-epoch run without checkpoints (test_full_disk's and
# test_package's words: one training for all three)
SMALL = ("experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=2", "framework.threads=1", "seed=0")


def _train(data: Path, out: Path | str, *extra: str) -> subprocess.CompletedProcess:
    """`sciperf train` in this process: what these tests assert is the run's exit status,
    its one line and its records, not how a process of its own ends."""
    return cli(*TRAIN, f"data.dir={data}", f"output_dir={out}", *extra)


def _one_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    # TensorFlow's C++ start-up lines go to stderr before sciperf runs: sciperf's own is one
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def _strict_json(path: Path) -> dict:
    """json.loads that refuses NaN/Infinity (what jq and browsers do)."""
    def refuse(token: str) -> None:
        raise ValueError(f"{path}: {token} is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_second_run_is_refused_and_the_first_kept(run_zoo, tiny_mini_data,
                                                     tmp_path: Path) -> None:
    """The first run is a copy of the session's: which run holds the folder (its size, its
    words) does not matter, only that the refused second one leaves every byte of it."""
    out = tmp_path / "run"
    first = run_zoo.copy(out, "train", *SMALL)
    assert first.returncode in (0, 1), first.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"result_0.txt", "summary.json"} <= set(before)
    # even a run that would fail at once on a user error must not touch the first (a
    # missing weights file is found by the backend's setup, after the claim)
    again = _train(tiny_mini_data, out, f"train.init_weights={tmp_path}/no.npz")
    _one_line(again, f"output_dir={out}", "already holds a run", "result_0.txt",
              "train.overwrite=true")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_overwrite_replaces_the_run_and_its_stale_instances(tiny_mini_data,
                                                           tmp_path: Path) -> None:
    """An earlier 2-instance throughput run left result_1.txt / summary_1.json: check and
    score would count a second instance that this run never had. The job's own files
    (rendered script, Slurm output) stay."""
    out = tmp_path / "run"
    out.mkdir()
    for name in ("result_0.txt", "result_1.txt", "summary_0.json", "summary_1.json",
                 "weights_instance1_rank0.npz", "slurm-7.out", "job.sbatch"):
        (out / name).write_text("old")
    proc = _train(tiny_mini_data, out, "train.overwrite=true")
    assert proc.returncode in (0, 1), proc.stderr
    assert sorted(p.name for p in out.iterdir()) == \
        ["job.sbatch", "result_0.txt", "slurm-7.out", "summary.json"]
    assert (out / "slurm-7.out").read_text() == "old"
    assert _strict_json(out / "summary.json")["epochs"] == 1


@pytest.mark.parametrize(("case", "words"), [
    ("file", ("is a file, not a directory",)),
    ("below-a-file", ("cannot be created", "is a file, not a directory")),
    ("proc", ("cannot be written",)),
])
def test_unusable_output_dirs_are_one_line(tiny_mini_data, tmp_path: Path,
                                           case: str, words: tuple[str, ...]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    out = {"file": blocker, "below-a-file": blocker / "run",
           "proc": Path("/proc/sciperf-run")}[case]
    _one_line(_train(tiny_mini_data, out), f"output_dir={out}", *words)
    assert blocker.read_text() == "keep"


@pytest.mark.parametrize(("extra", "words"), [
    (("data.train_samples=128",), ("holds 64 npy samples but 128 were requested",)),
    (("train.global_batch_size=24",), ("data.train_samples=64 must be a positive multiple",)),
])
def test_a_dataset_the_run_cannot_use_is_refused_before_any_record(
        tiny_mini_data, tmp_path: Path, extra: tuple[str, ...],
        words: tuple[str, ...]) -> None:
    """A short dataset or a batch its shards cannot hold is a refusal, like a bad override:
    one line and no records — so the corrected run may use the same output_dir without
    train.overwrite=true (docs/architecture.md, rule 10)."""
    out = tmp_path / "run"
    _one_line(_train(tiny_mini_data, out, *extra), *words)
    assert not out.exists() or output.run_records(out) == []
    proc = _train(tiny_mini_data, out)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert _strict_json(out / "summary.json")["epochs"] == 1


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_a_diverging_run_stops_at_the_first_nonfinite_loss(tiny_mini_data, tmp_path: Path,
                                                           framework: str) -> None:
    """Not `loss nan` for every epoch: one line naming the epoch, run_stop aborted, and a
    summary.json that strict JSON readers accept."""
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    out = tmp_path / "run"
    proc = _train(tiny_mini_data, out, f"framework={framework}",
                  "train.max_epochs=5", "opt.base_lr=1e25")
    _one_line(proc, "training loss is nan in epoch 1", "stopped")
    summary = _strict_json(out / "summary.json")
    assert summary["status"] == "error" and summary["epochs"] == 0
    log = (out / "result_0.txt").read_text()
    assert '"status": "aborted"' in log.splitlines()[-1]
    assert "NaN" not in log and "Infinity" not in log


def test_json_safe_turns_nonfinite_numbers_into_null() -> None:
    from sciperf.run import json_safe

    value = {"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "d": "nan"}
    assert json_safe(value) == {"a": None, "b": [1.0, None, {"c": None}], "d": "nan"}


def test_each_instance_answers_for_its_own_records(tmp_path: Path) -> None:
    """Instances of a throughput run share output_dir and start together: each rank 0
    claims its own numbered records; instance 0 also those no current instance owns."""
    names = ["result_0.txt", "result_1.txt", "result_2.txt", "summary.json", "summary_1.json",
             "weights_rank0.npz", "weights_instance1_rank3.npz"]
    got = {n: output.owner(Path(n), 2) for n in names}
    assert got == {"result_0.txt": 0, "result_1.txt": 1, "result_2.txt": 0,
                   "summary.json": 0, "summary_1.json": 1, "weights_rank0.npz": 0,
                   "weights_instance1_rank3.npz": 1}
    assert {output.owner(Path(n), 1) for n in names} == {0}
    for name in names:
        (tmp_path / name).write_text("old")
    output.claim(tmp_path, overwrite=True, writer=True, instance=1, instances=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for n in names if got[n] == 0)
    output.claim(tmp_path, overwrite=False, writer=False, instance=0, instances=2)  # no look


def test_only_the_writing_rank_claims_a_record_on_abort(tmp_path: Path) -> None:
    """Killed or torn down, a rank says what IT left: rank 1 never writes MLLOG."""
    assert records_line(tmp_path, RankInfo(rank=1, world=2), 5.0).startswith(
        "rank 1 writes no MLLOG record")
    assert records_line(tmp_path, RankInfo(), 5.0) == \
        f"run_stop aborted and summary.json written to {tmp_path}"
    assert records_line(tmp_path, RankInfo(), None).endswith("(stopped before run_start)")


def test_a_run_killed_without_warning_leaves_a_running_record(sciperf_cmd, tiny_mini_data,
                                                              tmp_path: Path) -> None:
    """SIGKILL (the OOM killer's) cannot be caught: from run_start on, summary.json says
    `running` until the end replaces it, so a dead run is told from one never started;
    `sciperf launch` names the likely cause."""
    import signal
    import time

    out = tmp_path / "run"
    cmd = [*sciperf_cmd, "launch", "launcher=local", "launcher.nprocs=1", *TRAIN[1:],
           "train.max_epochs=500", "train.target=0.0001", f"data.dir={tiny_mini_data}",
           f"output_dir={out}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = out / "result_0.txt"
    deadline = time.time() + 300
    while time.time() < deadline and '"epoch_num": 2' not in (log.read_text()
                                                               if log.exists() else ""):
        time.sleep(0.1)
    ranks = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
             and _child_of(int(p.name), proc.pid)]
    assert ranks, "the rank was not found"
    os.kill(ranks[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert "rank 0 exited with status 137 (SIGKILL: out of memory?" in stderr, stderr
    assert _strict_json(out / "summary.json")["status"] == "running"
    assert '"run_stop"' not in log.read_text()


def _child_of(pid: int, parent: int) -> bool:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().split()[3]) == parent
    except (OSError, ValueError, IndexError):
        return False
