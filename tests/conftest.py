"""Shared fixtures: repository paths, the real console command, small synthetic datasets."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


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
def tiny_mini_data(tmp_path_factory, sciperf_cmd) -> Path:
    """64 + 32 mini universes (npy), prepared once per session by the real command."""
    import subprocess

    root = tmp_path_factory.mktemp("tiny-mini-data")
    subprocess.run([*sciperf_cmd, "prepare", "experiment=mini", f"data.dir={root}",
                    "data.train_samples=64", "data.eval_samples=32"],
                   check=True, capture_output=True)
    return root


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
