"""`sciperf report RESULTS… [--out REPORT_DIR]`: runs compared in Markdown + PNG, one HTML
page and report.json — from two of our runs to a whole published round.

Everything is read from the MLLOG files (so published logs and ours are treated alike),
enriched by summary.json where sciperf wrote one (framework, ranks, measured samples/s)
and by a submission's systems/<system>.json (accelerator, host memory, local storage).
Groups and their scores are the scorer's (`sciperf.results.score`), so the numbers in the
tables are the official ones. A round is read per group (`report_groups`): per benchmark
and mode the groups ranked by score, with the time to train split into phases (medians,
ranges); epochs to target against global batch size beside mlperf-logging's RCPs
(`report_rcp`); throughput per accelerator against scale, scaling efficiency and the
fraction of peak (`report_compute`); staging against the bytes each node holds. The
figures (`report_figures`) draw one mark per group, one panel per benchmark. What a group
lacks is a note in the report, never a zero.

Time breakdown from the log: `sciperf.results.phases` (evaluation that runs beside
training counts as training). Samples/s: `sciperf.results.report_compute`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sciperf.data import atomic
from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.results import report_figures as figures
from sciperf.results import report_tables as tables
from sciperf.results.logs import find_logs, quality_target
from sciperf.results.mllog import RULESET
from sciperf.results.phases import PHASES, phases
from sciperf.results.report_compute import samples_per_epoch_num
from sciperf.results.report_document import Block, markdown, page
from sciperf.results.report_groups import (
    GroupStats,
    Notes,
    rank,
    scaling_rows,
    summarise,
)
from sciperf.results.report_rcp import RcpPoint, rcp_points
from sciperf.results.score import Group, Run, group_runs, load_runs, score_group
from sciperf.results.summary import summary_beside
from sciperf.results.tree import STRONG, WEAK, tree_place

__all__ = ["PHASES", "RunFacts", "build", "phases", "report", "run_facts"]
REPORT_FILES = ("report.md", "report.html", "report.json")


@dataclass
class RunFacts:
    """What the report shows for one run."""

    run: Run
    group: str
    series: str  # the group's system without its scale (our runs' scaling series)
    label: str
    ranks: int | None
    minutes: float | None
    epochs: int
    epochs_to_target: int | None
    samples_per_s: float | None
    phases: dict[str, float | None]  # seconds per phase; None: the log has no records
    curve: list[tuple[int, float, float]]  # (epoch, minutes since run_start, metric)
    batch_size: int | None = None
    nodes: int | None = None
    dataset_samples: int | None = None  # train_samples + eval_samples (staged)


def _reached(value: float, target: tuple[str, float, bool] | None) -> bool:
    if target is None:
        return False
    _, goal, higher = target
    return value >= goal if higher else value <= goal


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_facts(run: Run, group: Group) -> RunFacts:
    """The per-run figures from the log (+ summary.json)."""
    log, summary = run.log, run.summary or {}
    target = quality_target(log.benchmark or "")
    start = log.run_start_ms or 0.0
    curve = [(e.num, (e.metric_ms - start) / 60000, e.metric) for e in log.epochs
             if e.metric is not None and e.metric_ms is not None]
    epochs = curve[-1][0] if curve else len(log.epochs)
    hit = next((num for num, _, m in curve if _reached(m, target)), None)
    parts = phases(log)
    rate = summary.get("samples_per_s")
    train_samples = log.value("train_samples")
    training = parts["training"]
    gbs = _int(log.value("global_batch_size"))
    if rate is None and isinstance(train_samples, int) and train_samples > 0 and training:
        per_unit = samples_per_epoch_num(log.benchmark or "", gbs, train_samples) if gbs \
            else float(train_samples)
        rate = per_unit * epochs / training
    ranks = summary.get("world_size") or log.ranks
    parent = log.path.parent
    label = f"{parent.name}/{log.path.stem}" if parent.name else log.path.stem
    train, evals = _int(train_samples), _int(log.value("eval_samples"))
    return RunFacts(run, group.label, group.series, label, ranks, log.minutes, epochs,
                    hit if run.converged else None, rate, parts, curve,
                    gbs, _int(log.value("number_of_nodes")),
                    train + evals if train is not None and evals is not None else None)


def _with_checked_summaries(targets: Sequence[str | Path], ruleset: str) -> list[Run]:
    """The scorer's runs, each with its summary read by the checked loader: a corrupt
    summary.json stops the report (one line naming file and field) instead of being
    dropped, which would put the run in a "?" group of a wrong table. Checked before the
    logs are parsed and checked, so a bad summary fails fast."""
    summaries = {log: summary_beside(log) for log in find_logs(list(targets))
                 if tree_place(log) is None}
    runs = load_runs(targets, ruleset)
    for run in runs:
        if tree_place(run.path) is None:
            run.summary = summaries[run.path] if run.path in summaries \
                else summary_beside(run.path)
    return runs


@dataclass
class Document:
    """A built report: its blocks (Markdown and HTML) and the same numbers as JSON."""

    blocks: list[Block]
    data: dict[str, object]


def _groups(targets: Sequence[str | Path], ruleset: str,
            notes: Notes) -> tuple[list[GroupStats], list[RunFacts]]:
    """Every group scored and summarised, ranked."""
    groups = group_runs(_with_checked_summaries(targets, ruleset))
    bar = Progress(len(groups), "report: scoring groups", unit="groups",
                   enabled=len(groups) > 10)
    stats = []
    for group in groups:
        facts = [run_facts(r, group) for r in group.runs]
        stats.append(summarise(score_group(group, ruleset), facts, notes))
        bar.update()
    ranked = rank(stats)
    return ranked, [f for g in ranked for f in g.runs]


def _rcps(groups: list[GroupStats], ruleset: str,
          notes: Notes) -> dict[str, tuple[RcpPoint, ...]]:
    found = {}
    for benchmark in sorted({g.benchmark for g in groups}):
        points, why = rcp_points(benchmark, ruleset)
        if why:
            notes.add(benchmark, f"{why}; epochs to target drawn without RCPs")
        found[benchmark] = points
    return found


def build_document(targets: Sequence[str | Path], folder: Path, ruleset: str = RULESET,
                   place: Path | None = None) -> Document:
    """Score, summarise and plot; PNGs go to `folder` (`place`: where it goes once built
    aside, the folder a failed write's line names)."""
    def png(name: str) -> tuple[Path, Path]:  # (where it is written, where it is named)
        return folder / name, (folder if place is None else place) / name

    found = Notes()
    groups, facts = _groups(targets, ruleset, found)
    rcps = _rcps(groups, ruleset, found)
    scaling = scaling_rows(groups, found)
    notes = found.lines()
    blocks: list[Block] = [
        ("h1", "sciperf report"),
        ("p", f"{len(facts)} result logs in {len(groups)} groups from "
              f"{', '.join(str(t) for t in targets)}; converged = the official mlperf-logging "
              f"checker (hpc {ruleset}) passes the log; scores as mlperf-logging's result "
              f"summarizer computes them. Groups are ranked per benchmark and mode: {STRONG} "
              f"by time to train, {WEAK} by models per minute."),
        ("h2", "Scores per system / framework"), ("table", tables.group_table(groups))]
    figures.plot_time_to_train(groups, *png("time_to_train.png"))
    blocks += [
        ("h2", "Time to train by phase"),
        ("img", ("time_to_train.png", "per benchmark and mode, groups ranked by score: "
                 "median seconds of init, staging, training, evaluation; whisker: fastest "
                 "to slowest run")),
        ("table", tables.phase_table(groups))]
    figures.plot_epochs(groups, rcps, *png("epochs_to_target.png"))
    blocks += [
        ("h2", "Convergence"),
        ("img", ("epochs_to_target.png", "epochs to target (median, range) against global "
                 "batch size, beside the reference convergence points")),
        ("table", tables.convergence_table(groups, rcps))]
    for benchmark in sorted({g.benchmark for g in groups}):
        name = f"convergence_{benchmark}.png"
        figures.plot_curves(benchmark, groups, *png(name))
        blocks.append(("img", (name, f"{benchmark}: eval metric per group against epoch "
                               "and minutes")))
    figures.plot_throughput(groups, scaling, *png("throughput.png"))
    blocks += [
        ("h2", "Compute"),
        ("img", ("throughput.png", "training samples/s per accelerator against the "
                 "accelerators of the job; lines join one machine at several scales")),
        ("table", tables.compute_table(groups))]
    if scaling:
        blocks += [("p", "Scaling efficiency: samples/s per accelerator over that of the "
                         "machine's smallest scale (1.0 is ideal)."),
                   ("table", tables.scaling_table(scaling))]
    figures.plot_staging(groups, *png("staging.png"))
    blocks += [
        ("h2", "Staging"),
        ("p", "Dataset bytes per node: (train_samples + eval_samples) × the workload's "
              "uncompressed sample size, over number_of_nodes (each node stages its "
              "share); node memory and local storage from the system descriptions."),
        ("img", ("staging.png", "staging time against the bytes each node stages and "
                 "against the node's memory and local storage")),
        ("table", tables.staging_table(groups))]
    if notes:
        blocks += [("h2", "Notes: what is missing and what was assumed"), ("list", notes)]
    blocks += [("h2", "Runs"), ("table", tables.run_table(facts))]
    data = {"targets": [str(t) for t in targets], "ruleset": ruleset, "runs": len(facts),
            **tables.as_json(groups, rcps, scaling, notes)}
    return Document(blocks, data)


def build(targets: Sequence[str | Path], folder: Path, ruleset: str = RULESET,
          place: Path | None = None) -> list[Block]:
    """The document blocks of :func:`build_document`."""
    return build_document(targets, folder, ruleset, place).blocks


def _check_replaceable(out: Path) -> None:
    """`out` may be replaced whole only when it holds nothing but a report's own files
    (report.md, report.html, report.json, PNG plots): notes or folders a user kept beside a report
    were deleted with it."""
    if not out.exists():
        return
    if not out.is_dir():
        raise SciperfError(f"{out} exists and is not a sciperf report directory")
    found = sorted(out.iterdir())
    if found and not (out / "report.md").is_file():
        raise SciperfError(f"{out} exists and is not a sciperf report directory")
    foreign = [p.name for p in found if not _report_file(p)]
    if foreign:
        raise SciperfError(f"{out} holds files a report does not write ({', '.join(foreign)}); "
                           "replacing the report would delete them: move them or name "
                           "another --out")


def _report_file(path: Path) -> bool:
    """A file `report` writes (and so may replace)."""
    return path.is_file() and (path.name in REPORT_FILES or path.suffix == ".png")


def report(targets: Sequence[str | Path], out: str | Path, ruleset: str = RULESET) -> Path:
    """Write report.md, report.html, report.json and the PNGs to `out`, replacing a previous
    report whole. The report is built aside and renamed (`sciperf.data.atomic.folder_aside`):
    whole folders, not file by file, because a new report replaces an old one, which must
    stay as it was when the new one fails (a full disk: one line naming the file), and a
    report is never a mix of two."""
    out = Path(out)
    _check_replaceable(out)
    check_output_dir(out, aside=True)
    with atomic.folder_aside(out, replace=True) as tmp:
        doc = build_document(targets, tmp, ruleset, place=out)
        for name, text in (("report.md", markdown(doc.blocks)),
                           ("report.json", json.dumps(doc.data, indent=1) + "\n"),
                           ("report.html", page(doc.blocks, tmp, "sciperf report"))):
            atomic.write_text(tmp / name, text, named=out / name)
    return out
