"""The `local` launcher's supervisor: N processes on this host, all stopped when one fails;
and the host script (mpirun, torchrun) `sciperf launch` runs when there is no Slurm."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from sciperf.errors import SciperfError

from .report import (
    CHECKPOINTED_LINE,
    EX_TEMPFAIL,
    MpirunReport,
    TorchrunReport,
    checkpointed_since,
    failed_line,
    shell_status,
)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing is bound to at this moment (a job's own: `ports.reserved_port`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # each rank leads its own group (its loader workers too)


def _terminate_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGCONT, to the group, as Slurm ends a job step: a stopped process
    (SIGSTOP, a hung node's stand-in) keeps the SIGTERM pending and only handles it —
    writing run_stop aborted and summary.json — once continued; without the SIGCONT it
    met the SIGKILL still stopped and summary.json said "running"."""
    _signal_group(proc, signal.SIGTERM)
    _signal_group(proc, signal.SIGCONT)


def stop_all(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM (and SIGCONT) every rank's process group, SIGKILL what is left after
    `grace_s` (a rank that stays hung included)."""
    for proc in procs:
        _terminate_group(proc)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


exit_code = shell_status  # a child's status as a shell reports it (signal N → 128+N)


def run_local(commands: Sequence[tuple[Sequence[str], Mapping[str, str]]],
              grace_s: float = 5.0, poll_s: float = 0.1, signal_grace_s: float = 30.0) -> int:
    """Start every (argv, env) at once and return the ranks' verdict (`report`): 0 when
    all succeed, 75 when rank 0 stopped with a checkpoint, else the first failure's status.

    A rank that exits non-zero (or is killed) stops the others within `grace_s`. SIGINT
    and SIGTERM to this process pass on to every rank, which gets `signal_grace_s` — its
    train.term_grace_s and the write — to checkpoint or close its records before SIGKILL.
    """
    procs: list[subprocess.Popen] = []
    with _caught_signals() as caught:
        return _supervise(commands, procs, caught, grace_s, poll_s, signal_grace_s)


@contextlib.contextmanager
def _caught_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM noted (in the main thread) instead of raised while children run,
    so the supervisor stops them all before it returns."""
    caught: list[int] = []
    handlers: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield caught
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


Report = TorchrunReport | MpirunReport
REPORTS: dict[str, type[Report]] = {"torchrun": TorchrunReport, "mpirun": MpirunReport}
READER_DRAIN_S = 5.0  # after the job: what a stray holder of its stderr still writes


def run_script(path: str, env: Mapping[str, str], grace_s: float = 30.0,
               poll_s: float = 0.1, *, launcher: str = "",
               summary: Path | None = None) -> int:
    """`bash path` (a rendered host script: mpirun, torchrun) in its own process group;
    returns the ranks' verdict (`report`). SIGINT/SIGTERM to `sciperf launch` reach the
    whole group — the launcher and its ranks — which gets `grace_s` to checkpoint or write
    its aborted records before SIGKILL (the script kept running when only `sciperf launch`
    ended); a `kill -9` of `sciperf launch` has the kernel SIGTERM the exec'd
    mpirun/torchrun, which stops its ranks (they ran on as orphans).

    `launcher` torchrun or mpirun: the job's stderr passes through its report
    (`report.TorchrunReport`, `report.MpirunReport`), which withholds the launcher's
    traceback or boxes about a failed rank; one line names the rank instead, and its
    status (torchrun exits 1 whatever it was) is the launch's. `summary`: rank 0's
    summary.json, which says whether the run checkpointed when torchrun, ended by a
    signal, reports no rank's status at all."""
    since = time.time_ns()
    report = REPORTS[launcher](_to_stderr) if launcher in REPORTS else None
    with _caught_signals() as caught:
        try:
            # the script execs mpirun/torchrun, which keeps the parent-death signal
            proc = subprocess.Popen(["bash", path], env=dict(env), start_new_session=True,
                                    preexec_fn=_die_with_supervisor(),
                                    stderr=subprocess.PIPE if report else None)
        except OSError as exc:
            raise SciperfError(f"cannot start bash: {exc.strerror or exc}") from exc
        reader = _pump(proc.stderr, report) if report and proc.stderr else None
        try:
            while proc.poll() is None and not caught:
                time.sleep(poll_s)
        finally:
            if proc.poll() is None or _session_members(proc.pid):
                stop_session(proc, grace_s)
            if reader is not None:
                reader.join(timeout=READER_DRAIN_S)
    return _script_verdict(exit_code(proc.returncode), caught, report,
                           checkpointed_since(summary, since))


def _to_stderr(line: bytes) -> None:
    try:
        sys.stderr.write(line.decode(errors="replace"))
        sys.stderr.flush()
    except (OSError, ValueError):  # our stderr is gone: the job's lines are still drained
        pass


def _pump(stream: IO[bytes], report: Report) -> threading.Thread:
    """A thread passing the job's stderr through `report`, line by line, as it comes."""
    def pump() -> None:
        with stream:
            for line in iter(stream.readline, b""):
                report.feed(line)
        report.close()
    thread = threading.Thread(target=pump, name="sciperf-launch-stderr", daemon=True)
    thread.start()
    return thread


def _script_verdict(code: int, caught: list[int], report: Report | None,
                    checkpointed: bool) -> int:
    """The launch's status and one line, from the script's status, a signal to `sciperf
    launch`, torchrun's report and rank 0's summary."""
    failed = report.failed() if report else None
    if code == 0 and not caught:
        return 0
    if checkpointed or (failed is not None and failed.rank == 0
                        and failed.status == EX_TEMPFAIL):
        print(CHECKPOINTED_LINE, file=sys.stderr, flush=True)
        return EX_TEMPFAIL
    if failed is not None:
        name = "torchrun" if isinstance(report, TorchrunReport) else "mpirun"
        print(failed_line(failed.rank, failed.status, f"; {name} stopped the other ranks"),
              file=sys.stderr, flush=True)
        return failed.status
    if caught:
        return 128 + caught[0]
    if report is not None and report.signal is not None:  # torchrun's own SignalException
        return 128 + report.signal
    return code  # mpirun's: the first failed rank's status (75 included)


def _session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (zombies excluded), from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(stat.parent.name))
    return pids


def stop_session(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the script's process group (the shell and mpirun/torchrun), wait until
    nothing of its session lives — mpirun forwards the signal to ranks it put in groups of
    their own — then SIGKILL what is left. Waiting for the shell alone was not enough: it
    ends at once on SIGTERM, and the SIGKILL that followed took mpirun before it had
    passed the signal on, leaving both ranks running."""
    _terminate_group(proc)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the shell: a zombie leader still holds its group
        if not _session_members(proc.pid):
            break
        time.sleep(0.1)
    for pid in _session_members(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_supervisor() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGTERM the rank when its supervisor dies (None off
    Linux, where ranks may outlive a `kill -9` of `sciperf launch`).

    The ranks lead sessions of their own (so that a group signal reaches their loader
    workers), so nothing else ends them: a `kill -9` of `sciperf launch` left both training
    on as orphans. The SIGTERM is an ordinary one — the rank's handler writes `run_stop
    aborted` and summary.json, as under `scancel`. PDEATHSIG fires when the *thread* that
    forked the rank ends, not the process: that is the thread running `_supervise`, which
    does not return while a rank lives (its `finally` stops and reaps them all), so a rank
    never sees its forking thread end before the supervisor itself would."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    supervisor = os.getpid()

    def preexec() -> None:  # in the child, between fork and exec: kept to two calls
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != supervisor:  # it died before prctl: no signal would ever come
            os._exit(128 + signal.SIGTERM)
    return preexec


def _supervise(commands: Sequence[tuple[Sequence[str], Mapping[str, str]]],
               procs: list[subprocess.Popen], caught: list[int], grace_s: float,
               poll_s: float, signal_grace_s: float) -> int:
    """run_local's loop: start every rank, watch them, stop all on the first failure.

    A rank that exits 75 stopped with a checkpoint, not failed: every rank agreed on that
    step (an all-reduce), so its peers end too, 0, and are waited for."""
    preexec = _die_with_supervisor()
    try:
        for argv, env in commands:
            try:
                procs.append(subprocess.Popen(list(argv), env=dict(env), preexec_fn=preexec,
                                              start_new_session=True))
            except OSError as exc:
                raise SciperfError(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
        while True:
            codes = [proc.poll() for proc in procs]
            failed = [(rank, code) for rank, code in enumerate(codes)
                      if code not in (None, 0, EX_TEMPFAIL)]
            if failed:
                rank, code = failed[0]
                rest = "; stopping the other ranks" if len(procs) > 1 else ""
                print(failed_line(rank, exit_code(code), rest), file=sys.stderr, flush=True)
                stop_all(procs, grace_s)
                return exit_code(code)
            if caught:  # passed on to the ranks; what they make of it is the verdict
                stop_all(procs, signal_grace_s)
                return _verdict([exit_code(proc.returncode) for proc in procs],
                                128 + caught[0])
            if all(code is not None for code in codes):
                return _verdict([exit_code(code) for code in codes if code is not None], 0)
            time.sleep(poll_s)
    finally:
        stop_all([p for p in procs if p.poll() is None], grace_s)


def _verdict(statuses: list[int], otherwise: int) -> int:
    """75 when rank 0 checkpointed (its peers end 0) and no rank failed; 0 when every rank
    succeeded; else `otherwise` (the signal that ended the job)."""
    if EX_TEMPFAIL in statuses and all(s in (0, EX_TEMPFAIL) for s in statuses):
        if statuses[0] == EX_TEMPFAIL:
            print(CHECKPOINTED_LINE, file=sys.stderr, flush=True)
        return EX_TEMPFAIL
    if all(s == 0 for s in statuses):
        return 0
    return otherwise or 1
