#!/usr/bin/env bash
# Build Horovod 0.28.1 once against the installed frameworks and cache the wheel by versions.
#
#   containers/build-horovod.sh PYTHON FRAMEWORKS
#
# Horovod 0.28.1 exists only as an sdist and needs two fixes to build here:
#  * PyTorch 2.x headers need C++17 but Horovod's CMake forces C++14 and strips -std from
#    CXXFLAGS: a compiler wrapper appends -std=c++17 last.
#  * TensorFlow >= 2.16 dropped the XLA headers that horovod/tensorflow/xla_mpi_ops.cc uses:
#    that source is removed from the TensorFlow CMake list (XLA ops are unused here).
# The wheel is cached in $SCIPERF_CACHE/wheels under a key of every version it links
# against, so CI builds it once (~5 min on 2 cores) and never depends on the cache.
set -euo pipefail
py=$1
frameworks=$2
version=0.28.1
cache=${SCIPERF_CACHE:-$HOME/.cache/sciperf}/wheels

versions=$($py - <<'PY'
import importlib.metadata as md, sys
out = [f"py{sys.version_info.major}{sys.version_info.minor}"]
for name in ("torch", "tensorflow-cpu", "tensorflow"):
    try:
        out.append(f"{name}{md.version(name)}")
    except md.PackageNotFoundError:
        pass
print("-".join(out))
PY
)
mpi=$(command -v mpicc >/dev/null && echo mpi || echo nompi)
key="horovod${version}-${versions}-${mpi}"
dir="$cache/$key"
if ls "$dir"/horovod-*.whl >/dev/null 2>&1; then
  echo "build-horovod: using cached wheel $dir"
  $py -m pip install --quiet --force-reinstall --no-deps "$dir"/horovod-*.whl
  $py -m pip install --quiet cffi cloudpickle psutil pyyaml packaging
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build-horovod: building Horovod $version ($key), a few minutes on 2 cores"
$py -m pip download --quiet --no-deps --no-binary :all: "horovod==$version" -d "$work"
tar -xzf "$work"/horovod-"$version".tar.gz -C "$work"
src="$work/horovod-$version"
sed -i '/xla_mpi_ops.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
cat > "$work/cxx17" <<'SH'
#!/bin/sh
exec g++ "$@" -std=c++17
SH
chmod +x "$work/cxx17"
jobs=$(nproc)
export CXX="$work/cxx17" MAKEFLAGS=-j"$jobs"
export HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo
if [ "$mpi" = mpi ]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
case ",$frameworks," in *,pytorch,*) export HOROVOD_WITH_PYTORCH=1 ;;
  *) export HOROVOD_WITHOUT_PYTORCH=1 ;; esac
case ",$frameworks," in *,tensorflow,*) export HOROVOD_WITH_TENSORFLOW=1 ;;
  *) export HOROVOD_WITHOUT_TENSORFLOW=1 ;; esac
$py -m pip install --quiet setuptools wheel cffi cloudpickle psutil pyyaml packaging
$py -m pip wheel --quiet --no-build-isolation --no-deps -w "$work/wheel" "$src"
mkdir -p "$dir"
cp "$work"/wheel/horovod-*.whl "$dir"/
$py -m pip install --quiet --no-deps --force-reinstall "$dir"/horovod-*.whl
echo "build-horovod: cached $dir"
