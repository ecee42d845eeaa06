"""Every workload's backend in both frameworks round-trips its state (issue 13): a fresh
backend that loads a checkpoint holds the same weights and takes the same next epoch as
the one that wrote it (CosmoFlow's end-to-end resume is in test_checkpoint.py).

A workload's synthetic timing set is generated once per module and read by both
frameworks' tests: it is input only, never written by a backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sciperf import checkpoint
from sciperf.backends import RunContext, implemented, load_backend
from sciperf.config import compose, keys_with
from sciperf.workloads import WORKLOADS, get


def _backend(framework: str, name: str, root: Path):
    """A mini backend on the workload's bench timing data, 2 steps per epoch."""
    w = get(name)
    base = compose([f"workload={name}", "experiment=mini", f"framework={framework}"])
    n, gbs = w.bench.train["mini"].samples, w.bench.train["mini"].batch
    gbs = max(gbs // 2, 1)
    n = 2 * gbs
    fmt = w.formats[-1]  # the fastest format (the bench's training rows read it)
    folder = w.bench.dataset(root, w.model_spec(base), fmt, w.bench.train["mini"].samples)
    epoch = w.plan.epoch_overrides(n, gbs)  # a workload that draws its samples: 2 steps too
    cfg = compose([f"workload={name}", "experiment=mini", f"framework={framework}",
                   f"data.dir={folder}", f"data.format={fmt}", f"data.train_samples={n}",
                   f"data.eval_samples={gbs}", f"train.global_batch_size={gbs}", *epoch,
                   *(f"{key}=" for key in keys_with("reads", w))])  # from scratch
    backend = load_backend(framework, name)
    backend.setup(RunContext(cfg, w, w.dataset.list_samples(folder, "train", fmt, n),
                             w.dataset.list_samples(folder, "validation", fmt, gbs), gbs))
    return backend, w, cfg


# pairs whose state round trip a test of their own runs through the CLI (each backend
# here compiles its own step: two compiles of TensorFlow's AlphaFold2 take ~3 min)
COVERED_ELSEWHERE = {
    ("tensorflow", "openfold"): "test_e2e_tensorflow.py resumes a run from its checkpoint",
}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """Where the bench datasets are generated (each re-used once complete): one per
    module, so the second framework of a workload finds its set made."""
    return tmp_path_factory.mktemp("bench-data")


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
@pytest.mark.parametrize("name", WORKLOADS)
def test_state_round_trips(data_root: Path, tmp_path: Path, name: str,
                           framework: str) -> None:
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    if name not in implemented(framework):
        pytest.skip(f"{framework} does not implement {name} yet")
    if (framework, name) in COVERED_ELSEWHERE:
        pytest.skip(COVERED_ELSEWHERE[framework, name])
    root = data_root
    a, w, cfg = _backend(framework, name, root)
    a.train_epoch(0, w.lr_for_epoch(cfg, 0))
    path = checkpoint.write(tmp_path / "out", 1, a, {"epochs": 1, "history": []}, None, 2)
    b, _, _ = _backend(framework, name, root)
    before = b.export_weights()
    b.load_state(path)
    wa, wb = a.export_weights(), b.export_weights()
    assert any(not np.array_equal(before[k], wa[k]) for k in wa)  # a trained: not a no-op
    for key in wa:
        np.testing.assert_array_equal(wb[key], wa[key], err_msg=key)
    la = a.train_epoch(1, w.lr_for_epoch(cfg, 1)).loss
    lb = b.train_epoch(1, w.lr_for_epoch(cfg, 1)).loss
    assert lb == pytest.approx(la, rel=1e-5)  # optimizer moments and step restored too
    wa, wb = a.export_weights(), b.export_weights()
    for key in wa:
        np.testing.assert_allclose(wb[key], wa[key], rtol=1e-5, atol=1e-7, err_msg=key)
