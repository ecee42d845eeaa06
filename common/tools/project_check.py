"""`sciperf project TREE…`: the model against published results no one here wrote.

Every group of a submission tree (one system × mode × benchmark folder, the summarizer's
folder rules: ``sciperf.results.tree.select``) is projected at the scale and global batch
its logs ran, on the system its ``systems/<system>.json`` describes, and set against what
its converged runs measured (run_stop status success; the official checker is not rerun):

* training time per epoch: (run_stop − run_start − evaluation − staging inside the
  run) / epochs started, per run (`sciperf.results.phases`: an evaluation that runs
  beside another epoch's training is not subtracted);
* time to train: run_stop − run_start, per run;

each the olympic mean over the group's runs (the fastest and slowest dropped from three
on), as the scores are. The projection's time to train uses the RCPs' epochs at the
group's batch, so its error holds the convergence difference too.

One efficiency factor per (workload, accelerator kind) is fitted (``project_calibration``)
twice: on every group of the pair (the fit error) and, for each group, on the pair's
other groups only (the held-out error, the honest one). A pair with a single group has no
other group: its held-out factor is the workload's on other kinds, said in one line. The
groups are projected a third time with the factors sciperf ships (``Cost.efficiency``, fitted
on both published rounds): what `sciperf project workload=…` would have said.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.results.logs import RunLog, parse_log
from sciperf.results.phases import epochs_started, phases, staged_in_run
from sciperf.results.score import olympic_mean
from sciperf.results.throughput import instance_share
from sciperf.results.tree import WEAK, select, system_json, tree_place
from sciperf.tools.project_calibration import Fit, efficiency_for, fit_factor, held_out
from sciperf.tools.project_costs import workload_costs
from sciperf.tools.project_model import Costs, System, project
from sciperf.tools.project_system import from_description

LONG = 8  # groups from which reading them shows progress


@dataclass
class Measured:
    """A group's measured figures (seconds) and the scale its logs ran at."""

    epoch_s: float
    time_to_train_s: float
    epochs: float
    staging_s: float | None
    staging_in_run: bool
    runs: int
    nodes: int
    per_node: int
    global_batch: int
    train_samples: int | None
    eval_samples: int | None


@dataclass
class GroupCheck:
    """One group: its names, what it measured, the model's inputs and, after the fit, the
    projections with the fitted and the held-out factor."""

    label: str
    benchmark: str
    mode: str
    measured: Measured
    system: System
    costs: Costs
    staged: bool
    fit: dict[str, Any] = field(default_factory=dict)
    held: dict[str, Any] = field(default_factory=dict)
    stored: dict[str, Any] = field(default_factory=dict)  # with the shipped factor
    notes: list[str] = field(default_factory=list)

    @property
    def pair(self) -> tuple[str, str]:
        return self.benchmark, self.system.accelerator.kind

    @property
    def identity(self) -> tuple[Any, ...]:
        """What the same logs published in two rounds share: a held-out fit leaves out
        the group's copies too."""
        m = self.measured
        return self.benchmark, m.epoch_s, m.time_to_train_s, m.runs, m.global_batch

    def as_dict(self) -> dict[str, Any]:
        m = self.measured
        return {"group": self.label, "benchmark": self.benchmark, "mode": self.mode,
                "accelerator": self.system.accelerator.name,
                "kind": self.system.accelerator.kind, "nodes": m.nodes,
                "accelerators_per_node": m.per_node, "global_batch_size": m.global_batch,
                "runs": m.runs, "measured": {"epoch_s": m.epoch_s,
                                             "time_to_train_s": m.time_to_train_s,
                                             "epochs": m.epochs, "staging_s": m.staging_s},
                "fit": self.fit, "held_out": self.held, "shipped": self.stored,
                "notes": self.notes}


def run_times(log: RunLog) -> tuple[float, float, int, float | None, bool] | None:
    """(training s, run s, epochs started, staging s or None, staging inside the run) of
    one converged log (`sciperf.results.phases`: evaluation beside training is training
    time); None when the log lacks run_start/run_stop or any epoch."""
    start, stop = log.run_window
    if start is None or stop is None or not log.epochs:
        return None
    parts = phases(log)
    training = parts["training"]
    assert training is not None  # run_start and run_stop are there
    return (training, (stop - start) / 1000, epochs_started(log), parts["staging"],
            staged_in_run(log))


def _mean(values: list[float]) -> float:
    """The olympic mean from three values on (as the scores), else the plain mean."""
    if len(values) >= 3:
        found = olympic_mean(values, 0)
        if found is not None:
            return found
    return sum(values) / len(values)


def measure(logs: list[RunLog], label: str, notes: list[str]) -> Measured:
    """A group's measured figures over its converged runs."""
    rows = [(log, t) for log in logs if log.success and (t := run_times(log)) is not None]
    if not rows:
        raise SciperfError(f"{label}: no converged run with run_start, run_stop and epochs")
    first = rows[0][0]
    nodes, per_node = first.value("number_of_nodes"), first.value("accelerators_per_node")
    gbs = first.value("global_batch_size")
    if not isinstance(nodes, int) or not isinstance(gbs, int) or not isinstance(per_node, int):
        raise SciperfError(f"{first.path}: number_of_nodes, accelerators_per_node or "
                           "global_batch_size missing: the scale is unknown")
    staged = [t[3] for _, t in rows if t[3] is not None]
    if not staged:
        notes.append(f"{label}: no staging records (staging_start/staging_stop) in its logs: "
                     "measured staging unknown, none subtracted from the run")
    times = [t for _, t in rows]
    return Measured(
        epoch_s=_mean([t[0] / t[2] for t in times]), time_to_train_s=_mean([t[1] for t in times]),
        epochs=sum(t[2] for t in times) / len(times),
        staging_s=_mean(staged) if staged else None, staging_in_run=any(t[4] for t in times),
        runs=len(rows), nodes=nodes, per_node=per_node, global_batch=gbs,
        train_samples=_int(first.value("train_samples")),
        eval_samples=_int(first.value("eval_samples")))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _description(org: Path, system: str) -> dict[str, Any]:
    path = system_json(org, system)
    try:
        desc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SciperfError(f"{path}: no system description: the group's accelerators "
                           "are unknown") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise SciperfError(f"{path}: not a readable system description ({exc})") from None
    if not isinstance(desc, dict):
        raise SciperfError(f"{path}: not a system description (no JSON object)")
    return desc


def load_groups(targets: list[str], progress: bool = True) -> tuple[list[GroupCheck], list[str]]:
    """Every group under `targets` with its measured figures and model inputs, and the
    lines about groups left out (each says why) and assumptions made."""
    selection = select(targets)
    folders: dict[Path, list[Path]] = {}
    lines = list(selection.lines())
    for path in selection.files:
        if tree_place(path) is None:
            lines.append(f"{path}: not in a submission tree (<org>/results/<system>/<mode>/"
                         "<benchmark>/): no system description to project it on")
            continue
        folders.setdefault(path.parent, []).append(path)
    groups: list[GroupCheck] = []
    # a round's trees take seconds; a group or two is not long work
    show = Progress(len(folders), "project: reading groups", unit="groups",
                    enabled=progress and len(folders) > LONG)
    for _, files in sorted(folders.items()):
        try:
            groups.append(_group(files))
        except SciperfError as exc:
            lines.append(f"not projected: {exc}")
        show.update()
    return groups, lines


def _group(files: list[Path]) -> GroupCheck:
    place = tree_place(files[0])
    assert place is not None
    # the folder above the submitter's names the round where rounds sit side by side
    label = f"{place.org_dir.parent.name}/{place.org_dir.name}/{place.system}/{place.mode}/" \
            f"{place.benchmark}"
    notes: list[str] = []
    logs = [parse_log(f) for f in files]
    measured = measure(logs, label, notes)
    desc = _description(place.org_dir, place.system)
    if place.mode == WEAK:
        measured.nodes = instance_nodes(measured.nodes, desc, len(files), label, notes)
    system = from_description(desc, label, measured.nodes, measured.per_node)
    notes += system.notes
    system.notes = []
    costs, more = workload_costs(place.benchmark, measured.global_batch,
                                 measured.train_samples, measured.eval_samples)
    notes += [f"{label}: {line}" for line in more]
    notes.append("precision not logged: mixed precision assumed (the bf16/fp16 tensor "
                 "peak)")
    return GroupCheck(label, place.benchmark, place.mode, measured, system, costs,
                      staged=measured.staging_s is not None, notes=notes)


def instance_nodes(logged: int, desc: dict[str, Any], instances: int, label: str,
                   notes: list[str]) -> int:
    """Nodes of one instance of a throughput (weak) group (`instance_share`)."""
    try:
        total = int(str(desc.get("number_of_nodes")))
    except ValueError:
        notes.append(f"{label}: no number_of_nodes in the description: the logs' "
                     f"{logged} nodes taken as one instance's")
        return logged
    share = instance_share(logged, total, instances)
    if share != logged:
        notes.append(f"{label}: the logs say {logged} nodes, the job's {total} over "
                     f"{instances} instances: {share} nodes per instance assumed")
    return share


def projected(group: GroupCheck, efficiency: float) -> dict[str, Any]:
    """The group's projection with `efficiency`, and its errors against the measurement."""
    p = project(group.costs, group.system, efficiency, staged=group.staged,
                staging_timed=group.measured.staging_in_run)
    m = group.measured
    return {**p.as_dict(),
            "epoch_error": p.epoch_s / m.epoch_s - 1,
            "time_to_train_error": p.time_to_train_s / m.time_to_train_s - 1}


def calibrate(groups: list[GroupCheck]) -> tuple[dict[tuple[str, str], Fit], list[str]]:
    """Fit the factors, then project every group with its pair's factor (fit) and with the
    factor of the other groups (held out). Returns the pair factors and lines."""
    lines: list[str] = []
    pairs: dict[tuple[str, str], list[GroupCheck]] = {}
    for g in groups:
        pairs.setdefault(g.pair, []).append(g)
    fits = {pair: fit_factor([(g.costs, g.system, g.staged, g.measured.epoch_s)
                              for g in _unique(members)]) for pair, members in pairs.items()}
    for g in groups:
        g.fit = projected(g, fits[g.pair].efficiency)
        factor, line = held_out(g, groups)
        if line:
            lines.append(line)
        g.held = projected(g, factor)
        g.stored = projected(g, efficiency_for(*g.pair)[0])
    return fits, lines


def _unique(groups: list[GroupCheck]) -> list[GroupCheck]:
    """One of each set of copies (the same logs in two rounds weigh once in a fit)."""
    return list({g.identity: g for g in groups}.values())


def summary(groups: list[GroupCheck], which: str) -> dict[str, float | str | None]:
    """Median |error| of per-epoch time and of time to train, the worst group's ratio and
    how many groups lie within 2× (`which`: "fit", "held" or "stored")."""
    if not groups:
        return {"median_epoch_error": None, "median_ttt_error": None,
                "within_2x": 0, "groups": 0, "worst": None, "worst_ratio": None}
    rows = [getattr(g, which) for g in groups]
    ratios = [r["epoch_error"] + 1 for r in rows]
    worst = max(range(len(groups)), key=lambda i: max(ratios[i], 1 / ratios[i]))
    return {"median_epoch_error": statistics.median(abs(r["epoch_error"]) for r in rows),
            "median_ttt_error": statistics.median(abs(r["time_to_train_error"]) for r in rows),
            "within_2x": sum(0.5 <= x <= 2 for x in ratios), "groups": len(groups),
            "worst": groups[worst].label, "worst_ratio": ratios[worst]}
