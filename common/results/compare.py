"""`sciperf compare OUT_A OUT_B …`: runs side by side, from their summary.json files.

The quick cross-framework view (PyTorch vs TensorFlow on the same config); the full
report with plots and official scoring is `sciperf report` (results issue).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.config_keys import differences
from sciperf.errors import SciperfError
from sciperf.results.summary import COMPARE, load_summary

# (label, summary key, format of a float): one format per row, so a row's cells line up
# (a time of 18.9 s beside one of 7.0829 s read as two precisions)
ROWS: list[tuple[str, str, str]] = [
    ("framework", "framework", ""),
    ("status", "status", ""),
    ("benchmark", "benchmark", ""),
    ("experiment", "experiment", ""),
    ("precision", "precision", ""),
    ("epochs", "epochs", ""),  # to the target when status is success
    ("time to train [s]", "time_to_train_s", ".2f"),
    ("train samples/s", "samples_per_s", ".1f"),
    ("final metric", "final_metric", ".4f"),
    ("target", "target", "g"),
    ("parameters", "parameter_count", ""),
    ("global batch", "global_batch_size", ""),
    ("config hash", "config_hash", ""),
]


def _cell(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec or "g")
    if isinstance(value, int) and not isinstance(value, bool) and value > 9999:
        return f"{value:,}"
    return str(value)


def compare_table(paths: list[str]) -> str:
    """A Markdown table: one column per run, one row per figure, plus a ratio column."""
    if len(paths) < 2:
        raise SciperfError("usage: sciperf compare RUN_DIR RUN_DIR [RUN_DIR …]")
    runs = [load_summary(p, COMPARE) for p in paths]
    header = ["", *[f"{r['framework']} ({Path(p).name})" for r, p in zip(runs, paths,
                                                                         strict=True)]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, key, spec in ROWS:
        lines.append("| " + " | ".join([label, *[_cell(r.get(key), spec) for r in runs]])
                     + " |")
    base, other = runs[0].get("samples_per_s"), runs[1].get("samples_per_s")
    if base and other:
        lines.append(f"\nthroughput ratio {header[2]} / {header[1]}: {other / base:.2f}×")
    if differing := _differences(runs):
        lines.append(f"note: the runs differ beyond the framework in {', '.join(differing)}")
    return "\n".join(lines)


# keys that differ between any two runs without making them different experiments: the
# framework section (what compare compares) and the run-local paths config_hash leaves out
SAME_EXPERIMENT = ("framework", "output_dir", "data.dir", "data.stage_dir")


def _differences(runs: list[dict[str, Any]]) -> list[str]:
    """The config keys whose values differ between the runs, beyond the framework (the
    config hash always differed: it covers the framework section). Summaries without their
    config fall back to the hash."""
    configs = [r.get("config") for r in runs]
    if not all(isinstance(c, dict) for c in configs):
        return ["config hash"] if len({r.get("config_hash") for r in runs}) > 1 else []
    keys = sorted({k for other in configs[1:] for k in differences(configs[0], other)})
    return [k for k in keys
            if not any(k == s or k.startswith(s + ".") for s in SAME_EXPERIMENT)]
