#!/usr/bin/env bash
# Build, convert and push the sciperf images (what `make image`, `make sif`, `make push` run).
#
#   containers/image.sh build --framework F --flavor V [--tag T] [--base IMAGE] [--wheels DIR]
#                             [--ca FILE] [--engine podman|docker] [--build-arg KEY=VALUE]...
#   containers/image.sh sif   --framework F --flavor V [--tag T] [--engine E]
#   containers/image.sh push  --framework F --flavor V --registry HOST/NAMESPACE [--tag T]
#   containers/image.sh engine        # the engine that would be used (podman, else docker)
#
# build: the context is this checkout (never a git clone), the Dockerfile is the rendered
#   containers/F/V.Dockerfile; afterwards the version record the image wrote
#   (/etc/sciperf/image.json) is copied into the label org.sciperf.image-info, so
#   `podman inspect` and `sciperf info` say the same. --ca passes a CA bundle to pip as a
#   build secret (needed behind TLS-intercepting proxies; never stored in the image).
#   --wheels DIR offers DIR/*.whl to pip for this build (e.g. the CPU torch wheel).
# sif: saves the image as the docker-archive containers/F/V.def bootstraps from, then runs
#   `apptainer build` (or says where to run it when apptainer is not installed).
# push: tags and pushes REGISTRY/sciperf-F:V and REGISTRY/sciperf-F:V-<git describe>.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "image.sh: $*" >&2; exit 2; }

cmd=${1:-}
[ $# -gt 0 ] && shift
framework="" flavor="" tag="" base="" wheels="" ca="" registry=""
engine=${SCIPERF_ENGINE:-}
build_args=()
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die "option '$1' needs a value"
  case "$1" in
    --framework) framework=$2 ;;
    --flavor) flavor=$2 ;;
    --tag) tag=$2 ;;
    --base) base=$2 ;;
    --wheels) wheels=$2 ;;
    --ca) ca=$2 ;;
    --engine) engine=$2 ;;
    --registry) registry=$2 ;;
    --build-arg) build_args+=(--build-arg "$2") ;;
    *) die "unknown option '$1'" ;;
  esac
  shift 2
done

find_engine() {
  if [ -n "$engine" ]; then
    command -v "$engine" >/dev/null || die "container engine '$engine' not found"
  elif command -v podman >/dev/null; then
    engine=podman
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  else
    die "no container engine: install podman (apt-get install podman runc) or start docker"
  fi
}

check_image() {
  if [ -z "$framework" ] || [ -z "$flavor" ]; then die "$cmd needs --framework and --flavor"; fi
  dockerfile="containers/$framework/$flavor.Dockerfile"
  [ -f "$here/$dockerfile" ] || die "no image framework=$framework flavor=$flavor \
(frameworks: $(cd "$here/containers" && echo */cpu.Dockerfile | sed 's|/cpu.Dockerfile||g'); \
flavors: cpu gpu)"
  tag=${tag:-sciperf-$framework:$flavor}
  git=$(git -C "$here" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
}

build() {
  check_image
  find_engine
  local args=(build -f "$here/$dockerfile" -t "$tag" --build-arg "SCIPERF_GIT=$git")
  [ -n "$base" ] && args+=(--build-arg "BASE_IMAGE=$base")
  if [ -n "$ca" ]; then
    [ -f "$ca" ] || die "CA bundle '$ca' not found"
    args+=(--secret "id=ca,src=$ca")
  fi
  args+=("${build_args[@]}")
  copied=()
  trap 'rm -f "${copied[@]}"' EXIT
  if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || die "wheel directory '$wheels' not found"
    for whl in "$wheels"/*.whl; do
      [ -f "$whl" ] || die "no *.whl files in '$wheels'"
      dest="$here/containers/wheels/$(basename "$whl")"
      [ -e "$dest" ] && continue
      cp -l "$whl" "$dest" 2>/dev/null || cp "$whl" "$dest"
      copied+=("$dest")
    done
  fi
  [ "$engine" = docker ] && export DOCKER_BUILDKIT=1
  local previous
  previous=$("$engine" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  echo "image.sh: $engine build $tag from $dockerfile (sciperf $git)"
  "$engine" "${args[@]}" "$here"

  # The record the image wrote about itself becomes its label as well.
  local record tmp
  record=$("$engine" run --rm --entrypoint cat "$tag" /etc/sciperf/image.json)
  record=$(python3 -c 'import json, sys
print(json.dumps(json.load(sys.stdin), sort_keys=True, separators=(",", ":")))' <<<"$record")
  tmp=$(mktemp -d)
  printf 'FROM %s\n' "$tag" > "$tmp/Containerfile"
  "$engine" build -q -f "$tmp/Containerfile" --label "org.sciperf.image-info=$record" \
    -t "$tag" "$tmp" >/dev/null
  rm -rf "$tmp"
  # The image this tag named before is now untagged: drop it unless something still uses it
  # (its layers stay as long as the new image shares them, so the build cache survives).
  if [ -n "$previous" ] && [ "$previous" != "$("$engine" image inspect --format '{{.Id}}' "$tag")" ]
  then
    "$engine" rmi "$previous" >/dev/null 2>&1 || true
  fi
  echo "image.sh: built $tag"
}

sif() {
  check_image
  find_engine
  local archive def out
  archive=$(python3 "$here/containers/images.py" --get "$framework:$flavor:archive")
  def="containers/$framework/$flavor.def"
  out="build/images/sciperf-$framework-$flavor.sif"
  mkdir -p "$here/build/images"
  rm -f "${here:?}/$archive"
  if [ "$engine" = podman ]; then
    podman save --format docker-archive -o "$here/$archive" "$tag"
  else
    docker save -o "$here/$archive" "$tag"
  fi
  echo "image.sh: saved $tag as $archive"
  local apptainer
  apptainer=$(command -v apptainer || command -v singularity || true)
  if [ -z "$apptainer" ]; then
    die "apptainer not found: copy $archive and $def to a machine with apptainer and run \
'apptainer build $out $def' in a checkout there"
  fi
  (cd "$here" && "$apptainer" build --force "$out" "$def")
  echo "image.sh: built $out"
}

push() {
  check_image
  [ -n "$registry" ] || die "push needs a registry: make push REGISTRY=HOST/NAMESPACE"
  find_engine
  local remote="$registry/sciperf-$framework"
  for t in "$flavor" "$flavor-$git"; do
    "$engine" tag "$tag" "$remote:$t"
    "$engine" push "$remote:$t"
    echo "image.sh: pushed $remote:$t"
  done
}

case "$cmd" in
  build) build ;;
  sif) sif ;;
  push) push ;;
  engine) find_engine; echo "$engine" ;;
  *) die "usage: image.sh build|sif|push|engine --framework F --flavor V [options]" ;;
esac
