"""A run's identity holds the content of the files it reads, not their paths (issue 37).

The OpenFold mini starts from ``train.init_checkpoint: ${data.dir}/pretrained.pt``: the
resolved path was part of the experiment's hash, so the same dataset moved, or bound at
another path (``apptainer exec --bind DATA:/data:ro``), made a requeued run's resume
refused. The same file elsewhere is the same experiment; another file is not, wherever it
is. The shared ``train.init_weights`` (a file the run reads too) follows the same rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sciperf import checkpoint
from sciperf.config import compose, config_hash
from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError
from sciperf.run.resume import resume_point
from sciperf.run.summary import json_safe

PRETRAINED = "pretrained.pt"


def _dataset(folder: Path, content: bytes) -> Path:
    """A data folder holding only the mini's starting checkpoint (the identity reads no
    other file of it)."""
    folder.mkdir(parents=True)
    (folder / PRETRAINED).write_bytes(content)
    return folder


def _mini(data: Path, *extra: str) -> Any:
    return compose(["workload=openfold", "experiment=mini", f"data.dir={data}",
                    "train.resume=auto", *extra])


class _Backend:
    """What checkpoint.write asks of a backend: its state saved into a folder."""

    def save_state(self, folder: Path) -> None:
        (folder / "state.bin").write_bytes(b"weights")


def _checkpointed(cfg: Any, out: Path) -> None:
    """A checkpoint after epoch 1 of the run `cfg`, its driver.json as the driver writes it."""
    driver = {"epochs": 1, "history": [], "train_samples_seen": 4, "train_seconds": 1.0,
              "metric": None, "run_start": 0.0, "resumed": [], "epoch_progress": None,
              "config_hash": checkpoint.resume_hash(cfg), "world": 1,
              "config": checkpoint.resume_config(cfg), "workload": "openfold",
              "framework": "pytorch"}
    checkpoint.write(out, 1, _Backend(), json_safe(driver), None, 2)


def test_the_same_starting_checkpoint_at_another_path_is_the_same_experiment(
        tmp_path: Path) -> None:
    first = _dataset(tmp_path / "scratch" / "openfold", b"the pre-trained weights")
    bound = _dataset(tmp_path / "data", b"the pre-trained weights")
    assert config_hash(_mini(bound)) == config_hash(_mini(first))
    assert checkpoint.resume_hash(_mini(bound)) == checkpoint.resume_hash(_mini(first))
    identity = checkpoint.resume_config(_mini(first))["train"]["init_checkpoint"]
    assert identity.startswith("sha256:") and str(first) not in identity


def test_another_starting_checkpoint_is_another_experiment(tmp_path: Path) -> None:
    first = _dataset(tmp_path / "a", b"the pre-trained weights")
    other = _dataset(tmp_path / "b", b"other weights")
    assert config_hash(_mini(other)) != config_hash(_mini(first))
    replaced = _mini(first)
    before = config_hash(replaced)
    (first / PRETRAINED).write_bytes(b"weights pre-trained again, at the same path")
    assert config_hash(replaced) != before


def test_a_resume_finds_its_run_with_the_dataset_bound_elsewhere(tmp_path: Path) -> None:
    """The requeued job of a container run: the checkpoint was taken with the data at one
    path, the resume sees it at another."""
    out = tmp_path / "run"
    _checkpointed(_mini(_dataset(tmp_path / "scratch", b"the pre-trained weights")), out)
    bound = _dataset(tmp_path / "data", b"the pre-trained weights")
    found, replace = resume_point(_mini(bound), out, RankInfo())
    assert found is not None and found.epoch == 1 and not replace


def test_a_resume_from_another_starting_checkpoint_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _checkpointed(_mini(_dataset(tmp_path / "scratch", b"the pre-trained weights")), out)
    other = _dataset(tmp_path / "data", b"other weights")
    with pytest.raises(SciperfError) as refused:
        resume_point(_mini(other), out, RankInfo())
    line = str(refused.value)
    assert "\n" not in line and "taken with another configuration" in line
    assert "train.init_checkpoint=sha256:" in line, line


def test_the_shared_init_weights_key_is_its_content_too(tmp_path: Path) -> None:
    """train.init_weights (the canonical .npz any workload may start from): the same
    file's copy elsewhere is the same experiment; no file at all stays as written."""
    weights = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        weights.append(tmp_path / name / "w.npz")
        weights[-1].write_bytes(b"canonical weights")
    hashes = [config_hash(compose(["experiment=mini", f"train.init_weights={w}"]))
              for w in weights]
    assert hashes[0] == hashes[1]
    assert hashes[0] != config_hash(compose(["experiment=mini"]))
