"""`sciperf launch`'s own faults (issue 37), with real launchers and real ranks: the line it
prints and the status it exits with when ranks fail or are stopped, and the rendezvous port
it gives them when several launches start at once.

- torchrun reported a failed rank with its ~30-line ChildFailedError traceback (a signal
  to itself with a SignalException one) and exited 1 whatever the rank's status: now one
  line names the rank and the launch exits with that rank's status, while the ranks' own
  lines (a traceback included) still pass.
- a checkpointing run sent SIGTERM through `sciperf launch` stopped with its checkpoint
  (rank 0 exit 75) but the launch exited 143: now 75, so requeue logic can tell "resume
  it" from "killed".
- two launches started together both found the default port free and both gave it to
  their ranks: now a port is claimed (`sciperf_launchers.ports`) until the job ends.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sciperf_launchers")

from sciperf_launchers import free_port, job_env, reserved_port  # noqa: E402
from sciperf_launchers.ports import claim  # noqa: E402
from sciperf_launchers.report import CHECKPOINTED_LINE  # noqa: E402
from testkit import BIN, events, summary  # noqa: E402

TINY = ["experiment=mini", "data.train_samples=64", "data.eval_samples=32",
        "train.global_batch_size=8", "framework.threads=1"]
LOCAL = ["launcher=local", "launcher.nprocs=2"]
TORCHRUN = ["launcher=torchrun", "launcher.tasks_per_node=2"]
MPIRUN = ["launcher=mpirun", "launcher.tasks_per_node=2", "launcher.extra_args=[--oversubscribe]"]
LAUNCHERS = {"local": LOCAL, "torchrun": TORCHRUN}
# torchrun's report of a failed rank, none of which may reach the user
TORCHRUN_NOISE = ("Traceback", "ChildFailedError", "SignalException", "closing signal",
                  "exitcode", "death signal")


def _env() -> dict[str, str]:
    env = {k: v for k, v in job_env().items() if k not in ("SCIPERF_DEBUG", "MASTER_PORT")}
    return env


def _launch_program(launcher: list[str], out: Path, program: str, *args: str,
                    timeout: float = 120) -> subprocess.CompletedProcess:
    """`launch` (the function `sciperf launch` calls) of a Python program as every rank,
    in a process of its own (it handles signals and exits with the launch's status)."""
    code = ("import sys\n"
            "from sciperf.config import compose\n"
            "from sciperf_launchers import Program, launch\n"
            f"cfg = compose({[*launcher, f'output_dir={out}']!r})\n"
            f"argv = {(sys.executable, '-c', program, *args)!r}\n"
            "sys.exit(launch(cfg, program=Program(argv, path_args=False)))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=_env(), check=False)


def _start_launch(launcher: list[str], data: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "sciperf"), "launch", *launcher, *TINY, *extra,
                             f"data.dir={data}", f"output_dir={out}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the launch stops its ranks
        try:
            proc.communicate(timeout=60)
        finally:
            proc.kill()
        pytest.fail(f"the launch still ran after {timeout} s")


def _launch_lines(stderr: str) -> list[str]:
    """`sciperf launch`'s lines about how ranks ended."""
    return [ln for ln in stderr.splitlines()
            if ln.startswith("sciperf launch: rank ")]


# --- torchrun: one line, the rank's status -------------------------------------------------

FAILING_RANK = """
import os, signal, sys, time, traceback
if os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK")) == "1":
    print("rank 1: about to fail", file=sys.stderr, flush=True)
    if sys.argv[1] == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        raise ValueError("rank 1 breaks")
    except ValueError:
        traceback.print_exc()
    sys.exit(3)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["raises", "killed"])
@pytest.mark.parametrize("name", ["torchrun", "mpirun"])
def test_a_launcher_names_the_failed_rank_in_one_line_and_exits_with_its_status(tmp_path,
                                                                                 name, how):
    """Rank 1 fails (its own traceback, exit 3; or SIGKILL) while rank 0 waits: torchrun's
    ChildFailedError traceback used to follow (and the launch exited 1), mpirun's boxes of
    dashes ("Primary job terminated normally…", "mpirun detected…") likewise."""
    proc = _launch_program(TORCHRUN if name == "torchrun" else MPIRUN, tmp_path,
                           FAILING_RANK, how)
    assert "rank 1: about to fail" in proc.stderr  # the ranks' own lines pass, live
    for noise in ("ChildFailedError", "closing signal", "exitcode", "FAILED", "-" * 20,
                  "Primary job", "mpirun detected", "mpirun noticed", "Exit code"):
        assert noise not in proc.stderr, proc.stderr[-3000:]
    if how == "raises":
        assert proc.returncode == 3, proc.stderr[-3000:]
        # the rank's own traceback is the user's to read; torchrun's is gone
        assert "ValueError: rank 1 breaks" in proc.stderr
        assert proc.stderr.count("Traceback") == 1, proc.stderr[-3000:]
        assert _launch_lines(proc.stderr) == [
            f"sciperf launch: rank 1 exited with status 3; {name} stopped the other ranks"]
    else:
        assert proc.returncode == 137, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        lines = _launch_lines(proc.stderr)
        assert len(lines) == 1 and lines[0].startswith(
            "sciperf launch: rank 1 exited with status 137 (SIGKILL: out of memory?"), lines


def test_a_missed_target_under_torchrun_is_one_line(tiny_mini_data, tmp_path):
    """One epoch short of an unreachable target: both ranks exit 1, the job ends as it
    should — and the user used to read torchrun's 30-line traceback about it."""
    out = tmp_path / "missed"
    proc = _start_launch(TORCHRUN, tiny_mini_data, out, "train.max_epochs=1",
                         "train.target=0.0001")
    _, stderr = _finish(proc, 180)
    assert proc.returncode == 1, stderr[-3000:]
    for noise in TORCHRUN_NOISE:
        assert noise not in stderr, stderr[-3000:]
    lines = _launch_lines(stderr)
    assert len(lines) == 1 and re.fullmatch(
        r"sciperf launch: rank [01] exited with status 1; torchrun stopped the other ranks",
        lines[0]), stderr[-3000:]
    stops = events(out / "result_0.txt", "run_stop")
    assert [s["metadata"]["status"] for s in stops] == ["aborted"]


# --- a signal to the launch: the ranks' verdict ------------------------------------------

@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigterm_to_the_launch_of_a_checkpointing_run_exits_75(tiny_mini_data, tmp_path,
                                                                 launcher):
    """SIGTERM to `sciperf launch` mid-training: the ranks checkpoint (rank 0 exits 75,
    rank 1 0), and the launch says so and exits 75 — it exited 143 (and under torchrun
    printed a SignalException traceback)."""
    out = tmp_path / "term"
    proc = _start_launch(LAUNCHERS[launcher], tiny_mini_data, out, "train.max_epochs=50",
                         "train.target=0.0001", "train.checkpoint_every=1")
    log = out / "result_0.txt"
    deadline = time.monotonic() + 180
    while '"epoch_num": 2' not in (log.read_text() if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            _finish(proc, 1)
            pytest.fail(f"the ranks did not train: {proc.stderr.read()[-3000:]}")
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, stderr = _finish(proc, 90)
    assert proc.returncode == 75, stderr[-3000:]
    assert summary(out)["status"] == "checkpointed"
    assert CHECKPOINTED_LINE in stderr.splitlines(), stderr[-3000:]
    for noise in TORCHRUN_NOISE:
        assert noise not in stderr, stderr[-3000:]
    assert sorted((out / "checkpoints").iterdir())  # what a requeued job resumes


# --- rendezvous ports --------------------------------------------------------------------

CLAIMANT = """
import pathlib, sys, time
from sciperf_launchers import reserved_port
with reserved_port(int(sys.argv[1])) as port:
    print(port, flush=True)
    release = pathlib.Path(sys.argv[2])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""


def test_launches_claiming_one_port_at_once_each_get_their_own(tmp_path):
    """Four claimants of one port at the same moment: one gets it, the others other ports
    — each held until its job ends, invisible to a free-port check in between."""
    port, release = free_port(), tmp_path / "release"
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMANT, str(port), str(release)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        got = [int(proc.stdout.readline()) for proc in procs]  # type: ignore[union-attr]
        assert sorted(got) == sorted(set(got)) and port in got, got
        for held in got:  # no fifth launch takes a port while its job runs
            assert claim(held) is None, held
    finally:
        release.touch()
        for proc in procs:
            proc.wait(timeout=30)
    assert claim(port) is not None  # and the ports are free again after


def test_the_ranks_store_binds_and_serves_a_claimed_port():
    """The claim (a bound, never listening socket) leaves the port to the job's own
    rendezvous store: torch's TCPStore binds, listens and serves there."""
    from datetime import timedelta
    with reserved_port() as port:
        server = torch.distributed.TCPStore("127.0.0.1", port, 2, True,
                                            timedelta(seconds=10), wait_for_workers=False)
        client = torch.distributed.TCPStore("127.0.0.1", port, 2, False,
                                            timedelta(seconds=10))
        client.set("key", "value")
        assert server.get("key") == b"value"
        assert claim(port) is None  # still this job's


RANK_PORT = """
import json, os, pathlib, sys, time
out = pathlib.Path(sys.argv[1])
(out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(
    {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "MASTER_PORT")}))
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_launches_at_the_same_moment_give_their_ranks_different_ports(tmp_path, launcher):
    """Two jobs started together (local: both asking for one free launcher.master_port;
    torchrun: both on the default): each job's ranks see one port, the jobs two."""
    extra = [f"launcher.master_port={free_port()}"] if launcher == "local" else []
    outs = [tmp_path / f"job{i}" for i in range(2)]
    for out in outs:
        out.mkdir()
    code = ("import sys\n"
            "from sciperf.config import compose\n"
            "from sciperf_launchers import Program, launch\n"
            "cfg = compose(sys.argv[2:] + [f'output_dir={sys.argv[1]}'])\n"
            f"argv = ({sys.executable!r}, '-c', {RANK_PORT!r}, sys.argv[1], '4')\n"
            "sys.exit(launch(cfg, program=Program(argv, path_args=False)))\n")
    jobs = [subprocess.Popen([sys.executable, "-c", code, str(out), *LAUNCHERS[launcher],
                              *extra], stderr=subprocess.PIPE, text=True, env=_env())
            for out in outs]
    errors = [_finish(job, 120)[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], errors
    ports = []
    for out in outs:
        ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert {r["WORLD_SIZE"] for r in ranks} == {"2"}, ranks
        assert len({r["MASTER_PORT"] for r in ranks}) == 1, ranks
        ports.append(ranks[0]["MASTER_PORT"])
    assert ports[0] != ports[1], ports


def test_two_local_trainings_started_together_both_train(tiny_mini_data, tmp_path):
    """Two 2-rank trainings launched at once, both asking for one port: the second's rank
    0 found it taken ("MASTER_PORT=… is in use"), or its rank 1 joined the first job."""
    port = free_port()
    outs = [tmp_path / f"job{i}" for i in range(2)]
    jobs = [_start_launch(LOCAL, tiny_mini_data, out, f"launcher.master_port={port}",
                          "train.max_epochs=1", "train.target=10") for out in outs]
    errors = [_finish(job, 240)[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], [e[-2000:] for e in errors]
    for out in outs:
        result = summary(out)
        assert (result["status"], result["world_size"]) == ("success", 2), result
    assert all("in use" not in e for e in errors), errors
