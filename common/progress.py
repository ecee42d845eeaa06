"""Progress for long work: a line per step group or epoch with throughput and ETA."""

from __future__ import annotations

import sys
import time

from sciperf.console import say


def fmt_duration(seconds: float) -> str:
    """12.3s / 4m05s / 1h02m, for ETAs and summaries."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Counts items toward a total; prints at most every `every` seconds and at the end.

    Writes to stderr so stdout stays machine-readable; on a terminal it redraws one line,
    in logs (Slurm output files, CI) it prints whole lines.
    """

    def __init__(self, total: int, label: str, unit: str = "samples", every: float = 2.0,
                 enabled: bool = True):
        self.total, self.label, self.unit, self.every = total, label, unit, every
        self.enabled = enabled
        self.done = 0
        self.start = time.perf_counter()
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def update(self, n: int = 1) -> None:
        """Add `n` finished items and maybe print."""
        self.done += n
        now = time.perf_counter()
        if self.done >= self.total or now - self._last >= self.every:
            self._last = now
            self._print(now)

    def _print(self, now: float) -> None:
        if not self.enabled:
            return
        self.emit(self.line(now), final=self.done >= self.total)

    def line(self, now: float) -> str:
        """The progress line at `now` (a subclass counting other units words its own)."""
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        pct = 100.0 * self.done / max(self.total, 1)
        return (f"{self.label}: {self.done}/{self.total} {self.unit} ({pct:5.1f}%) "
                f"{rate:.1f} {self.unit}/s, ETA {fmt_duration(eta)}")

    def emit(self, text: str, final: bool) -> None:
        """One line on stderr: redrawn in place on a terminal, whole lines in logs."""
        end = "\n" if (not self._tty or final) else ""
        say(("\r" if self._tty else "") + text, end=end)
