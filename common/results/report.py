"""`sciperf report DIR… [--out REPORT_DIR]`: runs compared in Markdown + PNG and one HTML page.

Everything is read from the MLLOG files (so published logs and ours are treated alike),
enriched by summary.json where sciperf wrote one (framework, ranks, measured samples/s).
Groups and their scores are the scorer's (`sciperf.results.score`), so the numbers in the tables
are the official ones. The report shows, per run and per group: time to train, epochs to
the target, samples/s, the time breakdown (init, staging, training, evaluation),
convergence curves against epochs and wall time with the target drawn, and — when runs at
several scales exist — throughput against ranks with the scaling efficiency.

Time breakdown from the log: init = init_start → init_stop less staging done inside it;
staging = staging_start → staging_stop (inside init from hpc 3.0, inside the run before);
evaluation = Σ eval_start → eval_stop; training = run time − evaluation − staging in the
run. Samples/s = summary.json's measured value, else train_samples × epochs / training.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf.data import atomic
from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError
from sciperf.results.logs import RunLog, find_logs, quality_target
from sciperf.results.mllog import RULESET
from sciperf.results.score import Group, Run, Score, group_runs, load_runs, score_group, score_line
from sciperf.results.summary import summary_beside
from sciperf.results.tree import tree_place

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
PHASES = ("init", "staging", "training", "evaluation")


@dataclass
class RunFacts:
    """What the report shows for one run."""

    run: Run
    group: str
    series: str  # the group's system without its scale (scaling curves)
    label: str
    ranks: int | None
    minutes: float | None
    epochs: int
    epochs_to_target: int | None
    samples_per_s: float | None
    phases: dict[str, float]  # seconds per phase
    curve: list[tuple[int, float, float]]  # (epoch, minutes since run_start, metric)


def _seconds(ms: float | None) -> float:
    return 0.0 if ms is None else max(ms, 0.0) / 1000


def phases(log: RunLog) -> dict[str, float]:
    """Seconds of init, staging, training and evaluation (see the module docstring)."""
    start, stop = log.run_window
    staging = _seconds(log.interval_ms("staging_start", "staging_stop"))
    stage_events = log.all("staging_start")
    in_run = bool(stage_events) and start is not None and stage_events[0].time_ms >= start
    init = _seconds(log.interval_ms("init_start", "init_stop")) - (0.0 if in_run else staging)
    evaluation = sum(_seconds(e.eval_stop_ms - e.eval_start_ms) for e in log.epochs
                     if e.eval_start_ms is not None and e.eval_stop_ms is not None)
    run = _seconds(stop - start) if start is not None and stop is not None else 0.0
    training = run - evaluation - (staging if in_run else 0.0)
    return {"init": max(init, 0.0), "staging": staging, "training": max(training, 0.0),
            "evaluation": evaluation}


def _reached(value: float, target: tuple[str, float, bool] | None) -> bool:
    if target is None:
        return False
    _, goal, higher = target
    return value >= goal if higher else value <= goal


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
    if rate is None and isinstance(train_samples, int | float) and parts["training"] > 0:
        rate = train_samples * epochs / parts["training"]
    ranks = summary.get("world_size") or log.ranks
    parent = log.path.parent
    label = f"{parent.name}/{log.path.stem}" if parent.name else log.path.stem
    return RunFacts(run, group.label, group.series, label, ranks, log.minutes, epochs,
                    hit if run.converged else None, rate, parts, curve)


# --- plots -----------------------------------------------------------------------------------
# Each plot is saved to `path` through the atomic helper: written aside, renamed when whole;
# a refused write (a full disk) is one line naming `named`, the file's place in the report.

def _figure(width: float = 7.0, height: float = 4.0) -> Any:
    from matplotlib.figure import Figure  # Agg canvas, no pyplot global state
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _colors(groups: list[str]) -> dict[str, str]:
    return {g: COLORS[i % len(COLORS)] for i, g in enumerate(groups)}


def plot_convergence(facts: list[RunFacts], benchmark: str, x: str, path: Path,
                     named: Path | None = None) -> Any:
    """Eval metric vs epoch (x="epoch") or vs minutes since run_start (x="time")."""
    fig = _figure()
    ax = fig.add_subplot()
    colors = _colors(list(dict.fromkeys(f.group for f in facts)))
    seen: set[str] = set()
    for f in facts:
        xs = [c[0] if x == "epoch" else c[1] for c in f.curve]
        ax.plot(xs, [c[2] for c in f.curve], marker=".", lw=1, color=colors[f.group],
                alpha=0.8, label=None if f.group in seen else f.group)
        seen.add(f.group)
    target = quality_target(benchmark)
    if target is not None:
        ax.axhline(target[1], color="black", ls="--", lw=1, label=f"target {target[1]}")
    ax.set_xlabel("epoch" if x == "epoch" else "minutes since run_start")
    ax.set_ylabel(target[0] if target else "eval metric")
    ax.set_title(f"{benchmark}: convergence")
    ax.legend(fontsize=7)
    atomic.save_figure(fig, path, named=named)
    return fig


def plot_breakdown(facts: list[RunFacts], path: Path, named: Path | None = None) -> Any:
    """Stacked bars: seconds of each phase per run."""
    fig = _figure(7.0, max(2.5, 0.3 * len(facts) + 1.2))
    ax = fig.add_subplot()
    left = [0.0] * len(facts)
    for i, phase in enumerate(PHASES):
        widths = [f.phases[phase] / 60 for f in facts]
        ax.barh(range(len(facts)), widths, left=left, color=COLORS[i], label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(range(len(facts)), [f"{f.group}: {f.label}" for f in facts], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("minutes")
    ax.set_title("time breakdown per run")
    ax.legend(fontsize=7)
    atomic.save_figure(fig, path, named=named)
    return fig


def plot_time_to_train(scores: list[Score], facts: list[RunFacts], path: Path,
                       named: Path | None = None) -> Any:
    """Each run's time to train (dots) and each group's score (bar)."""
    fig = _figure(7.0, max(2.5, 0.45 * len(scores) + 1.2))
    ax = fig.add_subplot()
    names = [s.group.label for s in scores]
    ax.barh(range(len(scores)), [s.minutes or 0.0 for s in scores], color="#cccccc",
            label="score (olympic mean / TTTa)")
    for i, s in enumerate(scores):
        mins = [f.minutes for f in facts if f.run in s.group.runs and f.minutes is not None]
        ax.scatter(mins, [i] * len(mins), s=12, color=COLORS[0], zorder=3,
                   label="runs" if i == 0 else None)
    ax.set_yticks(range(len(scores)), names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("minutes")
    ax.set_title("time to train")
    ax.legend(fontsize=7)
    atomic.save_figure(fig, path, named=named)
    return fig


def scaling_rows(facts: list[RunFacts]) -> list[dict[str, Any]]:
    """Mean samples/s per (benchmark, framework/system, ranks) and the efficiency relative
    to the smallest scale: (rate_n / rate_base) / (n / base)."""
    series: dict[tuple[str, str], dict[int, list[float]]] = {}
    for f in facts:
        if f.ranks and f.samples_per_s:
            key = (f.run.log.benchmark or "?", f.series)
            series.setdefault(key, {}).setdefault(int(f.ranks), []).append(f.samples_per_s)
    rows = []
    for (benchmark, group), by_ranks in sorted(series.items()):
        if len(by_ranks) < 2:
            continue
        base = min(by_ranks)
        base_rate = sum(by_ranks[base]) / len(by_ranks[base])
        for ranks in sorted(by_ranks):
            rate = sum(by_ranks[ranks]) / len(by_ranks[ranks])
            rows.append({"benchmark": benchmark, "series": group, "ranks": ranks,
                         "samples_per_s": rate,
                         "efficiency": (rate / base_rate) / (ranks / base)})
    return rows


def plot_scaling(rows: list[dict[str, Any]], path: Path, named: Path | None = None) -> Any:
    """Samples/s vs ranks, with ideal linear scaling from the smallest scale."""
    fig = _figure()
    ax = fig.add_subplot()
    groups = list(dict.fromkeys((r["benchmark"], r["series"]) for r in rows))
    for i, key in enumerate(groups):
        pts = [r for r in rows if (r["benchmark"], r["series"]) == key]
        xs, ys = [r["ranks"] for r in pts], [r["samples_per_s"] for r in pts]
        ax.plot(xs, ys, marker="o", color=COLORS[i % len(COLORS)], label=" / ".join(key))
        ax.plot(xs, [ys[0] * x / xs[0] for x in xs], ls=":", color=COLORS[i % len(COLORS)])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks (dotted: ideal)")
    ax.set_ylabel("train samples/s")
    ax.set_title("throughput vs ranks")
    ax.legend(fontsize=7)
    atomic.save_figure(fig, path, named=named)
    return fig


# --- document ------------------------------------------------------------------------------

def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def group_table(scores: list[Score], facts: list[RunFacts]) -> tuple[list[str], list[list[str]]]:
    header = ["system (framework)", "benchmark", "mode", "runs", "converged", "score",
              "mean time to train [min]", "mean epochs", "mean samples/s", "RCP", "verdict"]
    rows = []
    for s in scores:
        mine = [f for f in facts if f.run in s.group.runs]
        rates = [f.samples_per_s for f in mine if f.samples_per_s]
        times = [f.minutes for f in mine if f.minutes is not None]
        rows.append([s.group.system, s.group.benchmark, s.group.mode, str(len(s.group.runs)),
                     str(len(s.group.converged)), score_line(s),
                     _num(sum(times) / len(times) if times else None, 4),
                     _num(sum(f.epochs for f in mine) / len(mine), 1),
                     _num(sum(rates) / len(rates) if rates else None, 1), s.rcp or "-",
                     s.verdict])
    return header, rows


def run_table(facts: list[RunFacts]) -> tuple[list[str], list[list[str]]]:
    header = ["group", "run", "ranks", "converged", "time to train [min]", "epochs",
              "epochs to target", "samples/s", *[f"{p} [s]" for p in PHASES]]
    rows = [[f.group, f.label, str(f.ranks or "-"), "yes" if f.run.converged else "no",
             _num(f.minutes, 4), str(f.epochs), str(f.epochs_to_target or "-"),
             _num(f.samples_per_s, 1), *[_num(f.phases[p], 1) for p in PHASES]]
            for f in facts]
    return header, rows


Block = tuple[str, Any]


def _md(blocks: list[Block]) -> str:
    out = []
    for kind, data in blocks:
        if kind == "h1":
            out.append(f"# {data}\n")
        elif kind == "h2":
            out.append(f"## {data}\n")
        elif kind == "p":
            out.append(f"{data}\n")
        elif kind == "table":
            header, rows = data
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "---|" * len(header))
            out.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)
            out.append("")
        elif kind == "img":
            out.append(f"![{data[1]}]({data[0]})\n")
    return "\n".join(out)


def _html(blocks: list[Block], folder: Path, title: str) -> str:
    """The same blocks as one self-contained page (PNGs inlined as data URIs)."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
           f"<title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
           "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
           "padding:2px 6px}img{max-width:100%}</style></head><body>"]
    for kind, data in blocks:
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{html.escape(data)}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{html.escape(data)}</p>")
        elif kind == "table":
            header, rows = data
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
                       + "</tr>")
            out.extend("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                       for r in rows)
            out.append("</table>")
        elif kind == "img":
            png = base64.b64encode((folder / data[0]).read_bytes()).decode()
            out.append(f"<figure><img alt='{html.escape(data[1])}' "
                       f"src='data:image/png;base64,{png}'><figcaption>"
                       f"{html.escape(data[1])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


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


def build(targets: Sequence[str | Path], folder: Path, ruleset: str = RULESET,
          place: Path | None = None) -> list[Block]:
    """Score, measure and plot; PNGs go to `folder` (`place`: where it goes once built
    aside, the folder a failed write's line names); returns the document blocks."""
    def png(name: str) -> tuple[Path, Path]:  # (where it is written, where it is named)
        return folder / name, (folder if place is None else place) / name

    groups = group_runs(_with_checked_summaries(targets, ruleset))
    scores = [score_group(g, ruleset) for g in groups]
    facts = [run_facts(r, g) for g in groups for r in g.runs]
    blocks: list[Block] = [
        ("h1", "sciperf report"),
        ("p", f"{len(facts)} result logs from {', '.join(str(t) for t in targets)}; "
              f"converged = the official mlperf-logging checker (hpc {ruleset}) passes the "
              "log; scores as mlperf-logging's result summarizer computes them."),
        ("h2", "Scores per system / framework"), ("table", group_table(scores, facts)),
        ("h2", "Runs"), ("table", run_table(facts)),
    ]
    plot_time_to_train(scores, facts, *png("time_to_train.png"))
    blocks += [("img", ("time_to_train.png", "time to train per group and run"))]
    plot_breakdown(facts, *png("breakdown.png"))
    blocks += [("h2", "Time breakdown"),
               ("img", ("breakdown.png", "init, staging, training, evaluation per run"))]
    blocks.append(("h2", "Convergence"))
    for benchmark in sorted({f.run.log.benchmark or "?" for f in facts}):
        mine = [f for f in facts if (f.run.log.benchmark or "?") == benchmark]
        for x in ("epoch", "time"):
            name = f"convergence_{benchmark}_{x}.png"
            plot_convergence(mine, benchmark, x, *png(name))
            blocks.append(("img", (name, f"{benchmark}: eval metric vs {x}")))
    rows = scaling_rows(facts)
    if rows:
        plot_scaling(rows, *png("scaling.png"))
        blocks += [("h2", "Scaling"),
                   ("table", (["benchmark", "series", "ranks", "samples/s", "efficiency"],
                              [[r["benchmark"], r["series"], str(r["ranks"]),
                                _num(r["samples_per_s"], 1), _num(r["efficiency"], 3)]
                               for r in rows])),
                   ("img", ("scaling.png", "throughput vs ranks"))]
    return blocks


def _check_replaceable(out: Path) -> None:
    """`out` may be replaced whole only when it holds nothing but a report's own files
    (report.md, report.html, PNG plots): notes or folders a user kept beside a report
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
    return path.is_file() and (path.name in ("report.md", "report.html")
                               or path.suffix == ".png")


def report(targets: Sequence[str | Path], out: str | Path, ruleset: str = RULESET) -> Path:
    """Write report.md, report.html and the PNGs to `out`, replacing a previous report
    whole. The report is built aside and renamed (`sciperf.data.atomic.folder_aside`):
    whole folders, not file by file, because a new report replaces an old one, which must
    stay as it was when the new one fails (a full disk: one line naming the file), and a
    report is never a mix of two."""
    out = Path(out)
    _check_replaceable(out)
    check_output_dir(out, aside=True)
    with atomic.folder_aside(out, replace=True) as tmp:
        blocks = build(targets, tmp, ruleset, place=out)
        for name, text in (("report.md", _md(blocks)),
                           ("report.html", _html(blocks, tmp, "sciperf report"))):
            atomic.write_text(tmp / name, text, named=out / name)
    return out
