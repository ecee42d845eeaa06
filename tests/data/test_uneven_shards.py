"""DeepCAM's reference sharding: sample counts that do not divide by the ranks run.

The rules fix 121,266 training and 15,158 validation samples, which divide by no usual
scale: every rank trains on ⌊n/ranks⌋ samples in full batches (the rest is left out, so all
ranks step together) and validation shards differ by at most one sample, each evaluated
exactly once with a smaller last batch. CosmoFlow keeps its strict divisibility rule. The
MLLOG header reports the whole sets (closed_deepcam.yaml checks them).
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

from sciperf.config import compose
from sciperf.data.loader import BatchLoader, batch_sizes
from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError
from sciperf.run import resolve_files
from sciperf.workloads import get
from sciperf.workloads.deepcam import data as dc_data

BIN = Path(sys.executable).parent
SMALL = ["workload=deepcam", "experiment=mini", "model.height=32", "model.width=48",
         "data.train_samples=0", "data.eval_samples=0", "framework.threads=1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """10 training and 7 validation samples: neither divides by 4 ranks."""
    root = tmp_path_factory.mktemp("uneven")
    subprocess.run([str(BIN / "sciperf"), "prepare", *SMALL[:4], "data.train_samples=10",
                    "data.eval_samples=7", f"data.dir={root}"], check=True,
                   capture_output=True, timeout=300)
    return root


def test_batch_sizes_error_drop_keep():
    assert batch_sizes(8, 4, "error") == [4, 4]
    with pytest.raises(ValueError, match="7 files do not divide into batches of 4"):
        batch_sizes(7, 4, "error")
    assert batch_sizes(7, 4, "drop") == [4]
    assert batch_sizes(7, 4, "keep") == [4, 3]
    assert batch_sizes(3, 4, "drop") == [] and batch_sizes(0, 4, "keep") == []
    with pytest.raises(ValueError, match="remainder='last'"):
        batch_sizes(7, 4, "last")


def test_batch_loader_keeps_or_drops_the_last_partial_batch():
    files = [Path(f"s{i}") for i in range(7)]

    def read(path: Path) -> tuple[np.ndarray, np.ndarray]:
        i = int(path.name[1:])
        return np.full((2,), i, np.float32), np.array(i)

    kept = list(BatchLoader(files, read, 3, shuffle=False, remainder="keep").epoch(0))
    assert [len(y) for _, y in kept] == [3, 3, 1]
    assert sorted(int(v) for _, y in kept for v in y) == list(range(7))  # each sample once
    dropped = list(BatchLoader(files, read, 3, seed=5, remainder="drop").epoch(1))
    assert [len(y) for _, y in dropped] == [3, 3]
    assert len(BatchLoader(files, read, 3, remainder="keep")) == 3


def _plans(cfg, world: int, per_node: int) -> list:
    return [resolve_files(cfg, RankInfo(r, world, r % per_node, per_node, r // per_node),
                          get("deepcam")) for r in range(world)]


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize(("world", "per_node"), [(4, 4), (4, 2), (3, 1)])
def test_deepcam_shards_train_evenly_and_evaluate_every_sample_once(data, tmp_path, staged,
                                                                    world, per_node):
    stage = [f"data.stage_dir={tmp_path}"] if staged else []
    cfg = compose([*SMALL, f"data.dir={data}", f"train.global_batch_size={world}", *stage])
    plans = _plans(cfg, world, per_node)
    assert {(p.train_samples, p.eval_samples, p.local_batch) for p in plans} == {(10, 7, 1)}
    trains = [p.train for p in plans]
    assert {len(t) for t in trains} == {10 // world}  # every rank the same number of steps
    assert len({f for t in trains for f in t}) == world * (10 // world)  # disjoint
    evals = [f for p in plans for f in p.evals]
    assert sorted(evals) == dc_data.list_samples(data, "validation", "npy")  # each once
    assert max(len(p.evals) for p in plans) - min(len(p.evals) for p in plans) <= 1


def test_too_few_samples_and_cosmoflow_stay_strict(data):
    cfg = compose([*SMALL, f"data.dir={data}", "train.global_batch_size=4",
                   "data.train_samples=3"])
    with pytest.raises(SciperfError, match="data.train_samples=3 is too small: at least "
                                           "ranks × local batch = 4 × 1 = 4"):
        _plans(cfg, 4, 4)
    cfg = compose([*SMALL, f"data.dir={data}", "train.global_batch_size=4"])
    with pytest.raises(SciperfError, match="must be a positive multiple"):
        resolve_files(cfg, RankInfo(0, 4, 0, 4), get("cosmoflow"))  # the strict rule, same files


def test_tensorflow_loader_ends_with_the_smaller_batch(data):
    pytest.importorskip("tensorflow")
    from sciperf_tensorflow.input import batches, make_loader
    files = dc_data.list_samples(data, "validation", "npy")
    model = get("deepcam").model(height=32, width=48)
    common = dict(reader=dc_data.model_reader(data, "npy", model), batch=4, seed=0,
                  shuffle=False, prefetch=2)
    kept = list(batches(make_loader(files, remainder="keep", **common), 0))
    assert [int(y.shape[0]) for _, y in kept] == [4, 3]
    assert [int(y.shape[0]) for _, y in batches(make_loader(files, remainder="drop",
                                                            **common), 0)] == [4]


def _two_ranks(framework: str, args: list[str]) -> subprocess.CompletedProcess:
    """PyTorch: the local launcher (DDP/gloo); TensorFlow: mpirun + Horovod."""
    if framework == "pytorch":
        cmd = [str(BIN / "sciperf"), "launch", "launcher=local", "launcher.nprocs=2", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun (OpenMPI) is not installed")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    cmd = ["mpirun", "-np", "2", "--bind-to", "none", str(BIN / "sciperf"), "train", *args,
           "distributed.backend=horovod"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False,
                          env=env)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_two_ranks_train_on_uneven_counts_and_log_the_whole_sets(data, tmp_path, framework):
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    out = tmp_path / "out"
    proc = _two_ranks(framework, [f"framework={framework}", *SMALL, f"data.dir={data}",
                                  "train.global_batch_size=4", "train.max_epochs=1",
                                  f"output_dir={out}"])
    summary_file = out / "summary.json"
    assert summary_file.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(summary_file.read_text())
    assert summary["world_size"] == 2 and summary["epochs"] == 1
    assert summary["status"] in ("success", "aborted"), proc.stderr[-2000:]
    events = [json.loads(ln[len(":::MLLOG "):]) for ln in
              (out / "result_0.txt").read_text().splitlines() if ln.startswith(":::MLLOG")]
    values = {e["key"]: e["value"] for e in events}
    assert (values["train_samples"], values["eval_samples"]) == (10, 7)
    assert 0.0 <= values["eval_accuracy"] <= 1.0
