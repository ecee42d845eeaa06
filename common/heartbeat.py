"""Training-step heartbeats and the hang sentinel, for runs whose collectives cannot time out.

Horovod's coordinator waits inside MPI for a rank that stopped (SIGSTOP, a frozen node):
neither its stall check nor any timeout fires, and the job would hang until the time
limit. A thread inside the waiting process is no remedy: while TensorFlow+Horovod waits,
the interpreter may not schedule it. So rank 0 starts a *sentinel*: a small separate
process that reads rank 0's heartbeat from shared memory and acts when the gap since the
last training step or evaluation batch exceeds the bound the run itself keeps there —
max(distributed.timeout_s, 4 × the slowest step seen), or FIRST_GRACE_S for the first step of
a phase (training, evaluation) that has not yet completed a step in this run (it may compile).

When it fires, the sentinel sends rank 0 SIGUSR2: rank 0's signal watcher thread
(sciperf.run.signals) writes run_stop aborted and summary.json, prints one line and exits. If rank
0 has not ended within WATCHER_GRACE_S (its interpreter is stuck too), the sentinel writes
the same records itself from what the run keeps in shared memory and summary.json, prints the
line and SIGKILLs rank 0; the launcher then ends the other ranks.

Shared memory layout (float64 each): last beat (CLOCK_MONOTONIC, shared by all processes of
the host), bound in seconds, completed epochs, records-written flag.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

FIRST_GRACE_S = 300.0  # a phase's first step in a run may compile (XLA, TF tracing)
WATCHER_GRACE_S = 5.0  # rank 0's own watcher writes the records within this after SIGUSR2
POLL_S = 0.5
SIGNAL = signal.SIGUSR2
_LAYOUT = struct.Struct("<4d")
LAST, BOUND, EPOCHS, WRITTEN = range(4)


class Heartbeat:
    """Rank 0's side: beats and phases update the shared record the sentinel reads."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.fd = os.memfd_create("sciperf-heartbeat", 0)
        os.ftruncate(self.fd, _LAYOUT.size)
        self.mem = mmap.mmap(self.fd, _LAYOUT.size)
        self._slowest = 0.0
        self._last = time.monotonic()
        self._first = True  # no beat yet since the phase began
        self._phase = ""
        self._seen: set[str] = set()  # phases that completed a step in this run
        self._write(LAST, self._last)
        self._write(BOUND, FIRST_GRACE_S)

    def _write(self, field: int, value: float) -> None:
        struct.pack_into("<d", self.mem, field * 8, value)

    def read(self, field: int) -> float:
        """One field of the shared record."""
        return struct.unpack_from("<d", self.mem, field * 8)[0]

    def _bound(self) -> float:
        if self._first and self._phase not in self._seen:
            return FIRST_GRACE_S
        return max(self.limit_s, 4 * self._slowest)

    def phase(self, name: str) -> None:
        """Training or evaluation begins; only its first step ever gets FIRST_GRACE_S."""
        self._phase, self._first = name, True
        self._last = time.monotonic()
        self._write(BOUND, self._bound())
        self._write(LAST, self._last)

    def beat(self) -> None:
        """A training step or an evaluation batch ended."""
        now = time.monotonic()
        if not self._first:  # the first step after a phase starts may include loader start
            self._slowest = max(self._slowest, now - self._last)
        self._seen.add(self._phase)
        self._last, self._first = now, False
        self._write(BOUND, self._bound())
        self._write(LAST, now)

    def epochs(self, n: int) -> None:
        """Completed epochs, for the sentinel's run_stop if it must write it."""
        self._write(EPOCHS, float(n))

    def written(self) -> None:
        """The closing records are on disk: the sentinel must not write them again."""
        self._write(WRITTEN, 1.0)

    def silent_for(self) -> float:
        """Seconds since the last beat or phase start."""
        return time.monotonic() - self.read(LAST)

    def close(self) -> None:
        """Release the shared memory."""
        self.mem.close()
        os.close(self.fd)


_CURRENT: Heartbeat | None = None


def beat() -> None:
    """A training step or evaluation batch ended (the templates call this; cheap when off)."""
    if _CURRENT is not None:
        _CURRENT.beat()


def phase(name: str) -> None:
    """The driver starts a phase ('train', 'eval')."""
    if _CURRENT is not None:
        _CURRENT.phase(name)


def epochs(n: int) -> None:
    """The driver finished epoch `n`."""
    if _CURRENT is not None:
        _CURRENT.epochs(n)


def current() -> Heartbeat | None:
    """The running heartbeat (rank 0 of a Horovod run), if any."""
    return _CURRENT


@contextlib.contextmanager
def sentinel(limit_s: float, log: Path, summary: Path, instance: int | None) -> Iterator[None]:
    """Beat for the duration of the block with a sentinel process watching (see module)."""
    global _CURRENT
    hb = Heartbeat(limit_s)
    cmd = [sys.executable, "-m", "sciperf.heartbeat", str(os.getpid()), str(hb.fd),
           str(limit_s), str(log), str(summary), "" if instance is None else str(instance)]
    proc = subprocess.Popen(cmd, pass_fds=(hb.fd,), stdin=subprocess.DEVNULL)
    # a Python-level handler makes the interpreter's C handler write SIGUSR2 to the wakeup
    # fd, where rank 0's watcher thread reads it (sciperf.run.signals.signal_watcher)
    previous = signal.signal(SIGNAL, lambda *_: None)
    _CURRENT = hb
    try:
        yield
    finally:
        _CURRENT = None
        signal.signal(SIGNAL, previous)
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        hb.close()


def hang_line(gap: float, limit_s: float, records: str) -> str:
    """The one line a hang ends with (the watcher's and the sentinel's alike)."""
    return (f"sciperf train: error: no training step ended for {gap:.0f} s (a peer rank "
            f"stopped responding or died; distributed.timeout_s={limit_s:g}); {records}")


# --- the sentinel process ----------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Rank 0 (our parent) still runs: when it ends, the sentinel is reparented at once."""
    return os.getppid() == pid


def _fallback_records(log: Path, summary: Path, instance: int | None, epochs: int) -> str:
    """run_stop aborted and the summary's final status, written from outside a stuck rank 0."""
    from sciperf import jsondata
    from sciperf.data import atomic
    from sciperf.errors import SciperfError
    from sciperf.results.mllog import MLLogger

    try:  # a log the disk refuses is said in the hang's line: rank 0 is ended all the same
        mll = MLLogger(log, mode="a", instance=instance)
        mll.run_stop(False, epochs)
        mll.close()
    except (OSError, SciperfError) as exc:
        return f"no records written ({exc})"
    try:  # the summary rank 0 wrote last; garbled or gone, the fallback writes its own
        record = jsondata.loads(summary.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        record = {}
    record = record if isinstance(record, dict) else {}
    now = time.time()
    start = record.get("run_start_unix")
    record.update(status="error", epochs=epochs, run_stop_unix=now if start else None,
                  time_to_train_s=(now - start) if start else None,
                  ended_by="hang sentinel: rank 0 was stuck in a collective")
    try:  # the earlier summary stays whole and no temporary is left (sciperf.data.atomic)
        atomic.write_text(summary, json.dumps(record, indent=2, default=str, allow_nan=False))
    except SciperfError as exc:  # the hang's line says it: rank 0 is ended all the same
        return f"run_stop aborted; {exc}"
    return f"run_stop aborted and {summary.name} written to {summary.parent}"


def _watch(pid: int, fd: int, limit_s: float, log: Path, summary: Path,
           instance: int | None) -> int:
    """Poll the heartbeat until rank 0 ends or hangs (see module)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    mem = mmap.mmap(fd, _LAYOUT.size)
    while _alive(pid):
        last, bound, done, _ = _LAYOUT.unpack_from(mem)
        gap = time.monotonic() - last
        if gap > bound:
            return _fire(pid, mem, gap, limit_s, log, summary, instance, int(done))
        time.sleep(POLL_S)
    return 0


def _fire(pid: int, mem: mmap.mmap, gap: float, limit_s: float, log: Path, summary: Path,
          instance: int | None, epochs: int) -> int:
    """Ask rank 0's watcher to end the run; do it here if rank 0 cannot."""
    os.kill(pid, SIGNAL)
    deadline = time.monotonic() + WATCHER_GRACE_S
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if not _alive(pid):
        return 0
    written = _LAYOUT.unpack_from(mem)[WRITTEN]
    records = (f"run_stop aborted and {summary.name} written to {summary.parent}" if written
               else _fallback_records(log, summary, instance, epochs))
    print(hang_line(gap, limit_s, records), file=sys.stderr, flush=True)
    os.kill(pid, signal.SIGKILL)
    return 0


def main(argv: list[str]) -> int:
    """`python -m sciperf.heartbeat PID FD LIMIT_S LOG SUMMARY INSTANCE` (started by
    :func:`sentinel`, not by users)."""
    pid, fd, limit_s, log, summary, instance = argv
    return _watch(int(pid), int(fd), float(limit_s), Path(log), Path(summary),
                  int(instance) if instance else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
