"""The DeepCAM spec (framework-free): numbers, architecture table, LR schedule, MLLOG keys."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sciperf.config import compose
from sciperf.results.check import check_log
from sciperf.results.mllog import MLLogger
from sciperf.workloads import WORKLOADS, get
from sciperf.workloads.deepcam import spec as dc
from testkit import cli, one_error_line


def test_registered_and_composed_from_the_spec() -> None:
    assert "deepcam" in WORKLOADS and get("deepcam").model is dc.ModelSpec
    cfg = compose(["workload=deepcam", "experiment=full"])
    assert cfg.workload == "deepcam" and cfg.train.target == dc.TARGET == 0.82
    assert cfg.data.train_samples == 121_266 and cfg.data.eval_samples == 15_158
    assert cfg.data.format == "hdf5" and cfg.opt.name == "LAMB"
    assert dc.ModelSpec(**cfg.model).parameter_count() == dc.FULL_PARAMETER_COUNT


def test_full_parameter_count_from_the_architecture() -> None:
    spec = dc.ModelSpec()
    assert spec.parameter_count() == dc.FULL_PARAMETER_COUNT == 56_454_720
    names = [layer.name for layer in spec.layers()]
    assert len(names) == len(set(names))  # canonical names are unique
    assert [b.name for b in spec.blocks()] == [f"block{i}" for i in range(1, 21)]
    # middle flow: 16 blocks × 3 separable convs 728→728; exit block 728→1024
    middle = spec.blocks()[3:19]
    assert all(len(b.convs) == 3 and not b.skip for b in middle)
    assert spec.blocks()[-1].cout == 1024 and spec.blocks()[-1].skip
    assert spec.weight_shapes()["block1_sep1_depthwise/kernel"] == (3, 3, 64, 1)
    assert spec.weight_shapes()["last_deconv/kernel"] == (3, 3, 3, 256)
    assert spec.feature_size == (48, 72)  # the reference's ASPP pooling tile


def test_class_weights_are_frequency_power() -> None:
    assert pytest.approx((1.0017, 2.6146, 1.7164), abs=1e-4) == dc.CLASS_WEIGHTS
    assert sum(dc.CLASS_FREQUENCIES) == pytest.approx(1.0, abs=1e-6)


def test_input_must_divide_by_the_output_stride() -> None:
    with pytest.raises(ValueError, match="model.height=100"):
        dc.ModelSpec(height=100).check()


def _opt(**kw) -> dc.OptimizerSpec:
    return dc.OptimizerSpec(**kw)


def test_multistep_schedule_matches_the_reference_rules() -> None:
    o = _opt(lr=0.01, lr_warmup_steps=4, milestones=[3, 6], decay_rate=0.1)
    lrs = [dc.lr_for_step(o, s) for s in range(14)]
    # warmup from 0 (step 0 runs at lr 0), peak at step 4; milestones counted after the
    # warmup: m + W + 1 → decay at steps 8 and 11
    expected = [0.0, 0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01, 0.01, 0.001, 0.001, 0.001,
                1e-4, 1e-4, 1e-4]
    assert lrs == pytest.approx(expected)
    plain = _opt(lr=0.01, lr_warmup_steps=0, milestones=[2], decay_rate=0.5)
    assert [dc.lr_for_step(plain, s) for s in range(4)] == pytest.approx(
        [0.01, 0.01, 0.005, 0.005])


def test_warmup_factor_and_cosine() -> None:
    o = _opt(lr=0.1, lr_warmup_steps=10, lr_warmup_factor=2.0, scheduler="cosine_annealing",
             t_max=20, eta_min=0.01)
    assert dc.lr_for_step(o, 0) == pytest.approx(0.1)
    assert dc.lr_for_step(o, 5) == pytest.approx(0.15)
    assert dc.lr_for_step(o, 10) == pytest.approx(0.2)
    assert dc.lr_for_step(o, 20) == pytest.approx(0.01 + 0.19 * (1 + math.cos(math.pi / 2)) / 2)
    assert dc.lr_for_step(o, 30) == pytest.approx(0.01)


def _header_log(path: Path, cfg, evals: list[float]) -> Path:
    """A log in the driver's (sciperf.run.driver) order from a composed config."""
    spec = get(cfg.workload)
    log = MLLogger(path)
    log.init_start()
    log.submission(spec.name, cfg.system, nodes=1)
    log.hyperparameters(spec.mllog_hyperparameters(cfg, int(cfg.data.train_samples),
                                                   int(cfg.data.eval_samples)))
    log.event("seed", int(cfg.seed))
    log.end("init_stop")
    log.start("run_start")
    for num, metric in enumerate(evals, start=1):
        for key in ("epoch", "eval"):
            log.start(f"{key}_start", metadata={"epoch_num": num})
            log.end(f"{key}_stop", metadata={"epoch_num": num})
        log.event(spec.metric.key, metric, metadata={"epoch_num": num})
    log.run_stop(any(spec.reached(m, cfg.train.target) for m in evals), len(evals))
    log.close()
    return path


@pytest.mark.parametrize("opt", [
    ["opt.name=LAMB"],
    ["opt.name=AdamW", "opt.scheduler=cosine_annealing"],
    ["opt.name=Adam"],
])
def test_full_config_header_passes_closed_deepcam(tmp_path: Path, opt: list[str]) -> None:
    cfg = compose(["workload=deepcam", "experiment=full", "seed=1", *opt])
    log = _header_log(tmp_path / "result_0.txt", cfg, [0.5, 0.83])
    text = log.read_text()
    for key in ("gradient_accumulation_frequency", "batchnorm_group_size", "opt_betas",
                "opt_eps", "scheduler_lr_warmup_steps", "scheduler_lr_warmup_factor"):
        assert f'"key": "{key}"' in text
    if "opt.name=LAMB" in opt:
        assert '"key": "opt_max_grad_norm"' in text and '"key": "scheduler_milestones"' in text
    verdict = check_log(log)
    assert verdict.ok, verdict.problems
    assert (verdict.division, verdict.benchmark) == ("closed", "deepcam")


def test_closed_checker_rejects_wrong_sample_counts_and_low_iou(tmp_path: Path) -> None:
    cfg = compose(["workload=deepcam", "experiment=full", "seed=1",
                   "data.train_samples=1024"])
    verdict = check_log(_header_log(tmp_path / "a.txt", cfg, [0.5, 0.83]))
    assert not verdict.ok and any("train_samples" in p for p in verdict.problems)
    cfg = compose(["workload=deepcam", "experiment=full", "seed=1"])
    verdict = check_log(_header_log(tmp_path / "b.txt", cfg, [0.5, 0.81]))
    assert not verdict.ok and any("eval_accuracy" in p for p in verdict.problems)


def test_closed_run_with_seed_zero_is_refused_before_anything_is_written(tmp_path):
    closed = compose(["workload=deepcam", "experiment=mini", "system.submission_division=closed"])
    with pytest.raises(ValueError, match="closed DeepCAM requires seed > 0"):
        dc.check_run(closed)
    dc.check_run(compose(["workload=deepcam", "experiment=mini",
                          "system.submission_division=closed", "seed=3"]))
    dc.check_run(compose(["workload=deepcam", "experiment=mini"]))  # open: any seed
    (tmp_path / "data").mkdir()
    out = tmp_path / "out"
    proc = cli("train", "workload=deepcam", "experiment=mini",
                "system.submission_division=closed", f"data.dir={tmp_path / 'data'}",
                f"output_dir={out}")
    line = one_error_line(proc, "train")  # exit 2, one line, no traceback, no warning
    assert "seed=0: closed DeepCAM requires seed > 0" in line and not out.exists()

