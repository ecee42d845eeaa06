"""Training-step heartbeats, for the hang watchdog of runs whose collectives cannot time out.

Horovod's coordinator waits inside MPI for a rank that stopped (SIGSTOP, a frozen node):
neither its stall check nor any timeout fires, and the job would hang until the time
limit. A watchdog thread
(sciperf.train) ends the run when the gap since the last beat exceeds both
`distributed.timeout_s` and four times the slowest step seen — so a long step is never
mistaken for a hang. The driver starts a phase before training and before evaluation;
the templates beat after every training step and evaluation batch.
"""

from __future__ import annotations

import threading
import time

FIRST_GRACE_S = 300.0  # a phase's first step may compile (XLA, TF tracing): more time

_lock = threading.Lock()
_last: float | None = None  # monotonic time of the last beat or phase start; None: off
_first = True  # no beat yet since the phase began
_slowest = 0.0  # longest gap between two beats of a phase seen


def beat() -> None:
    """A training step or an evaluation batch ended."""
    global _last, _slowest, _first
    now = time.monotonic()
    with _lock:
        if _last is not None and not _first:
            _slowest = max(_slowest, now - _last)
        _last, _first = now, False


def phase() -> None:
    """Training or evaluation begins: its first step gets FIRST_GRACE_S (compilation)."""
    global _last, _first
    with _lock:
        _last, _first = time.monotonic(), True


def reset() -> None:
    """A new run: off until the first phase."""
    global _last, _slowest, _first
    with _lock:
        _last, _slowest, _first = None, 0.0, True


def silent_for(limit: float) -> float | None:
    """Seconds since the last beat (or phase start) when that exceeds max(limit, 4 × the
    slowest step; FIRST_GRACE_S for a phase's first step), else None."""
    with _lock:
        if _last is None:
            return None
        gap = time.monotonic() - _last
        bound = max(limit, 4 * _slowest, FIRST_GRACE_S if _first else 0.0)
        return gap if gap > bound else None
