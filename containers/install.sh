#!/usr/bin/env bash
# The ONE install script: used by `make run`, `make test`, CI and the container images.
#
#   containers/install.sh [--venv DIR] [--frameworks pytorch,tensorflow] [--dev] [--system]
#
# --venv DIR     create/update a virtual environment there (default .venv)
# --system       install into the current interpreter instead (images)
# --frameworks   which backends to install beside `sciperf` (default: pytorch)
# --dev          also the test/lint tools
# --horovod      also Horovod 0.28.1 (built once from source, wheel cached by versions)
# --dali         also NVIDIA DALI (+ its TensorFlow plugin, compiled against the installed TF)
# --mpi          also OpenMPI from Debian (mpirun; Horovod's MPI controller), when root
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
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv="$2"; shift 2 ;;
    --frameworks) frameworks="$2"; shift 2 ;;
    --dev) dev=1; shift ;;
    --system) system=1; shift ;;
    --horovod) horovod=1; shift ;;
    --mpi) mpi=1; shift ;;
    --dali) dali=1; shift ;;
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

pkgs=(-e "$here/common" -e "$here/launchers")
IFS=',' read -ra fws <<< "$frameworks"
for fw in "${fws[@]}"; do
  [ -d "$here/frameworks/$fw" ] || { echo "install.sh: unknown framework '$fw'" >&2; exit 2; }
  pkgs+=(-e "$here/frameworks/$fw")
done
extra=()
[ "$dev" = 1 ] && extra+=(pytest ruff)
# tensorflow-cpu is the CPU wheel; GPU images install `tensorflow[and-cuda]` on NGC bases.
for fw in "${fws[@]}"; do [ "$fw" = tensorflow ] && extra+=(tensorflow-cpu); done

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

stamp_inputs=$(cat "$here/constraints.txt" "$here"/common/pyproject.toml \
  "$here"/frameworks/*/pyproject.toml "$here"/launchers/pyproject.toml \
  "$here/containers/build-horovod.sh" 2>/dev/null
  echo "$frameworks $dev $horovod $mpi $dali")
stamp="$($py -c 'import sys; print(sys.prefix)')/.sciperf-install-$(echo "$stamp_inputs" | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  echo "install.sh: environment up to date ($frameworks)"
  exit 0
fi

echo "install.sh: installing sciperf + $frameworks into $($py -c 'import sys; print(sys.prefix)')"
$py -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
$py -m pip install --quiet --disable-pip-version-check -c "$here/constraints.txt" \
  "${pkgs[@]}" "${extra[@]}"
if [ "$dali" = 1 ]; then
  # DALI 2.4 (CPU pipelines here, GPU pipelines in the images). The TF plugin compiles at
  # install against the installed TensorFlow and needs --no-build-isolation (pip >= 25.3).
  $py -m pip install --quiet -c "$here/constraints.txt" nvidia-dali-cuda120
  case ",$frameworks," in *,tensorflow,*)
    $py -m pip install --quiet setuptools wheel
    $py -m pip install --quiet --no-cache-dir --force-reinstall --no-deps \
      --no-build-isolation "nvidia-dali-tf-plugin-cuda120==$($py -c \
      'import importlib.metadata as m; print(m.version("nvidia-dali-cuda120"))')" ;;
  esac
fi
if [ "$horovod" = 1 ]; then
  "$here/containers/build-horovod.sh" "$py" "$frameworks"
fi
rm -f "$($py -c 'import sys; print(sys.prefix)')"/.sciperf-install-*
touch "$stamp"
echo "install.sh: done"
