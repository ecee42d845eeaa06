"""summary.json, read once and checked: the one loader `report`, `compare`, `package` and
`characterize run=` share.

A summary is read by tools that put its numbers in tables and divide by them, so a file
that parses but holds the wrong things (a string for samples/s, a list for world_size, a
list at the top, a key missing) must stop the command with one line naming the file and
the field — never a traceback from deep inside a plot, and never a silently different
table (a user comparing systems acts on it). Python's json writes bare NaN/Infinity, which
is not JSON; they are refused too, naming where they sit.

Only the fields some reader uses are typed (FIELDS); everything else is the writer's
business (``sciperf.run.summary.write_summary``) and passes through untouched.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError

SUMMARY_FILE = "summary.json"  # the name a run writes it under (sciperf.run.files reads it here)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _file_name(v: Any) -> bool:
    """A result file beside the summary: a plain name, so no reader escapes the run dir."""
    return isinstance(v, str) and v not in ("", ".", "..") and "/" not in v and "\\" not in v


Check = tuple[Callable[[Any], bool], str, bool]  # (test, what it should be, null allowed)

FIELDS: dict[str, Check] = {
    "status": (lambda v: isinstance(v, str), "a string", False),
    "benchmark": (lambda v: isinstance(v, str) and v != "", "a benchmark name", False),
    "framework": (lambda v: isinstance(v, str) and v != "", "a framework name", False),
    "experiment": (lambda v: isinstance(v, str), "a string", False),
    "precision": (lambda v: isinstance(v, str), "a string", False),
    "epochs": (lambda v: _integer(v) and v >= 0, "an integer ≥ 0", False),
    "time_to_train_s": (lambda v: _number(v) and v >= 0, "a number ≥ 0", True),
    "samples_per_s": (lambda v: _number(v) and v >= 0, "a number ≥ 0", True),
    "final_metric": (_number, "a number", True),
    "target": (_number, "a number", False),
    "parameter_count": (lambda v: _integer(v) and v >= 0, "an integer ≥ 0", True),
    "global_batch_size": (lambda v: _integer(v) and v >= 1, "an integer ≥ 1", False),
    "world_size": (lambda v: _integer(v) and v >= 1, "an integer ≥ 1", False),
    "instance": (lambda v: _integer(v) and v >= 0, "an integer ≥ 0", False),
    "instances": (lambda v: _integer(v) and v >= 1, "an integer ≥ 1", False),
    "result_file": (_file_name, "a file name", False),
    "config_hash": (lambda v: isinstance(v, str), "a string", False),
    "host": (lambda v: isinstance(v, str), "a string", False),
    "versions": (lambda v: isinstance(v, dict), "an object", False),
    "config": (lambda v: isinstance(v, dict), "an object", False),
    # the parts of the run's config that package and characterize read
    "config.experiment": (lambda v: isinstance(v, str), "a string", False),
    "config.system": (lambda v: isinstance(v, dict), "an object", False),
    "config.system.name": (lambda v: isinstance(v, str), "a string", False),
    "config.model": (lambda v: isinstance(v, dict), "an object", False),
    "config.framework": (lambda v: isinstance(v, dict), "an object", False),
    "config.framework.name": (lambda v: isinstance(v, str) and v != "", "a framework name",
                              False),
    "config.train": (lambda v: isinstance(v, dict), "an object", False),
    "config.train.global_batch_size": (lambda v: _integer(v) and v >= 1, "an integer ≥ 1",
                                       False),
    "config.data": (lambda v: isinstance(v, dict), "an object", False),
    "config.data.train_samples": (lambda v: _integer(v) and v >= 1, "an integer ≥ 1", False),
}

# What each reader cannot do without (all other FIELDS are checked only when present).
COMPARE = REPORT = ("framework",)  # the column / group a run is shown under
PACKAGE = ("benchmark", "framework", "result_file", "config", "config.system")
CHARACTERIZE = ("benchmark", "world_size", "config", "config.experiment", "config.system",
                "config.system.name", "config.model", "config.framework.name",
                "config.train.global_batch_size", "config.data", "config.data.train_samples")


class _Bare:
    """A bare NaN/Infinity/-Infinity token, kept so the check can say which field holds it."""

    def __init__(self, token: str) -> None:
        self.token = token


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bare_token(value: Any, where: str = "") -> tuple[str, str] | None:
    """(field, token) of the first bare NaN/Infinity anywhere in the document, else None."""
    if isinstance(value, _Bare):
        return where or "the document", value.token
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _bare_token(item, f"{where}[{key}]" if isinstance(key, int) else
                            f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def _lookup(data: dict[str, Any], field: str) -> tuple[bool, Any]:
    """(present, value) of a dotted field; absent when a parent is absent or not an object
    (the parent's own check reports that)."""
    node: Any = data
    for part in field.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def check_summary(data: Any, file: Path | str, required: Iterable[str] = ()) -> dict[str, Any]:
    """`data` (parsed from `file`) as a summary dict, or a SciperfError naming the field."""
    bare = _bare_token(data)
    if bare is not None:
        raise SciperfError(f"{file}: {bare[0]} is a bare {bare[1]}, which is not valid JSON "
                           "(a number or null was expected)")
    if not isinstance(data, dict):
        raise SciperfError(f"{file}: holds a JSON {type(data).__name__}, not an object (not a "
                           "sciperf run summary)")
    needed = set(required)
    for field, (test, what, nullable) in FIELDS.items():
        present, value = _lookup(data, field)
        if not present:
            if field in needed:
                raise SciperfError(f"{file}: {field} is missing (not a complete sciperf run "
                                   "summary)")
            continue
        if value is None and nullable and field not in needed:
            continue
        if not test(value):
            shown = "null" if value is None else _short(value)
            raise SciperfError(f"{file}: {field} is {shown}, not {what}")
    return data


def read_summary(file: Path | str, required: Iterable[str] = ()) -> dict[str, Any]:
    """A summary file, parsed and checked (see the module docstring)."""
    try:
        text = Path(file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SciperfError(f"{file}: cannot be read ({reason})") from None
    try:
        data = json.loads(text, parse_constant=_Bare)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise SciperfError(f"{file}: not valid JSON ({exc})") from None
    return check_summary(data, file, required)


def load_summary(path: str | Path, required: Iterable[str] = ()) -> dict[str, Any]:
    """summary.json of a run directory (or the summary file itself), checked."""
    path = Path(path)
    file = path / SUMMARY_FILE if path.is_dir() else path
    if not file.is_file():
        instances = sorted(path.glob("summary_*.json")) if path.is_dir() else []
        if instances:  # a throughput run: one summary per instance
            raise SciperfError(f"{path} is a throughput run of {len(instances)} instances: "
                               f"name one instance's summary ({instances[0]})")
        raise SciperfError(f"no {SUMMARY_FILE} in {path} (not a sciperf run directory)")
    return read_summary(file, required)


def summary_beside(log: Path) -> dict[str, Any] | None:
    """The checked summary sciperf wrote beside an MLLOG file (summary_<i>.json in
    throughput mode, else summary.json); None when there is none for this log (published
    logs). A corrupt one is an error, not a silent None: a report or a score must not show
    a wrong table."""
    index = log.stem.split("_", 1)[-1]
    for name in (f"summary_{index}.json", SUMMARY_FILE):
        file = log.parent / name
        if file.is_file():
            data = read_summary(file, REPORT)
            if data.get("result_file", log.name) == log.name:
                return data
    return None
