"""Ranks that outlive, hang under, or never meet their job: real processes, 2 ranks, gloo.

`kill -9` of `sciperf launch` must not leave its ranks training as orphans; a stopped
(hung) rank 0 must still close its records when the job is torn down; a rank that never
reaches the rendezvous is one line, not torch's traceback; a peer's death is not reported
as a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from sciperf.distributed import RankInfo  # noqa: E402
from sciperf_launchers import free_port  # noqa: E402

BIN = Path(sys.executable).parent
SMALL = ["experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=500", "train.global_batch_size=8", "train.target=0.0001",
         "framework.threads=1", "distributed.timeout_s=10"]


def _ranks_of(launcher: int) -> dict[int, int]:
    """Rank → pid of the processes below `launcher` whose environment sets RANK."""
    parents: dict[int, int] = {}
    ranks: list[tuple[int, int]] = []  # every process's: another test's launch has ranks too
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        for item in env:
            if item.startswith(b"RANK="):
                ranks.append((int(item[5:]), int(proc.name)))

    def below(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == launcher:
                return True
        return False
    return {rank: pid for rank, pid in ranks if below(pid)}


def _alive(pid: int) -> bool:
    try:  # a zombie (ended, not yet reaped by whoever adopted it) counts as ended
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


LOCAL = ("launcher=local", "launcher.nprocs=2")


def _start_launch(data: Path, out: Path, log: Path, launcher: tuple[str, ...] = LOCAL
                  ) -> tuple[subprocess.Popen, dict[int, int]]:
    """`sciperf launch` of 2 ranks (launcher=local by default), returned once both train."""
    with log.open("w") as err:
        launch = subprocess.Popen([str(BIN / "sciperf"), "launch", *launcher, *SMALL,
                                   f"data.dir={data}", f"output_dir={out}"],
                                  stdout=subprocess.DEVNULL, stderr=err)
    result = out / "result_0.txt"
    deadline = time.monotonic() + 240  # a loaded 2-core machine starts torch slowly
    while '"epoch_num": 2' not in (result.read_text() if result.exists() else ""):
        if launch.poll() is not None or time.monotonic() > deadline:
            launch.kill()
            pytest.fail(f"the ranks did not train: {log.read_text()[-3000:]}")
        time.sleep(0.2)
    ranks = _ranks_of(launch.pid)
    assert set(ranks) == {0, 1}, ranks
    return launch, ranks


def _assert_records_closed(out: Path) -> None:
    """rank 0 wrote run_stop aborted and the summary's final status (not "running")."""
    stops = [json.loads(ln[len(":::MLLOG "):])
             for ln in (out / "result_0.txt").read_text().splitlines()
             if '"key": "run_stop"' in ln]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted", stops
    assert json.loads((out / "summary.json").read_text())["status"] == "error"


@pytest.mark.parametrize("launcher", [LOCAL, ("launcher=torchrun", "launcher.tasks_per_node=2")],
                         ids=["local", "torchrun"])
def test_kill_9_of_the_launcher_ends_its_ranks_with_their_records(tiny_mini_data, tmp_path,
                                                                  launcher):
    """The ranks (local) or the host script (torchrun, mpirun) lead sessions of their own:
    a `kill -9` of `sciperf launch` left both ranks training as orphans. PR_SET_PDEATHSIG
    sends each rank — or the script's exec'd torchrun, which stops its ranks — an ordinary
    SIGTERM instead."""
    out = tmp_path / "orphans"
    launch, ranks = _start_launch(tiny_mini_data, out, tmp_path / "launch.err", launcher)
    launch.send_signal(signal.SIGKILL)
    launch.wait()
    deadline = time.monotonic() + 15
    while (alive := [pid for pid in ranks.values() if _alive(pid)]) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:  # do not leave them behind when the test fails
        os.kill(pid, signal.SIGKILL)
    assert alive == [], "ranks still running 15 s after the launcher was killed"
    _assert_records_closed(out)


def test_a_stopped_rank_0_closes_its_records_when_the_job_is_torn_down(tiny_mini_data,
                                                                       tmp_path):
    """SIGSTOP of rank 0: rank 1 times out and fails, the supervisor stops the job. The
    stopped rank 0 never handled the SIGTERM before its SIGKILL, so summary.json stayed
    "running" with no run_stop; SIGCONT after the SIGTERM lets it close them."""
    out = tmp_path / "stopped"
    log = tmp_path / "launch.err"
    launch, ranks = _start_launch(tiny_mini_data, out, log)
    os.kill(ranks[0], signal.SIGSTOP)
    try:
        launch.wait(timeout=90)
    except subprocess.TimeoutExpired:
        for pid in (*ranks.values(), launch.pid):
            os.kill(pid, signal.SIGKILL)
        pytest.fail("the job still ran 90 s after rank 0 hung")
    stderr = log.read_text()
    assert launch.returncode != 0
    assert "sciperf launch: rank 1 exited with status 1" in stderr, stderr[-3000:]
    # rank 1 waited out the timeout: that is what it says
    assert "rank 1 gave up after distributed.timeout_s=10" in stderr, stderr[-3000:]
    assert not _alive(ranks[0])
    _assert_records_closed(out)


def test_a_rank_that_never_joins_the_rendezvous_is_one_line(tiny_mini_data, tmp_path):
    """WORLD_SIZE=2 but only rank 0 started: torch's 14-frame DistStoreError traceback
    ("1/2 clients joined") became one line naming the address and the timeout."""
    port = free_port()
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
           "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TORCHELASTIC_RUN_ID": "sciperf-local-test"}
    proc = subprocess.run([str(BIN / "sciperf"), "train", *SMALL[:-1],
                           "distributed.timeout_s=5", f"data.dir={tiny_mini_data}",
                           f"output_dir={tmp_path / 'alone'}"],
                          capture_output=True, text=True, env=env, timeout=180, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf train:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"sciperf train: error: only 1 of 2 ranks joined the rendezvous at 127.0.0.1:{port} "
        "within distributed.timeout_s=5 (a rank hung or never started)"), proc.stderr[-3000:]


def _lost_line(message: str) -> str | None:
    from sciperf_pytorch.collectives import Comm
    comm = Comm(RankInfo(), "native", torch.device("cpu"), 10)
    comm.info = RankInfo(rank=0, world=2)  # what a 2-rank group would read the error as
    return comm.peer_lost(RuntimeError(message))


def test_a_dead_peer_is_not_reported_as_a_timeout():
    """A peer's death is seen at once (its kernel closes the socket): "gave up after
    distributed.timeout_s=45" two seconds after it misled."""
    died = _lost_line("[../gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:1234: "
                      "Connection reset by peer")
    assert died is not None and "died" in died and "timeout" not in died, died
    hung = _lost_line("[../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                      "10000ms for recv operation to complete")
    assert hung is not None and "gave up after distributed.timeout_s=10" in hung, hung
    shut = _lost_line("Horovod has been shut down. This was caused by an exception on one "
                      "of the ranks or an asynchronous completion of a background operation.")
    assert shut is not None and shut.startswith("Horovod shut down: a peer rank died or "
                                                "stalled") and "timeout" not in shut, shut
    assert _lost_line("CUDA out of memory") is None


SIBLING = """
import pathlib, signal, sys, time
def closing(*_):
    pathlib.Path(sys.argv[1]).write_text("records closed")
    sys.exit(143)
signal.signal(signal.SIGTERM, closing if sys.argv[2] == "handles" else signal.SIG_IGN)
pathlib.Path(sys.argv[1] + ".ready").touch()
time.sleep(120)
"""
SURVIVOR = """
import json, sys, time
from sciperf.distributed import end_stopped_siblings
t0 = time.monotonic()
ended = end_stopped_siblings({"TORCHELASTIC_RUN_ID": "torchrun-test"}, grace_s=3.0)
print(json.dumps([ended, time.monotonic() - t0]))
"""


@pytest.mark.parametrize("sibling", ["handles", "ignores"])
def test_end_stopped_siblings_lets_a_stopped_sibling_close_its_records(tmp_path, sibling):
    """Under torchrun the survivor ended stopped siblings with SIGKILL at once: a stopped
    rank 0 never wrote its records. Now SIGTERM + SIGCONT, SIGKILL only after the grace
    (this test process plays the torchrun agent: both are its children)."""
    mark = tmp_path / "sibling"
    stopped = subprocess.Popen([sys.executable, "-c", SIBLING, str(mark), sibling])
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{mark}.ready").exists():
            assert time.monotonic() < deadline and stopped.poll() is None
            time.sleep(0.05)
        stopped.send_signal(signal.SIGSTOP)
        survivor = subprocess.run([sys.executable, "-c", SURVIVOR], capture_output=True,
                                  text=True, timeout=60, check=True)
        ended, waited = json.loads(survivor.stdout)
        assert ended == [stopped.pid]
        code = stopped.wait(timeout=5)
    finally:
        if stopped.poll() is None:
            stopped.kill()
    if sibling == "handles":  # continued, it handled the SIGTERM: no 3 s wait
        assert code == 143 and mark.read_text() == "records closed" and waited < 2.5
    else:  # one that stays hung still ends, after the grace
        assert code == -signal.SIGKILL and not mark.exists() and waited >= 3.0


def test_ranks_started_with_different_configurations_refuse_to_train(tiny_mini_data,
                                                                      tmp_path):
    """Rank 1 with opt.base_lr=0.5, rank 0 with 0.004: the replicas trained apart in
    silence and rank 0's MLLOG said 0.004. Each rank now names its value; nothing trains."""
    port = free_port()
    procs = []
    for rank, lr in ((0, "0.004"), (1, "0.5")):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "TORCHELASTIC_RUN_ID": "sciperf-mismatch-test"}
        env.pop("SCIPERF_DEBUG", None)
        procs.append(subprocess.Popen(
            [str(BIN / "sciperf"), "train", *SMALL, f"opt.base_lr={lr}",
             f"data.dir={tiny_mini_data}", f"output_dir={tmp_path / 'run'}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    for rank, proc in enumerate(procs):
        _, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 2, stderr[-3000:]
        errors = [ln for ln in stderr.splitlines() if ln.startswith("sciperf train:")]
        lr = ("0.004", "0.5")[rank]
        assert len(errors) == 1 and errors[0].startswith(
            f"sciperf train: error: ranks disagree on the configuration (this rank: "
            f"opt.base_lr={lr}; another rank has other values)"), stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "error" and summary["epochs"] == 0
