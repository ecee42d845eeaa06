#!/usr/bin/env bash
# A Debian bookworm base image without any registry, for tests and offline builds:
#
#   base=$(containers/local-base.sh [--engine podman|docker])
#   make image BASE_IMAGE="$base" ...
#
# The root file system comes from `debootstrap --variant=minbase` (root, ~40 s, ~200 MB),
# the stand-in for the Dockerfiles' pinned debian:*-slim base. Its tarball is cached under
# $SCIPERF_CACHE/bases (default ~/.cache/sciperf/bases), keyed by a hash of the recipe
# below, so a changed recipe never reuses a stale base; nothing depends on the cache
# existing. Prints the image reference (and only that) on stdout.
set -euo pipefail

engine=${SCIPERF_ENGINE:-podman}
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine=${2:?--engine needs a value}; shift 2 ;;
    *) echo "local-base.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
recipe="debootstrap --variant=minbase $suite $mirror; rm var/cache/apt/archives/*.deb \
var/lib/apt/lists/*; tar --numeric-owner -c ."
key=$(printf '%s\n' "$recipe" | sha256sum | cut -c1-12)
cache=${SCIPERF_CACHE:-$HOME/.cache/sciperf}/bases
tarball="$cache/$suite-minbase-$key.tar"
ref="localhost/sciperf-base:$suite-$key"

if "$engine" image inspect "$ref" >/dev/null 2>&1; then
  echo "$ref"
  exit 0
fi
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || {
    echo "local-base.sh: debootstrap not found (apt-get install debootstrap)" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "local-base.sh: debootstrap needs root" >&2; exit 2; }
  mkdir -p "$cache"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "local-base.sh: debootstrap $suite (minbase) from $mirror" >&2
  if ! debootstrap --variant=minbase "$suite" "$work/root" "$mirror" >"$work/log" 2>&1; then
    tail -5 "$work/log" >&2
    echo "local-base.sh: debootstrap failed (log above)" >&2
    exit 1
  fi
  rm -rf "$work"/root/var/cache/apt/archives/*.deb "$work"/root/var/lib/apt/lists/*
  tar -C "$work/root" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  echo "local-base.sh: cached $tarball" >&2
fi
"$engine" import "$tarball" "$ref" >/dev/null
echo "local-base.sh: imported $ref" >&2
echo "$ref"
