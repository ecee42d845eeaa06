"""How a run ends on a signal or a hang, with its records written: the closing records'
one-time writer (`Closer`), the signal-watcher thread (SIGTERM/SIGHUP while the main
thread waits inside a collective), the stop-on-request flag (`STOP`: SIGUSR1, and SIGTERM
within train.term_grace_s, end a checkpointing run at its next optimizer step) and the
Horovod hang sentinel (sciperf.heartbeat).

These pieces share one rule: whichever thread or process notices the end first writes the
closing records, exactly once, and the run leaves one line saying what was written.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sciperf import heartbeat
from sciperf.distributed import RankInfo
from sciperf.run.files import result_file, summary_file


class Closer:
    """An aborted run's closing records, written once by whichever thread comes first: the
    main thread's exception path, or the signal watcher while the main thread is stuck."""

    def __init__(self, write: Callable[[], None], line: Callable[[], str]):
        self._write, self.line = write, line
        self._lock = threading.Lock()
        self.done = False

    def __call__(self) -> bool:
        """Write them unless written; True when this call wrote them."""
        with self._lock:
            if self.done:
                return False
            self.done = True
            self._write()
            return True


WATCHED = (signal.SIGTERM, signal.SIGHUP)
# set by SIGUSR1 (Slurm's `--signal=B:USR1@<seconds>` before the time limit) and, within
# train.term_grace_s, by SIGTERM: with checkpointing on, the run stops at the next
# optimizer step (or after the running evaluation), checkpoints and exits 75
STOP = threading.Event()
# mpirun follows its SIGTERM with SIGKILL one second later: no time for a checkpoint there
NO_TERM_GRACE_ENV = ("OMPI_COMM_WORLD_SIZE",)


def term_grace(cfg: Any) -> float:
    """Seconds a SIGTERM may take to reach a checkpoint: train.term_grace_s when this run
    checkpoints and its launcher leaves that time (not under mpirun), else 0 (end at once,
    records first)."""
    if not int(cfg.train.checkpoint_every) or any(k in os.environ for k in NO_TERM_GRACE_ENV):
        return 0.0
    return float(cfg.train.term_grace_s)


@contextlib.contextmanager
def stop_on_request(enabled: bool, on_term: bool) -> Iterator[None]:
    """SIGUSR1 — and SIGTERM when `on_term` — ask for a checkpoint and an early, resumable
    end (main thread only). A second SIGTERM ends the run at once (the CLI's handler)."""
    STOP.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not enabled:  # SIGUSR1's default action ended the run with no records at all
        previous = signal.signal(signal.SIGUSR1, _usr1_ignored)
        try:
            yield
        finally:
            signal.signal(signal.SIGUSR1, previous)
        return
    previous = signal.signal(signal.SIGUSR1, lambda *_: STOP.set())
    term = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        if STOP.is_set() and callable(term):  # asked twice: no more waiting
            term(signum, frame)
        STOP.set()

    if on_term:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)
        if on_term:
            signal.signal(signal.SIGTERM, term)


def _usr1_ignored(_signum: int, _frame: Any) -> None:
    print("SIGUSR1 ignored: this run writes no checkpoints (train.checkpoint_every=0), so it "
          "cannot stop to be resumed; SIGTERM ends it", file=sys.stderr, flush=True)


GRACE_S = 3.0  # after the watcher wrote the records: time for the main thread to exit itself
_STOP = b"\0"


@contextlib.contextmanager
def signal_watcher(closer: Closer, term_grace_s: float = 0.0) -> Iterator[None]:
    """SIGTERM/SIGHUP while the main thread waits inside a collective: Horovod's wait is
    C++, where Python's handler cannot run, and mpirun follows its SIGTERM with SIGKILL one
    second later — the run ended with no run_stop. Python's C-level handler still writes
    the signal number to the wakeup fd at once; this thread reads it, writes the closing
    records, and ends the process if the main thread has not within GRACE_S. With
    `term_grace_s` (a checkpointing run), a SIGTERM first gives the main thread that long
    to reach its checkpoint and end the run itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(read_fd, closer, term_grace_s), daemon=True,
                               name="sciperf-signal-watcher")
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        with contextlib.suppress(OSError):
            os.write(write_fd, _STOP)
        watcher.join(timeout=GRACE_S + 1)
        os.close(write_fd)
        if not watcher.is_alive():
            os.close(read_fd)


def _ended_within(read_fd: int, seconds: float) -> bool:
    """Whether the main thread leaves the watched block (it writes _STOP) within `seconds`."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready and (not (got := os.read(read_fd, 64)) or _STOP in got):
            return True
    return False


def _watch(read_fd: int, closer: Closer, term_grace_s: float = 0.0) -> None:
    """The watcher thread's loop (see :func:`signal_watcher`)."""
    while True:
        got = os.read(read_fd, 64)
        if not got or _STOP in got:
            return
        hb = heartbeat.current()
        if hb is not None and heartbeat.SIGNAL.value in got:  # the hang sentinel fired
            gap = hb.silent_for()
            if closer():
                print(heartbeat.hang_line(gap, hb.limit_s, closer.line()), file=sys.stderr,
                      flush=True)
                os._exit(1)
            return
        sig = next((s for s in WATCHED if s.value in got), None)
        if sig is None:  # SIGINT and others: the main thread's handlers deal with them
            continue
        if sig == signal.SIGTERM and term_grace_s > 0 and _ended_within(read_fd, term_grace_s):
            return  # the main thread checkpointed and ended the run itself
        if not closer():
            return  # the main thread is already closing
        if _ended_within(read_fd, GRACE_S):
            return  # the main thread got out and ends the run itself (its own last line)
        print(f"sciperf: {sig.name} while blocked in a collective ({closer.line()})",
              file=sys.stderr, flush=True)
        os._exit(128 + sig.value)


def hang_sentinel(cfg: Any, info: RankInfo, out: Path) -> contextlib.AbstractContextManager:
    """Horovod cannot time out a stopped peer (its coordinator waits inside MPI): on rank 0
    of a multi-rank Horovod run, a sentinel process ends a run whose steps stopped ending
    (sciperf.heartbeat); other backends' collectives time out by themselves."""
    if info.rank != 0 or info.world < 2 or cfg.distributed.backend != "horovod":
        return contextlib.nullcontext()
    return heartbeat.sentinel(float(cfg.distributed.timeout_s), out / result_file(info.instance),
                              out / summary_file(info.instance, info.instances),
                              info.instance if info.instances > 1 else None)
