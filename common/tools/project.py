"""`sciperf project`: time to train a workload on a system that is described, not measured.

Two forms (docs/projection.md):

* `sciperf project workload=NAME system=… [system.accelerator=H100 system.nodes=N
  train.global_batch_size=B …]` projects one configuration (the full experiment unless
  `experiment=` says otherwise) and prints the breakdown: per-step compute (roofline),
  all-reduce and input, per-epoch training and evaluation, staging, epochs to the target
  and time to train;
* `sciperf project TREE…` projects every group of published submission trees and sets it
  against what the group measured: the model's check (``project_check``).

The model is ``project_model``; the system's numbers come from ``project_system`` and the
accelerator table, the workload's from ``project_costs``; the one calibrated factor per
(workload, accelerator kind) from ``project_calibration``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from sciperf.errors import SciperfError
from sciperf.tools.project_calibration import efficiency_for
from sciperf.tools.project_check import GroupCheck, calibrate, load_groups, summary
from sciperf.tools.project_costs import workload_costs
from sciperf.tools.project_model import project
from sciperf.tools.project_system import from_config


def run(args: argparse.Namespace) -> int:
    """The verb: overrides (key=value) project a configuration, paths check the model."""
    words = list(args.overrides)
    if not words:
        raise SciperfError("usage: sciperf project workload=NAME system=… [key=value …] | "
                           "sciperf project RESULT_TREE […] [--json]")
    keyed = [w for w in words if "=" in w]
    if keyed and len(keyed) != len(words):
        paths = [w for w in words if "=" not in w]
        raise SciperfError(f"{paths[0]}: give either key=value overrides (one configuration) "
                           "or result trees (the check), not both")
    if keyed:
        result = project_config(words)
        print(json.dumps(result, indent=2) if args.json else config_table(result))
        return 0
    report = check(words)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if not k.startswith("_")},
                         indent=2))
        for line in report["lines"]:
            print(line, file=sys.stderr)
    else:
        print(check_table(report))
    return 0


def project_config(overrides: list[str]) -> dict[str, Any]:
    """The projection of one composed configuration, as a JSON-ready dict."""
    from sciperf.config import compose
    given = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    cfg = compose(overrides if "experiment" in given else ["experiment=full", *overrides])
    system = from_config(cfg)
    notes = list(system.notes)
    costs, more = workload_costs(str(cfg.workload), int(cfg.train.global_batch_size),
                                 int(cfg.data.train_samples) or None,
                                 int(cfg.data.eval_samples) or None)
    notes += more
    efficiency, line = efficiency_for(str(cfg.workload), system.accelerator.kind)
    if line:
        notes.append(line)
    staged = cfg.data.get("stage_dir") is not None
    if not staged:
        notes.append("no data.stage_dir/system.stage_dir: input read from the file system "
                     "every epoch, nothing staged")
    timed = str(cfg.mllog.ruleset) == "2.0.0"
    p = project(costs, system, efficiency, staged=staged, staging_timed=timed)
    return {"workload": costs.workload, "system": str(cfg.system.name),
            "accelerator": system.accelerator.name, "kind": system.accelerator.kind,
            "nodes": system.nodes, "accelerators_per_node": system.per_node,
            "precision": system.precision, "global_batch_size": costs.global_batch,
            "steps_per_epoch": costs.steps_per_epoch, "staged": staged,
            "projection": p.as_dict(), "notes": notes}


def _time(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.2f} min"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.3g} ms"


def config_table(result: dict[str, Any]) -> str:
    """The breakdown of one projection, then the assumption lines."""
    p = result["projection"]
    rows = [
        ("workload / accelerator", f"{result['workload']} / {result['accelerator']} "
                                   f"({result['precision']})"),
        ("scale", f"{result['nodes']} nodes × {result['accelerators_per_node']}, global "
                  f"batch {result['global_batch_size']}"),
        ("efficiency η (calibrated)", f"{p['efficiency']:.3g}"),
        ("step: compute (roofline/η)", f"{_time(p['compute_s'])} ({p['bound']}-bound, "
                                       f"roofline {_time(p['roofline_s'])})"),
        ("step: all-reduce", _time(p["allreduce_s"])),
        ("step: input (overlapped)", _time(p["input_s"])),
        ("step", _time(p["step_s"])),
        (f"epoch ({result['steps_per_epoch']} steps)", _time(p["epoch_s"])),
        ("evaluation per epoch", _time(p["eval_s"])),
        ("staging" + ("" if p["staging_timed"] else " (before run_start, untimed)"),
         _time(p["staging_s"]) if result["staged"] else "-"),
        ("epochs to target (RCP)", f"{p['epochs']:.2f}"),
        ("time to train", _time(p["time_to_train_s"])),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"  {k:<{width}}  {v}" for k, v in rows]
                     + [f"assumed: {n}" for n in result["notes"]])


def check(targets: list[str]) -> dict[str, Any]:
    """The model against published trees: every group, the factors, both summaries."""
    groups, lines = load_groups(targets)
    if not groups:
        raise SciperfError("no group under " + ", ".join(targets) + " could be projected"
                           + (f": {lines[-1]}" if lines else ""))
    fits, more = calibrate(groups)
    notes = Counter(n for g in groups for n in g.notes)
    said = [n if n.startswith(g_label) else f"{count} of {len(groups)} groups: {n}"
            for n, count in notes.items() for g_label in [_label_of(n, groups)]]
    return {"groups": [g.as_dict() for g in groups],
            "factors": [{"workload": w, "kind": k, **f.as_dict()}
                        for (w, k), f in sorted(fits.items())],
            "fit": summary(groups, "fit"), "held_out": summary(groups, "held"),
            "shipped": summary(groups, "stored"),
            "lines": lines + more + said, "_groups": groups}


def _label_of(note: str, groups: list[GroupCheck]) -> str:
    """The group a note names at its start ("" for a note every group may share)."""
    return next((g.label for g in groups if note.startswith(g.label + ":")), "\0")


def _pct(x: float) -> str:
    return f"{100 * x:+.0f} %"


def _row(g: GroupCheck) -> str:
    m, f, h = g.measured, g.fit, g.held
    return (f"| {g.label} | {g.system.accelerator.name} | {m.nodes}×{g.system.per_node} | "
            f"{m.global_batch} | {m.epoch_s:.3g} | {h['epoch_s']:.3g} | "
            f"{_pct(h['epoch_error'])} | {_pct(f['epoch_error'])} | "
            f"{m.time_to_train_s / 60:.3g} | {h['time_to_train_s'] / 60:.3g} | "
            f"{_pct(h['time_to_train_error'])} |")


def _summary_line(name: str, s: dict[str, Any]) -> str:
    return (f"{name}: median |error| per epoch {100 * s['median_epoch_error']:.1f} %, time "
            f"to train {100 * s['median_ttt_error']:.1f} %; {s['within_2x']} of "
            f"{s['groups']} groups within 2× per epoch; worst {s['worst']} "
            f"({s['worst_ratio']:.2f}×)")


def check_table(report: dict[str, Any]) -> str:
    """Markdown: measured vs projected per group (held-out factor, and the fit's error),
    the summaries, the factors, then what was assumed or left out."""
    lines = ["| group | accelerator | nodes×acc | GBS | epoch s measured | epoch s "
             "projected | error | error (fit) | TTT min measured | TTT min projected | "
             "TTT error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(g) for g in report["_groups"]]
    lines += ["", _summary_line("held out", report["held_out"]),
              _summary_line("fit", report["fit"]),
              _summary_line("shipped factors", report["shipped"]), "",
              "factors η (workload, accelerator kind): " + ", ".join(
                  f"{f['workload']}/{f['kind']} {f['efficiency']:.3g} ({_groups(f['groups'])})"
                  for f in report["factors"])]
    return "\n".join(lines + [""] + report["lines"])


def _groups(count: int) -> str:
    return f"{count} group" if count == 1 else f"{count} groups"
