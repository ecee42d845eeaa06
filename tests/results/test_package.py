"""`sciperf package`: real (short) runs arranged as a submission tree that mlperf-logging's
result_summarizer and package_checker read; errors leave nothing behind.

The runs are 2-epoch mini trainings: they do not reach the CosmoFlow target, so the
official tools and `sciperf score` must agree that the tree holds no converged run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sciperf.errors import SciperfError
from sciperf.results.package import SYSTEM_FIELDS, package
from sciperf.results.score import score
from testkit import sciperf

pytest.importorskip("torch")

SMALL = ["experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=2", "framework.threads=1"]


@pytest.fixture(scope="module")
def runs(run_zoo) -> dict[str, list[Path]]:
    """Two strong-scaling runs (seeds 0, 1) and one throughput job of 2 instances."""
    strong = [run_zoo.run("train", *SMALL, f"seed={seed}").out for seed in (0, 1)]
    weak = run_zoo.run("launch", "launcher=local", "launcher.nprocs=2", "instances=2", *SMALL)
    assert weak.returncode == 0, weak.stderr[-2000:]
    return {"strong": strong, "weak": [weak.out]}


def test_tree_layout_and_system_description(runs, tmp_path):
    dest = package([*map(str, runs["strong"]), str(runs["weak"][0])], "cpu2_pytorch",
                   tmp_path / "sciperf")
    strong = dest / "results/cpu2_pytorch/strong/cosmoflow"
    weak = dest / "results/cpu2_pytorch/weak/cosmoflow"
    assert sorted(p.name for p in strong.iterdir()) == ["result_0.txt", "result_1.txt"]
    assert sorted(p.name for p in weak.iterdir()) == ["result_0.txt", "result_1.txt"]
    for i, run in enumerate(runs["strong"]):  # copies, byte for byte, in the order given
        assert (strong / f"result_{i}.txt").read_bytes() == (run / "result_0.txt").read_bytes()
    assert (weak / "result_1.txt").read_bytes() == (runs["weak"][0] /
                                                    "result_1.txt").read_bytes()
    desc = json.loads((dest / "systems/cpu2_pytorch.json").read_text())
    assert set(desc) == set(SYSTEM_FIELDS)
    summary = json.loads((runs["strong"][0] / "summary.json").read_text())
    system = summary["config"]["system"]
    assert (desc["submitter"], desc["division"], desc["status"]) == (
        system["submission_org"], system["submission_division"], system["submission_status"])
    assert desc["system_name"] == "cpu2_pytorch" and desc["number_of_nodes"] == "1"
    assert desc["framework"] == f"pytorch {summary['versions']['torch']}"
    assert desc["other_software_stack"]["sciperf"] == summary["versions"]["sciperf"]
    assert desc["host_processor_core_count"].isdigit()  # runs made here: sciperf info's facts


def test_result_summarizer_and_package_checker_read_the_tree(runs, tmp_path):
    dest = package([*map(str, runs["strong"]), str(runs["weak"][0])], "cpu2_pytorch",
                   tmp_path / "sciperf")
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer", str(dest),
                           "hpc", "3.0.0", "-csv", str(tmp_path / "s.csv")], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # both 2-epoch runs miss the target: the summarizer drops both and gives no score ...
    assert "Too many non-converging runs for sciperf cpu2_pytorch/cosmoflow" in proc.stdout
    assert "Not enough converging weak scaling runs for sciperf cpu2_pytorch/cosmoflow" \
        in proc.stdout
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[1].startswith("closed,research,sciperf,cpu2_pytorch,1,")
    torch_version = json.loads((runs["strong"][0] / "summary.json").read_text())["versions"]
    assert f",pytorch {torch_version['torch']}," in rows[1]  # the framework column
    # ... and so does sciperf score on the same tree
    by_mode = {s.group.mode: s for s in score([dest])}
    assert by_mode["strong"].verdict.startswith("INVALID: 2 of 2 runs did not converge")
    assert by_mode["strong"].minutes is None
    assert not by_mode["weak"].valid and by_mode["weak"].number_of_models == 0
    checker = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(dest),
                              "hpc", "3.0.0", "--log_output", str(tmp_path / "pc.log")],
                             cwd=tmp_path, capture_output=True, text=True, check=False)
    text = checker.stdout + checker.stderr
    assert "System description checker passed for cpu2_pytorch" in text
    assert "Running compliance checks in dir" in text and "weak/cosmoflow" in text


def test_cli_prints_the_tree_and_its_verdict(runs, tmp_path):
    proc = sciperf("package", str(runs["strong"][0]), "--system", "one", "--out",
                   str(tmp_path / "tree"))
    assert proc.returncode == 0, proc.stderr
    assert "results/one/strong/cosmoflow (1 result file)" in proc.stdout
    assert "TOO FEW RUNS: 1 of the 10 cosmoflow requires" in proc.stdout


def _no_leftovers(parent: Path, name: str) -> bool:
    return not any(p.name == name or p.name.startswith(f".{name}.") for p in parent.iterdir())


def test_errors_name_the_problem_and_write_nothing(runs, tmp_path):
    other = tmp_path / "tf_run"
    shutil.copytree(runs["strong"][1], other)
    summary = json.loads((other / "summary.json").read_text())
    summary["framework"] = "tensorflow"
    (other / "summary.json").write_text(json.dumps(summary))
    dest = tmp_path / "out" / "tree"
    strong0 = runs["strong"][0]
    dotted = f"{strong0.parent}/./{strong0.name}"
    cases = [
        ([str(runs["strong"][0]), str(other)], "x", "differ in framework"),
        # the same run twice was two runs of the submission
        ([str(strong0), dotted], "x", f"{dotted} and {strong0} are the same run directory"),
        ([str(strong0), str(strong0)], "x", "are the same run directory"),
        ([str(tmp_path / "nope")], "x", "no such run directory"),
        ([str(tmp_path)], "x", "no summary.json in"),
        ([str(runs["strong"][0])], "bad/name", "is not a valid system name"),
        ([str(runs["strong"][0])], None, "--system NAME is required"),
        ([str(runs["strong"][0])], "", "--system NAME is required"),
    ]
    for targets, system, message in cases:
        with pytest.raises(SciperfError, match=message):
            package(targets, system, dest)
        assert not dest.exists()
    proc = sciperf("package", str(runs["strong"][0]), str(other), "--system", "x", "--out",
                   str(dest))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "differ in framework" in proc.stderr and not dest.exists()


def test_a_summary_backup_beside_the_summary_is_not_a_second_instance(runs, tmp_path):
    """summary*.json took summary.orig.json for one more instance: the log went in twice."""
    run = tmp_path / "run"
    shutil.copytree(runs["strong"][0], run)
    shutil.copy(run / "summary.json", run / "summary.orig.json")
    dest = package([str(run)], "x", tmp_path / "tree")
    assert [p.name for p in (dest / "results/x/strong/cosmoflow").iterdir()] == ["result_0.txt"]


def test_a_failure_while_writing_leaves_no_partial_tree(runs, tmp_path, monkeypatch):
    calls = []

    def failing_copy(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return shutil.copyfile(src, dst)

    monkeypatch.setattr("sciperf.results.package.shutil.copy2", failing_copy)
    with pytest.raises(SciperfError, match="result_1.txt: cannot be written"):
        package([str(p) for p in runs["strong"]], "x", tmp_path / "tree")
    assert len(calls) == 2 and _no_leftovers(tmp_path, "tree")
    calls.clear()
    # the folders made for --out a/b/tree go again
    with pytest.raises(SciperfError, match="result_1.txt: cannot be written"):
        package([str(p) for p in runs["strong"]], "x", tmp_path / "a" / "b" / "tree")
    assert len(calls) == 2 and not (tmp_path / "a").exists()
    package([str(runs["strong"][0])], "x", tmp_path / "tree")
    with pytest.raises(SciperfError, match="already exists"):
        package([str(runs["strong"][0])], "x", tmp_path / "tree")
