"""The `local` launcher's supervisor: N processes on this host, all stopped when one fails."""

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

from sciperf.errors import SciperfError


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
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


def exit_code(returncode: int) -> int:
    """A child's status as a shell reports it (killed by signal N → 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


# a rank that gets SIGKILL from nobody it knows: most often the kernel's OOM killer
KILLED_HINT = (" (SIGKILL: out of memory? the kernel's OOM killer leaves no other trace — "
               "`dmesg | grep -i oom`; lower train.global_batch_size or use more ranks)")


def run_local(commands: Sequence[tuple[Sequence[str], Mapping[str, str]]],
              grace_s: float = 5.0, poll_s: float = 0.1) -> int:
    """Start every (argv, env) at once; return 0 when all succeed, else the first failure.

    A rank that exits non-zero (or is killed) stops the others within `grace_s`; SIGINT
    and SIGTERM to this process stop all ranks the same way.
    """
    procs: list[subprocess.Popen] = []
    with _caught_signals() as caught:
        return _supervise(commands, procs, caught, grace_s, poll_s)


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


def run_script(path: str, env: Mapping[str, str], grace_s: float = 30.0,
               poll_s: float = 0.1) -> int:
    """`bash path` (a rendered host script: mpirun, torchrun) in its own process group,
    its status returned; SIGINT/SIGTERM to `sciperf launch` reach the whole group — the
    launcher and its ranks — which gets `grace_s` to write its aborted records before
    SIGKILL (the script kept running when only `sciperf launch` ended); a `kill -9` of
    `sciperf launch` has the kernel SIGTERM the exec'd mpirun/torchrun, which stops its
    ranks (they ran on as orphans)."""
    with _caught_signals() as caught:
        try:
            # the script execs mpirun/torchrun, which keeps the parent-death signal
            proc = subprocess.Popen(["bash", path], env=dict(env), start_new_session=True,
                                    preexec_fn=_die_with_supervisor())
        except OSError as exc:
            raise SciperfError(f"cannot start bash: {exc.strerror or exc}") from exc
        try:
            while (code := proc.poll()) is None and not caught:
                time.sleep(poll_s)
            return exit_code(code) if code is not None else 128 + caught[0]
        finally:
            if proc.poll() is None or _session_members(proc.pid):
                stop_session(proc, grace_s)


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
               poll_s: float) -> int:
    """run_local's loop: start every rank, watch them, stop all on the first failure."""
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
            failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed or caught:
                if failed:
                    rank, code = failed[0]
                    status = exit_code(code)
                    rest = "; stopping the other ranks" if len(procs) > 1 else ""
                    why = KILLED_HINT if code == -signal.SIGKILL else ""
                    print(f"sciperf launch: rank {rank} exited with status {status}{why}{rest}",
                          file=sys.stderr, flush=True)
                else:
                    status = 128 + caught[0]
                stop_all(procs, grace_s)
                return status or 1
            if all(code == 0 for code in codes):
                return 0
            time.sleep(poll_s)
    finally:
        stop_all([p for p in procs if p.poll() is None], grace_s)
