"""`sciperf info`: what is installed, so results and images say what ran."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sciperf import __version__
from sciperf.backends import available, load_backend
from sciperf.bench import machine
from sciperf.errors import SciperfError

PACKAGES = ("numpy", "h5py", "hydra-core", "mlperf-logging", "torch", "tensorflow-cpu",
            "tensorflow", "horovod", "nvidia-dali-cuda120", "mpi4py")


def git_hash() -> str | None:
    """Commit of the checkout sciperf runs from (None outside a git tree)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, check=False, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def info() -> dict[str, Any]:
    """sciperf + package versions, each installed backend's own report, and the machine."""
    pkgs = {}
    for name in PACKAGES:
        try:
            pkgs[name] = version(name)
        except PackageNotFoundError:
            continue
    backends: dict[str, Any] = {}
    for name in sorted(available()):
        try:
            backends[name] = load_backend(name).info()
        except SciperfError as exc:
            backends[name] = {"error": str(exc)}
    return {"sciperf": __version__, "git": git_hash(), "python": platform.python_version(),
            "packages": pkgs, "backends": backends, "machine": machine()}
