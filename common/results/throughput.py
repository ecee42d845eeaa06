"""Throughput ("weak scaling") of concurrent instances, from their MLLOG files.

MLPerf HPC throughput rules (docs/architecture.md, "Throughput mode"): M instances run
concurrently, one MLLOG file each; the time is the latest run_stop minus the earliest
run_start over the instances, reported as models per minute.
Read from the logs (not from summaries) so published logs score the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sciperf.errors import SciperfError
from sciperf.results.logs import parse_log


@dataclass(frozen=True)
class Instance:
    """One instance's run: start/stop (ms since the epoch) and whether it converged."""

    path: Path
    start_ms: int
    stop_ms: int
    success: bool


@dataclass(frozen=True)
class Throughput:
    """The throughput score of a set of concurrent instances."""

    instances: list[Instance]

    @property
    def converged(self) -> int:
        return sum(i.success for i in self.instances)

    @property
    def minutes(self) -> float:
        """Latest run_stop − earliest run_start, in minutes."""
        start = min(i.start_ms for i in self.instances)
        stop = max(i.stop_ms for i in self.instances)
        return (stop - start) / 60000.0

    @property
    def models_per_minute(self) -> float:
        return len(self.instances) / max(self.minutes, 1e-12)

    def line(self) -> str:
        return (f"throughput: {len(self.instances)} instances ({self.converged} reached the "
                f"target) in {self.minutes:.2f} min = {self.models_per_minute:.3f} models/min")


def read_instance(path: str | Path) -> Instance:
    """run_start / run_stop of one MLLOG file; a log without both raises naming the file."""
    log = parse_log(path)
    start, stop = log.run_window
    if start is None or stop is None:
        raise SciperfError(f"{log.path} has no run_start/run_stop pair (run did not start or "
                           "end)")
    return Instance(log.path, int(start), int(stop), log.success)


def throughput(paths: Sequence[str | Path]) -> Throughput:
    """Score concurrent instances' logs."""
    if not paths:
        raise SciperfError("throughput needs at least one MLLOG file")
    return Throughput([read_instance(p) for p in paths])
