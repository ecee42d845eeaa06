"""Throughput mode: `instances=M` runs M independent trainings inside one job.

Real processes under the local launcher (2 instances × 1 rank, and 2 × 2 with DDP):
each instance writes its own MLLOG with `instance` metadata and its own seed, the
official checker reads every log, and the instances' combined throughput is scored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciperf.results.check import check_log
from sciperf.results.throughput import throughput
from testkit import events, summary

pytest.importorskip("torch")

BIN = Path(sys.executable).parent
SMALL = ["experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=2", "framework.threads=1"]


@pytest.fixture(scope="module")
def data(tiny_mini_data: Path) -> Path:
    return tiny_mini_data


def _launch(data: Path, out: Path, nprocs: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "sciperf"), "launch", "launcher=local",
                           f"launcher.nprocs={nprocs}", *SMALL, f"data.dir={data}",
                           f"output_dir={out}", *extra],
                          capture_output=True, text=True, timeout=600, check=False)


def test_two_instances_of_one_rank_train_independently(data, tmp_path):
    out = tmp_path / "out"
    proc = _launch(data, out, 2, "instances=2")
    assert proc.returncode == 0, proc.stderr[-3000:]  # a missed target is a scored outcome
    logs = [out / "result_0.txt", out / "result_1.txt"]
    summaries = [summary(out, f"summary_{i}.json") for i in range(2)]
    assert not (out / "summary.json").exists()
    for i, (log, said) in enumerate(zip(logs, summaries, strict=True)):
        records = [e for e in (json.loads(ln[len(":::MLLOG"):])
                               for ln in log.read_text().splitlines()) if e]
        assert {e["metadata"].get("instance") for e in records} == {i}
        assert events(log, "seed")[0]["value"] == i  # seed + instance
        assert (said["instance"], said["world_size"], said["seed"]) == (i, 1, i)
        assert [p for p in check_log(log).problems if "eval_error" not in p] == []
    # different seeds → different trajectories (really independent trainings)
    assert summaries[0]["history"][0]["loss"] != summaries[1]["history"][0]["loss"]
    # the two ran concurrently: each began (init_start) before the other stopped. Not
    # run_start: a 2-epoch mini trains for ~0.6 s, less than the two processes' import
    # times can differ by on a slow, loaded CPU (0.67 s seen: those spans did not meet)
    spans = [(events(log, "init_start")[0]["time_ms"], events(log, "run_stop")[0]["time_ms"])
             for log in logs]
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1], spans
    score = throughput(logs)  # 2 epochs miss the target: no converged instance to score
    assert (len(score.instances), score.converged, score.minutes) == (2, 0, None)
    assert score.line() == "throughput: 2 instances, 0 converged: no score"
    assert score.line() in proc.stdout  # the launcher reports the combined score
    check = subprocess.run([str(BIN / "sciperf"), "check", str(out)], capture_output=True,
                           text=True, check=False)
    assert check.stdout.count("result_") == 2 and score.line() in check.stdout


def test_two_instances_of_two_ranks_each_use_their_own_ddp_group(data, tmp_path):
    out = tmp_path / "out"
    proc = _launch(data, out, 4, "instances=2", "train.save_weights=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i in range(2):
        said = summary(out, f"summary_{i}.json")
        assert (said["instance"], said["world_size"]) == (i, 2)
        assert len(events(out / f"result_{i}.txt", "run_start")) == 1
    for i in range(2):  # the ranks of each instance hold identical replicas
        w = [np.load(out / f"weights_instance{i}_rank{r}.npz") for r in range(2)]
        for name in w[0].files:
            np.testing.assert_array_equal(w[0][name], w[1][name], err_msg=name)
    a, b = (np.load(out / f"weights_instance{i}_rank0.npz") for i in range(2))
    assert not np.array_equal(a["conv0/kernel"], b["conv0/kernel"])  # separate trainings


def test_instances_must_divide_the_ranks(data, tmp_path):
    proc = _launch(data, tmp_path / "out", 3, "instances=2")
    assert proc.returncode == 2
    assert "instances=2 does not divide the 3 ranks" in proc.stderr


def test_horovod_instances_get_their_own_mpi_communicators(data, tmp_path):
    """mpirun -np 4 with instances=2: Horovod on MPI sub-communicators (TensorFlow)."""
    pytest.importorskip("horovod.tensorflow")
    if not shutil.which("mpirun"):
        pytest.skip("OpenMPI's mpirun is not installed (containers/install.sh --mpi)")
    out = tmp_path / "out"
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    proc = subprocess.run(["mpirun", "-np", "4", "--bind-to", "none", str(BIN / "sciperf"),
                           "train", "framework=tensorflow", "distributed.backend=horovod",
                           "instances=2", "train.save_weights=true", *SMALL,
                           "train.max_epochs=1", f"data.dir={data}", f"output_dir={out}"],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i in range(2):
        assert summary(out, f"summary_{i}.json")["world_size"] == 2
        w = [np.load(out / f"weights_instance{i}_rank{r}.npz") for r in range(2)]
        for name in w[0].files:
            np.testing.assert_array_equal(w[0][name], w[1][name], err_msg=name)
    a, b = (np.load(out / f"weights_instance{i}_rank0.npz") for i in range(2))
    assert not np.array_equal(a["conv0/kernel"], b["conv0/kernel"])
