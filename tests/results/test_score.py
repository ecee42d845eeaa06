"""`sciperf score`: scores equal mlperf-logging's result summarizer, and the dropping rules.

The published v3.0 logs are scored by sciperf and by `python -m
mlperf_logging.result_summarizer` on the same tree; every number must be equal. The
dropping rules are exercised on trees built from a real published log whose run length
(and, for a failed run, quality values and run_stop status) are rewritten.

`sciperf score`/`check` run their main in this process (testkit.cli): their exit status and
lines are what is tested. The official summarizer keeps a process of its own: it is the
reference the scores are compared with, run as its users run it.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sciperf.errors import SciperfError
from sciperf.results.logs import TOKEN, parse_log
from sciperf.results.score import olympic_mean, score, score_line
from sciperf.results.throughput import (
    Instance,
    Throughput,
    models_per_minute,
    throughput,
    tta_minutes,
)
from testkit import cli

NV = "NVIDIA/results/eos_n64_ngc23.09_pytorch/strong/cosmoflow"
HPE_WEAK = "HPE+LBNL/results/perlmutter_10x128x4_ngc21.09_mxnet/weak/cosmoflow"


@pytest.fixture(scope="module")
def v30(published_results: Path) -> Path:
    return published_results / "v3.0"


def summarize(org: Path, tmp: Path, passes: int = 2) -> tuple[list[dict], list[dict]]:
    """The official summarizer's strong and weak rows for one organisation folder.

    The summarizer scores a closed strong folder with the scaling.json found there, THEN runs
    the RCP check that (re)writes it; a second pass therefore gives the official order
    (package checker's RCP step, then the summary). It writes into `org`: never pass it a
    shared fixture, only a copy.
    """
    out = tmp / f"{org.name}.csv"
    for _ in range(passes):
        proc = subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer",
                               str(org), "hpc", "3.0.0", "-csv", str(out)], cwd=tmp,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    strong, weak = [], []
    with out.open() as f:  # the weak table is appended to the same CSV, header and all
        for row in csv.reader(f):
            if row[0] == "division":
                header, table = row, (weak if any(":" in c for c in row) else strong)
                continue
            table.append(dict(zip(header, row, strict=True)))
    return strong, weak


def system_of(row: dict) -> str:
    """The system folder name, from the summarizer's details URL (…/systems/<name>.json)."""
    return row["details_url"].rsplit("/", 1)[1].removesuffix(".json")


def test_published_scores_equal_the_result_summarizer(v30, tmp_path):
    before = sorted(str(p.relative_to(v30)) for p in v30.rglob("*"))
    ours = {(s.group.system, s.group.benchmark, s.group.mode): s for s in score([v30])}
    assert sorted(str(p.relative_to(v30)) for p in v30.rglob("*")) == before  # wrote nothing
    copy = shutil.copytree(v30, tmp_path / "v3.0")  # the summarizer writes scaling.json
    compared = 0
    for org in sorted(p for p in copy.iterdir() if p.is_dir()):
        strong, weak = summarize(org, tmp_path)
        for row in strong:
            for bench in ("cosmoflow", "deepcam", "oc20", "openfold"):
                if row[bench]:
                    s = ours[(system_of(row), bench, "strong")]
                    assert s.minutes == float(row[bench]), (system_of(row), bench)
                    assert s.valid
                    compared += 1
        for row in weak:
            for bench in ("cosmoflow", "deepcam", "oc20", "openfold"):
                if row[f"{bench}:time_to_train_all"]:
                    s = ours[(system_of(row), bench, "weak")]
                    assert s.minutes == float(row[f"{bench}:time_to_train_all"])
                    assert s.number_of_models == float(row[f"{bench}:number_of_models"])
                    assert s.instance_scale == float(row[f"{bench}:instance_scale"])
                    compared += 1
    assert compared == len(ours) == 5  # every published group, strong and weak
    eos = ours[("eos_n64_ngc23.09_pytorch", "cosmoflow", "strong")]
    assert eos.olympic_minutes == 2.098441666666667  # before the RCP normalisation
    assert (eos.scaling_factor, eos.scaling_source) == (1.009208103130755, "rcp")
    assert eos.minutes == 2.098441666666667 * 1.009208103130755 and eos.rcp.startswith("pass")
    weak = ours[("perlmutter_10x128x4_ngc21.09_mxnet", "cosmoflow", "weak")]
    assert (weak.number_of_models, weak.minutes) == (10, 14.70215)
    assert weak.models_per_minute == 10 / 14.70215


def test_throughput_helper_reads_through_the_shared_parser(v30):
    files = sorted((v30 / HPE_WEAK).glob("result_*.txt"))
    t = throughput(files)
    assert len(t.instances) == 10 and t.converged == 10
    assert t.minutes == pytest.approx(14.70215, abs=1e-12)
    (weak,) = score([v30 / HPE_WEAK])
    assert t.minutes == weak.minutes  # one TTTa for both tools


def test_tta_spans_the_converged_windows_and_has_no_rate_without_time():
    assert tta_minutes([(60_000, 180_000), (0, 120_000)]) == 3.0  # latest stop − earliest start
    assert tta_minutes([]) is None
    assert models_per_minute(2, 3.0) == 2 / 3
    assert models_per_minute(2, 0.0) is None and models_per_minute(0, None) is None
    same_ms = Throughput([Instance(Path("a"), 5, 5, True)])
    assert same_ms.line() == ("throughput: 1 instances, 1 converged, in 0.00 min = "
                              "no rate (no time elapsed)")


# --- synthetic trees from a real published log -----------------------------------------------

def rewrite(src: Path, dst: Path, minutes: float, converged: bool = True,
            prefix: str = "") -> None:
    """A copy of the log `src` whose run lasts `minutes`; a failed run never reaches the
    quality target and stops `aborted`. `prefix` goes before every `:::MLLOG`."""
    lines, start = [], None
    for line in src.read_text().splitlines():
        event = json.loads(line[len(TOKEN):])
        if event["key"] == "run_start":
            start = event["time_ms"]
        if event["key"] == "run_stop":
            event["time_ms"] = start + round(minutes * 60000)
            if not converged:
                event["metadata"]["status"] = "aborted"
        if event["key"] == "eval_error" and not converged:
            event["value"] = 0.5
        lines.append(prefix + TOKEN + json.dumps(event))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines) + "\n")


def strong_tree(v30: Path, root: Path, minutes: list[float], failed: set[int]) -> Path:
    """<root>/org/results/sys/strong/cosmoflow/result_<i>.txt + systems/sys.json."""
    org = root / "org"
    src = v30 / NV / "result_0.txt"
    for i, m in enumerate(minutes):
        rewrite(src, org / "results/sys/strong/cosmoflow" / f"result_{i}.txt", m,
                converged=i not in failed)
    (org / "systems").mkdir(parents=True)
    desc = json.loads((v30 / "NVIDIA/systems/eos_n64_ngc23.09_pytorch.json").read_text())
    desc["system_name"] = "sys"
    (org / "systems/sys.json").write_text(json.dumps(desc))
    return org


MINUTES = [2.5, 2.0, 3.0, 2.25, 2.75, 4.0, 1.5, 2.2, 2.8, 3.5]


def test_scaling_json_multiplies_the_olympic_mean_like_the_summarizer(v30, tmp_path):
    org = strong_tree(v30, tmp_path, MINUTES, failed=set())
    folder = org / "results/sys/strong/cosmoflow"
    (folder / "scaling.json").write_text(json.dumps({"scaling_factor": 1.25}))
    (s,) = score([org])
    runs = sorted(MINUTES)
    assert s.olympic_minutes == pytest.approx(sum(runs[1:-1]) / 8, abs=1e-9)
    assert (s.scaling_factor, s.scaling_source) == (1.25, "scaling.json")
    assert s.minutes == pytest.approx(s.olympic_minutes * 1.25)
    (row,), _ = summarize(org, tmp_path, passes=1)  # its 2nd pass would use its RCP factor
    assert s.minutes == pytest.approx(float(row["cosmoflow"]), abs=1e-9)
    assert score_line(s).endswith(f"(olympic {s.olympic_minutes:.4f} × scaling.json 1.25)")


def test_one_failed_run_is_the_dropped_slowest_and_matches_the_summarizer(v30, tmp_path):
    org = strong_tree(v30, tmp_path, MINUTES, failed={2})
    (s,) = score([org])
    assert s.valid and "1 non-converged run dropped" in s.verdict
    ok = sorted(m for i, m in enumerate(MINUTES) if i != 2)
    assert s.minutes == pytest.approx(sum(ok[1:]) / 8, abs=1e-9)  # only the fastest dropped
    failed = [r for r in s.group.runs if not r.converged]
    assert [r.path.name for r in failed] == ["result_2.txt"] and "eval_error" in failed[0].problem
    strong, _ = summarize(org, tmp_path)
    assert s.minutes == float(strong[0]["cosmoflow"])


def test_two_failed_runs_make_the_group_invalid(v30, tmp_path, caplog):
    org = strong_tree(v30, tmp_path, MINUTES, failed={2, 5})
    (s,) = score([org])
    assert not s.valid and s.minutes is None
    assert s.verdict.startswith("INVALID: 2 of 10 runs did not converge")
    with caplog.at_level(logging.WARNING):
        proc = cli("score", str(org))
    assert proc.returncode == 1 and "INVALID: 2 of 10" in proc.stdout
    assert proc.stdout.count("not converged:") == 2
    # the RCP checker's root-logger lines ("WARNING:root: Run incomplete or did not
    # converge. Marking as infinite.") leaked into stderr beside the table; in this process
    # pytest's handler takes such a record instead of logging's last-resort stderr one, so
    # none may have been emitted either
    assert proc.stderr == "", proc.stderr
    emitted = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert emitted == [], emitted


def test_too_few_runs_is_scored_but_flagged(v30, tmp_path):
    org = strong_tree(v30, tmp_path, [2.0, 3.0, 2.5], failed=set())
    (s,) = score([org])
    assert not s.valid and s.verdict.startswith("TOO FEW RUNS: 3 of the 10 cosmoflow")
    assert s.minutes == pytest.approx(2.5, abs=1e-9)  # the middle one is the olympic mean


def test_weak_needs_the_rule_count_of_converged_instances(v30, tmp_path):
    files = sorted((v30 / HPE_WEAK).glob("result_*.txt"))
    folder = tmp_path / "org/results/sys/weak/cosmoflow"
    folder.mkdir(parents=True)
    for f in files:
        shutil.copy(f, folder / f.name)
    (good,) = score([tmp_path / "org"])
    assert good.valid and good.minutes == 14.70215
    victim = folder / files[0].name
    log = parse_log(victim)
    rewrite(victim, victim, log.minutes, converged=False)
    (bad,) = score([tmp_path / "org"])
    assert not bad.valid and bad.number_of_models == 9
    assert bad.verdict == "INVALID: only 9 of 10 instances converged, cosmoflow requires 10"
    rest = [parse_log(f) for f in folder.glob("result_*.txt") if f != victim]
    span = max(r.run_stop_ms for r in rest) - min(r.run_start_ms for r in rest)
    assert bad.minutes == span / 60 / 1000  # TTTa over the converged instances only


def test_prefixed_lines_parse_like_the_official_parser(v30, tmp_path):
    src = v30 / NV / "result_0.txt"
    clean, tagged = tmp_path / "a/result_0.txt", tmp_path / "b/result_0.txt"
    rewrite(src, clean, 2.0)
    rewrite(src, tagged, 2.0, prefix="[1,0]<stdout>: ")
    a, b = parse_log(clean), parse_log(tagged)
    assert a.events == b.events and b.bad_lines == 0 and b.minutes == 2.0
    (sa,), (sb,) = score([clean]), score([tagged])
    assert sa.group.runs[0].converged and sb.group.runs[0].converged


def test_olympic_mean_slices_like_the_rules():
    assert olympic_mean([5.0, 1.0, 3.0, 4.0], dropped=0) == 3.5
    assert olympic_mean([5.0, 1.0, 3.0], dropped=1) == 4.0  # the failed run is the slowest
    assert olympic_mean([1.0], dropped=1) is None


def _garbage(path: Path) -> Path:
    path.write_text("garbage\n")
    return path


@pytest.mark.parametrize("setup, message", [
    (lambda p: p / "missing", "no such file or directory"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "no result_*.txt MLLOG files under"),
    (lambda p: _garbage(p / "result_0.txt"), "is not an MLLOG result file"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, setup, message):
    target = setup(tmp_path)
    with pytest.raises(SciperfError, match=re.escape(message)):
        score([target])
    proc = cli("score", str(target))
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and str(target) in proc.stderr


# --- the summarizer's folder rules: what it does not read is skipped, in one line ------------

HPE = "HPE+LBNL"
HPE_SYSTEMS = ("perlmutter_10x128x4_ngc21.09_mxnet", "perlmutter_512x4")
HPE_STRONG = "results/perlmutter_512x4/strong/deepcam"
HPE_WEAK_IN_ORG = HPE_WEAK.removeprefix(f"{HPE}/")


def _pruned_results(org: Path) -> Path:
    """NVIDIA v2.0's `weak/oc20/pruned_results/`: result files one folder too deep."""
    stray = org / HPE_WEAK_IN_ORG / "pruned_results"
    stray.mkdir()
    for name in ("result_1.txt", "result_2.txt"):
        shutil.copy(org / HPE_WEAK_IN_ORG / name, stray / name)
    return stray


def _readme(org: Path) -> Path:
    (org / "README.md").write_text("# HPE+LBNL submission\n")
    return org / "README.md"


def _readme_in_results(org: Path) -> Path:
    (org / "results/README.md").write_text("see the systems folder\n")  # as HelmholtzAI v2.0
    return org / "results/README.md"


def _scaling_json(org: Path) -> Path:
    """A factor one folder too high: the summarizer reads it only in a benchmark folder."""
    file = org / HPE_STRONG / ".." / "scaling.json"
    file.write_text(json.dumps({"scaling_factor": 2.0}))
    return org / "results/perlmutter_512x4/strong/scaling.json"


def _orphan_description(org: Path) -> Path:
    desc = org / "systems/perlmutter_1x4.json"
    shutil.copy(org / f"systems/{HPE_SYSTEMS[1]}.json", desc)
    return desc


def _system_without_description(org: Path) -> Path:
    ghost = org / "results/ghost"
    shutil.copytree(org / "results/perlmutter_512x4", ghost)
    return ghost


STRAYS = {
    "pruned_results": (_pruned_results, "a benchmark folder is read only for its own"),
    "README": (_readme, "a submitter's folder is read only for results/ and systems/"),
    "README in results": (_readme_in_results, "results/ is read only for its system folders"),
    "scaling.json": (_scaling_json, "strong/ is read only for its benchmark folders"),
    "systems file": (_orphan_description, "no results/perlmutter_1x4/ folder"),
    "no description": (_system_without_description, "no systems/ghost.json: the summarizer "
                                                     "skips a system without its description"),
}


@pytest.fixture(scope="module")
def hpe_official(v30) -> dict[tuple[str, str, str], tuple[float, bool]]:
    """The untouched published HPE+LBNL tree's scores (equal to the summarizer's, above)."""
    return {(s.group.system, s.group.benchmark, s.group.mode): (s.minutes, s.valid)
            for s in score([v30 / HPE])}


def _skip_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("skipped ")]


@pytest.mark.parametrize("kind", list(STRAYS))
def test_a_stray_thing_is_skipped_in_one_line_and_scores_stay_official(
        kind, v30, tmp_path, hpe_official):
    org = Path(shutil.copytree(v30 / HPE, tmp_path / HPE))
    add, why = STRAYS[kind]
    stray = add(org)
    proc = cli("score", str(org), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = _skip_lines(proc.stderr)  # exactly one line for the one stray thing
    assert line.startswith(f"skipped {stray}: ") and why in line, line
    groups = {(g["system"], g["benchmark"], g["mode"]): (g["minutes"], g["valid"])
              for g in json.loads(proc.stdout)}
    assert groups == hpe_official  # no extra group, every official score unchanged
    assert set(hpe_official) == {(HPE_SYSTEMS[0], "cosmoflow", "weak"),
                                 (HPE_SYSTEMS[1], "deepcam", "strong")}


def test_stray_tree_scores_what_the_result_summarizer_scores(v30, tmp_path):
    tree = Path(shutil.copytree(v30, tmp_path / "v3.0"))
    strays = sorted(str(add(tree / HPE)) for add, _ in STRAYS.values())
    (tree / "NVIDIA/README.md").write_text("# NVIDIA\n")  # as NVIDIA/README.md in v2.0
    strays.append(str(tree / "NVIDIA/README.md"))
    proc = cli("score", str(tree))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    skipped = _skip_lines(proc.stdout)  # after the table, one line per stray thing
    assert sorted(line.split(": ", 1)[0].removeprefix("skipped ") for line in skipped) \
        == sorted(strays)
    rows = [r for r in proc.stdout.splitlines() if r.startswith("| ") and "VALID" in r]
    assert len(rows) == 5 and not any("?" in r or "ghost" in r for r in rows)
    ours = {(s.group.system, s.group.benchmark, s.group.mode): s for s in score([tree])}
    assert len(ours) == 5
    compared = 0
    for org in (tree / "NVIDIA", tree / HPE):  # the official tools on the same stray tree
        strong, weak = summarize(org, tmp_path)
        for row, bench in ((r, b) for r in strong for b in ("cosmoflow", "deepcam", "oc20")):
            if row[bench]:
                assert ours[(system_of(row), bench, "strong")].minutes == float(row[bench])
                compared += 1
        for row in weak:
            if row["cosmoflow:time_to_train_all"]:
                s = ours[(system_of(row), "cosmoflow", "weak")]
                assert s.minutes == float(row["cosmoflow:time_to_train_all"])
                assert s.number_of_models == float(row["cosmoflow:number_of_models"])
                compared += 1
    assert compared == 5  # neither the stray folder nor the ghost system is a row there


def test_a_benchmark_folder_target_names_its_stray_subfolder(v30, tmp_path):
    org = Path(shutil.copytree(v30 / HPE, tmp_path / HPE))
    stray = _pruned_results(org)
    proc = cli("score", str(org / HPE_WEAK_IN_ORG))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert [line.split(": ", 1)[0] for line in _skip_lines(proc.stdout)] == [f"skipped {stray}"]
    assert "VALID: 10 converged instances of 10" in proc.stdout


@pytest.mark.parametrize("inside", ["", "result_1.txt"])
def test_naming_a_stray_folder_or_its_file_is_one_line_and_exit_2(
        inside, v30, tmp_path):
    org = Path(shutil.copytree(v30 / HPE, tmp_path / HPE))
    target = _pruned_results(org) / inside
    with pytest.raises(SciperfError, match="outside the summarizer's layout"):
        score([target])
    proc = cli("score", str(target))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert str(target).rstrip("/") in proc.stderr and "result_*.txt" in proc.stderr


# --- published logs outside a submission tree (no summary.json beside them) ----------------

def test_published_strong_runs_outside_a_tree_stay_strong(v30, tmp_path):
    """Ten strong logs (every one says instance 0) were scored as ONE throughput job of 10
    models — the mode came from the file count. Several instance indices make weak."""
    plain = tmp_path / "plain"
    shutil.copytree(v30 / NV, plain)
    (strong,) = score([plain])
    (tree,) = [s for s in score([v30 / "NVIDIA"])
               if s.group.system == "eos_n64_ngc23.09_pytorch" and s.group.benchmark == "cosmoflow"]
    assert strong.group.mode == "strong" and strong.valid
    assert strong.olympic_minutes == pytest.approx(tree.olympic_minutes, abs=1e-12)
    weak_plain = tmp_path / "weakplain"
    shutil.copytree(v30 / HPE_WEAK, weak_plain)
    (weak,) = score([weak_plain])
    assert weak.group.mode == "weak" and weak.number_of_models == 10


@pytest.mark.parametrize("factor", ["NaN", "Infinity", "-1", "0", "\"2\"", "true"])
def test_a_scaling_factor_that_is_no_positive_number_is_refused(v30, tmp_path, factor):
    """json reads NaN and Infinity: the score became NaN (invalid --json) or negative."""
    org = strong_tree(v30, tmp_path, MINUTES, failed=set())
    (org / "results/sys/strong/cosmoflow/scaling.json").write_text(
        f'{{"scaling_factor": {factor}}}')
    with pytest.raises(SciperfError, match=r"scaling\.json: scaling_factor=.* must be a "
                                           r"finite number > 0"):
        score([org])


def test_check_scores_the_instances_the_checker_passes_as_score_does(v30, tmp_path):
    """`check`'s throughput line counted every instance (10 reached, 0.680 models/min)
    although the checker failed one, and a log without run_stop ended it in an error."""
    folder = tmp_path / "weak"
    shutil.copytree(v30 / HPE_WEAK, folder)
    victim = folder / "result_5.txt"
    rewrite(victim, victim, parse_log(victim).minutes, converged=False)
    cut = folder / "result_7.txt"
    cut.write_text("".join(line for line in cut.read_text().splitlines(keepends=True)
                           if '"run_stop"' not in line))
    proc = cli("check", str(folder))
    (s,) = score([folder])
    assert proc.returncode == 1 and proc.stdout.count("FAIL ") == 2, proc.stdout
    assert s.number_of_models == 8
    line = proc.stdout.strip().splitlines()[-1]
    assert line == (f"throughput: 10 instances, 8 converged, in {s.minutes:.2f} min = "
                    f"{s.models_per_minute:.3f} models/min"), line
