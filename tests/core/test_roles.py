"""Config field roles (sciperf.roles): one declaration per key feeds the init-file check, the
container binds, the same-config/resume check and the bench's refusals."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from sciperf import checkpoint
from sciperf.config import compose, config_hash, hashed_config, key_roles, keys_with
from sciperf.workloads import WORKLOADS, get


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_declared_key_is_a_key_of_the_run_config(name: str) -> None:
    cfg = compose([f"workload={name}"])
    roles = key_roles(get(name))
    assert roles, "no role declared at all"
    for key in roles:
        assert OmegaConf.select(cfg, key, default="<absent>") != "<absent>", key


@pytest.mark.parametrize(("key", "value"), [("train.max_epochs", "7"), ("framework.threads", "1"),
                                            ("data.workers", "5"), ("train.resume", "auto")])
def test_a_local_key_may_change_on_resume_and_across_ranks(key: str, value: str) -> None:
    base = compose(["workload=cosmoflow"])
    other = compose(["workload=cosmoflow", f"{key}={value}"])
    assert key in checkpoint.not_training(base)
    assert checkpoint.resume_hash(base) == checkpoint.resume_hash(other)
    assert config_hash(base) != config_hash(other)  # still part of what the summary names


@pytest.mark.parametrize(("key", "value"), [("opt.base_lr", "0.5"), ("seed", "3"),
                                            ("train.global_batch_size", "8")])
def test_a_training_key_must_agree(key: str, value: str) -> None:
    base = compose(["workload=cosmoflow"])
    assert key not in checkpoint.not_training(base)
    assert checkpoint.resume_hash(base) != checkpoint.resume_hash(
        compose(["workload=cosmoflow", f"{key}={value}"]))


def test_places_are_never_part_of_the_experiment() -> None:
    places = keys_with("place", get("cosmoflow"))
    assert set(places) >= {"output_dir", "data.dir", "data.stage_dir"}
    moved = compose(["workload=cosmoflow", "data.dir=/elsewhere", "output_dir=/o2",
                     "data.stage_dir=/tmp/s"])
    assert config_hash(moved) == config_hash(compose(["workload=cosmoflow"]))
    assert "dir" not in hashed_config(moved)["data"]


def test_a_workload_declares_roles_of_its_own_keys() -> None:
    """OpenFold's reference checkpoint is a file the run reads, and its cycle length a key
    the bench sets; CosmoFlow has neither key."""
    openfold, cosmoflow = key_roles(get("openfold")), key_roles(get("cosmoflow"))
    assert openfold["train.init_checkpoint"].reads and "prepare" in \
        openfold["train.init_checkpoint"].hint
    assert "bench.samples" in openfold["train.val_every_iters"].bench
    assert "train.init_checkpoint" not in cosmoflow
    assert set(keys_with("reads", get("cosmoflow"))) == {"train.init_weights"}
