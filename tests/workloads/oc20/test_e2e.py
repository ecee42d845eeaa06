"""OC20 end to end: the mini reaches its force-MAE target through the real CLI in both
frameworks and passes the official checker (division open); a full-config log header
passes closed_oc20 and a missed target fails it; two real ranks (DDP, Horovod under mpirun)
train the same global batches to the same weights as one rank — the reference's loss
scale over ranks made visible; bad input ends in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciperf.config import compose
from sciperf.results.check import check_log
from sciperf.results.mllog import MLLogger
from sciperf.weights import load_npz
from sciperf.workloads import get
from sciperf.workloads.oc20 import spec
from testkit import MPI_ROOT_ENV, mllog

BIN = Path(sys.executable).parent
SMALL = ["workload=oc20", "experiment=mini", "data.train_samples=8", "data.eval_samples=3",
         "data.slab=[2,2,3]", "model.hidden_channels=16", "model.out_emb_channels=16",
         "model.int_emb_size=8", "model.num_blocks=1", "framework.threads=1"]
RUN = ["train.global_batch_size=4", "train.max_epochs=1", "train.save_weights=true",
       "data.shuffle=false", "seed=5", "precision=fp32", "opt.warmup_steps=0"]


def sciperf(*args: str, check: bool = True, env: dict | None = None,
            prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([*(prefix or []), str(BIN / "sciperf"), *args], capture_output=True,
                          text=True, check=False, env=env, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"sciperf {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def mini_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("oc20-mini")
    sciperf("prepare", "workload=oc20", "experiment=mini", f"data.dir={root}")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_mini_reaches_force_target_and_passes_checker(mini_data: Path, tmp_path: Path,
                                                      framework: str) -> None:
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    out = tmp_path / framework
    proc = sciperf("train", "workload=oc20", f"framework={framework}", "experiment=mini",
                   f"data.dir={mini_data}", f"output_dir={out}")
    summary = json.loads((out / "summary.json").read_text())
    target = summary["config"]["train"]["target"]
    assert summary["status"] == "success" and summary["final_metric"] <= target
    assert summary["division"] == "open" and summary["parameter_count"] == 155_526
    assert summary["epochs"] < summary["config"]["train"]["max_epochs"]
    events = mllog(out / "result_0.txt")
    values = {e["key"]: e["value"] for e in events}
    assert values["submission_benchmark"] == "oc20" and values["opt_name"] == "AdamW"
    assert values["train_samples"] == 1024 and values["eval_samples"] == 128
    errors = [e["value"] for e in events if e["key"] == "eval_error"]
    assert len(errors) == summary["epochs"] and errors[-1] <= target < min(errors[:-1],
                                                                           default=1e9)
    assert "eval_error" in proc.stdout
    verdict = sciperf("check", str(out / "result_0.txt"))
    assert verdict.stdout.startswith("PASS") and "open oc20" in verdict.stdout


def _header_log(path: Path, cfg, errors: list[float]) -> Path:
    """A log in the driver's (sciperf.run.driver) order from a composed config (no training)."""
    workload = get(cfg.workload)
    log = MLLogger(path)
    log.init_start()
    log.submission(workload.name, cfg.system, nodes=1)
    log.hyperparameters(workload.mllog_hyperparameters(cfg, int(cfg.data.train_samples),
                                                       int(cfg.data.eval_samples)))
    log.event("seed", int(cfg.seed))
    log.end("init_stop")
    log.start("run_start")
    for num, value in enumerate(errors, start=1):
        for key in ("epoch", "eval"):
            log.start(f"{key}_start", metadata={"epoch_num": num})
            log.end(f"{key}_stop", metadata={"epoch_num": num})
        log.event(workload.metric.key, value, metadata={"epoch_num": num})
    log.run_stop(any(workload.reached(v, cfg.train.target) for v in errors), len(errors))
    log.close()
    return path


@pytest.mark.parametrize("gbs", sorted(spec.RCP))
def test_full_config_header_passes_closed_oc20(tmp_path: Path, gbs: int) -> None:
    """Every closed_oc20.yaml key, for each RCP recipe's hyper-parameters."""
    lr, warmup, milestones, _ = spec.RCP[gbs]
    cfg = compose(["workload=oc20", "experiment=full", f"train.global_batch_size={gbs}",
                   f"opt.lr={lr}", f"opt.warmup_steps={warmup}",
                   f"opt.milestones=[{','.join(map(str, milestones))}]"])
    log = _header_log(tmp_path / "result_0.txt", cfg, [0.05, 0.035])
    text = log.read_text()
    for key in ("opt_learning_rate_warmup_steps", "opt_learning_rate_warmup_factor",
                "opt_learning_rate_decay_boundary_steps", "opt_learning_rate_decay_factor"):
        assert f'"key": "{key}"' in text
    verdict = check_log(log)
    assert verdict.ok, verdict.problems
    assert (verdict.division, verdict.benchmark) == ("closed", "oc20")


def test_closed_checker_rejects_a_missed_target_and_bad_batch(tmp_path: Path) -> None:
    cfg = compose(["workload=oc20", "experiment=full"])
    verdict = check_log(_header_log(tmp_path / "a.txt", cfg, [0.05, 0.037]))
    assert not verdict.ok and any("eval_error" in p for p in verdict.problems)
    bad = compose(["workload=oc20", "experiment=full", "train.global_batch_size=512"])
    with pytest.raises(ValueError, match="global_batch_size=512"):
        spec.check_run(bad)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("oc20-tiny")
    sciperf("prepare", *SMALL, f"data.dir={root}")
    return root


def _weights(out: Path, ranks: int) -> list[dict[str, np.ndarray]]:
    return [load_npz(out / f"weights_rank{r}.npz") for r in range(ranks)]


def _close(a: dict[str, np.ndarray], b: dict[str, np.ndarray], atol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=atol, err_msg=key)


@pytest.mark.slow
def test_two_ranks_train_like_one_rank_with_the_global_batch(tiny: Path, tmp_path: Path):
    """Unshuffled, ranks 0/1 take structures {0,2}/{1,3} of the global batch {0,1,2,3}:
    with the loss scaled by world ÷ the global free atoms and DDP's gradient mean, the two
    replicas end where one rank with the whole batch ends (a plain per-rank mean would
    weigh the ranks' unequal free-atom counts wrongly and land elsewhere)."""
    pytest.importorskip("torch")
    one, two = tmp_path / "one", tmp_path / "two"
    args = [*SMALL, *RUN, f"data.dir={tiny}"]
    sciperf("train", *args, f"output_dir={one}", check=False)
    sciperf("launch", "launcher=local", "launcher.nprocs=2", *args, f"output_dir={two}",
            check=False)
    assert (one / "weights_rank0.npz").is_file() and (two / "weights_rank1.npz").is_file()
    (w1,), (d0, d1) = _weights(one, 1), _weights(two, 2)
    _close(d0, d1, atol=0)  # replicas identical
    _close(d0, w1, atol=2e-5)  # = the one-rank run over the same global batches
    events = {e["key"]: e["value"] for e in mllog(two / "result_0.txt")}
    assert events["train_samples"] == 8 and events["eval_samples"] == 3  # every structure


@pytest.mark.slow
def test_horovod_tensorflow_matches_one_rank(tiny: Path, tmp_path: Path):
    """The same check for TensorFlow under mpirun + Horovod (2 ranks)."""
    env = {**os.environ, **MPI_ROOT_ENV}
    one, two = tmp_path / "one", tmp_path / "two"
    args = [*SMALL, *RUN, "framework=tensorflow", f"data.dir={tiny}"]
    sciperf("train", *args, f"output_dir={one}", check=False)
    env = {**os.environ, **MPI_ROOT_ENV}
    proc = sciperf("train", *args, "distributed.backend=horovod", f"output_dir={two}",
                   check=False, env=env,
                   prefix=["mpirun", "-np", "2", "--bind-to", "none",
                           "--mca", "mpi_yield_when_idle", "1"])
    assert (two / "weights_rank1.npz").is_file(), proc.stderr[-2000:]
    (w1,), (h0, h1) = _weights(one, 1), _weights(two, 2)
    _close(h0, h1, atol=0)
    _close(h0, w1, atol=2e-5)


def test_bad_data_is_one_line_and_dali_is_refused(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = sciperf("train", *SMALL, f"data.dir={tiny}", "data.loader=dali",
                   f"output_dir={tmp_path / 'd'}", check=False)
    assert proc.returncode == 2 and "has no DALI pipeline" in proc.stderr
    assert not (tmp_path / "d").exists()
    proc = sciperf("train", *SMALL, f"data.dir={tiny}", "model.cutoff=3.0",
                   "train.max_epochs=1", "train.global_batch_size=4",
                   f"output_dir={tmp_path / 'c'}", check=False)
    assert proc.returncode == 2 and "exceeds model.cutoff=3.0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_staged_run_copies_each_container_once(tiny: Path, tmp_path: Path) -> None:
    """Records share their container: staging copies every container file once and the
    run reads the node-local copies."""
    pytest.importorskip("torch")
    stage = tmp_path / "stage"
    proc = sciperf("train", *SMALL, *RUN, f"data.dir={tiny}", "data.format=lmdb",
                   f"data.stage_dir={stage}", f"output_dir={tmp_path / 'o'}", check=False)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # trained (target or not)
    staged = sorted(p.relative_to(stage) for p in stage.rglob("*.lmdb"))
    assert len(staged) == len(list(tiny.rglob("data.*.lmdb"))) > 0
    assert "staged" in proc.stdout and "error" not in proc.stderr.lower()
