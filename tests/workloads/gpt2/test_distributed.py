"""GPT-2 across ranks and restarts: 2 ranks with the global batch train as 1 rank (torch
DDP over gloo, and Horovod TensorFlow under mpirun), and a run resumed from its cycle-1
checkpoint ends where the uninterrupted run ends — on the mini's prepared token files
with a smaller network, so each run is a few optimizer steps."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runzoo import prepared
from sciperf.weights import load_npz
from testkit import MPI_ROOT_ENV, cli, mllog, sciperf, skip_without_horovod, summary

MINI = ("workload=gpt2", "experiment=mini")
# 1 layer, d 32, context 32 over the mini's 256-token files; 3 optimizer steps a cycle of
# GBS 8: windows 0-7, 8-15, 16-23 of the seeded stream, which the ranks share by stride
SMALL = ("model.n_layer=1", "model.n_head=2", "model.d_model=32", "model.context=32",
         "train.global_batch_size=8", "train.eval_every_steps=3", "train.save_weights=true",
         "precision=fp32", "seed=3", "framework.threads=1")


@pytest.fixture(scope="module")
def tokens(shared_tmp) -> Path:
    return prepared(shared_tmp, *MINI)


def _args(tokens: Path, out: Path, *more: str) -> list[str]:
    return [*MINI, *SMALL, f"data.dir={tokens}", f"output_dir={out}", *more]


def _weights(out: Path, rank: int = 0) -> dict[str, np.ndarray]:
    return load_npz(out / f"weights_rank{rank}.npz")


def _close(a: dict[str, np.ndarray], b: dict[str, np.ndarray], atol: float) -> None:
    assert a.keys() == b.keys() and len(a) > 0
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=atol, err_msg=key)


def _moved(start: dict[str, np.ndarray], end: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(end[k] - start[k]).max()) for k in end)


@pytest.fixture(scope="module")
def one_rank_torch(tokens: Path, tmp_path_factory) -> Path:
    """The one-rank PyTorch run every comparison here starts from (made once)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("gpt2-one") / "torch"
    proc = cli("train", *_args(tokens, out, "train.max_epochs=2", "train.checkpoint_every=1"))
    assert proc.returncode == 0 or (out / "weights_rank0.npz").is_file(), proc.stderr[-2000:]
    assert summary(out)["epochs"] == 2
    return out


@pytest.mark.slow
def test_two_torch_ranks_train_like_one_rank_with_the_global_batch(tokens: Path,
                                                                   one_rank_torch: Path,
                                                                   tmp_path: Path) -> None:
    """Each rank takes every other window of the global stream and its mean token loss;
    DDP's gradient mean is then the global batch's, so both replicas end on the one-rank
    weights (the same number of tokens per window makes the two means equal)."""
    two = tmp_path / "two"
    proc = sciperf("launch", "launcher=local", "launcher.nprocs=2",
                   *_args(tokens, two, "train.max_epochs=2"))
    assert (two / "weights_rank1.npz").is_file(), proc.stderr[-2000:]
    d0, d1, w1 = _weights(two, 0), _weights(two, 1), _weights(one_rank_torch)
    _close(d0, d1, atol=0)  # replicas identical
    _close(d0, w1, atol=2e-5)
    events = {e["key"]: e["value"] for e in mllog(two / "result_0.txt")}
    assert events["global_batch_size"] == 8 and summary(two)["world_size"] == 2
    a, b = summary(one_rank_torch)["history"], summary(two)["history"]
    np.testing.assert_allclose([h["metric"] for h in b], [h["metric"] for h in a], rtol=1e-5)


@pytest.mark.slow
def test_horovod_tensorflow_trains_like_one_rank(tokens: Path, tmp_path: Path) -> None:
    """The same under mpirun with Horovod's TensorFlow all-reduce (2 ranks)."""
    pytest.importorskip("tensorflow")
    skip_without_horovod("horovod.tensorflow")
    one, two = tmp_path / "one", tmp_path / "two"
    tf = ("framework=tensorflow", "train.max_epochs=1")
    proc = cli("train", *_args(tokens, one, *tf))
    assert (one / "weights_rank0.npz").is_file(), proc.stderr[-2000:]
    env = {**os.environ, **MPI_ROOT_ENV}
    proc = subprocess.run(["mpirun", "-np", "2", "--bind-to", "none", "--mca",
                           "mpi_yield_when_idle", "1", str(Path(sys.executable).parent
                                                              / "sciperf"),
                           "train", *_args(tokens, two, *tf, "distributed.backend=horovod")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert (two / "weights_rank1.npz").is_file(), proc.stderr[-2000:]
    h0, h1, w1 = _weights(two, 0), _weights(two, 1), _weights(one)
    _close(h0, h1, atol=0)
    _close(h0, w1, atol=2e-5)


@pytest.mark.slow
def test_resumed_run_ends_where_the_whole_run_ends(tokens: Path, one_rank_torch: Path,
                                                   tmp_path: Path) -> None:
    """Stop after cycle 1, resume to 2: the weights, both cycles' losses and validation
    errors, the AdamW moments and the LR schedule's position come back from the
    checkpoint (a restart from the weights alone would move differently: Adam's first
    steps after a reset are larger)."""
    parts = tmp_path / "parts"
    args = _args(tokens, parts, "train.checkpoint_every=1")
    first = cli("train", *args, "train.max_epochs=1")
    assert summary(parts)["epochs"] == 1, first.stderr[-2000:]
    cycle1 = shutil.copy(parts / "weights_rank0.npz", tmp_path / "cycle1.npz")
    second = cli("train", *args, "train.max_epochs=2", "train.resume=auto")
    assert "resuming from" in second.stdout, second.stderr[-2000:]
    a, b = summary(one_rank_torch), summary(parts)
    assert a["epochs"] == b["epochs"] == 2 and len(b["resumed"]) == 1
    for x, y in zip(a["history"], b["history"], strict=True):
        np.testing.assert_allclose([y["loss"], y["metric"]], [x["loss"], x["metric"]],
                                   rtol=1e-6)
    _close(_weights(parts), _weights(one_rank_torch), atol=1e-7)
    assert _moved(load_npz(cycle1), _weights(parts)) > 1e-4  # cycle 2 trained
    fresh = tmp_path / "fresh"
    cli("train", *_args(tokens, fresh, "train.max_epochs=1", f"train.init_weights={cycle1}"))
    assert _moved(_weights(fresh), _weights(parts)) > 1e-5  # weights alone: elsewhere
    log = [e["key"] for e in mllog(parts / "result_0.txt")]
    assert log.count("run_start") == 1 and log.count("eval_error") == 2

