"""The report's tables and its JSON, from the group summaries: one row per group (ranked
as the figures are), the same numbers the figures draw; `-` in a table and null in the
JSON where a number is unknown (the notes say why), never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sciperf.results.report_groups import PHASES, GroupStats, Spread
from sciperf.results.report_rcp import RcpPoint
from sciperf.results.score import score_line

if TYPE_CHECKING:
    from sciperf.results.report import RunFacts

Table = tuple[list[str], list[list[str]]]
GB = 1e9


def num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def spread(value: Spread | None, scale: float = 1.0, digits: int = 1) -> str:
    """`median (low–high)`, scaled (seconds → minutes: 1/60)."""
    if value is None:
        return "-"
    mid, low, high = (v * scale for v in (value.median, value.low, value.high))
    return f"{mid:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def _gb(value: float | None) -> str:
    return num(None if value is None else value / GB, 1)


def group_table(groups: Sequence[GroupStats]) -> Table:
    """Per group: the official score and verdict, runs, and the medians of the runs."""
    header = ["system (framework)", "benchmark", "mode", "runs", "converged", "score",
              "time to train [min]: median (range)", "median epochs",
              "median samples/s", "RCP", "verdict", "rank"]
    rows = []
    for g in groups:
        s, runs = g.score, g.runs
        minutes = Spread.of([f.minutes for f in runs])
        epochs = Spread.of([float(f.epochs) for f in runs])
        rate = Spread.of([f.samples_per_s for f in runs])
        rows.append([g.label, g.benchmark, g.mode, str(len(runs)),
                     str(len(s.group.converged)), score_line(s), spread(minutes, digits=4),
                     num(epochs.median if epochs else None, 1),
                     num(rate.median if rate else None, 1), s.rcp or "-", s.verdict,
                     str(g.rank)])
    return header, rows


def phase_table(groups: Sequence[GroupStats]) -> Table:
    header = ["rank", "system", "benchmark", "mode",
              *[f"{p} [s]: median (range)" for p in PHASES]]
    return header, [[str(g.rank), g.label, g.benchmark, g.mode,
                     *[spread(g.phases.get(p)) for p in PHASES]] for g in groups]


def convergence_table(groups: Sequence[GroupStats],
                      rcps: dict[str, Sequence[RcpPoint]]) -> Table:
    """Epochs to target beside the RCP of the same global batch size (the checker
    interpolates between batch sizes; the table shows only a reference point's own)."""
    header = ["system", "benchmark", "mode", "global batch size",
              "epochs to target: median (range)", "RCP mean", "RCP lowest accepted mean"]
    rows = []
    for g in groups:
        point = next((p for p in rcps.get(g.benchmark, ()) if p.batch_size == g.batch_size),
                     None)
        rows.append([g.label, g.benchmark, g.mode, str(g.batch_size or "-"),
                     spread(g.epochs_to_target), num(point.mean if point else None),
                     num(point.lowest_accepted if point else None)])
    return header, rows


def compute_table(groups: Sequence[GroupStats]) -> Table:
    header = ["system", "benchmark", "mode", "accelerator", "accelerators",
              "samples/s per accelerator", "train GFLOP/sample", "peak TFLOP/s",
              "% of peak"]
    return header, [[g.label, g.benchmark, g.mode, g.system.accelerator or "-",
                     str(g.accelerators or "-"), num(g.rate_per_accelerator, 2),
                     num(None if g.flops_per_sample is None else g.flops_per_sample / 1e9, 1),
                     num(None if g.peak_flops is None else g.peak_flops / 1e12, 1),
                     num(None if g.fraction_of_peak is None else 100 * g.fraction_of_peak,
                         1)] for g in groups]


def scaling_table(rows: Sequence[dict[str, Any]]) -> Table:
    header = ["benchmark", "series", "system", "mode", "accelerators",
              "samples/s per accelerator", "efficiency"]
    return header, [[r["benchmark"], r["series"], r["system"], r["mode"], str(r["accelerators"]),
                     num(r["rate_per_accelerator"], 2), num(r["efficiency"], 3)]
                    for r in rows]


def staging_table(groups: Sequence[GroupStats]) -> Table:
    header = ["system", "benchmark", "mode", "nodes", "dataset GB per node",
              "host memory GB", "local storage GB", "staging [s]: median (range)",
              "GB/s per node"]
    return header, [[g.label, g.benchmark, g.mode, str(g.nodes or "-"), _gb(g.bytes_per_node),
                     _gb(g.host_memory_bytes), _gb(g.local_storage_bytes),
                     spread(g.phases.get("staging")), num(
                         None if g.staging_rate is None else g.staging_rate / GB, 2)]
                    for g in groups]


def run_table(facts: Sequence[RunFacts]) -> Table:
    header = ["group", "run", "ranks", "converged", "time to train [min]", "epochs",
              "epochs to target", "samples/s", *[f"{p} [s]" for p in PHASES]]
    rows = [[f.group, f.label, str(f.ranks or "-"), "yes" if f.run.converged else "no",
             num(f.minutes, 4), str(f.epochs), str(f.epochs_to_target or "-"),
             num(f.samples_per_s, 1), *[num(f.phases[p], 1) for p in PHASES]]
            for f in facts]
    return header, rows


def _spread(value: Spread | None) -> dict[str, float | int] | None:
    return None if value is None else {"median": value.median, "low": value.low,
                                       "high": value.high, "n": value.n}


def as_json(groups: Sequence[GroupStats], rcps: dict[str, Sequence[RcpPoint]],
            scaling: Sequence[dict[str, Any]], notes: Sequence[str]) -> dict[str, Any]:
    """The numbers of every table and figure (null where unknown)."""
    out = []
    for g in groups:
        s = g.system
        out.append({
            "rank": g.rank, "score": g.score.as_dict(), "series": g.series,
            "phases_s": {p: _spread(g.phases.get(p)) for p in PHASES},
            "total_s": _spread(g.total_s), "epochs_to_target": _spread(g.epochs_to_target),
            "global_batch_size": g.batch_size, "nodes": g.nodes,
            "accelerators": g.accelerators, "samples_per_s_per_accelerator":
                g.rate_per_accelerator,
            "train_flops_per_sample": g.flops_per_sample, "peak_flops": g.peak_flops,
            "fraction_of_peak": g.fraction_of_peak,
            "system": {"source": s.source, "accelerator": s.accelerator,
                       "accelerators_per_node": s.accelerators_per_node,
                       "host_memory_bytes": s.host_memory_bytes,
                       "local_storage_bytes": s.local_storage_bytes},
            "dataset_bytes_per_node": g.bytes_per_node,
            "staging_bytes_per_s_per_node": g.staging_rate,
            "runs": [{"path": str(f.run.path), "minutes": f.minutes, "epochs": f.epochs,
                      "epochs_to_target": f.epochs_to_target, "ranks": f.ranks,
                      "samples_per_s": f.samples_per_s, "phases_s": f.phases}
                     for f in g.runs]})
    return {"groups": out,
            "rcps": {b: [p.as_dict() for p in points] for b, points in rcps.items()},
            "scaling": list(scaling), "notes": list(notes)}
