#!/usr/bin/env bash
# The GPU checklist of the PyTorch paths on a machine with NVIDIA GPUs and a Python that
# already holds a CUDA PyTorch (an HPC module, an NGC container, a venv): install sciperf
# beside it without touching torch, then run each step with its own time limit, one log
# for all and the bench JSON per workload. A step that fails is recorded and the next one
# runs: one broken path must not hide the others.
#
#   scripts/gpu-check.sh OUT [STEP…]     STEP: info mini full variants input nccl profile
#   WHEELS=DIR   offline wheels for what the Python lacks (hydra-core, omegaconf, antlr4,
#                mlperf-logging, …), installed with --no-index
#   PYTHON=…     the interpreter (default python3); STEP_LIMIT=s per step (default 900)
#   WORKLOADS="cosmoflow deepcam"   the workloads of the mini/full/variants/input steps
#   FULL_SHAPE="bench.samples=… bench.batch=… bench.epochs=… [overrides]"  the full rows
#   TAG=name     suffix of the full rows' step names (an A/B of one override)
#   INSTALLED=1  sciperf is installed already (a second invocation on the same machine)
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT [STEP…]}
shift
steps=${*:-info mini full variants input nccl profile}
py=${PYTHON:-python3}
limit=${STEP_LIMIT:-900}
workloads=${WORKLOADS:-cosmoflow deepcam}
work=${WORK:-/tmp/sciperf-gpu}
here=$(cd "$(dirname "$0")/.." && pwd)
read -ra shape <<<"${FULL_SHAPE:-bench.samples=32 bench.batch=8 bench.epochs=2}"
read -ra profile_args <<<"${PROFILE_ARGS:-bf16 32 8}"
mkdir -p "$out" "$work"
log=$out/gpu.log

install() {
    if [ -n "${WHEELS:-}" ]; then
        export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
        [ -n "${INSTALLED:-}" ] && return 0
        "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$work/site" \
            "$WHEELS"/*.whl || return 1
    fi
    [ -n "${INSTALLED:-}" ] && return 0
    "$py" -m pip install -q --no-index --no-deps --no-build-isolation \
        -e "$here/common" -e "$here/frameworks/pytorch" -e "$here/launchers"
}

# step NAME CMD…: run with the limit, append to the log, one JSON line of its outcome
step() {
    local name=$1 start rc
    shift
    echo "=== $name: $*" >>"$log"
    start=$EPOCHREALTIME
    timeout "$limit" "$@" >>"$log" 2>&1
    rc=$?
    printf '{"step": "%s", "rc": %d, "seconds": %s}\n' "$name" "$rc" \
        "$(awk "BEGIN {printf \"%.1f\", $EPOCHREALTIME - $start}")" | tee -a "$out/steps.jsonl"
}

sciperf=("$py" -m sciperf.cli)

# bench NAME WORKLOAD ARGS…: one bench run; its rows join OUT/<workload>.json
bench() {
    local name=$1 workload=$2
    shift 2
    # every bench step generates into (and re-uses) one data folder
    mkdir -p "$work/bench-$name" "$work/data-bench"
    ln -sfn "$work/data-bench" "$work/bench-$name/data"
    step "$name" "${sciperf[@]}" bench workload="$workload" output="$work/bench-$name" "$@"
    [ -f "$work/bench-$name/$workload.json" ] &&
        "$py" - "$out/$workload.json" "$work/bench-$name/$workload.json" "$name" <<'PY'
import json, sys
from pathlib import Path
target, new, name = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), sys.argv[3]
old = json.loads(target.read_text()) if target.exists() else {**new, "train": [], "input": []}
for key in ("train", "input"):
    old[key] += [{**row, "step": name} for row in new.get(key, [])]
target.write_text(json.dumps(old, indent=1))
PY
}

install >>"$log" 2>&1 || { echo "install failed: see $log"; tail -5 "$log"; exit 1; }
export PYTHONUNBUFFERED=1
for s in $steps; do
    case $s in
    info)
        step info bash -c "nvidia-smi; $py -m sciperf.cli info" ;;
    mini)  # each workload's mini to its target on the GPU, then the official checker
        for w in $workloads; do
            step "mini-$w" "${sciperf[@]}" run workload="$w" framework=pytorch experiment=mini \
                data.dir="$work/data-$w" output_dir="$work/run-$w" train.overwrite=true
            cp "$work/run-$w/summary.json" "$work/summary-$w.json" 2>/dev/null
        done ;;
    full)  # the full models: fp32 (IEEE), tf32 (tensor-core float32) and bf16 AMP
        for w in $workloads; do
            bench "full${TAG:+-$TAG}-$w" "$w" bench.cases=full bench.precision=fp32,tf32,bf16 \
                "${shape[@]}"
        done ;;
    variants)  # the knobs: channels-last off, torch.compile on (bf16)
        for w in $workloads; do
            bench "nolast-$w" "$w" bench.cases=full bench.precision=bf16 \
                framework.channels_last=false "${shape[@]}"
            bench "compile-$w" "$w" bench.cases=full bench.precision=bf16 \
                framework.compile=true "${shape[@]}"
        done ;;
    input)  # the loader over 1…cores workers against what a GPU consumes
        for w in $workloads; do
            bench "input-$w" "$w" bench.cases=input
        done ;;
    nccl)  # a one-rank DDP run through torchrun: the NCCL process group and DDP hooks
        w=${workloads%% *}
        [ -d "$work/data-$w" ] || step "prepare-$w" "${sciperf[@]}" prepare workload="$w" \
            experiment=mini data.dir="$work/data-$w"
        step "nccl-$w" "${sciperf[@]}" launch launcher=torchrun launcher.tasks_per_node=1 workload="$w" \
            framework=pytorch experiment=mini distributed.single_rank_group=true \
            data.dir="$work/data-$w" output_dir="$work/nccl-$w" train.overwrite=true
        step "nccl-check-$w" "${sciperf[@]}" check "$work/nccl-$w" ;;
    profile)  # where a full step's GPU time goes: the top kernels
        for w in $workloads; do
            step "profile-$w" "$py" "$here/scripts/gpu_profile.py" "$w" "$work/data-bench/$w" \
                "${profile_args[@]}"
        done ;;
    *) echo "unknown step $s (info mini full variants input nccl profile)"; exit 2 ;;
    esac
done
