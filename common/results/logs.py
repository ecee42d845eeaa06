"""The one MLLOG reader: result files → runs, for `score`, `report`, `package`, throughput.

Lines are read the way mlperf-logging's own parser reads them: anything before the
last `:::MLLOG ` on a line is a prefix (rank tags such as `0: ` or `[1,0]<stdout>:` in
some published logs) and is dropped, the rest is one JSON event. Timestamps stay in
milliseconds as floats, exactly as the official result summarizer keeps them, so scores
computed from these runs equal its numbers to the last bit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError
from sciperf.results.tree import RESULT_GLOB, result_index

TOKEN = ":::MLLOG "
# The longest line holding an MLLOG record that sciperf parses or hands to mlperf-logging:
# its parsers (the compliance checker's, the RCP checker's) cut a line's prefix with
# re.sub(".*:::MLLOG ", …), whose time grows with the square of the line's length. The bound
# is fifty times the longest record of the published logs and of sciperf's own, and still
# parsed in a fraction of a second (bench/cpu-2026-11-29-epyc-zen4.md#long-mllog-lines).
MAX_RECORD_BYTES = 16 << 10
METRIC_KEYS = ("eval_error", "eval_accuracy")  # MLPerf HPC quality keys (lower / higher better)


@dataclass(frozen=True)
class Event:
    """One MLLOG record."""

    key: str
    value: Any
    time_ms: float
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Epoch:
    """One epoch as logged: its number, when training and evaluation started/stopped and
    the quality metric logged for it (None where the log lacks the event)."""

    num: int
    start_ms: float | None = None
    stop_ms: float | None = None
    eval_start_ms: float | None = None
    eval_stop_ms: float | None = None
    metric: float | None = None
    metric_ms: float | None = None


@dataclass
class RunLog:
    """One result file: its events in file order, plus the facts read from them."""

    path: Path
    events: list[Event]
    bad_lines: int = 0
    _by_key: dict[str, list[Event]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for event in self.events:
            self._by_key.setdefault(event.key, []).append(event)

    def all(self, key: str) -> list[Event]:
        """Every event of `key`, in file order."""
        return self._by_key.get(key, [])

    def value(self, key: str, default: Any = None) -> Any:
        """Value of the first `key` event, or `default`."""
        found = self.all(key)
        return found[0].value if found else default

    @property
    def benchmark(self) -> str | None:
        return self.value("submission_benchmark")

    @property
    def org(self) -> str | None:
        return self.value("submission_org")

    @property
    def platform(self) -> str | None:
        return self.value("submission_platform")

    @property
    def division(self) -> str | None:
        return self.value("submission_division")

    @cached_property
    def run_window(self) -> tuple[float | None, float | None]:
        """(run_start, run_stop) in ms, picked as the official summarizer picks them:
        scan in order, keep the latest of each until both are seen."""
        start = stop = None
        for event in self.events:
            if event.key == "run_start":
                start = event.time_ms
            elif event.key == "run_stop":
                stop = event.time_ms
            if start is not None and stop is not None:
                break
        return start, stop

    @property
    def run_start_ms(self) -> float | None:
        return self.run_window[0]

    @property
    def run_stop_ms(self) -> float | None:
        return self.run_window[1]

    @property
    def minutes(self) -> float | None:
        """run_stop − run_start in minutes, in the summarizer's arithmetic."""
        start, stop = self.run_window
        if start is None or stop is None:
            return None
        return (stop - start) / 60 / 1000

    @property
    def stop_status(self) -> str | None:
        """run_stop's metadata status (success | aborted), None without a run_stop."""
        stops = self.all("run_stop")
        return stops[0].metadata.get("status") if stops else None

    @property
    def success(self) -> bool:
        return self.stop_status == "success"

    @property
    def instance(self) -> int | None:
        """Instance index of a throughput-mode log (`instance` or `instance_id` metadata)."""
        for event in self.all("run_start") + self.all("init_start"):
            for name in ("instance", "instance_id"):
                if isinstance(event.metadata.get(name), int):
                    return event.metadata[name]
        return None

    @property
    def ranks(self) -> int | None:
        """Accelerators (or nodes when there are none) the run used, as the summarizer's
        instance scale: number_of_nodes × max(accelerators_per_node, 1)."""
        nodes, acc = self.value("number_of_nodes"), self.value("accelerators_per_node")
        if nodes is None or acc is None:
            return None
        return int(nodes) * max(int(acc), 1)

    @property
    def metric_key(self) -> str | None:
        """The quality key this log reports (eval_error or eval_accuracy)."""
        return next((k for k in METRIC_KEYS if self.all(k)), None)

    def _in_run(self, event: Event) -> bool:
        """Whether `event` happened before run_stop (logs may go on after it)."""
        stop = self.run_stop_ms
        return stop is None or event.time_ms <= stop

    @cached_property
    def epochs(self) -> list[Epoch]:
        """Epochs that started before run_stop, by epoch_num, with their eval and metric."""
        rows: dict[int, dict[str, float]] = {}
        keys = {"epoch_start": "start_ms", "epoch_stop": "stop_ms",
                "eval_start": "eval_start_ms", "eval_stop": "eval_stop_ms"}
        for key, slot in keys.items():
            for event in self.all(key):
                num = _epoch_num(event)
                if num is not None and self._in_run(event):
                    rows.setdefault(num, {}).setdefault(slot, event.time_ms)
        metric_key = self.metric_key
        for event in self.all(metric_key) if metric_key else []:
            num = _epoch_num(event)
            if num is not None and self._in_run(event) and _is_number(event.value):
                row = rows.setdefault(num, {})
                row.setdefault("metric", float(event.value))
                row.setdefault("metric_ms", event.time_ms)
        return [Epoch(num, **rows[num]) for num in sorted(rows)]

    def interval_ms(self, start_key: str, stop_key: str) -> float | None:
        """First `start_key` → first `stop_key` after it, in ms (None if either is missing)."""
        starts = self.all(start_key)
        if not starts:
            return None
        stops = [e for e in self.all(stop_key) if e.time_ms >= starts[0].time_ms]
        return stops[0].time_ms - starts[0].time_ms if stops else None


def _epoch_num(event: Event) -> int | None:
    num = event.metadata.get("epoch_num")
    return num if isinstance(num, int) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _event(line: str) -> Event | None:
    """The event on one line, None for a line without the token; ValueError if corrupt."""
    at = line.rfind(TOKEN)
    if at < 0:
        return None
    record = json.loads(line[at + len(TOKEN):])
    if not isinstance(record, dict) or "key" not in record:
        raise ValueError("not an MLLOG record")
    return Event(str(record["key"]), record.get("value"), float(record["time_ms"]),
                 record.get("metadata") or {})


def read_log(path: str | Path) -> bytes:
    """The bytes of an MLLOG file, every line holding a record at most MAX_RECORD_BYTES
    long: a longer one is refused in one line naming the file and the line, before any
    parser reads it (mlperf-logging's would not finish). Lines end as the checker reads
    them (universal newlines: \\n, \\r\\n, \\r), each counted in bytes (it reads latin-1)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SciperfError(f"no such MLLOG file: {path}") from None
    except OSError as exc:
        raise SciperfError(f"cannot read MLLOG file {path}: {exc.strerror or exc}") from None
    token = TOKEN.encode()
    for number, line in enumerate(data.splitlines(), start=1):
        if len(line) > MAX_RECORD_BYTES and token in line:
            raise SciperfError(
                f"{path}: line {number} is {len(line)} bytes; an MLLOG record is at most "
                f"{MAX_RECORD_BYTES} bytes (the official checker's time grows with the "
                "square of a line's length)")
    return data


def parse_log(path: str | Path) -> RunLog:
    """Read one MLLOG file (through :func:`read_log`). Corrupt lines are counted (the
    compliance checker rejects such a log); a file that is unreadable, holds a line too
    long to check or no MLLOG line at all is a user error."""
    path = Path(path)
    text = read_log(path).decode("utf-8", errors="replace")
    events, bad = [], 0
    for line in text.splitlines():
        try:
            event = _event(line.strip())
        except (ValueError, KeyError, TypeError, RecursionError):  # deep nesting: corrupt
            bad += 1
            continue
        if event is not None:
            events.append(event)
    if not events:
        raise SciperfError(f"{path} is not an MLLOG result file (no readable ':::MLLOG' line)")
    return RunLog(path, events, bad)


def find_logs(targets: list[str | Path]) -> list[Path]:
    """Result files named, or found (recursively) under the directories named, in a stable
    order (directory, then result index). Each target must exist and yield a file."""
    if not targets:
        raise SciperfError("name at least one result file or directory")
    found: list[Path] = []
    for target in targets:
        path = Path(target)
        if path.is_file():
            found.append(path)
            continue
        if not path.is_dir():
            raise SciperfError(f"no such file or directory: {path}")
        files = sorted(path.rglob(RESULT_GLOB), key=lambda p: (str(p.parent), result_index(p)))
        if not files:
            raise SciperfError(f"no {RESULT_GLOB} MLLOG files under {path}")
        found.extend(files)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return unique


def quality_target(benchmark: str) -> tuple[str, float, bool] | None:
    """(metric key, target, higher is better) of a benchmark.

    From the sciperf spec when the workload is implemented, else from the official closed
    compliance rules of hpc 3.0.0 (the `ATLEAST_ONE_CHECK` on the quality key), so published
    logs of benchmarks sciperf does not implement yet still get their target line.
    """
    from sciperf.workloads import WORKLOADS, get
    if benchmark in WORKLOADS:
        metric = get(benchmark).metric
        return metric.key, float(metric.target), bool(metric.higher_is_better)
    import mlperf_logging.compliance_checker as cc
    rules = Path(cc.__file__).parent / "hpc_3.0.0" / f"closed_{benchmark}.yaml"
    if not rules.is_file():
        return None
    text = rules.read_text()
    for key in METRIC_KEYS:
        block = re.search(rf"NAME:\s*{key}\b.*?ATLEAST_ONE_CHECK:\s*\"([^\"]+)\"", text, re.S)
        if block:
            cmp = re.search(r"v\['value'\]\s*(<=|>=)\s*([0-9.eE+-]+)", block.group(1))
            if cmp:
                return key, float(cmp.group(2)), cmp.group(1) == ">="
    return None
