"""The report's training rates from published logs: the samples an MLLOG epoch stands
for come from the workload's data plan (OpenFold's epoch_num counts samples, GPT-2's
epochs are 1,000 steps), and a throughput instance's accelerators are bounded by the
job's when its logs state the whole job's scale."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sciperf.results.logs import parse_log
from sciperf.results.report import run_facts
from sciperf.results.report_compute import samples_per_epoch_num
from sciperf.results.report_groups import Notes, summarise
from sciperf.results.score import Run, group_runs, score_group
from sciperf.results.throughput import instance_share

HPE = "v3.0/HPE+LBNL"
HPE_WEAK = f"{HPE}/results/perlmutter_10x128x4_ngc21.09_mxnet/weak/cosmoflow"


def test_an_epoch_stands_for_what_the_data_plan_trains() -> None:
    assert samples_per_epoch_num("openfold", 218, 594595) == 1.0  # epoch_num counts samples
    assert samples_per_epoch_num("deepcam", 2048, 121266) == 59 * 2048  # whole batches
    assert samples_per_epoch_num("gpt2", 12, 8823810) == 1000 * 480  # 1,000 steps of 480
    assert samples_per_epoch_num("resnet", 256, 1281167) == 1281167  # not ours: a pass


def test_an_instance_is_bounded_by_the_job_in_whole_nodes() -> None:
    assert instance_share(4096, 4096, 60, per_node=8) == 64  # 8 nodes of 8
    assert instance_share(512, 5120, 10, per_node=4) == 512  # the log says the instance's
    assert instance_share(512, None, 10) == 512  # no description: the log's
    assert instance_share(256, 256, 128) == 2


def _group(tree: Path, notes: Notes):
    runs = [Run(parse_log(p), True) for p in sorted(tree.rglob("result_*.txt"))]
    (group,) = group_runs(runs)
    return summarise(score_group(group), [run_facts(r, group) for r in group.runs], notes)


def test_logs_with_the_job_s_scale_count_one_instance_s(published_results: Path,
                                                        tmp_path: Path) -> None:
    """HPE+LBNL's weak CosmoFlow logs say 128 nodes (one of its 10 instances); the same
    logs saying the job's 1,280 give the same accelerators and rate, with a note."""
    as_published = _group(published_results / HPE_WEAK, Notes())
    copy = tmp_path / "v3.0" / "HPE+LBNL"
    shutil.copytree(published_results / HPE / "systems", copy / "systems")
    shutil.copytree(published_results / HPE_WEAK, tmp_path / HPE_WEAK)
    for log in (tmp_path / HPE_WEAK).glob("result_*.txt"):
        text = re.sub(r'("key": "number_of_nodes", "value": )128\b', r"\g<1>1280",
                      log.read_text())
        log.write_text(text)
    notes = Notes()
    whole_job = _group(tmp_path / HPE_WEAK, notes)
    assert parse_log(next((tmp_path / HPE_WEAK).glob("result_*.txt"))).ranks == 5120
    assert whole_job.accelerators == as_published.accelerators == 10 * 512
    assert whole_job.rate_per_accelerator == pytest.approx(as_published.rate_per_accelerator)
    assert any("the logs say 5120 ranks per instance, the job's 5120 accelerators over 10 "
               "instances: 512 per instance assumed" in line for line in notes.lines())
