"""Download progress in bytes: decimal units, rate and ETA, from several connections."""

from __future__ import annotations

import threading
import time

from sciperf.progress import Progress, fmt_duration


def human(n: float) -> str:
    """Bytes for people (decimal units, as datasets publish their sizes)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"  # unreachable: the loop returns at TB


class ByteProgress(Progress):
    """`Progress` in bytes (MB, MB/s, ETA), safe to update from several connections. It is
    silent for its first `every` seconds: a quick file, or one refused at once, prints
    nothing; a line it started is finished by :meth:`finish`."""

    def __init__(self, total: int | None, label: str, already: int = 0, enabled: bool = True):
        super().__init__(total or 0, label, unit="bytes", enabled=enabled)
        self._lock = threading.Lock()
        self.restart(already)
        self.shown = False

    def restart(self, already: int = 0) -> None:
        """Count from `already` bytes, the rate from now (a resume, a restart from zero)."""
        self.done = self.already = already
        self.start = self._last = time.perf_counter()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            now = time.perf_counter()
            if now - self._last >= self.every:
                self._last = now
                self._print(now)

    def finish(self) -> None:
        """The closing line, when a line was shown."""
        if self.shown:
            self._print(time.perf_counter(), last=True)

    def _print(self, now: float, last: bool = False) -> None:
        if not self.enabled:
            return
        self.shown = True
        self.emit(self.line(now), final=last)

    def line(self, now: float) -> str:
        rate = (self.done - self.already) / max(now - self.start, 1e-9)
        if not self.total:
            return f"{self.label}: {human(self.done)} {human(rate)}/s"
        pct = 100.0 * self.done / self.total
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        return (f"{self.label}: {human(self.done)} of {human(self.total)} ({pct:5.1f}%) "
                f"{human(rate)}/s, ETA {fmt_duration(eta)}")
