"""CosmoFlow LR schedule and the MLLOG hyper-parameters derived from it (the reference's
schedule)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sciperf.config import compose
from sciperf.schedules import epoch_warmup_step_lr, scaled_peak_lr
from sciperf.workloads import get
from sciperf.workloads.cosmoflow import spec as cosmo

BASE, PEAK, WARMUP = 0.001, 0.008, 4
BOUNDARIES, FACTORS = [32, 64], [0.25, 0.125]

# Hand-computed for base 0.001, GBS 512 / base batch 64 → peak 0.008, warmup 4 epochs:
# warmup e < 4: 0.001 + e·0.007/4; then peak × factor of the latest boundary b with b < e.
EXPECTED = {
    0: 0.001,
    1: 0.00275,
    2: 0.0045,
    3: 0.00625,
    4: 0.008,
    31: 0.008,
    32: 0.008,  # boundary 32 is not < 32 yet
    33: 0.002,  # 0.008 × 0.25
    64: 0.002,  # boundary 64 is not < 64 yet; factors are absolute
    65: 0.001,  # 0.008 × 0.125, not 0.008 × 0.25 × 0.125
}


@pytest.mark.parametrize(("epoch", "lr"), sorted(EXPECTED.items()))
def test_epoch_warmup_step_lr_hand_computed(epoch: int, lr: float) -> None:
    got = epoch_warmup_step_lr(epoch, BASE, PEAK, WARMUP, BOUNDARIES, FACTORS)
    assert got == pytest.approx(lr, rel=1e-12, abs=1e-15)


def test_epoch_warmup_step_lr_unsorted_boundaries() -> None:
    for epoch, lr in EXPECTED.items():
        got = epoch_warmup_step_lr(epoch, BASE, PEAK, WARMUP, BOUNDARIES[::-1], FACTORS[::-1])
        assert got == pytest.approx(lr, rel=1e-12)


def test_epoch_warmup_step_lr_warmup_is_linear_and_monotone() -> None:
    lrs = [epoch_warmup_step_lr(e, BASE, PEAK, WARMUP, BOUNDARIES, FACTORS)
           for e in range(WARMUP + 1)]
    steps = [b - a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert all(s == pytest.approx((PEAK - BASE) / WARMUP) for s in steps)


def test_epoch_warmup_step_lr_no_warmup_no_decay() -> None:
    assert epoch_warmup_step_lr(0, BASE, PEAK, 0, [], []) == PEAK
    assert epoch_warmup_step_lr(1000, BASE, PEAK, 0, [], []) == PEAK


def test_epoch_warmup_step_lr_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="decay_boundaries"):
        epoch_warmup_step_lr(5, BASE, PEAK, WARMUP, [32, 64], [0.25])


@pytest.mark.parametrize(("gbs", "scaling", "peak"), [
    (512, "linear", 0.008),
    (64, "linear", 0.001),
    (32, "linear", 0.0005),
    (256, "sqrt", 0.002),   # 0.001 · √4
    (512, "sqrt", 0.001 * math.sqrt(8)),
    (512, "none", 0.001),
])
def test_scaled_peak_lr(gbs: int, scaling: str, peak: float) -> None:
    assert scaled_peak_lr(BASE, gbs, 64, scaling) == pytest.approx(peak, rel=1e-12)


def test_scaled_peak_lr_default_is_linear() -> None:
    assert scaled_peak_lr(BASE, 512, 64) == pytest.approx(0.008)


def test_scaled_peak_lr_unknown_scaling() -> None:
    with pytest.raises(ValueError, match="opt.scaling=cubic"):
        scaled_peak_lr(BASE, 512, 64, "cubic")


# --- through the composed config ------------------------------------------------------

@pytest.fixture(scope="module")
def full_512():
    return compose(["experiment=full", "train.global_batch_size=512"])


def test_lr_for_epoch_uses_the_reference_defaults(full_512) -> None:
    assert cosmo.peak_lr(full_512) == pytest.approx(PEAK)
    for epoch, lr in EXPECTED.items():
        assert get("cosmoflow").lr_for_epoch(full_512, epoch) == pytest.approx(lr, rel=1e-12)


def test_mllog_hyperparameters_values(full_512) -> None:
    hp = cosmo.mllog_hyperparameters(full_512, train_samples=1024, eval_samples=256)
    assert hp == {
        "global_batch_size": 512,
        "train_samples": 1024,
        "eval_samples": 256,
        "opt_name": "sgd",
        "opt_base_learning_rate": pytest.approx(PEAK),
        "opt_learning_rate_warmup_epochs": 4,
        "opt_learning_rate_warmup_factor": pytest.approx(8.0),
        "opt_learning_rate_decay_boundary_epochs": [32, 64],
        "opt_learning_rate_decay_factor": [0.25, 0.125],
        "dropout": 0.5,
        "opt_weight_decay": 0.0,
    }
    # Plain JSON values (OmegaConf containers would not serialise in the MLLOG line).
    assert json.loads(json.dumps(hp)) == hp
    assert type(hp["opt_learning_rate_decay_boundary_epochs"]) is list


def test_mllog_warmup_factor_follows_the_scaling() -> None:
    cfg = compose(["experiment=full", "train.global_batch_size=256"])
    hp = cosmo.mllog_hyperparameters(cfg, 512, 128)
    assert hp["opt_base_learning_rate"] == pytest.approx(0.004)
    assert hp["opt_learning_rate_warmup_factor"] == pytest.approx(4.0)


def _published_values(path: Path) -> dict:
    values = {}
    for line in path.read_text().splitlines():
        if line.startswith(":::MLLOG"):
            rec = json.loads(line[len(":::MLLOG"):])
            values.setdefault(rec["key"], rec["value"])
    return values


def test_mllog_hyperparameters_match_a_published_reference_log(published_results: Path,
                                                                full_512) -> None:
    """The HPE+LBNL v3.0 CosmoFlow logs ran the reference schedule at GBS 512."""
    logs = sorted(published_results.glob("v3.0/HPE+LBNL/results/*/*/cosmoflow/result_*.txt"))
    if not logs:
        pytest.skip("no HPE+LBNL CosmoFlow log in the published results")
    published = _published_values(logs[0])
    assert published["global_batch_size"] == 512
    ours = cosmo.mllog_hyperparameters(full_512, 0, 0)
    for key in ("global_batch_size", "opt_name", "opt_base_learning_rate",
                "opt_learning_rate_warmup_epochs", "opt_learning_rate_warmup_factor",
                "opt_learning_rate_decay_boundary_epochs", "opt_learning_rate_decay_factor",
                "dropout", "opt_weight_decay"):
        if isinstance(ours[key], float):
            assert ours[key] == pytest.approx(published[key]), key
        else:
            assert ours[key] == published[key], key
