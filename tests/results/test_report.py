"""`sciperf report`: reports from the published logs and from fresh mini runs (PyTorch vs
TensorFlow, and PyTorch at 1 and 2 ranks); table numbers equal the scorer's and the logs',
every PNG is a real image no taller than a screen page, the HTML page carries the same
tables and plots, report.json the same numbers, and what the input lacks is a note."""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import mlperf_logging
import pytest
from matplotlib.image import imread

from sciperf.errors import SciperfError
from sciperf.results import report_figures
from sciperf.results.logs import parse_log
from sciperf.results.report import PHASES, build, phases, report, run_facts
from sciperf.results.report_groups import Notes, rank, scaling_rows, summarise
from sciperf.results.report_systems import parse_bytes
from sciperf.results.score import Run, group_runs, score, score_group, score_line

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


@pytest.fixture(scope="module")
def published(published_results, tmp_path_factory) -> tuple[Path, Path]:
    """(the v3.0 logs copied, their report) — the module's one report of published logs.
    The copy lacks what real rounds lack: NVIDIA's systems/ folder is gone (its three
    systems have no description), HPE's perlmutter_512x4.json states no host memory and
    names an accelerator no table knows; its deepcam logs have no staging records."""
    root = tmp_path_factory.mktemp("published")
    tree = root / "v3.0"
    shutil.copytree(published_results / "v3.0", tree)
    shutil.rmtree(tree / "NVIDIA" / "systems")
    described = tree / "HPE+LBNL" / "systems" / "perlmutter_512x4.json"
    facts = json.loads(described.read_text())
    del facts["host_memory_capacity"]
    facts["accelerator_model_name"] = "Imaginary X1"
    described.write_text(json.dumps(facts))
    return tree, report([tree], root / "rep")


def cells(md: str, column: str) -> list[list[str]]:
    """The rows of the first table with a column named `column` (header included)."""
    return next(t for t in tables(md) if column in t[0])


def test_report_of_published_logs(published):
    tree, out = published
    md = (out / "report.md").read_text()
    groups = tables(md)[0]
    scores = {(s.group.system, s.group.benchmark, s.group.mode): s for s in score([tree])}
    assert len(groups) - 1 == len(scores) == 5
    for row in groups[1:]:
        s = scores[(row[0], row[1], row[2])]
        assert row[5] == score_line(s) and row[10] == s.verdict
        assert (int(row[3]), int(row[4])) == (len(s.group.runs), len(s.group.converged))
    eos = next(r for r in groups if r[0] == "eos_n64_ngc23.09_pytorch")
    assert eos[5] == "2.1178 min (olympic 2.0984 × rcp 1.00921)"
    assert eos[9] == "pass: RCP found" == scores[(eos[0], eos[1], eos[2])].rcp
    # ranked per benchmark and mode: deepcam strong by time to train, shortest first
    deepcam = [(r[0], r[11]) for r in groups[1:] if r[1:3] == ["deepcam", "strong"]]
    assert deepcam == [("eos_n256_ngc23.09_pytorch", "1"), ("perlmutter_512x4", "2")]
    minutes = {s.group.label: sorted(f"{r.log.minutes:.4f}" for r in s.group.runs)
               for s in scores.values()}
    by_group: dict[str, list[str]] = {}
    for row in cells(md, "run")[1:]:
        by_group.setdefault(row[0], []).append(row[4])
    assert {k: sorted(v) for k, v in by_group.items()} == minutes
    pngs = check_pngs(out)
    assert {p.name for p in pngs} == {
        "time_to_train.png", "epochs_to_target.png", "throughput.png", "staging.png",
        *(f"convergence_{b}.png" for b in ("cosmoflow", "deepcam", "oc20"))}
    check_html(out, tables(md), pngs)


def test_report_json_holds_the_numbers_of_tables_and_logs(published):
    """A group's phase medians are the medians of its logs' intervals; the RCPs are
    mlperf-logging's file's numbers (olympic mean of the reference epochs)."""
    tree, out = published
    data = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    (eos,) = [g for g in data["groups"] if g["score"]["system"] == "eos_n64_ngc23.09_pytorch"]
    logs = [parse_log(p) for p in sorted(
        (tree / "NVIDIA/results/eos_n64_ngc23.09_pytorch/strong/cosmoflow").glob("*.txt"))]
    staging = sorted(log.interval_ms("staging_start", "staging_stop") / 1000 for log in logs)
    assert eos["phases_s"]["staging"]["median"] == pytest.approx(
        (staging[4] + staging[5]) / 2)
    assert (eos["phases_s"]["staging"]["low"], eos["phases_s"]["staging"]["high"]) == \
        pytest.approx((staging[0], staging[-1]))
    row = next(r for r in cells(md, "init [s]: median (range)")
               if r[1] == "eos_n64_ngc23.09_pytorch")
    assert row[5] == f"{(staging[4] + staging[5]) / 2:.1f} ({staging[0]:.1f}–{staging[-1]:.1f})"
    assert eos["global_batch_size"] == 512 and eos["accelerators"] == 512
    rcps = Path(mlperf_logging.__file__).parent / "rcp_checker/hpc_3.0.0/rcps_cosmoflow.json"
    epochs = sorted(json.loads(rcps.read_text())["cosmoflow_ref_512"]["Epochs to converge"])
    mean = sum(epochs[1:-1]) / len(epochs[1:-1])
    (point,) = [p for p in data["rcps"]["cosmoflow"] if p["batch_size"] == 512]
    assert point["mean"] == pytest.approx(mean) and point["lowest_accepted"] < mean
    assert (point["fastest"], point["slowest"]) == (epochs[0], epochs[-1])
    conv = next(r for r in cells(md, "RCP mean") if r[0] == "eos_n64_ngc23.09_pytorch")
    assert conv[3:] == ["512", "23.0 (21.0–24.0)", f"{mean:.2f}",
                        f"{point['lowest_accepted']:.2f}"]
    rate = statistics.median(r["samples_per_s"] / r["ranks"] for r in eos["runs"])
    assert eos["samples_per_s_per_accelerator"] == pytest.approx(rate)


def test_what_is_missing_is_one_note_never_a_zero(published):
    _, out = published
    data = json.loads((out / "report.json").read_text())
    notes = data["notes"]
    md = (out / "report.md").read_text()
    assert [line for line in notes if f"- {line}" not in md] == []

    def note(cause: str) -> str:
        (line,) = [n for n in notes if cause in n]
        return line

    missing = note("systems/<system>.json is missing")
    assert all(f"{s}_ngc23.09_pytorch / " in missing for s in ("eos_n64", "eos_n256", "eos_n80"))
    assert note("does not state host_memory_capacity").startswith("perlmutter_512x4 / ")
    assert note("staging_stop records").startswith(
        "perlmutter_512x4 / deepcam / strong (5 of 5)")
    assert "one scale only" in note("one scale only")
    peak = [n for n in notes if "perlmutter_512x4 / " in n and "fraction of peak" in n]
    assert len(peak) == 1  # the unknown accelerator (or no peak table at all)
    (hpe,) = [g for g in data["groups"] if g["score"]["system"] == "perlmutter_512x4"]
    assert hpe["phases_s"]["staging"] is None and hpe["fraction_of_peak"] is None
    assert hpe["system"]["host_memory_bytes"] is None
    assert hpe["system"]["accelerator"] == "Imaginary X1"
    row = next(r for r in cells(md, "init [s]: median (range)") if r[1] == "perlmutter_512x4")
    assert row[5] == "-"  # staging: unknown, not 0
    staged = next(r for r in cells(md, "dataset GB per node") if r[0] == "perlmutter_512x4")
    assert staged[5] == "-" and staged[7] == "-"  # host memory, staging


def test_figures_stay_readable_for_a_round(published_results, tmp_path):
    """30 groups, 630 runs (the v3.0 groups at several names and scales): every
    figure at most MAX_HEIGHT tall, one row or mark per group, no run drawn alone."""
    logs = sorted((published_results / "v3.0").rglob("result_*.txt"))
    runs = [Run(parse_log(p), True) for p in logs]
    groups = group_runs(runs)
    notes = Notes()
    base = [summarise(score_group(g), [run_facts(r, g) for r in g.runs], notes)
            for g in groups]
    many = []
    for k in range(6):  # 5 groups × 6 = 30, each at its own scale, with 3 × the runs
        for g in base:
            copy = dataclasses.replace(g, score=dataclasses.replace(
                g.score, group=dataclasses.replace(g.score.group, system=f"{g.label}-{k}")))
            copy.runs = g.runs * 3
            copy.accelerators = (g.accelerators or 1) * 2 ** k
            many.append(copy)
    ranked = rank(many)
    rows = scaling_rows(ranked, notes)
    deepcam = [r for r in rows if r["benchmark"] == "deepcam" and r["series"].startswith(
        "eos_n*")]
    assert [r["accelerators"] for r in deepcam] == [2048 * 2 ** k for k in range(6)]
    assert [r["efficiency"] for r in deepcam] == [1.0] * 6  # same rate per accelerator
    assert sum(len(g.runs) for g in ranked) == 3 * len(logs) * 6 >= 600
    drawn = {
        "time": report_figures.plot_time_to_train(ranked, tmp_path / "t.png"),
        "epochs": report_figures.plot_epochs(ranked, {}, tmp_path / "e.png"),
        "curves": report_figures.plot_curves("cosmoflow", ranked, tmp_path / "c.png"),
        "throughput": report_figures.plot_throughput(ranked, rows, tmp_path / "p.png"),
        "staging": report_figures.plot_staging(ranked, tmp_path / "s.png")}
    for name in ("t", "e", "c", "p", "s"):
        image = imread(tmp_path / f"{name}.png")
        assert image.shape[0] <= report_figures.MAX_HEIGHT * report_figures.DPI, name
    bars = [len(ax.get_yticklabels()) for ax in drawn["time"].axes]
    assert sum(bars) == 30 and len(bars) == 4  # a row per group, a panel per facet
    curves = [line for line in drawn["curves"].axes[0].get_lines() if len(line.get_xdata()) > 2]
    assert len(curves) == 12  # the 12 cosmoflow groups, not their 240 runs
    (eos,) = [g for g in base if g.label == "eos_n64_ngc23.09_pytorch"]
    first = [f.curve[0][2] for f in eos.runs]
    assert curves[0].get_ydata()[0] == pytest.approx(statistics.median(first))


def test_phases_add_up_to_the_logged_intervals(published_results):
    # NVIDIA stages inside init (hpc 3.0); the HPE weak logs stage inside the run
    nv = published_results / "v3.0/NVIDIA/results/eos_n64_ngc23.09_pytorch/strong/cosmoflow"
    hpe = published_results / ("v3.0/HPE+LBNL/results/perlmutter_10x128x4_ngc21.09_mxnet/"
                               "weak/cosmoflow")
    for folder, staged_in_run in ((nv, False), (hpe, True)):
        log = parse_log(folder / "result_1.txt")
        p = phases(log)
        run_s = (log.run_stop_ms - log.run_start_ms) / 1000
        assert p["training"] + p["evaluation"] + (p["staging"] if staged_in_run else 0) \
            == pytest.approx(run_s)
        init_s = log.interval_ms("init_start", "init_stop") / 1000
        assert p["init"] + (0 if staged_in_run else p["staging"]) == pytest.approx(init_s)
        assert p["staging"] > 10 and p["evaluation"] > 0
    unstaged = parse_log(published_results / "v3.0/HPE+LBNL/results/perlmutter_512x4/strong/"
                         "deepcam/result_1.txt")
    assert phases(unstaged)["staging"] is None  # no records: unknown, not 0 s


def test_sizes_in_system_descriptions():
    assert parse_bytes("2x 1.92TB NVMe SSD + 30TB U.2 NVMe SSD") == pytest.approx(33.84e12)
    assert parse_bytes("256 GB DDR4") == 256e9 and parse_bytes("32GiB") == 32 * 2 ** 30
    assert parse_bytes("980Gb") == 980e9 and parse_bytes("") is None
    assert parse_bytes("N/A") is None and parse_bytes(None) is None


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
                           "--out", str(tmp_path / "rep"), "--json"], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "rep"
    # --json: stdout is the report's numbers, the same document report.json holds
    assert json.loads(proc.stdout) == json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    groups, runs, scaling = tables(md)[0], cells(md, "run"), cells(md, "efficiency")
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
        total = sum(float(c) for c in row[8:8 + len(PHASES)] if c != "-")
        assert total >= summary["time_to_train_s"] - 0.5  # phases cover the run (+ init)
    assert scaling[0] == ["benchmark", "series", "system", "mode", "accelerators",
                          "samples/s per accelerator", "efficiency"]
    one, two = scaling[1], scaling[2]
    assert (one[1], one[4], two[4]) == ("local-cpu (pytorch)", "1", "2")
    rate1, rate2 = summaries["pytorch"]["samples_per_s"], summaries["pytorch_2ranks"][
        "samples_per_s"]
    assert float(two[6]) == pytest.approx(rate2 / rate1 / 2, abs=1e-3)
    pngs = check_pngs(out)
    assert "throughput.png" in {p.name for p in pngs}
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
