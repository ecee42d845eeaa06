"""The `local` launcher's supervisor: N processes on this host, all stopped when one fails."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

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


def stop_all(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM every rank's process group, SIGKILL what is left after `grace_s` (a stopped
    rank — a hung node's stand-in — included)."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
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
    caught: list[int] = []
    handlers: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda signum, _frame: caught.append(signum))
    procs: list[subprocess.Popen] = []
    try:
        for argv, env in commands:
            try:
                procs.append(subprocess.Popen(list(argv), env=dict(env),
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
        for sig, handler in handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
