#!/usr/bin/env bash
# `make test-images`: build the TensorFlow cpu image for real with podman and run it.
#
#   containers/test-images.sh            # exit 0 pass, 1 fail, 77 skipped (podman cannot run)
#
# 1. podman, runc and debootstrap are installed from Debian when missing (as root);
#    containers/podman/containers.conf is used unless CONTAINERS_CONF is set.
# 2. A Debian bookworm base is debootstrapped (cached by recipe: containers/local-base.sh)
#    and stands in for the Dockerfile's pinned debian:*-slim, as no registry is reachable.
# 3. containers/tensorflow/cpu.Dockerfile is built by containers/image.sh from this checkout;
#    the host's CA bundle is passed to pip as a build secret (SCIPERF_CA_BUNDLE overrides).
# 4. Inside the image: `sciperf --help`, `sciperf info` (one backend, the image record equal
#    to the label and to this checkout), and a mini CosmoFlow training whose MLLOG is
#    checked with `sciperf check` in the image and on the host (.venv, when present).
#    SCIPERF_IMAGE_TRAIN=short (default: 256 universes, 2 epochs; the checker must flag
#    nothing but the unmet target) or full (the mini run to its target; the checker must PASS).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
framework=tensorflow
flavor=cpu
tag="localhost/sciperf-$framework:$flavor-test"
train=${SCIPERF_IMAGE_TRAIN:-short}
skip() { echo "test-images: SKIPPED: $*" >&2; exit 77; }
fail() { echo "test-images: FAIL: $*" >&2; exit 1; }
t0=$SECONDS
timings=()
lap() { timings+=("$1 $((SECONDS - lap_start)) s"); lap_start=$SECONDS; }
lap_start=$SECONDS
case "$train" in short|full) ;; *) fail "SCIPERF_IMAGE_TRAIN must be short or full, not '$train'" ;; esac

# 1. tools
missing=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    skip "${missing[*]} missing and cannot be installed here (not root with apt-get)"
  fi
  echo "test-images: installing ${missing[*]} (Debian)"
  apt-get update -qq >/dev/null || skip "apt-get update failed: cannot install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null \
    || skip "apt-get install podman runc debootstrap failed"
fi
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers/podman/containers.conf}
if ! err=$(podman info 2>&1 >/dev/null); then
  skip "podman cannot run here: $(head -1 <<<"$err")"
fi
lap tools

# 2. base image
# local-base.sh exits 2 when it cannot run here at all (no debootstrap, not root).
rc=0
base=$(SCIPERF_ENGINE=podman "$here/containers/local-base.sh") || rc=$?
[ "$rc" = 2 ] && skip "no local Debian base image can be made here (containers/local-base.sh)"
[ "$rc" = 0 ] || fail "could not make the local Debian base image (containers/local-base.sh)"
if ! err=$(podman run --rm "$base" true 2>&1); then
  skip "podman cannot start a container here: $(tail -1 <<<"$err")"
fi
lap base

# 3. build
ca=${SCIPERF_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
ca_args=()
[ -f "$ca" ] && ca_args=(--ca "$ca")
"$here/containers/image.sh" build --engine podman --framework "$framework" --flavor "$flavor" \
  --tag "$tag" --base "$base" "${ca_args[@]}" || fail "image build failed (log above)"
lap build

# 4. run
help=$(podman run --rm "$tag" --help) || fail "sciperf --help failed in the image"
grep -q "usage: sciperf" <<<"$help" || fail "sciperf --help printed no usage line"
info=$(podman run --rm "$tag" info 2>/dev/null) || fail "sciperf info failed in the image"
label=$(podman image inspect --format '{{index .Config.Labels "org.sciperf.image-info"}}' "$tag")
user=$(podman image inspect --format '{{.Config.User}}' "$tag")
uid=$(podman run --rm --entrypoint id "$tag" -u)
git=$(git -C "$here" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
python3 - "$framework" "$flavor" "$git" "$(sha256sum "$here/containers/install.sh" | cut -d' ' -f1)" \
  "$label" "$user" "$uid" "$info" <<'PY' || fail "sciperf info / label / user check (above)"
import json, sys
framework, flavor, git, install_sha, label, user, uid, text = sys.argv[1:]
info = json.loads(text)
image = info["image"]
problems = []
if sorted(info["backends"]) != [framework]:
    problems.append(f"backends {sorted(info['backends'])} != [{framework}]")
if "torch" in info["packages"]:
    problems.append("torch installed in the tensorflow image")
for key, want in (("framework", framework), ("flavor", flavor), ("sciperf_git", git),
                  ("install_script_sha256", install_sha)):
    if image.get(key) != want:
        problems.append(f"image.{key} = {image.get(key)!r}, expected {want!r}")
if not image["versions"].get(framework):
    problems.append(f"image.versions.{framework} missing")
if json.loads(label) != image:
    problems.append("label org.sciperf.image-info differs from /etc/sciperf/image.json")
if user in ("", "root", "0") or uid == "0":
    problems.append(f"image runs as root (USER {user!r}, uid {uid})")
for p in problems:
    print(f"test-images: {p}", file=sys.stderr)
print(f"test-images: info ok: {framework} {image['versions'][framework]}, "
      f"sciperf {image['sciperf_git']}, user {user}")
sys.exit(1 if problems else 0)
PY
lap info

work=$(mktemp -d /tmp/sciperf-test-images.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"  # the image's user (not root) writes the data and the results here
overrides=(workload=cosmoflow "framework=$framework" experiment=mini data.dir=/work/data
           output_dir=/work/out)
[ "$train" = short ] && overrides+=(data.train_samples=256 data.eval_samples=64
                                    train.max_epochs=2)
set +e
podman run --rm -v "$work:/work" "$tag" run "${overrides[@]}" 2>&1 \
  | grep -v -E '^(I0000|W0000|WARNING: All log)|oneDNN|rebuild TensorFlow|^To enable'
rc=${PIPESTATUS[0]}
set -e
log="$work/out/result_0.txt"
[ -s "$log" ] || fail "the training in the image wrote no MLLOG ($log), exit $rc"
want_rc=1
[ "$train" = full ] && want_rc=0
[ "$rc" = "$want_rc" ] || fail "sciperf run exited $rc, expected $want_rc ($train training)"
lap train

verdicts=("$(podman run --rm -v "$work:/work" "$tag" check /work/out/result_0.txt 2>&1 || true)")
if [ -x "$here/.venv/bin/sciperf" ]; then
  verdicts+=("$("$here/.venv/bin/sciperf" check "$log" 2>&1 || true)")
fi
expect="only the unmet target"
[ "$train" = full ] && expect="PASS"
for verdict in "${verdicts[@]}"; do
  echo "test-images: checker verdict (expected: $expect): $verdict"
  if [ "$train" = full ]; then
    [[ $verdict == PASS* ]] || fail "the checker rejected the full mini run"
  else
    # 2 epochs cannot reach the target: the one finding allowed is the unmet eval_error.
    [[ $verdict == FAIL*"eval_error"*"<= 0.124"* && $verdict != *"more)"* ]] \
      || fail "the checker found more than the unmet target"
  fi
done
lap check

size=$(podman image inspect --format '{{.Size}}' "$tag")
summary=$(printf '%s, ' "${timings[@]}")
echo "test-images: PASS: $tag ($((size / 1000000)) MB) built from this checkout and run;" \
  "${summary}total $((SECONDS - t0)) s"
