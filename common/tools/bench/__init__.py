"""`sciperf bench` / `make bench`: measured throughput on this machine, as JSON.

`workload=<name>` (default the registry's default; `make bench WORKLOAD=…`), driven by the
workload's contract (``Workload.bench``): training samples/s for each experiment it names
(mini, full) in fp32 and bf16 through the real backend (same code path as `sciperf
train`), input-pipeline samples/s for each on-disk format and input size (and the DALI
pipeline where the workload has a DALI format), staging against `cp -r` and 1 vs 2 ranks
where the cases ask for them, and the machine's measured matmul peak beside them. Speed
targets are reported here, never asserted in timed tests.

This module owns the run of a checked plan: :func:`bench` (the verb) and the order of the
rows, their printed lines, and the precision decisions made once before them (what
`precision=auto` picks, bf16 rows left out on a CPU that only emulates bf16). Each row kind
and each other job is a module of its own, so a change to one touches one file:
:mod:`.options` (the command line, checked into a :class:`Plan` before any row),
:mod:`.training` (a training row), :mod:`.isolation` (that row in a spawned process),
:mod:`.input_rows` (loader and DALI rows), :mod:`.system_rows` (staging and 1-vs-2-rank
rows), :mod:`.records` (the JSON files and the round statistics) and :mod:`.rows` (what
every row shares). Their names are re-exported here (``__all__``). A name is looked up
where it is called, and that is where a test replaces it: the training, staging and
scaling rows and the precision probe here, a loader row in :mod:`.input_rows`, the row a
child process times in :mod:`.isolation`, a training row's workload and backend in
:mod:`.training`.
"""

from __future__ import annotations

from typing import Any

from sciperf import precision as auto_precision
from sciperf.backends import load_backend
from sciperf.errors import SciperfError
from sciperf.info import machine
from sciperf.tools.bench.input_rows import (
    INPUT_BATCH,
    INPUT_PASSES,
    INPUT_PREFETCH,
    _input_rows,
    dali_case,
    input_case,
    usable_workers,
    worker_counts,
)
from sciperf.tools.bench.isolation import _child_row, _ended, isolated_train_case, stop_child
from sciperf.tools.bench.options import BENCH_KEYS, Plan, plan_bench, set_by_bench
from sciperf.tools.bench.records import Outputs, _round, round_summary
from sciperf.tools.bench.rows import _cases, _device, _input_model, _per_unit, _units, significant
from sciperf.tools.bench.system_rows import (
    SCALING_SETS,
    scaling_case,
    scaling_overrides,
    staging_case,
)
from sciperf.tools.bench.training import _epochs, train_case
from sciperf.workloads.base import Workload

__all__ = [
    "BENCH_KEYS",
    "INPUT_BATCH",
    "INPUT_PASSES",
    "INPUT_PREFETCH",
    "SCALING_SETS",
    "Outputs",
    "Plan",
    "_cases",
    "_child_row",
    "_device",
    "_ended",
    "_per_unit",
    "_units",
    "bench",
    "dali_case",
    "input_case",
    "isolated_train_case",
    "plan_bench",
    "round_summary",
    "scaling_case",
    "scaling_overrides",
    "set_by_bench",
    "significant",
    "staging_case",
    "stop_child",
    "train_case",
    "usable_workers",
    "worker_counts",
]


def bench(overrides: list[str]) -> int:
    """Run every case of the workload for the frameworks asked (framework=a,b) and write
    the JSON: rows land in `<workload>.json.partial` as they are timed, and
    `<workload>.json` is replaced only by a bench that completes (an interrupted one
    replaced a whole bench's file with its few rows, saying nothing)."""
    plan = plan_bench(overrides)
    result: dict[str, Any] = {"workload": plan.name, "machine": machine(),
                              "asked": plan.asked(), "complete": False, "train": [],
                              "input": []}
    files = Outputs(plan.out, plan.name)
    files.clear_partial()
    try:
        _run(plan, result, files)
        result["complete"] = True
        files.finish(result)
    except SciperfError as exc:  # a row or a write failed: the line says where rows are
        err = SciperfError(f"{exc} ({files.left()})")
        err.exit_code = exc.exit_code
        raise err from exc
    except BaseException as exc:  # Ctrl-C, SIGTERM: the CLI's line names what is left
        exc.sciperf_records = files.left()  # type: ignore[attr-defined]
        raise
    return 0


def _run(plan: Plan, result: dict[str, Any], files: Outputs) -> None:
    """Every row of `plan`, each saved in the partial file as it finishes."""
    workload, cases, root = plan.workload, _cases(plan.workload), plan.out / "data" / plan.name
    timed = isolated_train_case if plan.isolate else train_case
    save = lambda: files.save(result)  # noqa: E731
    result["precision_auto"] = {fw: _auto_choice(fw, workload) for fw in plan.frameworks}
    for fw, choice in result["precision_auto"].items():
        print(f"precision=auto ({fw}): {choice['precision']} ({choice['reason']})", flush=True)
    if left_out := _emulated_bf16(plan):
        result["bf16_left_out"], result["asked"] = left_out, plan.asked()
        print(f"bf16 rows left out: {left_out}", flush=True)
    for n in range(1, plan.rounds + 1):
        for fw, experiment, precision in plan.train_rows:
            row = timed(fw, experiment, precision, root, plan.extra, plan.shape)
            row["round"] = n
            result["train"].append(row)
            save()  # a later row killed (OOM) keeps it
            print(f"train {fw:<10} {experiment:<4} {precision:<4} "
                  f"{row['samples_per_s']:8.4g} samples/s, {row['seconds']:.1f} s, peak "
                  f"{row['peak_rss_MB']} MB{_units(row)}, "
                  f"{row['fraction_of_peak']:.1%} of the {precision} matmul peak"
                  f"{_epochs(row)}{_round(n, plan.rounds)}", flush=True)
    if plan.rounds > 1:
        result["rounds"] = round_summary(result["train"])
        save()
        for line in result["rounds"]:
            print(f"rounds {line['framework']:<10} {line['model']:<4} {line['precision']:<4} "
                  f"median {line['median_samples_per_s']:.4g} samples/s (spread "
                  f"{line['spread']:.2f}x), median {line['median_ratio']:.3f}x {line['vs']} "
                  f"(by round {' / '.join(f'{r:.3f}' for r in line['ratio'])})", flush=True)
    if "input" in plan.runs:
        _input_rows(workload, root, result, plan.workers, plan.shape, save)
    if "staging" in plan.runs:
        sizes, n = cases.input[-1]
        row = staging_case(cases.dataset(root, _input_model(workload, dict(sizes)), "npy", n))
        result["staging"] = row
        save()
        for method, m in row["methods"].items():
            print(f"staging {method:<15} {row['MB']} MB: {m['median_s']:.3f} s "
                  f"({m['MB_per_s']} MB/s)", flush=True)
    if "scaling" in plan.runs:
        result["scaling"] = []
        for fw in plan.frameworks:
            row = scaling_case(workload, fw, root, extra=plan.extra)
            result["scaling"].append(row)
            save()
            print(f"scaling {fw:<10} 1 vs 2 ranks: {row['runs']} speedup "
                  f"{row['speedup_2_vs_1']}" + (f" (the row sets {', '.join(replaced)} "
                  "itself)" if (replaced := row["overrides_replaced"]) else ""), flush=True)


def _emulated_bf16(plan: Plan) -> str | None:
    """On a CPU without bf16 kernels (``sciperf.info.bf16_kernels``) the default bench
    leaves its bf16 rows out and says why (emulated, a mini row ran for hours); a
    bench.precision that names bf16 is refused in one line, as `precision=bf16` is. A
    GPU beside such a CPU keeps them."""
    why = auto_precision.emulated_bf16(machine())
    if "bf16" not in plan.precisions or not why or not any(
            load_backend(fw, plan.name).runtime.versions().get("device", "cpu") == "cpu"
            for fw in plan.frameworks):
        return None
    if plan.precision_given:
        raise SciperfError(f"bench.precision={','.join(plan.precisions)}: {why}; use "
                           "bench.precision=fp32")
    plan.precisions = [p for p in plan.precisions if p != "bf16"]
    return why


def _auto_choice(framework: str, workload: Workload) -> dict[str, Any]:
    """What `precision=auto` picks for this workload on this machine and why, beside the
    rows that time both precisions (the probe after the framework's thread setup, as in
    a run)."""
    runtime = load_backend(framework, workload.name).runtime
    runtime.setup_threads(0)
    return auto_precision.on_this_machine(auto_precision.AUTO, workload.cost.hot_op,
                                          runtime).as_dict()
