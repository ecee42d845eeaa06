"""`sciperf report`: reports from the published logs and from fresh mini runs (PyTorch vs
TensorFlow, and PyTorch at 1 and 2 ranks); table numbers equal the scorer's, every PNG is
a real image, the HTML page carries the same tables and plots."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.image import imread

from sciperf.errors import SciperfError
from sciperf.results.report import PHASES, build, plot_convergence, report, run_facts
from sciperf.results.score import group_runs, load_runs, score, score_line

BIN = Path(sys.executable).parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SMALL = ["experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=2", "framework.threads=1"]


def tables(markdown: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells (header first, separator dropped)."""
    found, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current.append([c.strip() for c in line.strip("|").split(" | ")])
        elif current:
            found.append(current)
            current = []
    return found


def check_pngs(folder: Path) -> list[Path]:
    """Every PNG in the report: the signature, decodable, non-empty pixels that vary."""
    pngs = sorted(folder.glob("*.png"))
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE), png
        image = imread(io.BytesIO(data), format="png")
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100, png
        assert image.std() > 0, png  # not a blank canvas
    return pngs


def check_html(folder: Path, md_tables: list[list[list[str]]], pngs: list[Path]) -> None:
    """The HTML page has the Markdown's tables cell for cell and each PNG inlined."""
    page = (folder / "report.html").read_text()
    cells = re.findall(r"<t[dh]>(.*?)</t[dh]>", page)
    expected = [c for table in md_tables for row in table for c in row]
    assert [html.unescape(c) for c in cells] == [c.replace("\\|", "|") for c in expected]
    inlined = re.findall(r"src='data:image/png;base64,([^']+)'", page)
    assert sorted(base64.b64decode(b) for b in inlined) == sorted(p.read_bytes() for p in pngs)


def test_report_of_published_logs(published_results, tmp_path):
    v30 = published_results / "v3.0"
    out = report([v30], tmp_path / "rep")
    md = (out / "report.md").read_text()
    groups, runs = tables(md)[:2]
    scores = {(s.group.system, s.group.benchmark, s.group.mode): s for s in score([v30])}
    assert len(groups) - 1 == len(scores) == 5
    for row in groups[1:]:
        s = scores[(row[0], row[1], row[2])]
        assert row[5] == score_line(s) and row[-1] == s.verdict
        assert (int(row[3]), int(row[4])) == (len(s.group.runs), len(s.group.converged))
    eos = next(r for r in groups if r[0] == "eos_n64_ngc23.09_pytorch")
    assert eos[5] == "2.1178 min (olympic 2.0984 × rcp 1.00921)"
    assert eos[-2] == "pass: RCP found" == scores[(eos[0], eos[1], eos[2])].rcp
    minutes = {s.group.label: sorted(f"{r.log.minutes:.4f}" for r in s.group.runs)
               for s in scores.values()}
    by_group: dict[str, list[str]] = {}
    for row in runs[1:]:
        by_group.setdefault(row[0], []).append(row[4])
    assert {k: sorted(v) for k, v in by_group.items()} == minutes
    pngs = check_pngs(out)
    assert {p.name for p in pngs} == {
        "time_to_train.png", "breakdown.png", *(f"convergence_{b}_{x}.png"
                                                for b in ("cosmoflow", "deepcam", "oc20")
                                                for x in ("epoch", "time"))}
    assert "scaling.png" not in md  # no series at two scales among these logs
    check_html(out, tables(md), pngs)


def test_convergence_plot_draws_the_target(published_results, tmp_path):
    folder = published_results / "v3.0/NVIDIA/results/eos_n64_ngc23.09_pytorch"
    groups = group_runs(load_runs([folder]))
    facts = [run_facts(r, g) for g in groups for r in g.runs]
    fig = plot_convergence(facts, "cosmoflow", "epoch", tmp_path / "c.png")
    lines = fig.axes[0].get_lines()
    assert any(list(line.get_ydata()) == [0.124, 0.124] for line in lines)  # target line
    curves = [line for line in lines if len(line.get_xdata()) > 2]
    assert len(curves) == 10  # one curve per run
    first = facts[0]
    assert list(curves[0].get_ydata()) == [m for _, _, m in first.curve]
    assert first.epochs_to_target == first.epochs == first.curve[-1][0]
    assert first.curve[-1][2] <= 0.124 and all(m > 0.124 for _, _, m in first.curve[:-1])


def test_phases_add_up_to_the_logged_intervals(published_results):
    # NVIDIA stages inside init (hpc 3.0); the HPE weak logs stage inside the run
    nv = published_results / "v3.0/NVIDIA/results/eos_n64_ngc23.09_pytorch/strong/cosmoflow"
    hpe = published_results / ("v3.0/HPE+LBNL/results/perlmutter_10x128x4_ngc21.09_mxnet/"
                               "weak/cosmoflow")
    for folder, staged_in_run in ((nv, False), (hpe, True)):
        (group,) = group_runs(load_runs([folder / "result_1.txt"]))
        facts = run_facts(group.runs[0], group)
        log, p = group.runs[0].log, facts.phases
        run_s = (log.run_stop_ms - log.run_start_ms) / 1000
        assert p["training"] + p["evaluation"] + (p["staging"] if staged_in_run else 0) \
            == pytest.approx(run_s)
        init_s = log.interval_ms("init_start", "init_stop") / 1000
        assert p["init"] + (0 if staged_in_run else p["staging"]) == pytest.approx(init_s)
        assert p["staging"] > 10 and p["evaluation"] > 0


@pytest.fixture(scope="module")
def mini_runs(run_zoo, tmp_path_factory) -> dict[str, Path]:
    """2-epoch mini runs: PyTorch and TensorFlow on 1 rank, PyTorch DDP on 2 ranks (the
    PyTorch one is test_package's seed 0: the same words, one training), copied into
    folders named as the report labels them."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    root = tmp_path_factory.mktemp("report-runs")
    words = {"pytorch": ("train", *SMALL, "seed=0"),
             "tensorflow": ("train", *SMALL, "framework=tensorflow"),
             "pytorch_2ranks": ("launch", "launcher=local", "launcher.nprocs=2", *SMALL)}
    return {name: run_zoo.copy(root / name, *args).out for name, args in words.items()}


def test_a_refused_report_leaves_no_folders_it_made(tmp_path):
    """`--out a/b/report` for targets that hold no logs: a and b stayed behind."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(SciperfError, match="no result_"):
        report([tmp_path / "empty"], tmp_path / "a" / "b" / "report")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_compare_notes_only_what_differs_beyond_the_framework(mini_runs, tmp_path):
    """The note "the runs differ in configuration" came on every PyTorch/TensorFlow pair:
    the config hash covers the framework section. It now names the keys that differ."""
    def compare(*runs: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "sciperf"), "compare", *map(str, runs)],
                              capture_output=True, text=True, check=False)

    same = compare(mini_runs["pytorch"], mini_runs["tensorflow"])
    assert same.returncode == 0 and "| pytorch (pytorch) | tensorflow (tensorflow) |" \
        in same.stdout, same.stderr
    assert "differ" not in same.stdout
    other = tmp_path / "other"
    other.mkdir()
    summary = json.loads((mini_runs["tensorflow"] / "summary.json").read_text())
    summary["config"]["seed"] += 1
    summary["config"]["train"]["max_epochs"] += 1
    (other / "summary.json").write_text(json.dumps(summary))
    differ = compare(mini_runs["pytorch"], other)
    assert differ.stdout.strip().splitlines()[-1] == \
        "note: the runs differ beyond the framework in seed, train.max_epochs"


def test_report_compares_fresh_pytorch_and_tensorflow_runs(mini_runs, tmp_path):
    proc = subprocess.run([str(BIN / "sciperf"), "report", *map(str, mini_runs.values()),
                           "--out", str(tmp_path / "rep")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "rep"
    md = (out / "report.md").read_text()
    groups, runs, scaling = tables(md)
    names = [r[0] for r in groups[1:]]
    assert names == ["local-cpu (pytorch, 1 rank)", "local-cpu (pytorch, 2 ranks)",
                     "local-cpu (tensorflow, 1 rank)"]
    summaries = {name: json.loads((p / "summary.json").read_text())
                 for name, p in mini_runs.items()}
    by_label = {r[1]: r for r in runs[1:]}
    scored = {s.group.system: s for s in score(list(mini_runs.values()))}
    for name, summary in summaries.items():
        row = by_label[f"{name}/result_0"]
        (run,) = scored[row[0].split(" / ")[0]].group.runs
        assert row[4] == f"{run.log.minutes:.4f}"  # time to train: the scorer's minutes
        assert row[5] == str(summary["epochs"]) == "2"
        assert row[6] == "-" and row[3] == "no"  # 2 epochs: target not reached
        assert row[7] == f"{summary['samples_per_s']:.1f}"  # measured samples/s
        assert row[2] == str(summary["world_size"])
        total = sum(float(row[8 + i]) for i in range(len(PHASES)))
        assert total >= summary["time_to_train_s"] - 0.5  # phases cover the run (+ init)
    assert scaling[0] == ["benchmark", "series", "ranks", "samples/s", "efficiency"]
    one, two = scaling[1], scaling[2]
    assert (one[1], one[2], two[2]) == ("local-cpu (pytorch)", "1", "2")
    rate1, rate2 = summaries["pytorch"]["samples_per_s"], summaries["pytorch_2ranks"][
        "samples_per_s"]
    assert float(two[4]) == pytest.approx(rate2 / rate1 / 2, abs=1e-3)
    pngs = check_pngs(out)
    assert "scaling.png" in {p.name for p in pngs}
    check_html(out, tables(md), pngs)


def test_rerun_replaces_the_report_and_errors_leave_it(mini_runs, tmp_path):
    out = tmp_path / "rep"
    report([mini_runs["pytorch"]], out)
    first = (out / "report.md").read_text()
    report([mini_runs["pytorch"], mini_runs["tensorflow"]], out)
    assert (out / "report.md").read_text() != first and "tensorflow" in (
        out / "report.md").read_text()
    with pytest.raises(SciperfError, match="no such file or directory"):
        report([tmp_path / "missing"], out)
    assert "tensorflow" in (out / "report.md").read_text()  # the previous report stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no temporary leftovers
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(SciperfError, match="is not a sciperf report directory"):
        report([mini_runs["pytorch"]], tmp_path / "other")
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
    (out / "notes.txt").write_text("mine")  # beside a report: replacing it deleted them
    (out / "sub").mkdir()
    with pytest.raises(SciperfError, match=r"holds files a report does not write "
                                           r"\(notes.txt, sub\)"):
        report([mini_runs["pytorch"]], out)
    assert (out / "notes.txt").read_text() == "mine" and "tensorflow" in (
        out / "report.md").read_text()


def test_build_without_runs_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SciperfError, match="no result_"):
        build([tmp_path / "empty"], tmp_path)
    proc = subprocess.run([str(BIN / "sciperf"), "report", str(tmp_path / "empty")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
