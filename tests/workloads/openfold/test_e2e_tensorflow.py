"""OpenFold in TensorFlow end to end through real processes, against the PyTorch runs it
mirrors: from the same starting weights (a canonical ``.npz``), the same chains and
recycling counts, dropout off, the two frameworks' training losses and validation lDDT-Cα
agree cycle for cycle; the log passes the official open rules but the 0.8 threshold;
a run resumed from its cycle-1 checkpoint ends where the uninterrupted run ends; two
Horovod ranks with one chain each end where one rank with both ends.

One TensorFlow run (``whole``: two cycles, a checkpoint after each), made once per session
for every xdist worker, serves every comparison: its compiled step costs about a minute on
two CPU cores.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from workloads.openfold.test_e2e import (  # noqa: E402
    MPI_ENV,
    NO_DROPOUT,
    RUN,
    SMALL,
    UNREACHED,
    _horovod_ready,
    _rules_with_target,
    checker,
    sciperf,
    summary,
    weights,
)

from runzoo import made_once, prepared  # noqa: E402
from sciperf import weights as weight_files  # noqa: E402
from sciperf.data.pickles import load_torch_file  # noqa: E402
from sciperf.results.check import check_log  # noqa: E402
from sciperf.workloads.openfold.sizes import mini_spec  # noqa: E402
from testkit import mllog  # noqa: E402

TF = ["framework=tensorflow"]
TWO = [*RUN[:-1], "train.max_epochs=2", *NO_DROPOUT, UNREACHED, "train.save_weights=true",
       "train.checkpoint_every=1"]
# fp32, 4 Adam steps from the same weights: PyTorch and TensorFlow differ by summation
# order only (the float64 parity of one step is test_model_tensorflow's)
LOSS_RTOL, LDDT_ATOL = 1e-5, 1e-4
RANK_ATOL = 1e-5  # one rank's batch of 2 against two ranks' mean: summation order


@pytest.fixture(scope="module")
def proteins(shared_tmp) -> Path:
    return prepared(shared_tmp, *SMALL)


@pytest.fixture(scope="module")
def start(shared_tmp) -> Path:
    """Starting weights both frameworks read: a seeded PyTorch mini's, canonical .npz."""
    from sciperf_pytorch import weights as torch_weights
    from sciperf_pytorch.workloads.openfold.model import AlphaFold

    def make(folder: Path) -> None:
        torch.manual_seed(3)
        model = AlphaFold(mini_spec(), checkpointing=False)
        weight_files.save_npz(folder / "start.npz", torch_weights.export_weights(model))
    return made_once(shared_tmp, "openfold-tf-start", make) / "start.npz"


def _train(proteins: Path, start: Path, out: Path, *extra: str, prefix=None, env=None):
    proc = sciperf("train", *SMALL, *TWO, f"train.init_weights={start}",
                   f"data.dir={proteins}", f"output_dir={out}", *extra, check=False,
                   prefix=prefix, env=env)
    assert (out / "summary.json").is_file(), proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def whole(proteins: Path, start: Path, shared_tmp) -> Path:
    """The TensorFlow run every test reads, trained once per session (every xdist worker
    that runs a test of this module reads the same one)."""
    return made_once(shared_tmp, "openfold-tf-whole",
                     lambda folder: _train(proteins, start, folder / "run", *TF)) / "run"


def _reference_weights(out: Path, epoch: int) -> dict[str, np.ndarray]:
    """The weights a checkpoint's state.pt (the reference's format) holds."""
    state = load_torch_file(out / "checkpoints" / f"epoch_{epoch:04d}" / "state.pt")
    return dict(state["alphafold_state_dict"])


@pytest.mark.slow
def test_tensorflow_trains_as_pytorch_from_the_same_weights(proteins, start, whole,
                                                            tmp_path: Path) -> None:
    pt = tmp_path / "pytorch"
    _train(proteins, start, pt)
    a, b = summary(pt), summary(whole)
    assert (a["framework"], b["framework"]) == ("pytorch", "tensorflow")
    assert a["epochs"] == b["epochs"] == 2 and b["parameter_count"] == 199_226
    for x, y in zip(a["history"], b["history"], strict=True):
        assert y["loss"] == pytest.approx(x["loss"], rel=LOSS_RTOL)
        assert y["metric"] == pytest.approx(x["metric"], abs=LDDT_ATOL)
    assert a["history"][0]["loss"] != a["history"][1]["loss"]  # it trained


@pytest.mark.slow
def test_the_log_passes_the_open_rules_but_the_threshold(whole, tmp_path: Path) -> None:
    """open_openfold.yaml wants an eval_accuracy ≥ 0.8: the official rules fail that check
    and no other; with only that threshold lowered the log passes."""
    log = whole / "result_0.txt"
    values = {e["key"]: e["value"] for e in mllog(log)}
    assert values["submission_benchmark"] == "openfold"
    assert values["submission_division"] == "open"
    verdict = check_log(log)
    assert (verdict.ok, verdict.division, verdict.benchmark) == (False, "open", "openfold")
    passed, found = checker(log)
    assert not passed and len(found) == 1 and ">= 0.8" in found[0], found
    passed, found = checker(log, _rules_with_target(tmp_path, 0.0))
    assert passed and not found, found


@pytest.mark.slow
def test_a_resumed_run_ends_where_the_whole_run_ends(proteins, start, whole,
                                                     tmp_path: Path) -> None:
    """The whole run's output with its cycle-2 checkpoint and results removed, resumed:
    cycle 2 retrains from cycle 1's state.npz (weights, Adam, the EMA, the step counter
    that seeds the recycling draw) to the same weights and loss."""
    parts = tmp_path / "parts"
    shutil.copytree(whole, parts)
    shutil.rmtree(parts / "checkpoints" / "epoch_0002")
    for name in ("summary.json", "weights_rank0.npz"):
        (parts / name).unlink()
    proc = _train(proteins, start, parts, *TF, "train.resume=auto")
    assert "resuming from" in proc.stdout, proc.stderr[-3000:]
    a, b = summary(whole), summary(parts)
    np.testing.assert_allclose(b["history"][1]["loss"], a["history"][1]["loss"], rtol=1e-6)
    wa, wb = weights(whole / "weights_rank0.npz"), weights(parts / "weights_rank0.npz")
    assert wa.keys() == wb.keys()
    for key in wa:
        np.testing.assert_allclose(wb[key], wa[key], rtol=0, atol=1e-7, err_msg=key)


@pytest.mark.slow
def test_two_horovod_ranks_end_where_one_rank_ends(proteins, start, whole,
                                                  tmp_path: Path) -> None:
    """Two ranks × one chain under mpirun (Horovod TensorFlow), one cycle: both replicas
    hold the one-rank run's cycle-1 weights."""
    reason = _horovod_ready()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "two"
    _train(proteins, start, out, *TF, "train.max_epochs=1", "distributed.backend=horovod",
           prefix=["mpirun", "-np", "2", "--bind-to", "none"], env=MPI_ENV)
    assert summary(out)["world_size"] == 2
    one, two = _reference_weights(whole, 1), _reference_weights(out, 1)
    assert one.keys() == two.keys()
    for key in one:
        np.testing.assert_allclose(two[key], one[key], rtol=0, atol=RANK_ATOL, err_msg=key)
    r0, r1 = weights(out / "weights_rank0.npz"), weights(out / "weights_rank1.npz")
    for key in r0:
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)
