"""Write the version record of a container image (run once, as the last build step).

    python containers/image_versions.py --framework tensorflow --flavor cpu \
        --base-image debian:12.11-slim --git <hash> --out /etc/sciperf/image.json

Inside an image there is no git checkout and CUDA/NCCL/MPI are facts of the base image, so
the build records them once; `sciperf info` reads the file back (sciperf.info.image_info)
and `containers/image.sh build` copies it into the image label `org.sciperf.image-info`.
Versions come from package metadata, the NGC images' own environment variables
(CUDA_VERSION, NCCL_VERSION, …) and the installed framework's build info; what an image
lacks is recorded as null rather than guessed. Stdlib only: it runs before anything is
known to work.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Framework -> the distributions that may provide it (CPU wheel, GPU wheel, NGC build).
FRAMEWORK_DISTS = {"pytorch": ("torch",), "tensorflow": ("tensorflow-cpu", "tensorflow")}
#: Variables in which NGC images state their component versions.
BASE_ENV = ("NVIDIA_PYTORCH_VERSION", "NVIDIA_TENSORFLOW_VERSION", "CUDA_VERSION",
            "CUDNN_VERSION", "NCCL_VERSION", "OPENMPI_VERSION", "HPCX_VERSION", "UCX_VERSION",
            "DALI_VERSION")


def dist_version(*names: str) -> str | None:
    """Version of the first installed distribution among `names`."""
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def _framework_build(framework: str) -> dict[str, str | None]:
    """CUDA/cuDNN/NCCL the framework was built with (None for CPU builds or when unknown).

    Imported in a child process so a broken framework install is reported, not fatal.
    """
    probes = {
        "pytorch": "import torch, json; nccl = None\n"
                   "try:\n    nccl = '.'.join(map(str, torch.cuda.nccl.version()))\n"
                   "except Exception:\n    pass\n"
                   "print(json.dumps({'cuda': torch.version.cuda, 'nccl': nccl, "
                   "'cudnn': str(torch.backends.cudnn.version() or '') or None}))",
        "tensorflow": "import json, tensorflow as tf; b = tf.sysconfig.get_build_info()\n"
                      "print(json.dumps({'cuda': b.get('cuda_version'), 'nccl': None, "
                      "'cudnn': b.get('cudnn_version')}))",
    }
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    try:
        out = subprocess.run([sys.executable, "-c", probes[framework]], capture_output=True,
                             text=True, check=False, timeout=300, env=env)
        found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        found = {}
    return {k: (str(v) if v else None) for k, v in found.items()}


def mpi_version() -> str | None:
    """`mpirun --version`, first line condensed (e.g. 'Open MPI 4.1.7'); None without MPI."""
    if shutil.which("mpirun") is None:
        return None
    try:
        out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True,
                             check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    first = (out.stdout or out.stderr).strip().splitlines()[:1]
    if not first:
        return None
    match = re.search(r"\(([^)]+)\)\s+(\S+)", first[0])  # "mpirun (Open MPI) 4.1.4"
    return f"{match.group(1)} {match.group(2)}" if match else first[0]


def collect(framework: str, flavor: str, base_image: str, git: str) -> dict[str, Any]:
    """The whole record: what the image is, what it was built from, what it contains."""
    build = _framework_build(framework)
    env = os.environ
    versions = {
        "python": platform.python_version(),
        "sciperf": dist_version("sciperf"),
        framework: dist_version(*FRAMEWORK_DISTS[framework]),
        # What the framework itself was built with and loads (a pip CUDA build brings its
        # own CUDA/NCCL wheels); the NGC base's variables only where the framework is silent.
        "cuda": build.get("cuda") or env.get("CUDA_VERSION"),
        "cudnn": build.get("cudnn") or env.get("CUDNN_VERSION"),
        "nccl": build.get("nccl") or dist_version("nvidia-nccl-cu12") or env.get("NCCL_VERSION"),
        "mpi": mpi_version(),
        "dali": dist_version("nvidia-dali-cuda120", "nvidia-dali-cuda110") or env.get(
            "DALI_VERSION"),
        "horovod": dist_version("horovod"),
    }
    install_sh = HERE / "install.sh"
    return {
        "image": f"sciperf-{framework}:{flavor}",
        "framework": framework,
        "flavor": flavor,
        "base_image": base_image,
        "sciperf_git": git,
        "install_script_sha256": hashlib.sha256(install_sh.read_bytes()).hexdigest()
        if install_sh.is_file() else None,
        "built": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "versions": versions,
        # The base image's own component versions, as its environment states them (NGC).
        "base_versions": {k: env[k] for k in BASE_ENV if env.get(k)},
    }


def main(argv: list[str] | None = None) -> int:
    """Write the record as JSON; a framework that is not installed is a build error."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", required=True, choices=sorted(FRAMEWORK_DISTS))
    p.add_argument("--flavor", required=True, choices=("cpu", "gpu"))
    p.add_argument("--base-image", required=True)
    p.add_argument("--git", default="unknown")
    p.add_argument("--out", type=Path, help="file to write (default: stdout)")
    args = p.parse_args(argv)
    record = collect(args.framework, args.flavor, args.base_image, args.git)
    if record["versions"][args.framework] is None:
        print(f"image_versions: framework {args.framework} is not installed in "
              f"{sys.prefix}", file=sys.stderr)
        return 2
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
