"""A run never writes an MLLOG line that its own `check` would refuse.

`check` and `score` refuse a record line over MAX_RECORD_BYTES (the official checker's
parser is quadratic in a line's length). The config's texts that become MLLOG values are
bounded before the run starts, and the logger refuses any longer record before writing
a byte of it, so the log stays whole lines every reader accepts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sciperf.config import compose
from sciperf.config_checks import LOGGED_TEXT, LOGGED_TEXT_MAX
from sciperf.errors import SciperfError
from sciperf.results.logs import MAX_RECORD_BYTES, parse_log
from sciperf.results.mllog import MLLogger
from testkit import cli, one_error_line


@pytest.mark.parametrize("key", LOGGED_TEXT)
def test_a_logged_config_text_past_the_bound_is_refused_before_the_run(key: str,
                                                                        tmp_path: Path) -> None:
    out = tmp_path / "out"
    value = "x" * (LOGGED_TEXT_MAX + 1)
    proc = cli("train", "workload=cosmoflow", "experiment=mini", f"{key}={value}",
               f"data.dir={tmp_path / 'data'}", f"output_dir={out}")
    line = one_error_line(proc, "train")
    assert key in line and f"{LOGGED_TEXT_MAX + 1} bytes" in line and value not in line
    assert not out.exists()


def test_a_logged_config_text_at_the_bound_composes() -> None:
    cfg = compose(["workload=cosmoflow", "experiment=mini",
                   f"system.submission_platform={'p' * LOGGED_TEXT_MAX}"])
    assert len(cfg.system.submission_platform) == LOGGED_TEXT_MAX


def test_the_logger_refuses_a_record_readers_would_refuse(tmp_path: Path) -> None:
    path = tmp_path / "result_0.txt"
    log = MLLogger(path)
    log.event("seed", 1)
    with pytest.raises(SciperfError) as info:
        log.event("submission_platform", "y" * MAX_RECORD_BYTES)
    message = str(info.value)
    assert "\n" not in message and "submission_platform" in message
    assert str(MAX_RECORD_BYTES) in message
    log.event("seed", 2)  # the refused record left nothing behind it
    log.close()
    assert [e.value for e in parse_log(path).events] == [1, 2]


def test_the_longest_record_the_logger_writes_is_read_back(tmp_path: Path) -> None:
    """The logger's bound is not stricter than a reader needs: a value near it is written
    and read."""
    path = tmp_path / "result_0.txt"
    log = MLLogger(path)
    value = "z" * (MAX_RECORD_BYTES - 2048)
    log.event("submission_platform", value)
    log.close()
    assert parse_log(path).events[0].value == value
