"""The one MLPerf logger and `sciperf check` (official compliance checker, hpc 3.0.0)."""

from __future__ import annotations

import inspect
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sciperf import cli
from sciperf.errors import SciperfError
from sciperf.results.check import Verdict, check_log
from sciperf.results.mllog import RULESET, MLLogger
from testkit import cosmoflow_log

HERE = str(Path(__file__).resolve())


def _records(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    assert lines
    out = []
    for line in lines:
        assert line.startswith(":::MLLOG {"), line
        out.append(json.loads(line[len(":::MLLOG "):]))
    return out


def _line() -> int:
    """Line number of the caller's next line."""
    return inspect.currentframe().f_back.f_lineno + 1


# --- MLLogger ---------------------------------------------------------------------------

def test_lines_are_valid_mllog(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "result_0.txt"
    log = MLLogger(path)
    log.event("global_batch_size", 16)
    log.start("epoch_start", metadata={"epoch_num": 1})
    log.end("epoch_stop", metadata={"epoch_num": 1})
    log.event("eval_error", 0.25, metadata={"epoch_num": 1})
    log.close()
    recs = _records(path)
    assert [r["key"] for r in recs] == ["global_batch_size", "epoch_start", "epoch_stop",
                                        "eval_error"]
    assert [r["event_type"] for r in recs] == ["POINT_IN_TIME", "INTERVAL_START",
                                               "INTERVAL_END", "POINT_IN_TIME"]
    for r in recs:
        assert set(r) == {"namespace", "time_ms", "event_type", "key", "value", "metadata"}
        assert isinstance(r["time_ms"], int) and r["time_ms"] > 1_600_000_000_000
    assert recs[0]["value"] == 16 and recs[3]["value"] == 0.25
    assert [r["metadata"].get("epoch_num") for r in recs] == [None, 1, 1, 1]
    times = [r["time_ms"] for r in recs]
    assert times == sorted(times)


def test_file_and_line_name_the_caller(tmp_path: Path) -> None:
    log = MLLogger(tmp_path / "r.txt")
    line_event = _line()
    log.event("seed", 3)
    line_phase = _line()
    log.init_start()  # logs two events from inside mllog.py
    line_stop = _line()
    log.run_stop(True, epoch_num=2)
    log.close()
    recs = _records(tmp_path / "r.txt")
    assert [r["key"] for r in recs] == ["seed", "cache_clear", "init_start", "run_stop"]
    assert {r["metadata"]["file"] for r in recs} == {HERE}
    assert [r["metadata"]["lineno"] for r in recs] == [line_event, line_phase, line_phase,
                                                       line_stop]


def test_run_stop_status_and_epoch(tmp_path: Path) -> None:
    for success, status in ((True, "success"), (False, "aborted")):
        path = tmp_path / f"{status}.txt"
        log = MLLogger(path)
        log.run_stop(success, epoch_num=7)
        log.close()
        (rec,) = _records(path)
        assert rec["key"] == "run_stop" and rec["event_type"] == "INTERVAL_END"
        assert rec["metadata"]["status"] == status
        assert rec["metadata"]["epoch_num"] == 7


def test_instance_metadata(tmp_path: Path) -> None:
    log = MLLogger(tmp_path / "r.txt", instance=3)
    log.event("eval_error", 0.2, metadata={"epoch_num": 4})
    log.close()
    (rec,) = _records(tmp_path / "r.txt")
    assert rec["metadata"]["instance"] == 3
    assert rec["metadata"]["epoch_num"] == 4


def test_lines_reach_the_file_before_close(tmp_path: Path) -> None:
    """A killed job keeps its log: every line is flushed as it is written."""
    path = tmp_path / "r.txt"
    log = MLLogger(path)
    log.event("seed", 1)
    assert len(_records(path)) == 1
    log.event("seed", 2)
    assert [r["value"] for r in _records(path)] == [1, 2]
    log.close()


def test_disabled_logger_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "off" / "r.txt"
    log = MLLogger(path, enabled=False)
    log.init_start()
    log.event("seed", 1)
    log.run_stop(True, 1)
    log.close()
    assert not path.exists()
    assert not (tmp_path / "off").exists()
    none = MLLogger(None)
    none.event("seed", 1)
    none.close()
    assert list(tmp_path.iterdir()) == []


def test_new_logger_never_writes_into_an_earlier_file(tmp_path: Path) -> None:
    first_path, second_path = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    first = MLLogger(first_path)
    first.event("seed", 1)
    old_id = id(first)
    del first  # forgotten without close(), e.g. after an exception
    others = []  # kept alive so that only the freed address can come back
    for _ in range(200):
        second = MLLogger(second_path)
        if id(second) == old_id:
            break
        others.append(second)
    else:
        pytest.skip("the allocator did not reuse the address; nothing to show")
    for other in others:
        other.close()
    second.event("seed", 2)
    second.close()
    assert [r["value"] for r in _records(tmp_path / "a.txt")] == [1]


# --- a complete run log, in the driver's order (sciperf.run.driver) ---------------------

@pytest.fixture(scope="module")
def good_log(tmp_path_factory) -> Path:
    return cosmoflow_log(tmp_path_factory.mktemp("mllog") / "result_0.txt", [0.31, 0.18, 0.123])


def test_complete_log_passes(good_log: Path) -> None:
    keys = [r["key"] for r in _records(good_log)]
    assert keys[:2] == ["cache_clear", "init_start"]
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("run_stop")
    verdict = check_log(good_log)
    assert verdict.ok, verdict.problems
    assert verdict.problems == []
    assert (verdict.division, verdict.benchmark) == ("closed", "cosmoflow")
    assert verdict.line() == f"PASS {good_log}: compliant (hpc {RULESET}, closed cosmoflow)"


def _variant(good: Path, tmp_path: Path, name: str, edit) -> Path:
    path = tmp_path / f"{name}.txt"
    path.write_text("\n".join(edit(good.read_text().splitlines())) + "\n")
    return path


def _drop(key: str):
    return lambda lines: [ln for ln in lines if f'"key": "{key}"' not in ln]


def _garbage(lines: list[str]) -> list[str]:
    return [*lines[:5], ':::MLLOG {"namespace": "", "time_ms": 1, "key": oops', *lines[5:]]


@pytest.mark.parametrize(("name", "edit", "expected"), [
    ("no_run_stop", _drop("run_stop"), "run_stop"),
    ("no_org", _drop("submission_org"), "submission_org"),
    ("no_gbs", _drop("global_batch_size"), "global_batch_size"),
    ("garbage_json", _garbage, "pars"),
])
def test_broken_logs_fail(good_log: Path, tmp_path: Path, name: str, edit,
                          expected: str) -> None:
    verdict = check_log(_variant(good_log, tmp_path, name, edit))
    assert not verdict.ok
    assert any(expected in p for p in verdict.problems), verdict.problems
    assert verdict.line().startswith(f"FAIL {tmp_path / name}.txt: ")
    assert verdict.line().endswith(f"(hpc {RULESET}, closed cosmoflow)")


def _set(key: str, value):
    """An edit giving MLLOG `key` another value."""
    def edit(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if f'"key": "{key}"' in line:
                record = json.loads(line[len(":::MLLOG "):])
                record["value"] = value
                line = ":::MLLOG " + json.dumps(record)
            out.append(line)
        return out
    return edit


def _line_of(path: Path, key: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1)
                if f'"key": "{key}"' in ln)


def test_a_failed_check_is_the_whole_finding_on_one_line(good_log: Path, tmp_path: Path):
    """The checker writes a heading ending in ':' and then the failed test on its own
    line: the verdict showed only "CHECK for 'opt_name' failed in line 12: (+N more)"."""
    bad = _variant(good_log, tmp_path, "adam", _set("opt_name", "adam"))
    verdict = check_log(bad)
    at = _line_of(bad, "opt_name") - 1  # the checker counts lines from 0
    assert verdict.problems[0] == (f"CHECK for 'opt_name' failed in line {at}: failed test:"
                                   "  v['value'] in ['sgd', 'SGD']"), verdict.problems
    # a string value: the test itself raises (comparing str with float)
    dropout = check_log(_variant(good_log, tmp_path, "dropout", _set("dropout", "two")))
    assert dropout.problems[0] == ("Failed executing CHECK code: v['value'] >= 0. and "
                                   "v['value'] < 1. triggered by line: [dropout]"), \
        dropout.problems
    assert all("current context" not in p and ":::MLLOG" not in p
               for p in verdict.problems + dropout.problems)


def test_rank_prefixed_lines_still_name_division_and_benchmark(good_log: Path,
                                                               tmp_path: Path) -> None:
    """`0: :::MLLOG …` (srun --label): the checker and the parser read it; the verdict's
    division and benchmark came out as '? ?'."""
    prefixed = _variant(good_log, tmp_path, "prefixed", lambda ls: [f"0: {ln}" for ln in ls])
    assert check_log(prefixed).line().endswith(f"(hpc {RULESET}, closed cosmoflow)")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("submission_benchmark", "resnet", "submission_benchmark 'resnet' is not an MLPerf HPC "
                                       "benchmark (cosmoflow, deepcam, oc20, openfold)"),
    ("submission_division", "foo", "submission_division 'foo' is not one of closed, open"),
])
def test_a_name_the_rules_do_not_know_is_said_not_crashed_on(good_log: Path, tmp_path: Path,
                                                             key: str, value: str,
                                                             expected: str) -> None:
    """The checker opened <division>_<benchmark>.yaml and crashed with a FileNotFoundError
    naming its own installation's file."""
    verdict = check_log(_variant(good_log, tmp_path, value, _set(key, value)))
    assert not verdict.ok and len(verdict.problems) == 1
    assert verdict.problems[0].startswith(expected), verdict.problems


def test_target_never_reached_fails_closed_cosmoflow(tmp_path: Path) -> None:
    log = cosmoflow_log(tmp_path / "result_0.txt", [0.4, 0.2, 0.125])
    assert _records(log)[-1]["metadata"]["status"] == "aborted"
    verdict = check_log(log)
    assert not verdict.ok
    assert any("eval_error" in p and "0.124" in p for p in verdict.problems), verdict.problems


def test_a_log_that_crashes_the_checker_names_the_exception(good_log: Path,
                                                            tmp_path: Path) -> None:
    """A value the checker's rules cannot compare (a string eval_error) crashes the
    official checker: the verdict gives its exception, not the traceback's first line."""
    def text_metric(lines: list[str]) -> list[str]:
        at = next(i for i, ln in enumerate(lines) if '"key": "eval_error"' in ln)
        record = json.loads(lines[at][len(":::MLLOG "):])
        record["value"] = "abc"
        return [*lines[:at], ":::MLLOG " + json.dumps(record), *lines[at + 1:]]

    verdict = check_log(_variant(good_log, tmp_path, "text_metric", text_metric))
    assert not verdict.ok and len(verdict.problems) == 1, verdict.problems
    line = verdict.line()
    assert "the checker crashed on this log: TypeError: " in line and "Traceback" not in line
    assert "'str'" in line, line


@pytest.mark.parametrize("content", [b"", b"hello\nworld\n", bytes(range(256))])
def test_a_file_that_is_no_log_is_one_line(tmp_path: Path, content: bytes,
                                           capsys: pytest.CaptureFixture) -> None:
    """Not a checker FAIL about a missing submission_org: the same one-line refusal as
    score and report, exit 2."""
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(SciperfError, match="is not an MLLOG result file"):
        check_log(path)
    assert cli.main(["check", str(path)]) == 2
    assert "is not an MLLOG result file" in capsys.readouterr().err


def test_check_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SciperfError, match="no such MLLOG file"):
        check_log(tmp_path / "nothing.txt")


def test_cli_check_exit_codes(good_log: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture) -> None:
    bad = _variant(good_log, tmp_path, "bad", _drop("run_stop"))
    assert cli.main(["check", str(good_log)]) == 0
    assert capsys.readouterr().out.startswith(f"PASS {good_log}")
    assert cli.main(["check", str(good_log), str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("PASS") and lines[1].startswith(f"FAIL {bad}")


# --- published logs ---------------------------------------------------------------------

def test_published_logs_pass(published_results: Path) -> None:
    logs = sorted(published_results.glob("v*/*/results/*/*/*/result_*.txt"))
    if not logs:
        pytest.skip(f"no result_*.txt under {published_results}")
    with ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(check_log, logs))
    failed = [v.line() for v in verdicts if not v.ok]
    assert failed == []
    for path, v in zip(logs, verdicts, strict=True):
        assert v.benchmark == path.parent.name  # results/<system>/<scale>/<benchmark>/
        assert v.division == "closed"
        assert v.line() == f"PASS {path}: compliant (hpc {RULESET}, closed {v.benchmark})"
    assert {v.benchmark for v in verdicts} >= {"cosmoflow"}


# --- Verdict.line ------------------------------------------------------------------------

def test_verdict_line_formats() -> None:
    p = Path("runs/result_0.txt")
    what = f"(hpc {RULESET}, open deepcam)"
    assert Verdict(p, True, "open", "deepcam", []).line() == f"PASS {p}: compliant {what}"
    assert Verdict(p, False, "open", "deepcam", ["missing x"]).line() == \
        f"FAIL {p}: missing x {what}"
    assert Verdict(p, False, "open", "deepcam", ["a", "b", "c"]).line() == \
        f"FAIL {p}: a (+2 more) {what}"
    assert Verdict(p, False, "?", "?", []).line() == \
        f"FAIL {p}: checker failed (hpc {RULESET}, ? ?)"
