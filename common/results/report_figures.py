"""The report's figures, drawn from group summaries so that they stay readable for a whole
round (hundreds of runs, tens of groups): one mark per group, never one per run; one
panel per benchmark (and mode), each with its own axes; groups sorted by score; no figure
taller than MAX_HEIGHT inches at DPI (a screen page).

Each plot is saved to `path` through the atomic helper: written aside, renamed when whole;
a refused write (a full disk) is one line naming `named`, the file's place in the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sciperf.data import atomic
from sciperf.results.logs import quality_target
from sciperf.results.report_compute import median
from sciperf.results.report_groups import PHASES, GroupStats
from sciperf.results.report_rcp import RcpPoint
from sciperf.results.tree import WEAK

if TYPE_CHECKING:
    from sciperf.results.report import RunFacts

DPI = 100
WIDTH = 10.0  # inches: 1000 px
MAX_HEIGHT = 11.5  # inches: no figure taller than a screen page
MAX_BARS = 40  # group rows in the time-to-train figure; the rest are in the table
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
PHASE_COLORS = dict(zip(PHASES, ("#9ecae1", "#fdae6b", "#3182bd", "#e6550d"), strict=True))


def figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure  # Agg canvas, no pyplot global state
    return Figure(figsize=(width, min(height, MAX_HEIGHT)), dpi=DPI, layout="constrained")


def style(index: int) -> dict[str, Any]:
    """Colour and marker of the index-th series: 10 colours × 10 markers tell 100 apart."""
    return {"color": COLORS[index % len(COLORS)],
            "marker": MARKERS[(index // len(COLORS)) % len(MARKERS)]}


def grid(fig: Any, panels: int, cols: int) -> list[Any]:
    """`panels` axes in rows of `cols`."""
    rows = math.ceil(panels / cols)
    return [fig.add_subplot(rows, cols, i + 1) for i in range(panels)]


def save(fig: Any, path: Path, named: Path | None) -> Any:
    atomic.save_figure(fig, path, named=named)
    return fig


def _facets(groups: Sequence[GroupStats]) -> dict[tuple[str, str], list[GroupStats]]:
    found: dict[tuple[str, str], list[GroupStats]] = {}
    for g in groups:
        found.setdefault((g.benchmark, g.mode), []).append(g)
    return found


def score_text(g: GroupStats) -> str:
    s = g.score
    if s.minutes is None:
        return "no score"
    if g.mode == WEAK:
        return f"{s.models_per_minute:.3g} models/min"
    return f"{s.minutes:.3g} min"


def plot_time_to_train(groups: Sequence[GroupStats], path: Path,
                       named: Path | None = None) -> Any:
    """Per benchmark and mode, groups ranked by score: median minutes of each phase
    stacked, the whisker the fastest–slowest run (init to run_stop), the score beside."""
    facets = _facets(groups)
    total = sum(len(v) for v in facets.values())
    keep = total if total <= MAX_BARS else max(3, MAX_BARS // max(len(facets), 1))
    shown = {k: v[:keep] for k, v in facets.items()}
    bars = sum(len(v) for v in shown.values())
    bar = min(0.3, (MAX_HEIGHT - 0.9 * len(shown) - 0.5) / max(bars, 1))
    fig = figure(WIDTH, bar * bars + 0.9 * len(shown) + 0.5)
    gs = fig.add_gridspec(len(shown), 1, height_ratios=[len(v) + 2 for v in shown.values()])
    for row, ((benchmark, mode), mine) in enumerate(shown.items()):
        ax = fig.add_subplot(gs[row])
        ys = range(len(mine))
        left = [0.0] * len(mine)
        for phase in PHASES:
            widths = [(g.phases[phase].median if g.phases.get(phase) else 0.0) / 60
                      for g in mine]
            ax.barh(ys, widths, left=left, height=0.7, color=PHASE_COLORS[phase],
                    label=f"{phase} (median)" if row == 0 else None)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        for y, g in zip(ys, mine, strict=True):
            if g.total_s is not None:
                mid = g.total_s.median / 60
                ax.errorbar([mid], [y], xerr=[[mid - g.total_s.low / 60],
                                                [g.total_s.high / 60 - mid]],
                            fmt="none", ecolor="black", elinewidth=0.8, capsize=2,
                            label="fastest–slowest run" if row == 0 and y == 0 else None)
            ax.annotate(score_text(g), (1.0, y), xycoords=("axes fraction", "data"),
                        xytext=(3, 0), textcoords="offset points", va="center", fontsize=6)
        ax.set_yticks(list(ys), [f"{g.rank}. {g.label}" for g in mine], fontsize=6)
        ax.invert_yaxis()
        more = len(facets[(benchmark, mode)]) - len(mine)
        ax.set_title(f"{benchmark}, {mode}" + (f" (top {len(mine)}; {more} more in the "
                                               "table)" if more else ""), fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("minutes" if row == len(shown) - 1 else "", fontsize=7)
        if row == 0:
            ax.legend(fontsize=6, ncol=5, loc="lower left", bbox_to_anchor=(0, 1.15))
    return save(fig, path, named)


def plot_epochs(groups: Sequence[GroupStats], rcps: dict[str, Sequence[RcpPoint]],
                path: Path, named: Path | None = None) -> Any:
    """Per benchmark: each group's epochs to target (median, range) against its global
    batch size, beside the RCPs (mean, lowest accepted mean, reference runs' range)."""
    benchmarks = sorted({g.benchmark for g in groups})
    cols = min(2, len(benchmarks))
    rows = math.ceil(len(benchmarks) / cols)
    legend_rows = max(len([g for g in groups if g.benchmark == b]) for b in benchmarks)
    fig = figure(WIDTH, rows * (3.2 + 0.12 * legend_rows / 2))
    for ax, benchmark in zip(grid(fig, len(benchmarks), cols), benchmarks, strict=True):
        points = rcps.get(benchmark, ())
        if points:
            bs = [p.batch_size for p in points]
            ax.fill_between(bs, [p.fastest for p in points], [p.slowest for p in points],
                            color="#cccccc", alpha=0.5, label="RCP runs: fastest–slowest")
            ax.plot(bs, [p.mean for p in points], color="black", marker="x", lw=1,
                    label="RCP mean")
            ax.plot(bs, [p.lowest_accepted for p in points], color="black", ls="--",
                    lw=0.8, label="RCP lowest accepted mean")
        mine = [g for g in groups if g.benchmark == benchmark]
        shared: dict[int, list[GroupStats]] = {}
        for g in mine:  # groups of one batch size side by side, not on top of each other
            shared.setdefault(g.batch_size or 0, []).append(g)
        for i, g in enumerate(mine):
            e = g.epochs_to_target
            if e is None or g.batch_size is None:
                continue
            peers = shared[g.batch_size]
            x = g.batch_size * 2 ** (0.08 * (peers.index(g) - (len(peers) - 1) / 2))
            ax.errorbar([x], [e.median], yerr=[[e.median - e.low],
                                                          [e.high - e.median]],
                        ls="none", capsize=2, ms=4, mfc="none" if g.mode == WEAK else None,
                        label=f"{g.label} ({g.mode})", **style(i))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch size", fontsize=7)
        ax.set_ylabel("epochs to target", fontsize=7)
        ax.set_title(benchmark, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=5, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    return save(fig, path, named)


def _median_curve(runs: Sequence[RunFacts], column: int) -> tuple[list[int], list[float],
                                                                   list[float], list[float]]:
    """Per epoch: median, lowest and highest of a curve column over the runs."""
    by_epoch: dict[int, list[float]] = {}
    for f in runs:
        for point in f.curve:
            by_epoch.setdefault(point[0], []).append(point[column])
    epochs = sorted(by_epoch)
    return (epochs, [median(by_epoch[e]) or 0.0 for e in epochs],
            [min(by_epoch[e]) for e in epochs], [max(by_epoch[e]) for e in epochs])


def plot_curves(benchmark: str, groups: Sequence[GroupStats], path: Path,
                named: Path | None = None) -> Any:
    """The eval metric per group: median over its runs (band: range) against the epoch
    and against minutes since run_start, with the target."""
    mine = [g for g in groups if g.benchmark == benchmark]
    fig = figure(WIDTH, 3.4 + 0.12 * len(mine) / 2)
    target = quality_target(benchmark)
    axes = grid(fig, 2, 2)
    for ax, x in zip(axes, ("epoch", "minutes since run_start"), strict=True):
        for i, g in enumerate(mine):
            epochs, metric, low, high = _median_curve(g.runs, 2)
            if not epochs:
                continue
            xs = [float(e) for e in epochs] if x == "epoch" else \
                _median_curve(g.runs, 1)[1]
            st = style(i)
            ax.plot(xs, metric, lw=1, ms=2, label=f"{g.label} ({g.mode})", **st)
            ax.fill_between(xs, low, high, color=st["color"], alpha=0.15, lw=0)
        if target is not None:
            ax.axhline(target[1], color="black", ls="--", lw=1, label=f"target {target[1]}")
        ax.set_xlabel(x, fontsize=7)
        ax.set_ylabel(target[0] if target else "eval metric", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0].set_title(f"{benchmark}: median per group (band: range of runs)", fontsize=8)
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=5, loc="outside lower center",
               ncol=3)
    return save(fig, path, named)


def plot_throughput(groups: Sequence[GroupStats], rows: Sequence[dict[str, Any]],
                    path: Path, named: Path | None = None) -> Any:
    """Per benchmark: samples/s per accelerator against the job's accelerators (lines:
    one machine at several scales) and, where peaks are known, the fraction of peak."""
    benchmarks = sorted({g.benchmark for g in groups})
    peaks = any(g.fraction_of_peak is not None for g in groups)
    series = list(dict.fromkeys(g.series for g in groups))
    fig = figure(WIDTH, (2 if peaks else 1) * 3.0 + 0.12 * len(series) / 3 + 0.3)
    top = grid(fig, len(benchmarks) * (2 if peaks else 1), len(benchmarks))
    for col, benchmark in enumerate(benchmarks):
        ax = top[col]
        for name in dict.fromkeys(r["series"] for r in rows if r["benchmark"] == benchmark):
            line = [r for r in rows if r["benchmark"] == benchmark and r["series"] == name]
            ax.plot([r["accelerators"] for r in line],
                    [r["rate_per_accelerator"] for r in line], lw=0.8,
                    color=style(series.index(name))["color"] if name in series else "gray")
        for g in (g for g in groups if g.benchmark == benchmark):
            st = style(series.index(g.series))
            if g.accelerators and g.rate_per_accelerator:
                ax.plot([g.accelerators], [g.rate_per_accelerator], ls="none", ms=4,
                        mfc="none" if g.mode == WEAK else None, **st)
            if peaks and g.accelerators and g.fraction_of_peak is not None:
                top[len(benchmarks) + col].plot([g.accelerators], [100 * g.fraction_of_peak],
                                                ls="none", ms=4, **st)
        ax.set_title(benchmark, fontsize=8)
        ax.set_ylabel("train samples/s per accelerator", fontsize=7)
        for axis in (top[col], top[len(benchmarks) + col]) if peaks else (top[col],):
            axis.set_xscale("log", base=2)
            axis.set_xlabel(f"accelerators in the job (hollow: {WEAK})", fontsize=7)
            axis.tick_params(labelsize=7)
        if peaks:
            top[len(benchmarks) + col].set_ylabel("% of accelerator peak", fontsize=7)
    handles = [top[0].plot([], [], ls="none", **style(i))[0] for i in range(len(series))]
    fig.legend(handles, series, fontsize=5, loc="outside lower center", ncol=3)
    return save(fig, path, named)


def plot_staging(groups: Sequence[GroupStats], path: Path, named: Path | None = None) -> Any:
    """Median staging time against the bytes each node stages, and against that share
    over the node's host memory (filled) and local storage (hollow)."""
    fig = figure(WIDTH, 3.6)
    left, right = grid(fig, 2, 2)
    benchmarks = sorted({g.benchmark for g in groups})
    for g in groups:
        staging = g.phases.get("staging")
        if staging is None or g.bytes_per_node is None:
            continue
        st = style(benchmarks.index(g.benchmark))
        err = [[staging.median - staging.low], [staging.high - staging.median]]
        left.errorbar([g.bytes_per_node / 1e9], [staging.median], yerr=err, ls="none",
                      ms=4, capsize=2, **st)
        for capacity, hollow in ((g.host_memory_bytes, False), (g.local_storage_bytes, True)):
            if capacity:
                right.plot([g.bytes_per_node / capacity], [staging.median], ls="none", ms=4,
                           mfc="none" if hollow else None, **st)
    right.axvline(1.0, color="black", ls=":", lw=0.8)
    left.set_xlabel("dataset GB per node", fontsize=7)
    right.set_xlabel("dataset per node / node capacity (filled: host memory, hollow: "
                     "local storage)", fontsize=7)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_ylabel("staging seconds (median, range)", fontsize=7)
        ax.tick_params(labelsize=7)
    handles = [left.plot([], [], ls="none", **style(i))[0] for i in range(len(benchmarks))]
    fig.legend(handles, benchmarks, fontsize=6, loc="outside lower center",
               ncol=len(benchmarks))
    return save(fig, path, named)
