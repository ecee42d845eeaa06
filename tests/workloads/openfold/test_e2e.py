"""OpenFold end to end through real processes: the official checker on a full-config header
(closed) and on a real mini run (open); two ranks (torchrun DDP, mpirun Horovod) end where
one rank with the same global batch ends; node-local staging over two ranks; throughput
mode; a resumed run equals an uninterrupted one, EMA included.

Every run is the mini on 16 synthetic chains, 2 optimizer steps per train/validation cycle
(``train.val_every_iters=2``) at global batch 2 — the reference's layout of one chain per
rank when two ranks share it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import mlperf_logging
import numpy as np
import pytest

from sciperf.config import compose
from sciperf.results.check import check_log
from sciperf.results.mllog import MLLogger
from sciperf.workloads import get
from sciperf.workloads.openfold import data, spec
from sciperf.workloads.openfold.sizes import ModelSpec
from testkit import mllog

torch = pytest.importorskip("torch")

BIN = Path(sys.executable).parent
WORKLOAD = get("openfold")
# these tests are about ranks, staging and resuming, not the starting point: no
# pre-trained starting checkpoint (a prepare that makes one would cost minutes here)
_PRETRAIN = ["data.pretrain_epochs=0"]
SMALL = ["workload=openfold", "experiment=mini", "data.train_samples=16", "data.eval_samples=2",
         "framework.threads=1", "train.init_checkpoint=", *_PRETRAIN]
RUN = ["train.global_batch_size=2", "train.val_every_iters=2", "train.max_epochs=1"]
# dropout is reseeded per rank (forward_<seed>_<rank>_<iteration>, as the reference): two
# ranks draw other masks than one rank, so the rank comparisons switch every dropout off
NO_DROPOUT = [f"model.{f.name}=0.0" for f in dataclasses.fields(ModelSpec)
              if f.name.endswith("dropout")]
UNREACHED = "train.target=0.99"  # the run ends aborted after its epochs, checkpoints kept
LOWERED = 0.02  # a test-lowered target every run reaches at its first evaluation
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
# fp32 CPU: one rank's batch of 2 against two ranks' gradient mean differ by summation order
# only (measured 2.3e-7 after 2 Adam steps at lr 1e-3)
RANK_ATOL = 1e-5
OFFICIAL_RULES = Path(mlperf_logging.__file__).parent / "compliance_checker" / "hpc_3.0.0" / \
    "common.yaml"


def sciperf(*args: str, check: bool = True, prefix: list[str] | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real `sciperf` command (optionally under a launcher), output captured."""
    cmd = [*(prefix or []), str(BIN / "sciperf"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def keys(path: Path) -> list[str]:
    return [e["key"] for e in mllog(path)]


def summary(out: Path, name: str = "summary.json") -> dict[str, Any]:
    return json.loads((out / name).read_text())


def weights(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def checkpointed(out: Path, epoch: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(model, EMA) state dicts the checkpoint of `epoch` keeps; the EMA ("SWA") weights
    are validation's model (the WeightEMA step piece's checkpoint state)."""
    state = torch.load(out / "checkpoints" / f"epoch_{epoch:04d}" / "state.pt",
                       weights_only=True)
    model = next(state[k] for k in ("model", "alphafold_state_dict") if k in state)
    return ({k: v.numpy() for k, v in model.items()},
            {k: v.numpy() for k, v in state["extra"]["ema"].items()})


def assert_close(a: dict, b: dict, atol: float, what: str) -> None:
    assert a.keys() == b.keys() and a, what
    for name in a:
        np.testing.assert_allclose(np.asarray(a[name]), np.asarray(b[name]), rtol=0, atol=atol,
                                   err_msg=f"{what}: {name}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def proteins(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("openfold-e2e")
    sciperf("prepare", *SMALL, f"data.dir={root}")
    return root


# ---------------------------------------------------------------- official checker

def _header_log(path: Path, cfg: Any, hyper: dict[str, Any], accuracies: list[float]) -> Path:
    """A log in the driver's event order (sciperf.run.driver; no training): the header from
    `hyper`, then one train/validation cycle per accuracy with MLLOG's epoch_num in
    samples."""
    log = MLLogger(path)
    log.init_start()
    log.submission(WORKLOAD.name, cfg.system, nodes=1)
    log.hyperparameters(hyper)
    log.event("seed", int(cfg.seed))
    log.end("init_stop")
    log.start("run_start")
    for cycle, value in enumerate(accuracies, start=1):
        tag = {"epoch_num": WORKLOAD.epoch_num(cfg, cycle)}
        for key in ("epoch", "eval"):
            log.start(f"{key}_start", metadata=tag)
            log.end(f"{key}_stop", metadata=tag)
        log.event(WORKLOAD.metric.key, value, metadata=tag)
    reached = any(WORKLOAD.reached(v, cfg.train.target) for v in accuracies)
    log.run_stop(reached, WORKLOAD.epoch_num(cfg, len(accuracies)))
    log.close()
    return path


def test_full_config_header_passes_closed_openfold(tmp_path: Path) -> None:
    """closed_openfold.yaml on the header the driver writes for the full config.

    The closed value of ``init_checkpoint_sha256sum`` is the SHA-256 of the reference's
    1.1 GiB checkpoint, which only a real closed run has. So the header is computed by
    ``spec.mllog_hyperparameters`` from a config whose ``train.init_checkpoint`` is a file
    made here: the logged value is that file's SHA-256 (hashed independently below), and
    the checker fails on that key and on no other. With the one value a run from the
    reference file logs — ``spec.INIT_CHECKPOINT_SHA256``, checked against
    closed_openfold.yaml by the checker itself — in its place, the same header passes; a
    missed target fails it."""
    stand_in = tmp_path / spec.INIT_CHECKPOINT_NAME
    stand_in.write_bytes(b"a stand-in, not the reference checkpoint\n")
    cfg = compose(["workload=openfold", "experiment=full", f"train.init_checkpoint={stand_in}"])
    WORKLOAD.check_run(cfg)  # a legal closed configuration
    hyper = WORKLOAD.mllog_hyperparameters(cfg, spec.TRAIN_SAMPLES, spec.EVAL_SAMPLES)
    assert hyper["init_checkpoint_sha256sum"] == hashlib.sha256(stand_in.read_bytes()).hexdigest()
    assert hyper["model_parameters_count"] == spec.FULL_PARAMETER_COUNT == 93_229_082
    reached = [0.70, 0.81]

    passed, found = checker(_header_log(tmp_path / "stand_in.txt", cfg, hyper, reached))
    assert not passed and len(found) == 1, found
    assert found[0].startswith("CHECK for 'init_checkpoint_sha256sum' failed"), found

    real = {**hyper, "init_checkpoint_sha256sum": spec.INIT_CHECKPOINT_SHA256}
    verdict = check_log(_header_log(tmp_path / "result_0.txt", cfg, real, reached))
    assert verdict.ok, verdict.problems
    assert (verdict.division, verdict.benchmark) == ("closed", "openfold")

    passed, found = checker(_header_log(tmp_path / "missed.txt", cfg, real, [0.70, 0.79]))
    assert not passed and len(found) == 1, found
    assert found[0].startswith("Failed checks for eval_accuracy"), found


def _rules_with_target(tmp: Path, target: float) -> Path:
    """A copy of the official hpc 3.0.0 rules whose only change is open_openfold.yaml's
    accuracy threshold (0.8 → `target`); their cross-references point into the copy."""
    dst = tmp / "rules" / "hpc_3.0.0"
    shutil.copytree(OFFICIAL_RULES.parent, dst)
    for path in dst.glob("*.yaml"):
        path.write_text(path.read_text().replace("'hpc_3.0.0/", f"'{dst}/"))
    rule = dst / "open_openfold.yaml"
    text = rule.read_text()
    assert text.count("v['value'] >= 0.8 and") == 1
    rule.write_text(text.replace("v['value'] >= 0.8 and", f"v['value'] >= {target} and"))
    return dst / "common.yaml"


def checker(log: Path, rules: Path = OFFICIAL_RULES) -> tuple[bool, list[str]]:
    """The official checker's own code over `rules` (hpc 3.0.0, as `sciperf check` runs
    it): (passed, its findings — one whole message each, warnings included)."""
    with tempfile.TemporaryDirectory(prefix="openfold-check-") as scratch:
        proc = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker",
                               "--usage", "hpc", "--ruleset", "3.0.0", "--config", str(rules),
                               "--log_output", str(Path(scratch) / "checker.log"),
                               str(log.resolve())],
                              cwd=scratch, capture_output=True, text=True, check=False)
    text = proc.stderr
    body = text.split("WARNING - ", 1)[1].split("ERROR - FAILED")[0] if "WARNING - " in text \
        else ""
    found = [m.strip() for m in body.split("-" * 30) if m.strip()]
    passed = proc.returncode == 0 and "SUCCESS" in text
    assert passed or found, text[-2000:]
    return passed, found


@pytest.mark.slow
def test_mini_run_log_passes_the_open_rules(proteins: Path, tmp_path: Path) -> None:
    """A real mini run (division open) to a test-lowered target. open_openfold.yaml demands
    one eval_accuracy in [0.8, 1] whatever the run's target, which two steps of the mini
    cannot reach: the official rules fail that check and no other, and the same rules with
    only that threshold lowered to the run's target pass the log."""
    out = tmp_path / "run"
    proc = sciperf("train", *SMALL, *RUN, f"train.target={LOWERED}", f"data.dir={proteins}",
                   f"output_dir={out}")
    result = summary(out)
    assert result["status"] == "success" and result["division"] == "open"
    assert result["epochs"] == 1 and result["final_metric"] >= LOWERED
    assert result["parameter_count"] == 199_226 and "eval_accuracy" in proc.stdout
    events = mllog(out / "result_0.txt")
    values = {e["key"]: e["value"] for e in events}
    assert values["submission_benchmark"] == "openfold" and values["val_every_iters"] == 2
    assert values["train_samples"] == 16 and values["eval_samples"] == 2
    accuracy = [e for e in events if e["key"] == "eval_accuracy"]
    assert [e["metadata"]["epoch_num"] for e in accuracy] == [2 * 2]  # samples: cycle·GBS·2
    assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "success"

    verdict = check_log(out / "result_0.txt")
    assert (verdict.ok, verdict.division, verdict.benchmark) == (False, "open", "openfold")
    passed, found = checker(out / "result_0.txt")
    assert not passed and len(found) == 1, found
    assert found[0].startswith("Failed checks for eval_accuracy") and ">= 0.8" in found[0]

    passed, found = checker(out / "result_0.txt", _rules_with_target(tmp_path, LOWERED))
    assert passed and not found, found


# ---------------------------------------------------------------- ranks

@pytest.fixture(scope="module")
def one_rank(proteins: Path, tmp_path_factory) -> Path:
    """One rank, global batch 2, no dropout: what the two-rank runs must equal."""
    out = tmp_path_factory.mktemp("openfold-one") / "run"
    proc = sciperf("train", *SMALL, *RUN, *NO_DROPOUT, UNREACHED, "train.save_weights=true",
                   "train.checkpoint_every=1", f"data.dir={proteins}", f"output_dir={out}",
                   check=False)
    assert (out / "weights_rank0.npz").is_file(), proc.stderr[-3000:]
    return out


def _horovod_ready() -> str | None:
    if shutil.which("mpirun") is None:
        return "mpirun (OpenMPI) is not installed"
    probe = subprocess.run([sys.executable, "-c", "import horovod.torch"], capture_output=True,
                           check=False)
    return None if probe.returncode == 0 else "Horovod is not installed (install.sh --horovod)"


def _two_rank_prefix(launcher: str) -> tuple[list[str], list[str], dict[str, str]]:
    """(command before `sciperf`, extra overrides, environment) of a two-rank launcher."""
    if launcher == "torchrun":
        torchrun = [str(BIN / "torchrun"), "--nproc_per_node=2",
                    f"--master_port={free_port()}", "--no-python"]
        return torchrun, [], {}
    reason = _horovod_ready()
    if reason:
        pytest.skip(reason)
    return ["mpirun", "-np", "2", "--bind-to", "none"], ["distributed.backend=horovod"], MPI_ENV


def test_both_ranks_draw_other_chains_of_the_global_stream(proteins: Path) -> None:
    """The sampler the runs below use: rank r of 2 takes draws r, r + 2, … of the one-rank
    stream — per step one chain each, together the one rank's batch of 2."""
    cfg = compose([*SMALL, *RUN, f"data.dir={proteins}"])
    files = data.list_samples(proteins, "train", "processed", 16)
    count = 2  # val_every_iters steps × local batch
    single = data.draw(files, cfg, 0, rank=0, world=1, count=2 * count)
    ranks = [data.draw(files, cfg, 0, rank=r, world=2, count=count) for r in (0, 1)]
    assert ranks[0] == single[0::2] and ranks[1] == single[1::2]
    for step in range(2):
        assert ranks[0][step].path != ranks[1][step].path  # different chains in every step
    assert len({d.seed for d in single}) == 4  # each draw its own crop/MSA seed


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "mpirun-horovod"])
def test_two_ranks_end_where_one_rank_ends(proteins: Path, one_rank: Path, tmp_path: Path,
                                          launcher: str) -> None:
    """Two ranks × 1 chain (DDP under torchrun; Horovod under mpirun), 2 steps: replicas
    identical, and equal to one rank with both chains per step — weights, the EMA the
    checkpoint keeps, the loss and the EMA's validation lDDT-Cα (sharded: one chain per
    rank, reduced)."""
    prefix, extra, env = _two_rank_prefix(launcher)
    out = tmp_path / launcher
    proc = sciperf("train", *SMALL, *RUN, *NO_DROPOUT, UNREACHED, *extra,
                   "train.save_weights=true", "train.checkpoint_every=1",
                   f"data.dir={proteins}", f"output_dir={out}", prefix=prefix, env=env,
                   check=False)
    assert (out / "weights_rank1.npz").is_file(), proc.stderr[-3000:]
    two, one = summary(out), summary(one_rank)
    assert two["world_size"] == 2 and two["epochs"] == 1 and two["status"] == "aborted"
    assert sorted(p.name for p in out.glob("result_*")) == ["result_0.txt"]
    assert keys(out / "result_0.txt").count("run_start") == 1

    w0, w1 = weights(out / "weights_rank0.npz"), weights(out / "weights_rank1.npz")
    assert_close(w0, w1, 0.0, "replicas")
    reference = weights(one_rank / "weights_rank0.npz")
    assert_close(w0, reference, RANK_ATOL, f"{launcher} vs one rank")
    model, average = checkpointed(out, 1)
    assert_close(average, checkpointed(one_rank, 1)[1], RANK_ATOL, "EMA")
    # the EMA (0.9) trails the weights by a tenth of step 2's move: the steps moved them
    assert max(float(np.abs(model[k] - average[k]).max()) for k in model) > 10 * RANK_ATOL
    np.testing.assert_allclose(two["history"][0]["loss"], one["history"][0]["loss"], rtol=1e-6)
    np.testing.assert_allclose(two["final_metric"], one["final_metric"], rtol=1e-6)


@pytest.mark.slow
def test_staged_two_rank_run_reads_every_chain_from_the_stage(proteins: Path, one_rank: Path,
                                                              tmp_path: Path) -> None:
    """`data.stage_dir` on two local ranks: sampled sharding lets every rank draw every
    chain, so the node's ranks split the copying of the whole layout (rank 0 copies only
    its part) before run_start; the run then trains on the staged copies exactly as the
    unstaged one rank does (same weights: both ranks drew from all 16 chains)."""
    stage, out = tmp_path / "stage", tmp_path / "run"
    proc = sciperf("launch", "launcher=local", "launcher.nprocs=2", *SMALL, *RUN, *NO_DROPOUT,
                   f"train.target={LOWERED}", "train.save_weights=true",
                   f"data.dir={proteins}", f"data.stage_dir={stage}", f"output_dir={out}")
    layout = data.sample_files(data.list_samples(proteins, "train", "processed", 1)[0],
                               "processed")
    roots = list(stage.iterdir())
    assert len(roots) == 1
    staged = sorted(p.relative_to(roots[0]) for p in roots[0].rglob("*") if p.is_file())
    assert staged == sorted(p.relative_to(proteins) for p in layout)
    for rel in staged:
        assert (roots[0] / rel).read_bytes() == (proteins / rel).read_bytes(), rel

    events = mllog(out / "result_0.txt")
    order = [e["key"] for e in events]
    assert order.count("staging_start") == order.count("staging_stop") == 1
    assert order.index("staging_stop") < order.index("run_start")  # hpc 3.0.0: untimed
    share = next(e for e in events if e["key"] == "staging_stop")["metadata"]["staged_files"]
    assert 0 < share < len(layout)  # rank 0 copied its part, rank 1 the rest
    result = summary(out)
    assert result["status"] == "success" and result["world_size"] == 2
    assert result["staging"]["files"] == share and "staged" in proc.stdout
    assert_close(weights(out / "weights_rank0.npz"), weights(one_rank / "weights_rank0.npz"),
                 RANK_ATOL, "staged two ranks vs one rank")


@pytest.mark.slow
def test_throughput_mode_runs_two_independent_instances(proteins: Path, tmp_path: Path) -> None:
    """`instances=2` on two ranks: two one-rank instances, each with its own seed (seed +
    instance), MLLOG file and summary; both logs pass the open rules at the lowered
    target (see test_mini_run_log_passes_the_open_rules)."""
    out = tmp_path / "run"
    proc = sciperf("launch", "launcher=local", "launcher.nprocs=2", "instances=2", *SMALL, *RUN,
                   f"train.target={LOWERED}", "seed=7", f"data.dir={proteins}",
                   f"output_dir={out}")
    assert sorted(p.name for p in out.iterdir()) == ["result_0.txt", "result_1.txt",
                                                     "summary_0.json", "summary_1.json"]
    runs = [summary(out, f"summary_{i}.json") for i in (0, 1)]
    assert [(r["instance"], r["instances"], r["world_size"]) for r in runs] == [(0, 2, 1),
                                                                                (1, 2, 1)]
    assert [r["seed"] for r in runs] == [7, 8] and all(r["status"] == "success" for r in runs)
    assert runs[0]["history"][0]["loss"] != runs[1]["history"][0]["loss"]  # independent
    rules = _rules_with_target(tmp_path, LOWERED)
    for i in (0, 1):
        events = mllog(out / f"result_{i}.txt")
        assert [e["key"] for e in events].count("run_start") == 1
        assert {e["metadata"].get("instance") for e in events} == {i}
        assert {e["value"] for e in events if e["key"] == "seed"} == {7 + i}
        assert checker(out / f"result_{i}.txt", rules) == (True, [])
    assert "throughput: 2 instances, 2 converged, in " in proc.stdout


# ---------------------------------------------------------------- resume

@pytest.mark.slow
def test_resumed_run_equals_an_uninterrupted_run(proteins: Path, tmp_path: Path) -> None:
    """Checkpoint every cycle; stop after cycle 1, resume to 2: the weights, both cycles'
    losses and the EMA (the WeightEMA piece's checkpoint state: validation's model) equal the
    uninterrupted 2-cycle run's — dropout on, reseeded by iteration as the reference."""
    args = [*SMALL, *RUN[:-1], UNREACHED, "train.save_weights=true", "train.checkpoint_every=1",
            f"data.dir={proteins}"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    proc = sciperf("train", *args, "train.max_epochs=2", f"output_dir={whole}", check=False)
    assert (whole / "weights_rank0.npz").is_file(), proc.stderr[-3000:]
    first = sciperf("train", *args, "train.max_epochs=1", f"output_dir={parts}", check=False)
    assert summary(parts)["epochs"] == 1, first.stderr[-3000:]
    second = sciperf("train", *args, "train.max_epochs=2", "train.resume=auto",
                     f"output_dir={parts}", check=False)
    assert "resuming from" in second.stdout, second.stderr[-3000:]

    a, b = summary(whole), summary(parts)
    assert a["epochs"] == b["epochs"] == 2 and len(b["resumed"]) == 1
    assert b["division"] == "open"
    for x, y in zip(a["history"], b["history"], strict=True):
        np.testing.assert_allclose([y["loss"], y["metric"]], [x["loss"], x["metric"]],
                                   rtol=1e-6)
    assert a["history"][0]["loss"] != a["history"][1]["loss"]  # two different cycles
    wa, wb = weights(whole / "weights_rank0.npz"), weights(parts / "weights_rank0.npz")
    assert_close(wb, wa, 1e-7, "resumed weights")
    (_, ea), (model, eb) = checkpointed(whole, 2), checkpointed(parts, 2)
    assert_close(eb, ea, 1e-7, "resumed EMA")
    # the EMA is not the model: an EMA restarted from the weights would land elsewhere
    assert max(float(np.abs(model[k] - eb[k]).max()) for k in model) > 1e-5
    log = keys(parts / "result_0.txt")
    assert log.count("run_start") == 1 and log.count("eval_accuracy") == 2
