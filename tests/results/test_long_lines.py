"""Result logs that mlperf-logging's parsers would not finish: refused in one line.

The official checker (and its RCP checker) cut a line's prefix with a regular expression
whose time grows with the square of the line's length, so one valid MLLOG record holding a
1 MB string never finished `sciperf check` or `sciperf score`. Every reader goes through
`sciperf.results.logs.read_log`, which refuses a record line longer than MAX_RECORD_BYTES
before any parser sees it, and the checker itself runs under a time limit
(`sciperf.results.check.CHECKER_SECONDS`). JSON nested deeper than Python's recursion
limit, the other input a parser of these files cannot survive, is one line too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sciperf.results import check
from sciperf.results.logs import MAX_RECORD_BYTES, TOKEN, parse_log
from sciperf.workloads.cosmoflow import spec as cosmo
from testkit import cli, cosmoflow_log, one_error_line

KEY = "submission_platform"  # a free-text value of every log: where a long string lands
NV_COSMOFLOW = "v3.0/NVIDIA/results/eos_n64_ngc23.09_pytorch/strong/cosmoflow"
NV_SYSTEM = "v3.0/NVIDIA/systems/eos_n64_ngc23.09_pytorch.json"


@pytest.fixture(scope="module")
def good_log(tmp_path_factory) -> Path:
    return cosmoflow_log(tmp_path_factory.mktemp("long_lines") / "result_0.txt")


def _stretch(source: Path, dest: Path, line_bytes: int) -> int:
    """`source` copied to `dest` with its KEY record's string value grown until that line
    is `line_bytes` long (its newline not counted); returns the line's number."""
    lines = source.read_bytes().decode().splitlines()
    number = next(i for i, ln in enumerate(lines, 1) if f'"key": "{KEY}"' in ln)
    line = lines[number - 1]
    prefix, record = line[:line.rfind(TOKEN)], json.loads(line[line.rfind(TOKEN) + len(TOKEN):])
    record["value"] = ""
    bare = len((prefix + TOKEN + json.dumps(record)).encode())
    record["value"] = "x" * (line_bytes - bare)
    lines[number - 1] = prefix + TOKEN + json.dumps(record)
    assert len(lines[number - 1].encode()) == line_bytes
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(lines) + "\n")
    return number


def _refusal(path: Path, number: int, line_bytes: int) -> str:
    return (f"{path}: line {number} is {line_bytes} bytes; an MLLOG record is at most "
            f"{MAX_RECORD_BYTES} bytes")


@pytest.mark.timeout(60)
def test_a_1mb_record_is_one_line_from_check(good_log: Path, tmp_path: Path) -> None:
    """The checker's parser never finished on this line; now nothing parses it."""
    bad = tmp_path / "result_0.txt"
    number = _stretch(good_log, bad, 1 << 20)
    line = one_error_line(cli("check", str(bad)), "check")
    assert _refusal(bad, number, 1 << 20) in line, line
    # a run folder holding it is the same line
    assert _refusal(bad, number, 1 << 20) in one_error_line(cli("check", str(tmp_path)),
                                                            "check")


@pytest.mark.timeout(60)
def test_a_1mb_record_is_one_line_from_score_of_a_run_folder(good_log: Path,
                                                             tmp_path: Path) -> None:
    bad = tmp_path / "run" / "result_1.txt"
    number = _stretch(good_log, bad, 1 << 20)
    shutil.copy(good_log, bad.parent / "result_0.txt")
    line = one_error_line(cli("score", str(bad.parent)), "score")
    assert _refusal(bad.resolve(), number, 1 << 20) in line, line


@pytest.mark.timeout(60)
def test_a_1mb_record_in_a_published_tree_names_the_file(published_results: Path,
                                                         tmp_path: Path) -> None:
    """A submission tree of the published v3.0 NVIDIA CosmoFlow runs, one of them with a
    1 MB platform string: score, report and package's reader name that file and line."""
    folder = tmp_path / NV_COSMOFLOW
    shutil.copytree(published_results / NV_COSMOFLOW, folder)
    (tmp_path / NV_SYSTEM).parent.mkdir(parents=True)
    shutil.copy(published_results / NV_SYSTEM, tmp_path / NV_SYSTEM)
    bad = folder / "result_3.txt"
    number = _stretch(published_results / NV_COSMOFLOW / bad.name, bad, 1 << 20)
    expected = _refusal(bad.resolve(), number, 1 << 20)
    assert expected in one_error_line(cli("score", str(tmp_path / "v3.0")), "score")
    assert expected in one_error_line(
        cli("report", str(tmp_path / "v3.0"), "--out", str(tmp_path / "report")), "report")
    assert not (tmp_path / "report").exists()


@pytest.mark.timeout(120)
def test_a_record_at_the_bound_checks_as_before(good_log: Path, tmp_path: Path) -> None:
    """MAX_RECORD_BYTES is a line the checker parses in a fraction of a second: a log
    holding one still passes, and its value reads back whole; a byte more is refused."""
    at = tmp_path / "at" / "result_0.txt"
    _stretch(good_log, at, MAX_RECORD_BYTES)
    proc = cli("check", str(at))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"PASS {at}: compliant"), proc.stdout
    assert len(parse_log(at).platform) > MAX_RECORD_BYTES - 300
    over = tmp_path / "over" / "result_0.txt"
    number = _stretch(good_log, over, MAX_RECORD_BYTES + 1)
    assert _refusal(over, number, MAX_RECORD_BYTES + 1) in one_error_line(
        cli("check", str(over)), "check")


def test_a_long_line_without_a_record_is_not_refused(good_log: Path, tmp_path: Path) -> None:
    """Only a line holding `:::MLLOG ` goes through the checker's regular expression; a
    long line of other output in a captured log (a printed config) is skipped by it."""
    path = tmp_path / "result_0.txt"
    path.write_text("config: " + "y" * (4 * MAX_RECORD_BYTES) + "\n" + good_log.read_text())
    log = parse_log(path)
    assert (log.benchmark, log.bad_lines) == (cosmo.NAME, 0)


def _children() -> set[int]:
    """This process's child processes (Linux: /proc/self/task/*/children)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").glob("*"):
        with open(task / "children") as fh:
            found.update(int(pid) for pid in fh.read().split())
    return found


@pytest.mark.timeout(60)
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_the_checker_past_its_time_limit_is_one_line(good_log: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A checker still running at CHECKER_SECONDS is stopped (no process left behind):
    one line naming the file and the limit, from check and from score."""
    monkeypatch.setattr(check, "CHECKER_SECONDS", 0.01)
    before = _children()
    line = one_error_line(cli("check", str(good_log)), "check")
    assert line.endswith(f"{good_log}: the official checker did not finish within 0.01 s "
                         "and was stopped"), line
    run = tmp_path / "run"
    run.mkdir()
    for i in range(3):
        shutil.copy(good_log, run / f"result_{i}.txt")
    line = one_error_line(cli("score", str(run)), "score")
    assert "the official checker did not finish within 0.01 s" in line, line
    assert str(run.resolve() / "result_") in line, line
    assert _children() <= before  # the checkers were killed and reaped


DEEP = "[" * 5000 + "]" * 5000  # past Python's recursion limit, far under MAX_RECORD_BYTES


@pytest.mark.timeout(60)
def test_deeply_nested_json_is_one_line_not_a_traceback(good_log: Path,
                                                        tmp_path: Path) -> None:
    """json raises RecursionError (not ValueError) on deep nesting: a record holding it is
    a corrupt line the checker FAILs, a summary.json holding it a one-line refusal."""
    log = tmp_path / "run" / "result_0.txt"
    log.parent.mkdir()
    log.write_text(good_log.read_text()
                   + f'{TOKEN}{{"key": "x", "time_ms": 1, "value": {DEEP}}}\n')
    assert parse_log(log).bad_lines == 1
    proc = cli("check", str(log))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.stdout.startswith(f"FAIL {log}: "), proc.stdout
    (log.parent / "summary.json").write_text(f'{{"status": {DEEP}}}')
    line = one_error_line(cli("compare", str(log.parent), str(log.parent)), "compare")
    assert f"{log.parent / 'summary.json'}: not valid JSON" in line, line
