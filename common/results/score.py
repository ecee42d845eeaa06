"""`sciperf score DIR…`: MLPerf HPC scores of result logs, as the official summarizer rules it.

Logs are grouped by system / benchmark / mode. In a submission tree
(`<org>/results/<system>/{strong,weak}/<benchmark>/`) the folders say all three; for our
own run directories the system is the MLLOG `submission_platform` plus the framework and
the number of ranks from summary.json (a system is one scale), and a directory holding
several instances' logs is one throughput job.

A run counts as converged exactly when mlperf-logging's result summarizer counts it: when
the official compliance checker (hpc ruleset, closed/open rules, quality target) passes
it. Time to solution (strong): the olympic mean of run_stop − run_start in minutes — sort,
drop the fastest and the slowest; one non-converged run is allowed and is the dropped
slowest, more make the group invalid. Closed-division strong groups get mlperf-logging's
RCP review (reference convergence points): a group converging faster than the reference
mean, within the allowed speed-up, has its mean multiplied by RCP mean / its mean epochs
— the factor the package checker writes as `scaling.json` before the summarizer scores.
A `scaling.json` already in the folder (a review committee's) takes precedence. sciperf
never writes into the trees it scores; the summarizer, run bare, does (first run without
the factor, later runs with it), which is why its numbers depend on what ran before.
Throughput (weak): TTTa = latest run_stop − earliest run_start over the converged
instances, in minutes, and models per minute. The rules' run counts (cosmoflow 10,
deepcam 5, oc20 5, openfold 10) come from mlperf-logging itself.

Which files of a submission tree are scored is the summarizer's folder rules, applied by
`sciperf.results.tree.select`; what they leave out is named in "skipped" lines.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError
from sciperf.results.logs import RunLog, parse_log
from sciperf.results.mllog import RULESET
from sciperf.results.summary import summary_beside
from sciperf.results.throughput import models_per_minute, tta_minutes
from sciperf.results.tree import SCALING, STRONG, WEAK, Selection, select, tree_place

MAX_DROPPED = 1  # olympic scoring: one non-converged run may be the dropped slowest


def hpc_benchmarks() -> dict[str, int]:
    """MLPerf HPC benchmark → runs (strong) or converged instances (weak) the rules
    require, from mlperf-logging."""
    from mlperf_logging.benchmark_meta import get_result_file_counts
    return {name: int(n) for name, n in get_result_file_counts("hpc").items()}


def required_runs(benchmark: str, source: Path | None = None) -> int:
    """The run count the rules require of `benchmark`; an unknown one is an error naming
    the log it came from (`source`)."""
    counts = hpc_benchmarks()
    if benchmark not in counts:
        where = f"{source}: " if source else ""
        raise SciperfError(f"{where}unknown MLPerf HPC benchmark '{benchmark}'; valid: "
                           f"{', '.join(sorted(counts))}")
    return counts[benchmark]


@dataclass(eq=False)  # a run is itself: two copies of one log are two runs
class Run:
    """One scored log: parsed events, its summary.json (ours only) and the checker's word."""

    log: RunLog
    converged: bool
    problem: str | None = None
    summary: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        return self.log.path


@dataclass
class Group:
    """Logs scored together: one system × benchmark × mode (weak: one throughput job)."""

    system: str
    benchmark: str
    mode: str
    org: str | None = None
    framework: str | None = None
    folder: Path | None = None  # the submission-tree folder (scaling.json lives there)
    runs: list[Run] = field(default_factory=list)
    series: str = ""  # the system without its scale: runs of one series at several scales

    @property
    def label(self) -> str:
        return f"{self.system} / {self.benchmark} / {self.mode}"

    @property
    def converged(self) -> list[Run]:
        return [r for r in self.runs if r.converged]


@dataclass
class Score:
    """The outcome for a group: numbers (None where the rules give none) and a verdict."""

    group: Group
    required: int
    valid: bool
    verdict: str
    olympic_minutes: float | None = None  # strong: olympic mean before scaling
    scaling_factor: float = 1.0
    scaling_source: str | None = None  # "scaling.json" or "rcp" when the factor is not 1
    rcp: str | None = None  # closed strong groups: the RCP checker's verdict
    minutes: float | None = None  # strong: time to solution; weak: TTTa
    number_of_models: int | None = None  # weak
    instance_scale: int | None = None  # weak
    models_per_minute: float | None = None  # weak

    def as_dict(self) -> dict[str, Any]:
        g = self.group
        return {"system": g.system, "org": g.org, "framework": g.framework,
                "benchmark": g.benchmark, "mode": g.mode, "runs": len(g.runs),
                "converged": len(g.converged), "required": self.required, "valid": self.valid,
                "verdict": self.verdict, "minutes": self.minutes,
                "olympic_minutes": self.olympic_minutes, "scaling_factor": self.scaling_factor,
                "scaling_source": self.scaling_source, "rcp": self.rcp,
                "number_of_models": self.number_of_models,
                "instance_scale": self.instance_scale,
                "models_per_minute": self.models_per_minute,
                "files": [{"path": str(r.path), "minutes": r.log.minutes,
                           "converged": r.converged, "problem": r.problem} for r in g.runs]}


def olympic_mean(minutes: list[float], dropped: int) -> float | None:
    """Mean after dropping the fastest and the slowest; `dropped` runs already missing
    (non-converged) count as the slowest. Same slice and arithmetic as the summarizer."""
    ordered = sorted(minutes)
    kept = ordered[MAX_DROPPED:len(ordered) - (MAX_DROPPED - dropped)]
    if not kept:
        return None
    return sum(kept) * 1.0 / len(kept)


def scaling_factor(folder: Path | None) -> float:
    """A review committee's `scaling.json` factor for a result folder (1.0 without one)."""
    file = folder / SCALING if folder else None
    if file is None or not file.is_file():
        return 1.0
    try:
        factor = json.loads(file.read_text())["scaling_factor"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # deep nesting
        raise SciperfError(f"{file}: no readable scaling_factor ({exc})") from None
    # json reads NaN and Infinity; a factor ≤ 0 would make a negative or zero score
    if isinstance(factor, bool) or not isinstance(factor, int | float) \
            or not math.isfinite(factor) or factor <= 0:
        raise SciperfError(f"{file}: scaling_factor={factor!r} must be a finite number > 0")
    return float(factor)


def rcp_review(group: Group, ruleset: str = RULESET) -> tuple[str | None, float]:
    """mlperf-logging's RCP check of a closed strong group: (verdict, normalisation factor).

    Open-division groups get (None, 1.0): the rules do not hold them to the reference
    convergence. The checker reads a directory of result_*.txt, so logs outside a
    submission tree are linked into a temporary one; nothing is written next to the logs.
    """
    if any(r.log.division != "closed" for r in group.runs):
        return None, 1.0
    if len(group.runs) < 3:  # the check averages after dropping the fastest and slowest
        return f"not checked: {len(group.runs)} run(s), the RCP mean needs at least 3", 1.0
    from mlperf_logging.rcp_checker import rcp_checker

    from sciperf.data import atomic
    from sciperf.results.check import scratch
    with scratch("sciperf-rcp-") as tmp:
        for i, run in enumerate(group.runs):
            with atomic.failing_as(tmp / f"result_{i}.txt"):
                os.symlink(run.path.resolve(), tmp / f"result_{i}.txt")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)  # its root-logger lines ("Run incomplete or did
        try:  # not converge. Marking as infinite.") repeat what the table's verdict says
            ok, message, factor = rcp_checker.check_directory(
                str(tmp), "hpc", ruleset, False, False, rcp_pass="pruned_rcps", set_scaling=False)
        except Exception as exc:  # the summarizer, too, scores on when its RCP step fails
            return f"error: {exc}", 1.0
        finally:
            logging.disable(previous)
    factor = float(factor)
    if not math.isfinite(factor):
        return f"not checked: no convergence epochs to compare ({message})", 1.0
    return f"{'pass' if ok else 'FAIL'}: {message}", factor if ok else 1.0


def group_scaling(group: Group, ruleset: str = RULESET) -> tuple[float, str | None, str | None]:
    """(factor, its source, RCP verdict): a committee's scaling.json wins over the RCP factor."""
    rcp, rcp_factor = rcp_review(group, ruleset)
    committee = scaling_factor(group.folder)
    if group.folder is not None and (group.folder / SCALING).is_file():
        return committee, SCALING, rcp
    return rcp_factor, ("rcp" if rcp_factor != 1.0 else None), rcp


def score_strong(group: Group, ruleset: str = RULESET) -> Score:
    """Time to solution of a strong-scaling group, with its verdict."""
    required = required_runs(group.benchmark, group.runs[0].path)
    n, ok = len(group.runs), group.converged
    dropped = n - len(ok)
    factor, source, rcp = group_scaling(group, ruleset)
    scaled = {"scaling_factor": factor, "scaling_source": source, "rcp": rcp}
    if dropped > MAX_DROPPED:
        return Score(group, required, False, f"INVALID: {dropped} of {n} runs did not converge "
                     f"(olympic scoring drops at most {MAX_DROPPED})", **scaled)
    raw = olympic_mean([r.log.minutes for r in ok], dropped)
    minutes = raw * factor if raw is not None else None
    if n < required:
        verdict = (f"TOO FEW RUNS: {n} of the {required} {group.benchmark} requires "
                   "(indicative only)")
        return Score(group, required, False, verdict, raw, minutes=minutes, **scaled)
    if minutes is None:
        return Score(group, required, False, "INVALID: no run left after olympic dropping",
                     raw, **scaled)
    extra = ", 1 non-converged run dropped" if dropped else ""
    if rcp is not None and rcp.startswith("FAIL"):
        extra += " (RCP check failed: the package checker rejects it without review)"
    return Score(group, required, True, f"VALID: {n} runs{extra}", raw, minutes=minutes,
                 **scaled)


def score_weak(group: Group) -> Score:
    """Throughput (TTTa over converged instances) of a weak-scaling group."""
    required = required_runs(group.benchmark, group.runs[0].path)
    ok, n = group.converged, len(group.runs)
    score = Score(group, required, False, "", number_of_models=len(ok))
    if ok:
        score.minutes = tta_minutes([(r.log.run_start_ms, r.log.run_stop_ms) for r in ok])
        score.models_per_minute = models_per_minute(len(ok), score.minutes)
        scales = {r.log.ranks for r in ok}
        score.instance_scale = scales.pop() if len(scales) == 1 else None
    if n < required:
        score.verdict = (f"TOO FEW RUNS: {n} instances, {group.benchmark} requires at least "
                         f"{required} (indicative only)")
    elif len(ok) < required:
        score.verdict = (f"INVALID: only {len(ok)} of {n} instances converged, "
                         f"{group.benchmark} requires {required}")
    elif score.instance_scale is None:
        score.verdict = "INVALID: the instances differ in scale (number_of_nodes × accelerators)"
    else:
        score.valid = True
        score.verdict = f"VALID: {len(ok)} converged instances of {n}"
    return score


def _check_all(paths: Sequence[Path], ruleset: str) -> list[tuple[bool, str | None]]:
    """The official checker on every file, several processes at a time; the first file
    refused (the checker's time limit) ends it (map drops the checks not yet started)."""
    from sciperf.results.check import check_log

    def one(path: Path) -> tuple[bool, str | None]:
        verdict = check_log(path, ruleset=ruleset)
        return verdict.ok, None if verdict.ok else (verdict.problems or ["checker failed"])[0]

    workers = max(1, min(len(paths), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, paths))


def _our_mode(run: Run, folder_instances: dict[Path, set[int]]) -> str:
    """Throughput mode when the run had several instances (its summary) or, without a
    summary, when its folder's logs carry several instance indices: a throughput run's
    logs are one per instance (`instance` / `instance_id` 0…N−1), whereas the strong runs
    of one folder all carry the same index or none (NVIDIA's strong logs say instance 0)."""
    if run.summary is not None:
        return WEAK if int(run.summary.get("instances") or 1) > 1 else STRONG
    return WEAK if len(folder_instances.get(run.path.parent, set())) > 1 else STRONG


def _instances_by_folder(runs: Sequence[Run]) -> dict[Path, set[int]]:
    """Each folder's instance indices, over the logs of it being scored."""
    found: dict[Path, set[int]] = {}
    for run in runs:
        if (index := run.log.instance) is not None:
            found.setdefault(run.path.parent, set()).add(index)
    return found


def _group_key(run: Run, folder_instances: dict[Path, set[int]]) -> tuple[Any, ...]:
    """Identity of the group a run belongs to (and its label fields)."""
    place = tree_place(run.path)
    if place is not None:
        return (place.org_dir.name, place.system, None, None, place.benchmark, place.mode,
                run.path.parent)
    log = run.log
    if not log.benchmark:
        raise SciperfError(f"{run.path}: no submission_benchmark in the log (cannot group it)")
    framework = (run.summary or {}).get("framework")
    ranks = (run.summary or {}).get("world_size") or log.ranks
    mode = _our_mode(run, folder_instances)
    folder = run.path.parent if mode == WEAK else None
    return (log.org, log.platform or "unknown-platform", framework, ranks, log.benchmark, mode,
            folder)


def load_runs(targets: Sequence[str | Path], ruleset: str = RULESET) -> list[Run]:
    """Parse and check every result file under `targets` that the summarizer would score."""
    return _load(select(targets).files, ruleset)


def _load(paths: list[Path], ruleset: str) -> list[Run]:
    """Parse and check `paths` (the official checker decides convergence)."""
    logs = [parse_log(p) for p in paths]
    checked = _check_all(paths, ruleset)
    return [Run(log, ok, problem, None if tree_place(log.path) else summary_beside(log.path))
            for log, (ok, problem) in zip(logs, checked, strict=True)]


def group_runs(runs: list[Run]) -> list[Group]:
    """Runs → groups, in a stable order (system, benchmark, mode)."""
    groups: dict[tuple[Any, ...], Group] = {}
    instances = _instances_by_folder(runs)
    for run in runs:
        key = _group_key(run, instances)
        org, system, framework, ranks, benchmark, mode, folder = key
        tree = tree_place(run.path) is not None
        if key not in groups:
            series = f"{system} ({framework})" if framework else system
            label = system if tree else f"{system} ({framework or '?'}, {ranks} "\
                f"rank{'s' if ranks != 1 else ''})"
            groups[key] = Group(label, benchmark, mode, org, framework,
                                folder if tree else None, series=series)
        groups[key].runs.append(run)
    return sorted(groups.values(), key=lambda g: (g.system, g.benchmark, g.mode,
                                                  str(g.runs[0].path)))


def score_group(group: Group, ruleset: str = RULESET) -> Score:
    """The group's score by the rules of `ruleset` (its RCPs for closed strong groups)."""
    return score_weak(group) if group.mode == WEAK else score_strong(group, ruleset)


class Scores(list[Score]):
    """The groups' scores, carrying the selection's lines (what was skipped and why), so
    the table and the CLI can say them without a second walk of the tree."""

    def __init__(self, scores: Iterable[Score], selection: Selection | None = None) -> None:
        super().__init__(scores)
        self.selection = selection or Selection()


def score(targets: Sequence[str | Path], ruleset: str = RULESET) -> Scores:
    """Every group's score under `targets` (files or directories), by the summarizer's rules."""
    sel = select(targets)
    return Scores((score_group(g, ruleset) for g in group_runs(_load(sel.files, ruleset))),
                  sel)


def skip_lines(scores: Sequence[Score]) -> list[str]:
    """The lines about what the folder rules left out (none for a plain list of scores)."""
    return scores.selection.lines() if isinstance(scores, Scores) else []


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def score_line(s: Score) -> str:
    """The figure of a score in words."""
    if s.minutes is None:
        return "-"
    if s.group.mode == WEAK:
        return (f"{s.number_of_models} models in {_fmt(s.minutes)} min = "
                f"{_fmt(s.models_per_minute)} models/min (instance scale "
                f"{s.instance_scale if s.instance_scale is not None else '-'})")
    scaled = ""
    if s.scaling_factor != 1.0 and s.olympic_minutes is not None:
        scaled = (f" (olympic {_fmt(s.olympic_minutes, 4)} × {s.scaling_source} "
                  f"{s.scaling_factor:.6g})")
    return f"{_fmt(s.minutes, 4)} min{scaled}"


def score_table(scores: list[Score]) -> str:
    """Markdown table: one row per group."""
    lines = ["| system | benchmark | mode | runs | converged | score | RCP | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for s in scores:
        g = s.group
        lines.append(f"| {g.system} | {g.benchmark} | {g.mode} | {len(g.runs)} | "
                     f"{len(g.converged)} | {score_line(s)} | {s.rcp or '-'} | {s.verdict} |")
    for s in scores:
        for run in s.group.runs:
            if not run.converged:
                lines.append(f"not converged: {run.path}: {run.problem}")
    return "\n".join(lines + skip_lines(scores))
