"""docs/architecture.md, rule 10 through the CLI: user errors end in one clear line.

Every case runs `sciperf …` — through its ``main(argv)`` in this process (testkit.cli),
the console script itself where the interpreter's own exit is what is tested — and
checks: exit status 2, exactly one line on stderr, that line names the offending
key/file/dir, and no traceback text.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
from pathlib import Path

import pytest

from sciperf import config as config_mod
from sciperf.workloads import WORKLOADS
from testkit import cli, one_error_line, sciperf

CONFIGS = Path(config_mod.__file__).resolve().parent.parent / "configs"


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def _run(_cmd: list[str], args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`sciperf ARGS` in `cwd`, in this process (the console script's main)."""
    return cli(*args, cwd=cwd, env=env)


def _one_error_line(proc: subprocess.CompletedProcess, verb: str) -> str:
    """Assert the rule-10 shape and return the single stderr line."""
    return one_error_line(proc, verb)


@pytest.mark.parametrize("group", ["workload", "framework", "experiment"])
def test_unknown_group_choice_lists_valid_choices(sciperf_cmd, tmp_path, group: str) -> None:
    valid = sorted(set(WORKLOADS) | set(_options("workload"))) if group == "workload" \
        else _options(group)
    line = _one_error_line(_run(sciperf_cmd, ["show", f"{group}=no_such_choice"], tmp_path),
                           "show")
    assert "no_such_choice" in line
    assert group in line
    assert valid
    for choice in valid:
        assert choice in line, (choice, line)


@pytest.mark.parametrize(("override", "must_name"), [
    ("no_such_key=1", "no_such_key"),
    ("train.no_such_key=1", "train.no_such_key"),
    ("model.no_such_layer=3", "model.no_such_layer"),
])
def test_unknown_key(sciperf_cmd, tmp_path, override: str, must_name: str) -> None:
    line = _one_error_line(_run(sciperf_cmd, ["show", override], tmp_path), "show")
    assert must_name in line


@pytest.mark.parametrize(("override", "must_name"), [
    ("train.max_epochs=abc", "train.max_epochs"),
    ("seed=1.5x", "seed"),
    ("train.target=high", "train.target"),
])
def test_bad_type(sciperf_cmd, tmp_path, override: str, must_name: str) -> None:
    line = _one_error_line(_run(sciperf_cmd, ["show", override], tmp_path), "show")
    assert must_name in line
    assert override.split("=")[1] in line


def test_bad_precision_lists_choices(sciperf_cmd, tmp_path) -> None:
    line = _one_error_line(_run(sciperf_cmd, ["show", "precision=fp16"], tmp_path), "show")
    assert "precision" in line and "fp16" in line
    for choice in ("auto", *config_mod.PRECISIONS):
        assert choice in line


def test_bad_data_format_lists_choices(sciperf_cmd, tmp_path) -> None:
    line = _one_error_line(_run(sciperf_cmd, ["show", "data.format=hdf5"], tmp_path), "show")
    assert "data.format" in line and "hdf5" in line
    assert "tfrecord" in line and "npy" in line


@pytest.mark.parametrize("override", ["train.max_epochs", "=3"])
def test_malformed_override(sciperf_cmd, tmp_path, override: str) -> None:
    line = _one_error_line(_run(sciperf_cmd, ["show", override], tmp_path), "show")
    assert "override" in line


def test_train_missing_data_dir_names_it(sciperf_cmd, tmp_path) -> None:
    missing = tmp_path / "no" / "such" / "data"
    out = tmp_path / "out"
    proc = _run(sciperf_cmd, ["train", f"data.dir={missing}", f"output_dir={out}"], tmp_path)
    line = _one_error_line(proc, "train")
    assert str(missing) in line
    assert not missing.exists()


def test_check_missing_file_names_it(sciperf_cmd, tmp_path) -> None:
    missing = tmp_path / "result_0.txt"
    line = _one_error_line(_run(sciperf_cmd, ["check", str(missing)], tmp_path), "check")
    assert str(missing) in line


def test_check_without_files_says_usage(sciperf_cmd, tmp_path) -> None:
    line = _one_error_line(_run(sciperf_cmd, ["check"], tmp_path), "check")
    assert "usage" in line


def test_info_refuses_arguments_it_would_ignore(sciperf_cmd, tmp_path) -> None:
    """`sciperf info workload=deepcam` prints the same as `sciperf info`: said, not ignored."""
    line = _one_error_line(_run(sciperf_cmd, ["info", "workload=deepcam"], tmp_path), "info")
    assert "takes no arguments" in line and "workload=deepcam" in line


def test_debug_shows_the_traceback(sciperf_cmd, tmp_path) -> None:
    """The one-line form is a choice, not lost information: --debug/SCIPERF_DEBUG=1 show it."""
    proc = sciperf("show", "precision=fp16", cwd=tmp_path, env={"SCIPERF_DEBUG": "1"})
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "SciperfError" in proc.stderr


@pytest.mark.parametrize(("rank", "lines"), [(0, 1), (1, 0)])
def test_a_sigterm_is_said_once_by_the_writing_rank(monkeypatch, capsys, rank: int,
                                                    lines: int) -> None:
    """A job's SIGTERM reaches every rank (scancel; mpirun tearing down after a peer
    failed): rank 0 says what it wrote, the others end with 143 without a line each."""
    from sciperf import cli

    def verb(_args) -> int:
        exc = cli.Terminated(signal.SIGTERM)
        exc.sciperf_records = "run_stop aborted and summary.json written to OUT"
        exc.sciperf_quiet = rank != 0
        raise exc

    monkeypatch.setitem(cli.VERBS, "train", dataclasses.replace(cli.VERBS["train"], run=verb))
    assert cli.main(["train"]) == 143
    err = capsys.readouterr().err.splitlines()
    assert len(err) == lines
    assert all(ln.startswith("sciperf train: terminated by SIGTERM (run_stop") for ln in err)


def test_sighup_ends_with_its_own_status(monkeypatch, capsys) -> None:
    """SIGHUP ended the CLI with 143 (SIGTERM's status); the shell's reading is 129."""
    from sciperf import cli

    def verb(_args) -> int:
        raise cli.Terminated(signal.SIGHUP)

    monkeypatch.setitem(cli.VERBS, "train", dataclasses.replace(cli.VERBS["train"], run=verb))
    assert cli.main(["train"]) == 129
    assert capsys.readouterr().err.startswith("sciperf train: terminated by SIGHUP")


def test_a_rank_of_a_job_names_itself(sciperf_cmd, tmp_path: Path) -> None:
    """mpirun/srun report the first rank to exit, often not the one whose error it is: the
    line says which rank it came from; a process outside a job says nothing of ranks."""
    job = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    line = _one_error_line(_run(sciperf_cmd, ["train", "workload=nope"], tmp_path, **job),
                           "train")
    assert "workload" in line and line.endswith(" (rank 1 of 2)"), line
    alone = _one_error_line(_run(sciperf_cmd, ["train", "workload=nope"], tmp_path), "train")
    assert "rank" not in alone, alone


@pytest.mark.parametrize(("argv", "prog", "hint"), [
    (["trian"], "sciperf", "`sciperf -h` lists the verbs and options)"),
    ([], "sciperf", "`sciperf -h` lists the verbs and options)"),
    (["check", "--bogus", "x"], "sciperf check", "`sciperf check -h` lists the options)"),
])
def test_argument_errors_are_one_line(sciperf_cmd, tmp_path: Path, argv: list[str], prog: str,
                                      hint: str) -> None:
    """argparse printed its three-line usage block before the error."""
    proc = _run(sciperf_cmd, argv, tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{prog}: error: ") and line.endswith(hint), line


@pytest.mark.parametrize("argv", [["report", "x", "--out="], ["characterize", "--out", " "],
                                  ["package", "x", "--system", "s", "--out="],
                                  ["characterize", "run="]])
def test_empty_folders_are_refused(sciperf_cmd, tmp_path: Path, argv: list[str]) -> None:
    """`--out $DIR` with DIR unset wrote ./report, ./characterize into the current folder."""
    line = _one_error_line(_run(sciperf_cmd, argv, tmp_path), argv[0])
    assert "is empty" in line, line
    assert list(tmp_path.iterdir()) == []
