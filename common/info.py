"""`sciperf info`: what is installed, so results and images say what ran."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sciperf import __version__, jsondata
from sciperf.backends import available, load_registry
from sciperf.errors import SciperfError

#: Where a container image records what it was built from (containers/image_versions.py
#: writes it at build time); $SCIPERF_IMAGE_INFO points elsewhere (tests, unusual layouts).
IMAGE_INFO_PATH = Path("/etc/sciperf/image.json")
IMAGE_INFO_ENV = "SCIPERF_IMAGE_INFO"

PACKAGES = ("numpy", "h5py", "hydra-core", "mlperf-logging", "torch", "tensorflow-cpu",
            "tensorflow", "horovod", "nvidia-dali-cuda120", "mpi4py")


@functools.cache
def git_hash() -> str | None:
    """Commit of the checkout sciperf runs from (None outside a git tree)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, check=False, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def image_info() -> dict[str, Any] | None:
    """The version record baked into a sciperf container image, or None outside an image.

    Inside an image there is no git checkout, and CUDA/NCCL/MPI versions are facts of the
    base image: the record written at build time is what lets a result say what ran. A
    file named by $SCIPERF_IMAGE_INFO must exist; the default path may be absent.
    """
    env = os.environ.get(IMAGE_INFO_ENV)
    path = Path(env) if env else IMAGE_INFO_PATH
    if not path.is_file():
        if env:
            raise SciperfError(f"{IMAGE_INFO_ENV}={env}: no such image info file")
        return None
    try:
        record = jsondata.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SciperfError(f"{path}: unreadable image info ({exc})") from None
    if not isinstance(record, dict):
        raise SciperfError(f"{path}: image info is not a JSON object")
    return record


def info() -> dict[str, Any]:
    """sciperf + package versions, each installed backend's own report, the image's baked-in
    version record (None outside an image) and the machine."""
    pkgs = {}
    for name in PACKAGES:
        try:
            pkgs[name] = version(name)
        except PackageNotFoundError:
            continue
    backends: dict[str, Any] = {}
    for name in sorted(available()):
        try:
            backends[name] = load_registry(name).versions()
        except SciperfError as exc:
            backends[name] = {"error": str(exc)}
    return {"sciperf": __version__, "git": git_hash(), "python": platform.python_version(),
            "packages": pkgs, "backends": backends, "image": image_info(),
            "machine": machine()}


def machine() -> dict[str, Any]:
    """CPU model, cores and ISA flags relevant to bf16 (AMX/AVX-512), and whether oneDNN has
    bf16 kernels for it."""
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "host": platform.node(),
            "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "bf16_kernels": bf16_kernels(flags)}


# oneDNN (both frameworks' CPU kernels) computes bf16 with AMX, AVX-512 BF16, AVX-NE-CONVERT or,
# converting in registers, any AVX-512 core (avx512f/bw/vl/dq: a Xeon without AMX ran bf16 at
# 0.54× fp32). Below that, on AVX2 CPUs, neither framework has a bf16 kernel to call.
AVX512_CORE = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


def bf16_kernels(flags: set[str]) -> bool:
    """Whether an x86 CPU with these /proc/cpuinfo flags has oneDNN bf16 kernels; other
    architectures (no x86 flags to judge by) are taken to have them.

    Without them bf16 is emulated: a 3-D convolution's forward + backward took 25× its fp32
    time in PyTorch on an AVX2 AMD EPYC (Zen 3), and TensorFlow has no dilated bf16
    gradient kernel at all there."""
    if "sse2" not in flags:
        return True
    return flags >= AVX512_CORE or bool({"amx_bf16", "avx512_bf16", "avx_ne_convert"} & flags)
