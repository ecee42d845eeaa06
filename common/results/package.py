"""`sciperf package OUT… --system NAME`: our runs as an official MLPerf HPC submission tree.

    <DEST>/results/<NAME>/{strong,weak}/<benchmark>/result_<i>.txt
    <DEST>/systems/<NAME>.json

DEST is the organisation folder that mlperf-logging's `result_summarizer` and
`package_checker` take. A run directory with one instance adds one strong-scaling run
(numbered in the order given); a throughput job (instances > 1) gives the weak-scaling
folder of its benchmark. The system description is filled from the `system` section of
the runs' config (stored in summary.json), the versions the runs recorded, and — only
when the runs were made on this host — this machine's facts from `sciperf info`; what
nobody measured stays an empty string, never a guess. The tree is built in a temporary
sibling folder and renamed into place (`sciperf.data.atomic.folder_aside`), so an error
— a full disk too, one line naming the file at its place in the tree — leaves nothing
half-written: a reader of DEST (the summarizer, `score`) finds a whole tree or none.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf.data import atomic
from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError
from sciperf.results import tree
from sciperf.results.logs import parse_log
from sciperf.results.score import required_runs
from sciperf.results.summary import PACKAGE, read_summary

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
SUMMARY_NAME = re.compile(r"summary(_[0-9]+)?\.json")

# Fields the official system description checker requires (hpc rules); those we cannot
# know stay "".
SYSTEM_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes",
    "host_processors_per_node", "host_processor_model_name", "host_processor_core_count",
    "host_processor_vcpu_count", "host_processor_frequency", "host_processor_caches",
    "host_processor_interconnect", "host_memory_capacity", "host_storage_type",
    "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity",
    "accelerator_interconnect", "accelerator_interconnect_topology", "cooling", "hw_notes",
    "framework", "other_software_stack", "operating_system", "sw_notes",
)


@dataclass
class RunDir:
    """One run directory: its summaries (one per instance) and result logs."""

    path: Path
    summaries: list[dict[str, Any]]
    logs: list[Path]

    @property
    def first(self) -> dict[str, Any]:
        return self.summaries[0]

    @property
    def mode(self) -> str:
        return tree.WEAK if int(self.first.get("instances") or 1) > 1 else tree.STRONG

    @property
    def benchmark(self) -> str:
        return str(self.first["benchmark"])


def read_run_dir(path: str | Path) -> RunDir:
    """A sciperf run directory: summary.json (or summary_<i>.json) beside result_<i>.txt."""
    path = Path(path)
    if not path.is_dir():
        raise SciperfError(f"no such run directory: {path}")
    # summary.json, or summary_<i>.json per instance: not a backup beside them
    # (summary.orig.json), which would package the same log twice
    files = sorted(f for f in path.glob("summary*.json") if SUMMARY_NAME.fullmatch(f.name))
    if not files:
        raise SciperfError(f"no summary.json in {path} (not a sciperf run directory)")
    summaries = [read_summary(file, PACKAGE) for file in files]
    summaries.sort(key=lambda s: int(s.get("instance") or 0))
    logs = []
    for summary in summaries:
        log = path / summary["result_file"]
        if not log.is_file():
            raise SciperfError(f"{log} is missing (named by {path}'s summary)")
        if parse_log(log).run_stop_ms is None:
            raise SciperfError(f"{log} has no run_stop (the run did not end); not packaged")
        logs.append(log)
    return RunDir(path, summaries, logs)


def _one(values: set[Any], what: str) -> Any:
    """The single value runs agree on, or an error naming the disagreement."""
    if len(values) != 1:
        shown = ", ".join(sorted(str(v) for v in values))
        raise SciperfError(f"the runs differ in {what} ({shown}): package each under its own "
                           "--system name")
    return next(iter(values))


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}"


def _sockets() -> str:
    """Physical CPU packages of this host (distinct `physical id`s), "" when unknown."""
    try:
        ids = {ln.split(":", 1)[1].strip() for ln in
               Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("physical id")}
    except OSError:
        return ""
    return str(len(ids)) if ids else ""


def system_description(name: str, runs: list[RunDir]) -> dict[str, Any]:
    """systems/<name>.json from the runs' system config, recorded versions and — for runs
    made on this host — `sciperf info`."""
    summaries = [s for r in runs for s in r.summaries]
    keys = ("name", "submission_org", "submission_platform", "submission_division",
            "submission_status", "accelerators_per_node")
    system = json.loads(_one({json.dumps({k: s["config"]["system"].get(k) for k in keys})
                              for s in summaries}, "system config"))
    framework = _one({s["framework"] for s in summaries}, "framework")
    versions = summaries[0].get("versions") or {}
    fw_version = versions.get(framework) or versions.get("torch") or ""
    nodes = max(int(parse_log(p).value("number_of_nodes", 1)) for r in runs for p in r.logs)
    desc: dict[str, Any] = dict.fromkeys(SYSTEM_FIELDS, "")
    desc.update({
        "submitter": system["submission_org"], "division": system["submission_division"],
        "status": system["submission_status"], "system_name": name,
        "number_of_nodes": str(nodes),
        "accelerators_per_node": str(system["accelerators_per_node"]),
        "framework": f"{framework} {fw_version}".strip(),
        "other_software_stack": {k: str(v) for k, v in versions.items()
                                 if k not in ("framework", "device", framework) and v is not None},
        "sw_notes": f"sciperf {versions.get('sciperf', '')}; platform "
                    f"{system['submission_platform']}; system config '{system['name']}'",
    })
    hosts = {s.get("host") for s in summaries}
    if hosts == {platform.node()}:  # the machine facts are this host's: say so, from info
        from sciperf.info import machine as this_machine  # what `sciperf info` reports
        machine = this_machine()
        desc.update({
            "host_processors_per_node": _sockets() or "1",
            "host_processor_model_name": machine["cpu"],
            "host_processor_core_count": str(machine["cores"]),
            "host_processor_vcpu_count": str(os.cpu_count() or machine["cores"]),
            "operating_system": _os_name(),
        })
        devices = {str(s.get("versions", {}).get("device", "")) for s in summaries}
        if system["accelerators_per_node"] and devices - {"", "cpu"}:
            desc["accelerator_model_name"] = ", ".join(sorted(devices - {"", "cpu"}))
    else:
        desc["host_processors_per_node"] = "1"
        desc["hw_notes"] = f"runs made on {', '.join(sorted(map(str, hosts)))}; host facts " \
                           "not recorded"
    return desc


def _distinct(targets: list[str]) -> list[str]:
    """The run directories, each once: the same folder named twice (`r1 ./r1`, a link)
    would put its logs twice into the submission as two runs."""
    seen: dict[Path, str] = {}
    for target in targets:
        real = Path(target).resolve()
        if real in seen:
            raise SciperfError(f"{target} and {seen[real]} are the same run directory "
                               "(each run is packaged once)")
        seen[real] = target
    return targets


def plan(runs: list[RunDir]) -> dict[tuple[str, str], list[Path]]:
    """(mode, benchmark) → the result logs in submission order."""
    planned: dict[tuple[str, str], list[Path]] = {}
    for run in runs:
        key = (run.mode, run.benchmark)
        required_runs(run.benchmark)  # an unknown benchmark is an error here, not later
        if run.mode == tree.WEAK and key in planned:
            raise SciperfError(f"{run.path}: a second throughput job of {run.benchmark}; a "
                               "submission holds one weak-scaling set per benchmark")
        planned.setdefault(key, []).extend(run.logs)
    return planned


def write_tree(org: Path, system: str, layout: dict[tuple[str, str], list[Path]],
               desc: dict[str, Any], place: Path | None = None) -> None:
    """The logs of `layout` (plan's) as `system`'s results under the organisation folder
    `org`, numbered in submission order, and the system description beside them. `place`:
    where `org` goes once built aside, the folder a failed write's line names."""
    def named(path: Path) -> Path:
        return path if place is None else place / path.relative_to(org)

    for (mode, benchmark), logs in layout.items():
        folder = tree.result_dir(org, system, mode, benchmark)
        with atomic.failing_as(named(folder)):
            folder.mkdir(parents=True)
        for i, log in enumerate(logs):
            path = folder / tree.result_name(i)
            # the log was read whole by read_run_dir: what fails here is the write; `org`
            # is built aside and removed on failure, so a file needs no temporary of its own
            with atomic.failing_as(named(path)):
                shutil.copy2(log, path)
    description = tree.system_json(org, system)
    with atomic.failing_as(named(description)):
        description.parent.mkdir()
        description.write_text(json.dumps(desc, indent=2) + "\n")


def package(targets: list[str], system: str | None, dest: str | Path) -> Path:
    """Write the submission tree for the run directories `targets` to `dest`."""
    if not targets:
        raise SciperfError("usage: sciperf package RUN_DIR [...] --system NAME [--out DIR]")
    if not system:
        raise SciperfError("--system NAME is required: the system the runs were made on "
                           f"({tree.OUTLINE})")
    if not NAME_RE.match(system):
        raise SciperfError(f"--system {system} is not a valid system name "
                           "(letters, digits, '.', '_', '+', '-')")
    dest = Path(dest)
    if dest.exists():
        raise SciperfError(f"{dest} already exists (remove it or choose --out)")
    check_output_dir(dest, aside=True)
    runs = [read_run_dir(t) for t in _distinct(targets)]
    layout = plan(runs)
    desc = system_description(system, runs)
    with atomic.folder_aside(dest) as tmp:
        write_tree(tmp, system, layout, desc, place=dest)
    return dest
