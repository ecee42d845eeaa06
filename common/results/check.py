"""`sciperf check`: the official mlperf-logging compliance checker, one verdict line.

The checker is run as its own process (it configures global logging), in a scratch
directory (:func:`scratch`), and its findings are condensed to one line per log. Its log
file goes to the null device: everything it logs is on its stderr too, and a log file the
disk refuses would fill that stderr with logging's tracebacks, read as the checker's
crash. What it reads is bounded first: `parse_log` refuses a line its parser would not
finish, and the process itself is stopped after CHECKER_SECONDS.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf.data import atomic
from sciperf.errors import SciperfError
from sciperf.results import own_rules
from sciperf.results.logs import parse_log
from sciperf.results.mllog import RULESET
from sciperf.results.tree import RESULT_GLOB


@dataclass
class Verdict:
    """Outcome of checking one MLLOG file."""

    path: Path
    ok: bool
    division: str
    benchmark: str
    problems: list[str]
    ruleset: str = RULESET

    def line(self) -> str:
        """The one-line verdict printed by the CLI."""
        what = f"hpc {self.ruleset}, {self.division} {self.benchmark}"
        if self.ok:
            return f"PASS {self.path}: compliant ({what})"
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        first = self.problems[0] if self.problems else "checker failed"
        return f"FAIL {self.path}: {first}{more} ({what})"


def _crash(output: str) -> str | None:
    """The exception a crashed checker ended with ("the checker crashed on this log:
    TypeError: …"), or None: its traceback's frames name the checker's code, not what in
    the log made it fail, so only the last line is worth one verdict line."""
    head, sep, tail = output.partition("Traceback (most recent call last):")
    if not sep:
        return None
    last = [ln.strip() for ln in tail.splitlines() if ln.strip() and not ln.startswith(" ")]
    return f"the checker crashed on this log: {last[-1] if last else 'no exception line'}"


SEPARATOR = "-" * 30  # between the checker's messages (mlp_compliance.log_messages)
DUMPS = ("current context[s]=", "current line[v]=")  # the checker's state, multi-line dicts


def _problems(output: str) -> list[str]:
    """The checker's findings, one line each: its messages are several lines (a heading
    ending in ':', the log line, the failed test, its state) separated by dashes."""
    crash = _crash(output)
    if crash is not None:
        return [crash]
    return [line for message in output.split(SEPARATOR) if (line := _one_line(message))]


def _one_line(message: str) -> str:
    """One checker message as a line: its text lines joined, a quoted MLLOG line as its
    key (when the text does not name it already), the state dumps left out."""
    kept: list[str] = []
    for raw in message.splitlines():
        text = raw.strip()
        for prefix in ("WARNING -", "ERROR -"):
            text = text.removeprefix(prefix).strip()
        if not text or text.startswith(("INFO", "** Logging")) or text == "FAILED":
            continue
        if text.startswith(DUMPS):
            break
        if text.startswith(":::MLLOG"):
            key = _mllog_key(text)
            if key and f"'{key}'" not in " ".join(kept):
                kept.append(f"[{key}]")
            continue
        kept.append(text)
    return " ".join(kept)


def _mllog_key(line: str) -> str | None:
    try:
        return str(json.loads(line[len(":::MLLOG"):])["key"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


DIVISIONS = ("closed", "open")


def _unknown_names(division: Any, benchmark: Any) -> str | None:
    """What the checker has no rules for (it opens `<division>_<benchmark>.yaml` and
    crashed with a FileNotFoundError naming its own file): a division not in the rules,
    a benchmark neither MLPerf HPC's nor a workload of sciperf's (whose logs get the
    official rules extended to it, open division only: sciperf.results.own_rules)."""
    from sciperf.results.score import hpc_benchmarks
    from sciperf.workloads import names
    if division not in DIVISIONS:
        return (f"submission_division {division!r} is not one of {', '.join(DIVISIONS)} "
                "(the checker has no rules for it)")
    if benchmark in (known := hpc_benchmarks()):
        return None
    if benchmark not in names():
        return (f"submission_benchmark {benchmark!r} is not an MLPerf HPC benchmark "
                f"({', '.join(sorted(known))}) nor a sciperf workload")
    if division != "open":
        return (f"submission_division {division!r}: {benchmark} is not an MLPerf HPC "
                "benchmark, so its runs are open division (system.submission_division=open)")
    return None


def _own_rules(benchmark: str, ruleset: str, scratch: Path) -> list[str]:
    """``--config`` of the official rules extended to a workload of sciperf's own (none
    for an MLPerf HPC benchmark: the checker's own rules)."""
    from sciperf.results.score import hpc_benchmarks
    from sciperf.workloads import get
    if benchmark in hpc_benchmarks():
        return []
    return ["--config", str(own_rules.write_rules(get(benchmark), ruleset, scratch))]


@contextlib.contextmanager
def scratch(prefix: str, within: Path | None = None) -> Iterator[Path]:
    """A new private folder for files needed only while the body runs (an official
    checker's), in `within` or the temporary directory, removed after the body. A disk
    that cannot take it (full, read-only) is one line naming where it was to be made,
    and the body's writes name their own files (sciperf.data.atomic): nothing of the
    folder is left either way."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=within))
    except OSError as exc:  # tempfile.tempdir stays None when no candidate was usable
        where = within or tempfile.tempdir or "the temporary directory"
        raise SciperfError(f"{where}: cannot be written ({atomic.why(exc)})") from None
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# The official checker's time limit on one log. With lines bounded (logs.MAX_RECORD_BYTES)
# its time grows with the log's size, and logs of tens of MB check in seconds
# (bench/cpu-2026-11-29-epyc-zen4.md#long-mllog-lines): a log still running after five
# minutes is refused rather than waited on without end.
CHECKER_SECONDS = 300.0


def check_log(path: str | Path, ruleset: str = RULESET) -> Verdict:
    """Run the official checker (usage hpc) on one result file, for at most
    CHECKER_SECONDS (then one line naming the file and the limit)."""
    path = Path(path)
    if not path.is_file():
        raise SciperfError(f"no such MLLOG file: {path}")
    # not a log at all (another file, empty, binary), or a line longer than
    # MAX_RECORD_BYTES that the checker's parser would not finish: one line
    log = parse_log(path)
    if unknown := _unknown_names(log.division, log.benchmark):  # the checker would crash
        return Verdict(path, False, str(log.division or "?"), str(log.benchmark or "?"),
                       [unknown], ruleset)
    with scratch("sciperf-check-") as tmp:
        cmd = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "hpc",
               "--ruleset", ruleset, *_own_rules(str(log.benchmark), ruleset, tmp),
               "--log_output", os.devnull, str(path.resolve())]
        limit = CHECKER_SECONDS
        try:  # on timeout the process is killed and reaped before this raises
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False,
                                  timeout=limit)
        except subprocess.TimeoutExpired:
            raise SciperfError(
                f"{path}: the official checker did not finish within {limit:g} s and was "
                "stopped") from None
    output = proc.stdout + proc.stderr
    ok = proc.returncode == 0 and "SUCCESS" in output
    problems = [] if ok else _problems(output) or [output.strip().splitlines()[-1:][0]
                                                   if output.strip() else "checker failed"]
    return Verdict(path, ok, str(log.division or "?"), str(log.benchmark or "?"), problems,
                   ruleset)


def result_files(target: str | Path) -> list[Path]:
    """A result file as given, or a run directory's result_<i>.txt in instance order."""
    path = Path(target)
    if not path.is_dir():
        return [path]
    files = sorted(path.glob(RESULT_GLOB),
                   key=lambda p: int(p.stem.split("_")[1]) if p.stem.split("_")[1].isdigit()
                   else -1)
    if not files:
        raise SciperfError(f"no {RESULT_GLOB} MLLOG files in {path}")
    return files
