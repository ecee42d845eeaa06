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
    """One instance's run: start/stop (ms since the epoch; None when the log lacks them)
    and whether it converged (its run_stop says success and, where asked, the checker
    passed the log)."""

    path: Path
    start_ms: int | None
    stop_ms: int | None
    success: bool


@dataclass(frozen=True)
class Throughput:
    """The throughput score of a set of concurrent instances: as the rules and `sciperf
    score` count it, over the converged instances only."""

    instances: list[Instance]

    @property
    def converged(self) -> int:
        return sum(i.success for i in self.instances)

    @property
    def minutes(self) -> float | None:
        """TTTa over the converged instances (None when none converged)."""
        return tta_minutes([(i.start_ms or 0, i.stop_ms or 0) for i in self.instances
                            if i.success])

    @property
    def models_per_minute(self) -> float | None:
        return models_per_minute(self.converged, self.minutes)

    def line(self) -> str:
        head = f"throughput: {len(self.instances)} instances, {self.converged} converged"
        if self.minutes is None:
            return f"{head}: no score"
        rate = self.models_per_minute
        per_min = f"{rate:.3f} models/min" if rate is not None else "no rate (no time elapsed)"
        return f"{head}, in {self.minutes:.2f} min = {per_min}"


def instance_share(logged: int, job_total: int | None, instances: int,
                   per_node: int = 1) -> int:
    """One instance's nodes (or accelerators: `per_node` a node) in a throughput job. Some
    submitters log the instance's, others the whole job's: the job's total (its system
    description) over the instances run, in whole nodes, bounds what the log says."""
    if job_total is None or instances < 1 or per_node < 1:
        return logged
    share = job_total // per_node // instances * per_node
    return share if 1 <= share < logged else logged


def tta_minutes(windows: Sequence[tuple[float, float]]) -> float | None:
    """The rules' throughput time: latest run_stop − earliest run_start over the
    converged instances' (start, stop) in ms, in minutes; None for no instance. One
    definition for `sciperf score` and the launch/check throughput line, so the two
    never disagree on the same logs."""
    if not windows:
        return None
    return (max(stop for _, stop in windows) - min(start for start, _ in windows)) / 60000.0


def models_per_minute(models: int, minutes: float | None) -> float | None:
    """Converged models per minute of TTTa; None without a positive time (instances
    stamped in the same millisecond have no rate to report)."""
    return models / minutes if minutes is not None and minutes > 0 else None


def read_instance(path: str | Path, passed: bool = True) -> Instance:
    """run_start / run_stop of one MLLOG file; a log without both never converged (the
    checker names what it lacks)."""
    log = parse_log(path)
    start, stop = log.run_window
    if start is None or stop is None:
        return Instance(log.path, None, None, False)
    return Instance(log.path, int(start), int(stop), log.success and passed)


def throughput(paths: Sequence[str | Path], passed: Sequence[bool] | None = None) -> Throughput:
    """Score concurrent instances' logs; `passed`: the checker's verdict on each (a log it
    fails does not count as converged, whatever its run_stop says)."""
    if not paths:
        raise SciperfError("throughput needs at least one MLLOG file")
    verdicts = list(passed) if passed is not None else [True] * len(paths)
    return Throughput([read_instance(p, ok) for p, ok in zip(paths, verdicts, strict=True)])
