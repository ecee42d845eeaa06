"""Shared fixtures: repository paths, the real console command, small synthetic datasets."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _passive_openmp_beside_other_workers() -> None:
    """Under pytest-xdist every worker's processes share the cores with the other
    workers': OpenMP threads that spin while they wait (libgomp's default) take the cores
    from the processes that have work, so a threaded run there waits on spinners. Passive
    waiting hands the core back (bench/cpu-2026-11-29-epyc-zen4.md). Pinning each worker
    to its own cores does as well for single-process runs but slows every job of several
    ranks, which then share one core. `OMP_WAIT_POLICY` set by the caller wins."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


_passive_openmp_beside_other_workers()

# The environment TensorFlow must load under (oneDNN on, INFO lines off), as in a run: the
# package sets it, and test modules import tensorflow before it. A PyTorch-only install lacks it.
with contextlib.suppress(ImportError):
    import sciperf_tensorflow  # noqa: F401


@pytest.fixture
def bf16_cpu() -> None:
    """Skips a test that trains in bf16 on this CPU where sciperf refuses bf16 (no bf16
    kernels: emulated, ~25× fp32 — one mini run to target took most of an hour);
    tests/core/test_precision.py and tests/tools/test_bench.py test the refusal everywhere."""
    from sciperf.info import machine

    if not (cpu := machine())["bf16_kernels"]:
        pytest.skip(f"this CPU ({cpu['cpu']}) has no bf16 kernels: precision=bf16 is refused "
                    "here")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout (holds common/, configs/, frameworks/)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def published_results() -> Path:
    """Published MLPerf HPC v3.0 logs beside the checkout (../shared/fixtures/…)."""
    path = REPO_ROOT.parent / "shared" / "fixtures" / "mlperf_hpc_results"
    if not path.is_dir():
        pytest.skip(f"published MLPerf HPC result logs not found at {path}")
    return path


@pytest.fixture(scope="session")
def sciperf_cmd() -> list[str]:
    """The installed `sciperf` console script (the one users run), or `python -m` fallback."""
    beside = Path(sys.executable).with_name("sciperf")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("sciperf")
    return [found] if found else [sys.executable, "-m", "sciperf.cli"]


@pytest.fixture(scope="session")
def shared_tmp(tmp_path_factory) -> Path:
    """One folder for the whole session, every xdist worker included (tests/runzoo.py)."""
    from runzoo import shared_root
    return shared_root(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def tiny_mini_data(shared_tmp) -> Path:
    """64 + 32 mini universes (npy), prepared once per session by the real command."""
    from runzoo import prepared
    return prepared(shared_tmp, "experiment=mini", "data.train_samples=64",
                    "data.eval_samples=32")


@pytest.fixture(scope="session")
def cosmoflow_mini_data(shared_tmp) -> Path:
    """The whole CosmoFlow mini set (1536 + 128 universes), prepared once per session for
    every end-to-end run to target, in either framework (read only)."""
    from runzoo import prepared
    return prepared(shared_tmp, "workload=cosmoflow", "experiment=mini")


@pytest.fixture(scope="session")
def run_zoo(shared_tmp, tiny_mini_data):
    """Runs on `tiny_mini_data`, each trained once per session (tests/runzoo.py)."""
    from runzoo import RunZoo
    return RunZoo(shared_tmp, tiny_mini_data)


DALI_MISSING = "nvidia-dali-cuda120 not installed (containers/install.sh --dali)"


@pytest.fixture(scope="session")
def torch_dali():
    """sciperf_pytorch.dali, or a skip naming what is missing."""
    pytest.importorskip("torch")
    from sciperf.data import dali
    if not dali.available():
        pytest.skip(DALI_MISSING)
    from sciperf_pytorch import dali as pt_dali

    return pt_dali


@pytest.fixture(scope="session")
def tf_dali():
    """sciperf_tensorflow.dali (needs DALI's TensorFlow plugin), or a skip naming why not."""
    pytest.importorskip("tensorflow")
    from sciperf.data import dali
    if not dali.available():
        pytest.skip(DALI_MISSING)
    try:
        import nvidia.dali.plugin.tf  # noqa: F401
    except (ImportError, RuntimeError) as exc:
        pytest.skip(f"nvidia-dali-tf-plugin-cuda120 not usable: {str(exc).splitlines()[0]}")
    from sciperf_tensorflow import dali as tf_dali

    return tf_dali


def _epoch_records(log: Path, key: str) -> list[int]:
    """epoch_num of every `key` record of an MLLOG file being written (empty before its
    first record; a half-written last line is skipped by the project's reader)."""
    from sciperf.errors import SciperfError
    from sciperf.results.logs import parse_log

    try:
        return [e.metadata.get("epoch_num") for e in parse_log(log).all(key)]
    except SciperfError:  # not there yet, or no complete record yet
        return []


def _stopped(pid: int) -> bool:
    """Whether every thread of process `pid` has stopped: a signal sent before that may
    already be taken by a thread still running (gone from the pending set, handled)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue  # the thread ended
    return all(state in "tT" for state in states)


def _pending(pid: int, sig: int) -> bool:
    """Whether `sig` waits, undelivered, at process `pid` (it is stopped)."""
    status = Path(f"/proc/{pid}/status").read_text()
    masks = [int(ln.split()[1], 16) for ln in status.splitlines()
             if ln.startswith(("SigPnd:", "ShdPnd:"))]
    return any(m & (1 << (sig - 1)) for m in masks)


def _stop_inside_epoch(log: Path, pids: list[int], epoch: int, send, sig: int,
                       timeout: float = 600.0) -> None:
    """Signal a run while it is inside `epoch`, deterministically.

    A mini epoch lasts ~0.15 s (5–20 ms steps), shorter than polling plus a signal's way
    through Slurm: the ranks (`pids`) are frozen (SIGSTOP) the moment the epoch's
    epoch_start is logged, `send()` sends `sig` (directly, or through scancel), it waits
    pending at every rank, then SIGCONT delivers it — the run meets it at its next
    optimizer step, inside that epoch."""
    import signal
    import time

    deadline = time.time() + timeout
    while epoch not in _epoch_records(log, "epoch_start"):
        if time.time() > deadline:
            pytest.fail(f"timed out waiting for epoch {epoch} in {log}")
        time.sleep(0.002)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        while not all(_stopped(pid) for pid in pids):
            if time.time() > deadline:
                pytest.fail(f"the ranks {pids} never stopped")
            time.sleep(0.001)
        if epoch in _epoch_records(log, "epoch_stop"):
            pytest.fail(f"epoch {epoch} ended before the ranks could be frozen")
        send()
        wait = time.time() + 60
        while not all(_pending(pid, sig) for pid in pids):
            if time.time() > wait:
                states = {pid: [ln for ln in Path(f"/proc/{pid}/status").read_text()
                                .splitlines() if ln.startswith(("State", "Sig", "Shd"))]
                          for pid in pids}
                pytest.fail(f"signal {sig} never reached the frozen ranks {states}")
            time.sleep(0.01)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


@pytest.fixture
def stop_inside_epoch():
    """See :func:`_stop_inside_epoch`."""
    return _stop_inside_epoch
