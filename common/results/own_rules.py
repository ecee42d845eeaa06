"""The official checker's rules, extended to a workload of sciperf's own.

The mlperf-logging checker knows the MLPerf HPC benchmarks only: its ``common.yaml``
accepts four ``submission_benchmark`` names and then loads ``<division>_<benchmark>.yaml``.
A workload sciperf adds (a plugin, a candidate benchmark) logs the same MLLOG events, so
its logs are checked by the same rules: a copy of the ruleset in a scratch folder, whose
open division also accepts the workload's name and whose ``open_<name>.yaml`` holds the
rule every MLPerf HPC benchmark has — its quality metric logged with ``epoch_num`` at
every evaluation, and at least one value at the spec's target. Every other rule (the
event order, the submission keys, run_start/run_stop, the epochs) is the checker's own,
unchanged. Such a workload is never an MLPerf result: the closed division is refused.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sciperf.data import atomic

OPEN_COMMON = "open_common.yaml"
BENCHMARK_KEY = "submission_benchmark"


def ruleset_folder(ruleset: str) -> Path:
    """The checker's own folder of hpc `ruleset` (hpc_3.0.0, hpc_2.0.0)."""
    return Path(str(resources.files("mlperf_logging.compliance_checker"))) / f"hpc_{ruleset}"


def write_rules(workload: Any, ruleset: str, scratch: Path) -> Path:
    """The extended ruleset for `workload` (its contract: name and metric) under `scratch`;
    returns the ``common.yaml`` to give the checker as ``--config`` (an absolute path:
    the checker joins its own folder with it, which keeps an absolute one). Every file is
    composed before the first write, so a write the disk refuses is one line naming the
    file it was for."""
    source = ruleset_folder(ruleset)
    folder = scratch / source.name
    # every enqueue of `hpc_x/...` names the copy
    texts = {path.name: path.read_text().replace(f"'{source.name}/", f"'{folder}/")
             for path in sorted(source.glob("*.yaml"))}
    rules = yaml.safe_load(texts[OPEN_COMMON])
    for rule in rules:
        key = rule.get("KEY") if isinstance(rule, dict) else None
        if key and key.get("NAME") == BENCHMARK_KEY:
            key["CHECK"] = f"{key['CHECK'].rstrip()} or v['value'] == {workload.name!r}"
    texts[OPEN_COMMON] = yaml.safe_dump(rules, sort_keys=False)
    texts[f"open_{workload.name}.yaml"] = yaml.safe_dump(metric_rules(workload),
                                                         sort_keys=False)
    with atomic.failing_as(folder):
        folder.mkdir()
    for name, text in texts.items():
        with atomic.failing_as(folder / name):
            (folder / name).write_text(text)
    return folder / "common.yaml"


def metric_rules(workload: Any) -> list[dict[str, Any]]:
    """The quality rule of a benchmark: the metric at every evaluation with its epoch_num,
    at least one value at the target (in the metric's direction)."""
    metric = workload.metric
    reached = (f"v['value'] >= {metric.target!r}" if metric.higher_is_better
               else f"v['value'] <= {metric.target!r}")
    return [{"KEY": {"NAME": metric.key, "REQ": "AT_LEAST_ONE",
                     "CHECK": ["'epoch_num' in v['metadata']"],
                     "ATLEAST_ONE_CHECK": reached}}]
