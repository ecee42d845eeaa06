"""Per-group numbers of the report: a round of hundreds of runs is read as tens of groups
(one system × benchmark × mode), each summarised by medians and spreads, ranked by its
official score, with its machine's facts, its compute rates and its staging.

Everything a group lacks is None plus one note naming the group and what was assumed: a
median over no values is no number, never a zero that would rank a system first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sciperf.results.phases import PHASES
from sciperf.results.report_compute import (
    accelerator_peak,
    fraction_of_peak,
    median,
    train_flops,
)
from sciperf.results.report_systems import SystemFacts, describe, series_key, series_label
from sciperf.results.score import Score
from sciperf.results.throughput import instance_share
from sciperf.results.tree import STRONG, WEAK

if TYPE_CHECKING:
    from sciperf.results.report import RunFacts

NAMED = 4  # groups a note names before it counts the rest


class Notes:
    """What is missing and what was assumed, one line per cause: a round of 30 groups
    lacking the same field is one line naming them, not 30 lines."""

    def __init__(self) -> None:
        self._by_cause: dict[str, list[str]] = {}

    def add(self, who: str, cause: str) -> None:
        names = self._by_cause.setdefault(cause, [])
        if who not in names:
            names.append(who)

    def lines(self) -> list[str]:
        out = []
        for cause, names in self._by_cause.items():
            more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
            out.append(f"{', '.join(names[:NAMED])}{more}: {cause}")
        return out


@dataclass(frozen=True)
class Spread:
    """Median and range of a group's values (n: how many runs gave one)."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float | None]) -> Spread | None:
        found = [v for v in values if v is not None]
        mid = median(found)
        return None if mid is None else cls(mid, min(found), max(found), len(found))


@dataclass
class GroupStats:
    """One group, summarised (see the module docstring)."""

    score: Score
    runs: list[RunFacts]
    system: SystemFacts
    series: str
    series_key: tuple[Any, ...]
    rank: int = 0  # 1: the best score among the groups of its benchmark and mode
    phases: dict[str, Spread | None] = field(default_factory=dict)
    total_s: Spread | None = None  # per run: the sum of its phases, init to run_stop
    epochs_to_target: Spread | None = None
    batch_size: int | None = None
    nodes: int | None = None  # per run (per instance in weak mode)
    accelerators: int | None = None  # the job: a run's (strong) or all instances' (weak)
    rate_per_accelerator: float | None = None
    flops_per_sample: float | None = None
    peak_flops: float | None = None
    fraction_of_peak: float | None = None
    bytes_per_node: float | None = None
    host_memory_bytes: float | None = None
    local_storage_bytes: float | None = None

    @property
    def label(self) -> str:
        return self.score.group.system

    @property
    def benchmark(self) -> str:
        return self.score.group.benchmark

    @property
    def mode(self) -> str:
        return self.score.group.mode

    @property
    def staging_rate(self) -> float | None:
        """Bytes per second each node stages (its share over the median staging time)."""
        staging = self.phases.get("staging")
        if self.bytes_per_node is None or staging is None or staging.median <= 0:
            return None
        return self.bytes_per_node / staging.median


def _one(values: list[Any]) -> Any:
    """The value every run agrees on, None where they differ or none has one."""
    found = {v for v in values if v is not None}
    return found.pop() if len(found) == 1 else None


def _payload(benchmark: str) -> float | None:
    from sciperf.workloads import WORKLOADS, get
    if benchmark not in WORKLOADS:
        return None
    workload = get(benchmark)
    return float(workload.dataset.payload_bytes(workload.model()))


def summarise(score: Score, runs: list[RunFacts], notes: Notes) -> GroupStats:
    """A group's numbers; every gap is a note (see the module docstring)."""
    group = score.group
    facts = describe(group)
    stats = GroupStats(score, runs, facts, series_label(group), series_key(group, facts))
    name = group.label
    if facts.problem:
        notes.add(name, f"{facts.kind} {facts.problem}: no accelerator, memory or storage "
                        "facts; those columns are left empty")
    elif facts.missing:
        notes.add(name, f"{facts.kind} does not state {', '.join(facts.missing)}; those "
                        "columns are left empty")
    stats.phases = {p: Spread.of([r.phases[p] for r in runs]) for p in PHASES}
    lacking = sum(r.phases["staging"] is None for r in runs)
    if lacking:
        notes.add(f"{name} ({lacking} of {len(runs)})", "logs without staging_start/"
                  "staging_stop records; their staging is not shown (not taken as 0)")
    totals = [None if any(r.phases[p] is None for p in ("init", "training"))
              else sum(v for v in r.phases.values() if v is not None) for r in runs]
    stats.total_s = Spread.of(totals)
    stats.epochs_to_target = Spread.of([r.epochs_to_target for r in runs])
    stats.batch_size = _one([r.batch_size for r in runs])
    stats.nodes = _one([r.nodes for r in runs])
    if group.mode == WEAK:
        ranks = _instance_ranks(stats, runs, notes)
        stats.accelerators = sum(ranks) if all(ranks) else None  # type: ignore[arg-type]
    else:
        ranks = [r.ranks for r in runs]
        stats.accelerators = _one(ranks)
    stats.rate_per_accelerator = median([r.samples_per_s / n for r, n in zip(runs, ranks,
                                                                            strict=True)
                                         if r.samples_per_s and n])
    _compute(stats, runs, notes)
    _staging(stats, runs, notes)
    return stats


def _instance_ranks(stats: GroupStats, runs: list[RunFacts], notes: Notes) -> list[int | None]:
    """Each instance's accelerators in a throughput group, bounded by the job's (the
    description's nodes × accelerators per node over the instances: `instance_share`)."""
    facts = stats.system
    job = facts.job_nodes * facts.accelerators_per_node \
        if facts.job_nodes and facts.accelerators_per_node else None
    shares = [None if r.ranks is None else instance_share(
        r.ranks, job, len(runs), facts.accelerators_per_node or 1) for r in runs]
    logged = [r.ranks for r in runs]
    if shares != logged:
        notes.add(stats.score.group.label, f"the logs say {_one(logged) or 'more'} ranks per "
                  f"instance, the job's {job} accelerators over {len(runs)} instances: "
                  f"{_one(shares) or 'fewer'} per instance assumed")
    return shares


def _compute(stats: GroupStats, runs: list[RunFacts], notes: Notes) -> None:
    """FLOPs per sample, the accelerator's peak and the fraction achieved."""
    name, facts = stats.score.group.label, stats.system
    flops, why = train_flops(stats.benchmark)
    stats.flops_per_sample = flops
    if flops is None:
        notes.add(name, f"{why}; fraction of peak not computed")
        return
    precision = _one([(r.run.summary or {}).get("precision") for r in runs])
    if facts.peak_flops_per_node is not None:
        per_node = facts.peak_flops_per_node
        apn = facts.accelerators_per_node or 0
        stats.peak_flops = per_node / apn if apn > 0 else per_node
    elif facts.accelerators_per_node == 0:
        notes.add(name, "no accelerators in the system description; fraction of peak "
                        "not computed")
        return
    else:
        stats.peak_flops, why = accelerator_peak(facts.accelerator, precision)
        if stats.peak_flops is None:
            notes.add(name, f"{why}; fraction of peak not computed")
            return
    stats.fraction_of_peak = fraction_of_peak(stats.rate_per_accelerator, flops,
                                              stats.peak_flops)


def _staging(stats: GroupStats, runs: list[RunFacts], notes: Notes) -> None:
    """The dataset bytes each node stages, beside the node's memory and local storage."""
    stats.host_memory_bytes = stats.system.host_memory_bytes
    stats.local_storage_bytes = stats.system.local_storage_bytes
    payload = _payload(stats.benchmark)
    samples = _one([r.dataset_samples for r in runs])
    if payload is None or samples is None or not stats.nodes:
        what = "no sample size (not a sciperf workload)" if payload is None else \
            "no train_samples/eval_samples or number_of_nodes in the logs"
        notes.add(stats.score.group.label, f"{what}; dataset bytes per node not computed")
        return
    stats.bytes_per_node = payload * samples / stats.nodes


def rank(groups: list[GroupStats]) -> list[GroupStats]:
    """Groups by benchmark, mode (strong first), then score: strong by time to train
    (shortest first), weak by models per minute (most first); unscored ones last."""
    def key(g: GroupStats) -> tuple[Any, ...]:
        s = g.score
        if g.mode == WEAK:
            value = -(s.models_per_minute or 0.0)
            missing = s.models_per_minute is None
        else:
            value, missing = (s.minutes or 0.0), s.minutes is None
        return (g.benchmark, g.mode, missing, value, g.label)

    ordered = sorted(groups, key=key)
    place: dict[tuple[str, str], int] = {}
    for g in ordered:
        place[(g.benchmark, g.mode)] = g.rank = place.get((g.benchmark, g.mode), 0) + 1
    return ordered


def scaling_rows(groups: list[GroupStats], notes: Notes) -> list[dict[str, Any]]:
    """Per machine (series) and benchmark seen at several scales: rate per accelerator and
    its efficiency relative to the smallest scale. Strong and weak jobs of one machine
    share the series, so a weak job against the strong run is the weak-scaling
    efficiency (the smallest scale of a size comes strong first)."""
    series: dict[tuple[Any, ...], list[GroupStats]] = {}
    for g in groups:
        if g.accelerators and g.rate_per_accelerator:
            series.setdefault((g.benchmark, g.series_key), []).append(g)
    rows = []
    for (benchmark, _), members in series.items():
        members.sort(key=lambda g: (g.accelerators, g.mode != STRONG, g.label))
        base = members[0]
        for g in members:  # one machine, one name in every table and legend
            g.series = base.series
        if len({(g.accelerators, g.mode) for g in members}) < 2:
            notes.add(f"{base.series} / {benchmark}", "one scale only; no scaling efficiency")
            continue
        for g in members:
            rate, first = g.rate_per_accelerator or 0.0, base.rate_per_accelerator or 0.0
            rows.append({"benchmark": benchmark, "mode": g.mode, "series": base.series,
                         "system": g.label, "accelerators": g.accelerators,
                         "rate_per_accelerator": rate, "efficiency": rate / first})
    return sorted(rows, key=lambda r: (r["benchmark"], r["series"], r["accelerators"]))
