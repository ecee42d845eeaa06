"""Bad summary.json files and unusable --out paths end the real command in one line.

Every reader of summary.json (`report`, `compare`, `characterize run=`) goes through the
one checked loader (sciperf.results.summary): valid JSON of the wrong shape, bare
NaN/Infinity and unparseable text exit 2 with one stderr line naming the file and the
field, never a traceback and never a report with the run silently dropped into a "?" group.

Every case runs the verb's main in this process (testkit.cli): what is tested is the verb's
exit status and its lines, not the console script's own exit.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testkit import cli

# What `sciperf train` writes, cut to the fields the readers look at.
BASE: dict[str, Any] = {
    "status": "success", "benchmark": "cosmoflow", "framework": "pytorch",
    "experiment": "mini", "precision": "fp32", "epochs": 2, "time_to_train_s": 10.0,
    "samples_per_s": 100.0, "final_metric": 0.3, "target": 0.35, "parameter_count": 108604,
    "global_batch_size": 8, "world_size": 1, "instance": 0, "instances": 1,
    "result_file": "result_0.txt", "config_hash": "abc", "versions": {}, "host": "h",
    "history": [],  # + "config": the composed mini config (fixture `base`)
}
VERBS = ("report", "compare", "characterize")


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], str]:
    return lambda s: json.dumps({**s, key: value})


def _drop(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda s: json.dumps({k: v for k, v in s.items() if k != key})


# (id, summary → file text, what the error line must say, verbs the case applies to)
CASES: list[tuple[str, Callable[[dict[str, Any]], str], str, tuple[str, ...]]] = [
    ("string-rate", _set("samples_per_s", "fast"), "samples_per_s is 'fast'", VERBS),
    ("list-world-size", _set("world_size", []), "world_size is []", VERBS),
    ("int-config", _set("config", 3), "config is 3", VERBS),
    ("null-world-size", _set("world_size", None), "world_size is null", VERBS),
    ("top-level-list", lambda s: json.dumps([s]), "list, not an object", VERBS),
    ("no-framework", _drop("framework"), "framework is missing", ("report", "compare")),
    ("no-benchmark", _drop("benchmark"), "benchmark is missing", ("characterize",)),
    ("bare-nan", lambda s: json.dumps({**s, "samples_per_s": float("nan")}),
     "samples_per_s is a bare NaN", VERBS),
    ("nested-infinity", lambda s: json.dumps({**s, "history": [{"loss": float("inf")}]}),
     "history[0].loss is a bare Infinity", VERBS),
    ("unparseable", lambda s: json.dumps(s)[:-20], "not valid JSON", VERBS),
]


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    """BASE with the config `sciperf train experiment=mini` stores."""
    from sciperf.config import compose, to_container
    return {**BASE, "config": to_container(compose(["experiment=mini"]))}


@pytest.fixture
def run_dir(published_results: Path, base: dict[str, Any], tmp_path: Path) -> Path:
    """A run directory as `sciperf train` leaves it: a (published) MLLOG file and `base`."""
    run = tmp_path / "run"
    run.mkdir()
    log = next(published_results.rglob("result_0.txt"))
    shutil.copy(log, run / "result_0.txt")
    (run / "summary.json").write_text(json.dumps(base))
    return run


def _args(verb: str, run: Path, out: Path) -> list[str]:
    return {"report": ["report", str(run), "--out", str(out)],
            "compare": ["compare", str(run), str(run)],
            "characterize": ["characterize", f"run={run}", "--out", str(out)],
            "package": ["package", str(run), "--system", "x", "--out", str(out)]}[verb]


def _one_error_line(args: list[str]) -> str:
    """Run the verb's main in this process; it must exit 2 with exactly one stderr line (no
    traceback)."""
    proc = cli(*args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("verb", VERBS)
def test_a_good_summary_is_read(verb, run_dir, tmp_path):
    """The control: BASE passes the loader (characterize then goes on to count)."""
    proc = cli(*_args(verb, run_dir, tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("verb", "text", "said"), [
    pytest.param(verb, text, said, id=f"{case}-{verb}")
    for case, text, said, verbs in CASES for verb in verbs])
def test_bad_summary_is_one_line(verb, text, said, base, run_dir, tmp_path):
    (run_dir / "summary.json").write_text(text(base))
    out = tmp_path / "out"
    line = _one_error_line(_args(verb, run_dir, out))
    assert "run/summary.json" in line and said in line, line
    assert not out.exists()


@pytest.mark.parametrize("verb", ("report", "characterize", "package"))
@pytest.mark.parametrize("where", ("file", "under-a-file", "proc"))
def test_unusable_out_is_one_line(verb, where, run_dir, tmp_path):
    """--out at an existing file, below a file, or under /proc (tests run as root, which
    writes into a chmod-ed read-only folder anyway, so /proc stands in for a folder that
    cannot be written): one line naming the path, nothing written anywhere."""
    blocker = tmp_path / "blocker"
    blocker.write_text("keep")
    out = {"file": blocker, "under-a-file": blocker / "out",
           "proc": Path("/proc/sciperf-out")}[where]
    before = sorted(tmp_path.rglob("*"))
    line = _one_error_line(_args(verb, run_dir, out))
    assert str(out) in line, line
    assert sorted(tmp_path.rglob("*")) == before and blocker.read_text() == "keep"


@pytest.mark.parametrize("case", ["unparseable", "string-rate", "bare-nan"])
def test_score_refuses_a_bad_summary_beside_a_run(case, base, run_dir):
    """score reads a run's summary too (its instance count and rates): a corrupt one is an
    error naming it, not a silently different score."""
    text, said = next((t, s) for c, t, s, _ in CASES if c == case)
    (run_dir / "summary.json").write_text(text(base))
    line = _one_error_line(["score", str(run_dir)])
    assert "run/summary.json" in line and said in line, line


@pytest.mark.parametrize("verb", ("report", "package"))
def test_built_aside_trees_get_a_plain_folders_mode(verb, run_dir, tmp_path):
    """Built in a temporary sibling and renamed: the folder must not stay mkdtemp's 0700
    (others on a shared system read reports and submission trees)."""
    out = tmp_path / "out"
    cli(*_args(verb, run_dir, out))
    assert out.is_dir()
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask
