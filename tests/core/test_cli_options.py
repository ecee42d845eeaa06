"""The console script's options and pipes: what a verb does not read is refused, not ignored.

`sciperf check RUN --json` printed text, `sciperf score RUN --out DIR` wrote nothing and
`sciperf bench stray` dropped the word and ran the whole default bench — each exit 0, the
user none the wiser. A reader that leaves the pipe (`sciperf score … | head`) ended the
command in a BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from testkit import SCIPERF, cli


@pytest.mark.parametrize(("argv", "option", "verbs"), [
    (["check", "RUN", "--json"], "--json", "data, score, report, characterize, project"),
    (["compare", "A", "B", "--json"], "--json", "data, score, report, characterize, project"),
    (["score", "RUN", "--out", "foo"], "--out", "data, package, report, characterize"),
    (["score", "RUN", "--system", "bar"], "--system", "package"),
    (["train", "--force"], "--force", "prepare, data, run"),
    (["show", "--ruleset", "3.0.0"], "--ruleset", "check, score, package, report"),
])
def test_an_option_the_verb_does_not_read_is_one_line(tmp_path, argv, option, verbs):
    proc = cli(*argv, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.strip() == (f"sciperf {argv[0]}: error: {option} is not an option of "
                                   f"`sciperf {argv[0]}` (it is one of {verbs})")
    assert list(tmp_path.iterdir()) == []


def test_bench_refuses_a_word_that_is_no_override(tmp_path):
    proc = cli("bench", "stray", f"output={tmp_path / 'b'}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("sciperf bench: error: Error parsing override 'stray': "
                                   "overrides are key=value")
    assert not (tmp_path / "b").exists()


def test_a_closed_pipe_ends_quietly_as_sigpipe(published_results):
    """`sciperf score TREE | true`: the reader is gone before the table is written (the
    console script in a shell pipe: the process's own exit status is what is tested)."""
    proc = subprocess.run(f"{SCIPERF} score {published_results / 'v3.0'} | true; "
                          "echo status=${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.stdout.strip() == "status=141"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_debug_reaches_the_ranks_a_launch_starts(monkeypatch, capsys, tmp_path):
    """`sciperf --debug launch …` showed tracebacks for launch's own errors only: the ranks
    it starts (or submits) read SCIPERF_DEBUG, which it now sets for them."""
    from sciperf import cli
    from sciperf_launchers import job_env
    monkeypatch.setenv("SCIPERF_DEBUG", "0")  # restored after the test: launch sets it
    assert cli.main(["show", "--debug"]) == 0
    assert os.environ["SCIPERF_DEBUG"] == "0"  # only launch passes it on
    assert cli.main(["launch", "--debug", "launcher=local", "dry_run=true",
                     f"output_dir={tmp_path}"]) == 0
    capsys.readouterr()
    assert job_env()["SCIPERF_DEBUG"] == "1"


def _help(*argv: str) -> str:
    proc = cli(*argv, "-h")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout


def test_each_verb_lists_its_own_options_and_examples():
    """`sciperf VERB -h` shows what that verb reads, as git and Slurm commands do: one
    flat parser showed --system, --out and --force under every verb."""
    from sciperf.cli_args import OPTIONS, VERBS
    for name, verb in VERBS.items():
        text = _help(name)
        assert text.startswith(f"usage: sciperf {name} "), text[:80]
        assert "--debug" in text and verb.examples and f"  sciperf {name}" in text
        own = dict(verb.options)
        for option in OPTIONS:
            assert (f"--{option}" in text) == (option in own), (name, option)
    assert "--system NAME" in _help("package") and "default ./submission" in _help("package")
    assert "default ./report" in _help("report") and "--ruleset" not in _help("train")


def test_the_verb_list_points_at_each_verbs_help():
    from sciperf.cli_args import VERBS
    text = _help()
    assert "`sciperf VERB -h` shows a verb's own options and examples." in text
    assert all(f"\n  {name} " in text for name in VERBS)
    assert "--out" not in text and "--system" not in text  # those belong to verbs


@pytest.mark.parametrize("argv", [["--debug", "show", "workload=oc20"],
                                  ["show", "workload=oc20", "--debug"]])
def test_debug_goes_before_or_after_the_verb(argv):
    proc = cli(*argv)
    assert proc.returncode == 0 and "workload: oc20" in proc.stdout
