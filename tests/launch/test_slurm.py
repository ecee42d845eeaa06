"""A real scheduler: a single-node Slurm on this machine runs rendered sbatch scripts.

The fixture brings Slurm up with `launchers/slurm/local-slurm.sh` (installing slurm-wlm and
munge with apt-get when missing) and stops its daemons afterwards. The tests skip only when
that script says Slurm cannot run here (exit status 3: not root, no apt-get).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sciperf.config import compose

pytest.importorskip("sciperf_launchers")
from sciperf_launchers import Program, job_env, launch, plan, write_script  # noqa: E402

LOCAL_SLURM = Path(__file__).resolve().parents[2] / "launchers" / "slurm" / "local-slurm.sh"
CANNOT_RUN = 3  # local-slurm.sh: Slurm cannot run on this machine
PRINT_RANK = ("import dataclasses, json; from sciperf.distributed import discover; "
              "print('RANKINFO', json.dumps(dataclasses.asdict(discover())), flush=True)")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> dict[str, str]:
    """The environment (SLURM_CONF…) of a running single-node Slurm."""
    state = tmp_path_factory.mktemp("slurm")
    proc = subprocess.run([str(LOCAL_SLURM), "start", str(state)], capture_output=True,
                          text=True, timeout=900, check=False)
    if proc.returncode == CANNOT_RUN:
        pytest.skip(f"Slurm cannot start here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, f"local-slurm.sh start failed:\n{proc.stderr}"
    env = job_env({**os.environ, "SLURM_CONF": str(state / "slurm.conf")})
    try:
        yield env
    finally:
        subprocess.run([str(LOCAL_SLURM), "stop", str(state)], capture_output=True, timeout=60,
                       check=False)


def _sbatch_wait(script: Path, env: dict[str, str], timeout: float) -> tuple[str, int]:
    """Submit, wait for the end; (job id, sbatch's exit status = the job's)."""
    proc = subprocess.run(["sbatch", "--parsable", "--wait", str(script)], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False)
    job_id = proc.stdout.strip().split(";")[0]
    assert job_id.isdigit(), f"sbatch did not submit: {proc.stdout}{proc.stderr}"
    return job_id, proc.returncode


def _job_state(job_id: str, env: dict[str, str]) -> tuple[str, str]:
    """(JobState, ExitCode) from scontrol (no accounting database here)."""
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                         env=env, check=True).stdout
    state = re.search(r"JobState=(\S+)", out)
    code = re.search(r"ExitCode=(\S+)", out)
    assert state and code, out
    return state.group(1), code.group(1)


def test_srun_job_two_ranks_discover_one_world(slurm, tmp_path: Path) -> None:
    """…into an output_dir whose name sbatch's directive parser and its log-name patterns
    would cut or expand unless quoted: a blank ("Invalid directive found in batch script"),
    `#` (a comment), a quote, `$`, and `%u` (Slurm's user-name pattern: the log went to a
    folder that does not exist and the job failed without one)."""
    out = tmp_path / 'o u%u $x #h "q"'
    overrides = ["system=local-slurm", "launcher=srun", "launcher.tasks_per_node=2",
                 f"output_dir='{out}'"]
    job = plan(compose(overrides), program=Program((sys.executable, "-c", PRINT_RANK),
                                                    path_args=False))
    assert job.kind == "sbatch" and " --mpi=pmix " in job.text
    out.mkdir()
    script = write_script(out / "launch.sbatch", job.text)
    job_id, rc = _sbatch_wait(script, slurm, timeout=300)
    log = (out / f"slurm-{job_id}.out").read_text()
    print(log)
    assert rc == 0 and _job_state(job_id, slurm) == ("COMPLETED", "0:0"), log
    infos = sorted((json.loads(line.split(" ", 1)[1]) for line in log.splitlines()
                    if line.startswith("RANKINFO ")), key=lambda i: i["rank"])
    assert [i["rank"] for i in infos] == [0, 1]
    assert {(i["world"], i["local_size"], i["source"]) for i in infos} == {(2, 2, "slurm")}
    assert sorted(i["local_rank"] for i in infos) == [0, 1]
    assert len({(i["master_addr"], i["master_port"]) for i in infos}) == 1


def test_launch_submits_and_prints_the_job_id(slurm, tmp_path: Path, monkeypatch,
                                               capsys) -> None:
    """`launch` itself: writes OUT/launch.sbatch, submits it, prints the job id."""
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    overrides = ["system=local-slurm", "launcher=srun", "launcher.tasks_per_node=2",
                 f"output_dir={tmp_path}"]
    program = Program((sys.executable, "-c", PRINT_RANK), path_args=False)
    assert launch(compose(overrides), program=program) == 0
    job_id = capsys.readouterr().out.strip()
    assert job_id.isdigit() and (tmp_path / "launch.sbatch").is_file()
    deadline = time.monotonic() + 120
    while (state := _job_state(job_id, slurm))[0] in ("PENDING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {job_id} still {state[0]}"
        time.sleep(0.5)
    assert state == ("COMPLETED", "0:0")
    log = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert log.count("RANKINFO ") == 2, log


@pytest.mark.slow
def test_srun_mini_cosmoflow_training(slurm, tmp_path: Path, tiny_mini_data: Path) -> None:
    """2 ranks of mini CosmoFlow (PyTorch) through sbatch → srun: MLLOG and exit state.

    Needs distributed training in the PyTorch backend (DDP over gloo). One epoch of the
    session's 64 + 32 mini samples, one thread a rank: the launch is under test, not the
    convergence (the whole mini set took 5 min on a 2-core AVX2 EPYC).
    """
    pytest.importorskip("torch")
    data, out = tiny_mini_data, tmp_path / "out"
    overrides = ["workload=cosmoflow", "framework=pytorch", "experiment=mini",
                 "system=local-slurm", "launcher=srun", "launcher.tasks_per_node=2",
                 "data.train_samples=64", "data.eval_samples=32", "framework.threads=1",
                 f"data.dir={data}", f"output_dir={out}", "train.max_epochs=1",
                 f"data.stage_dir={tmp_path / 'stage'}"]
    job = plan(compose(overrides), overrides=overrides)
    script = write_script(out / "launch.sbatch", job.text)
    job_id, rc = _sbatch_wait(script, slurm, timeout=1800)
    log = (out / f"slurm-{job_id}.out").read_text()
    print(log[-4000:])
    result = out / "result_0.txt"
    assert result.is_file(), log[-4000:]
    stops = [json.loads(line.split(" ", 1)[1]) for line in result.read_text().splitlines()
             if line.startswith(":::MLLOG ") and '"run_stop"' in line]
    assert len(stops) == 1, "result_0.txt must hold exactly one run_stop"
    text = result.read_text()
    assert text.index('"staging_stop"') < text.index('"run_start"')
    # SLURM_LOCALID 0 and 1 each staged their half: together every sample file, once
    staged = sorted(p.name for p in (tmp_path / "stage").rglob("*.npy"))
    assert staged == sorted(p.name for p in data.glob("*/*.npy")), log[-4000:]
    status = stops[0]["metadata"]["status"]
    state, code = _job_state(job_id, slurm)
    print(f"run_stop status={status}; job {job_id}: {state} {code}")
    assert code == f"{rc}:0", (code, rc)  # sbatch --wait reports the job's exit code
    if status == "success":
        assert (state, rc) == ("COMPLETED", 0), log[-4000:]
    else:  # one epoch rarely reaches the target: `sciperf train` exits 1 (then srun's
        # --kill-on-bad-exit may end the other rank first: 143)
        assert state == "FAILED" and rc in (1, 143), log[-4000:]


def _wait_for(predicate, timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}")


def _submit_two_rank_mini(slurm: dict[str, str], tmp_path: Path, data: Path,
                          *extra: str) -> tuple[str, Path]:
    """Submit 2 srun ranks of mini CosmoFlow (GBS 8, target out of reach) on the session's
    64+32 mini universes (`data`) through a rendered sbatch script; (job id, output_dir)."""
    out = tmp_path / "out"
    overrides = ["workload=cosmoflow", "framework=pytorch", "experiment=mini",
                 "system=local-slurm", "launcher=srun", "launcher.tasks_per_node=2",
                 f"data.dir={data}", f"output_dir={out}", "data.train_samples=64",
                 "data.eval_samples=32", "train.global_batch_size=8", "train.target=0.0001",
                 "framework.threads=1", *extra]
    job = plan(compose(overrides), overrides=overrides)
    script = write_script(out / "launch.sbatch", job.text)
    job_id = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                            text=True, env=slurm, timeout=60, check=True).stdout.strip()
    return job_id.split(";")[0], out


@pytest.mark.slow
def test_requeue_checkpoints_on_usr1_and_resumes(slurm, tmp_path: Path, tiny_mini_data,
                                                 stop_inside_epoch) -> None:
    """launcher.requeue=true on a real Slurm: USR1 to the batch shell (what --signal=B:USR1
    sends before the time limit; scancel --signal sends it now) reaches both srun ranks
    inside epoch 2, they stop at the same step, rank 0 checkpoints, the job requeues itself
    and the second run resumes and finishes: one log, every epoch once, the resume
    recorded."""
    pytest.importorskip("torch")
    job_id, out = _submit_two_rank_mini(slurm, tmp_path, tiny_mini_data, "launcher.requeue=true",
                                        "train.max_epochs=3")
    log = out / "result_0.txt"
    # The ranks are found while they start up (seconds of imports), so the watch for epoch 2
    # begins before epoch 1: waiting for epoch 1 in the log first (0.5 s polls) could let
    # epochs 1 and 2 (~0.3 s each) pass unseen — the CI failure of 2026-11-25.
    _wait_for(lambda: set(_pids_with(b"SLURM_PROCID", tasks_only=True)) == {0, 1}, 600,
              "both ranks of the first run", every=0.01)
    ranks = _pids_with(b"SLURM_PROCID", tasks_only=True)
    assert '"epoch_stop"' not in (log.read_text() if log.exists() else ""), \
        "the watch for epoch 2 began after epoch 1 ended"
    scancel = ["scancel", "--signal=USR1", "--batch", job_id]
    stop_inside_epoch(log, list(ranks.values()), 2,
                      lambda: subprocess.run(scancel, env=slurm, check=True), signal.SIGUSR1)
    ckpt = out / "checkpoints"
    _wait_for(lambda: any(ckpt.glob("epoch_0001_step_*")), 120, "the mid-epoch checkpoint")
    _wait_for(lambda: _job_state(job_id, slurm)[0] in ("COMPLETED", "FAILED"), 900,
              "the requeued run to finish")
    output = (out / f"slurm-{job_id}.out").read_text()
    assert "resuming from" in output and "steps into epoch 2" in output, output[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 3 and [r["from_epoch"] for r in summary["resumed"]] == [1]
    assert summary["division"] == "open" and summary["world_size"] == 2
    starts = [json.loads(ln.split(" ", 1)[1])["metadata"]["epoch_num"]
              for ln in log.read_text().splitlines() if '"epoch_start"' in ln]
    assert starts == [1, 2, 3]


def _pids_with(variable: bytes, tasks_only: bool = False) -> dict[int, int]:
    """value of `variable` → pid, over this machine's processes running sciperf; with
    `tasks_only`, srun itself (which carries the batch step's SLURM_PROCID) is left out."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if b"sciperf" not in cmdline:
                continue
            if tasks_only and Path(cmdline.split(b"\0")[0].decode()).name == "srun":
                continue
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(variable + b"="):
                found[int(item.split(b"=")[1])] = int(proc.name)
    return found


@pytest.mark.slow
def test_a_killed_srun_rank_ends_the_job_with_run_stop_aborted(slurm, tmp_path: Path,
                                                               tiny_mini_data) -> None:
    """kill -9 of rank 1 of a 2-rank srun step: srun's --kill-on-bad-exit ends rank 0,
    whose signal watcher leaves run_stop aborted and summary.json; all within 60 s."""
    pytest.importorskip("torch")
    job_id, out = _submit_two_rank_mini(slurm, tmp_path, tiny_mini_data, "train.max_epochs=50")
    log = out / "result_0.txt"
    _wait_for(lambda: '"epoch_num": 2' in (log.read_text() if log.exists() else ""), 600,
              "epoch 2")
    ranks = _pids_with(b"SLURM_PROCID")
    assert set(ranks) == {0, 1}, ranks
    os.kill(ranks[1], 9)
    killed = time.time()
    _wait_for(lambda: _job_state(job_id, slurm)[0] not in ("RUNNING", "COMPLETING"), 60,
              "the job to end after its rank 1 died")
    print(f"job ended {time.time() - killed:.1f} s after kill -9 of rank 1")
    stops = [json.loads(ln.split(" ", 1)[1]) for ln in log.read_text().splitlines()
             if '"run_stop"' in ln]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"
    assert json.loads((out / "summary.json").read_text())["status"] == "error"


# rank 0 writes the summary a checkpointed run writes and exits 75, as `sciperf train` does
# when stopped with a checkpoint; its peers exit 0
CHECKPOINTED_RANK = (
    "import json, os, pathlib, sys\n"
    "if os.environ['RANK'] == '0':\n"
    "    pathlib.Path(sys.argv[1], 'summary.json').write_text(json.dumps("
    "{'status': 'checkpointed'}))\n"
    "    sys.exit(75)\n")


@pytest.mark.parametrize("fresh", [True, False], ids=["this-jobs-summary", "an-earlier-one"])
def test_a_torchrun_job_exits_75_when_rank_0_checkpointed(slurm, tmp_path: Path,
                                                          fresh: bool) -> None:
    """torchrun exits 1 for any failed worker; the batch script gives the job the ranks'
    verdict — 75 when rank 0 checkpointed during this job — so Slurm and a wrapper tell
    "resume it" from "failed". A summary.json left by an earlier run says nothing about
    this one: the job then keeps torchrun's 1."""
    out = tmp_path / "out"
    out.mkdir()
    program = CHECKPOINTED_RANK if fresh else "import sys; sys.exit(3)"
    if not fresh:
        (out / "summary.json").write_text('{"status": "checkpointed"}')
        old = time.time() - 3600
        os.utime(out / "summary.json", (old, old))
    overrides = ["system=local-slurm", "launcher=torchrun", "launcher.tasks_per_node=2",
                 f"output_dir={out}"]
    job = plan(compose(overrides), program=Program((sys.executable, "-c", program, str(out)),
                                                    path_args=False))
    script = write_script(out / "launch.sbatch", job.text)
    job_id, rc = _sbatch_wait(script, slurm, timeout=300)
    log = (out / f"slurm-{job_id}.out").read_text()
    assert (rc, _job_state(job_id, slurm)) == ((75, ("FAILED", "75:0")) if fresh else
                                               (1, ("FAILED", "1:0"))), log[-3000:]
