"""`sciperf bench` / `make bench`: measured throughput on this machine, as JSON.

`workload=<name>` (default the registry's default; `make bench WORKLOAD=…`), driven by the
workload's contract (``Workload.bench``): training samples/s for each experiment it names
(mini, full) in fp32 and bf16 through the real backend (same code path as `sciperf
train`), input-pipeline samples/s for each on-disk format and input size (and the DALI
pipeline where the workload has a DALI format), staging against `cp -r` and 1 vs 2 ranks
where the cases ask for them, and the machine's measured matmul peak beside them. Speed
targets are reported here, never asserted in timed tests.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sciperf import allocator
from sciperf import precision as auto_precision
from sciperf.backends import RunContext, load_backend
from sciperf.config import PRECISIONS, compose
from sciperf.data.loader import BatchLoader
from sciperf.data.staging import stage_files
from sciperf.distributed import cpu_count
from sciperf.errors import SciperfError
from sciperf.info import machine
from sciperf.tools.characterize import count_flops, counted_layers
from sciperf.workloads import DEFAULT, get
from sciperf.workloads.base import Workload


def _epochs(row: dict[str, Any]) -> str:
    """', epochs 3.68 / 3.12' where a row timed more than one epoch (old rows: nothing)."""
    rates = row.get("samples_per_s_by_epoch") or []
    return f", epochs {' / '.join(f'{r:.4g}' for r in rates)}" if len(rates) > 1 else ""


def significant(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits: a full OpenFold step on a CPU is 0.0008
    samples/s, which three decimals would print as 0.001."""
    return float(f"{x:.{digits}g}")


def _cases(workload: Workload) -> Any:
    if workload.bench is None:
        raise SciperfError(f"sciperf bench has no cases for workload={workload.name}")
    return workload.bench


def train_case(framework: str, experiment: str, precision: str, root: Path,
               extra: list[str], shape: dict[str, int] | None = None) -> dict[str, Any]:
    """Samples/s of train_epoch after one warm-up epoch (the real backend path).

    `shape` replaces the case's `samples`, `batch` or `epochs` (``bench.samples=`` …): the
    cases are sized for a 2-core CPU, where a GPU times two full steps in milliseconds."""
    base = compose([f"experiment={experiment}", f"framework={framework}"] + extra)
    workload = get(base.workload)
    cases = _cases(workload)
    extra = [*cases.overrides, *extra]
    sized = dict(zip(("samples", "batch", "epochs"), cases.train[experiment], strict=True))
    n, gbs, epochs = (sized | (shape or {})).values()
    n_eval = max(n // 2, 1)
    fmt = cases.format
    folder = cases.dataset(root, workload.model_spec(base), fmt, n)
    # a workload that draws its samples (sharding "sampled") trains n/gbs steps an epoch
    # here, as an epoch over n samples would
    epoch = [f"train.val_every_iters={n // gbs}"] if workload.sharding == "sampled" else []
    cfg = compose([f"experiment={experiment}", f"framework={framework}", f"data.dir={folder}",
                   f"data.format={fmt}", f"data.train_samples={n}",
                   f"data.eval_samples={n_eval}", f"train.global_batch_size={gbs}",
                   f"precision={precision}", *epoch] + extra)
    malloc = allocator.configure(str(cfg.framework.malloc))  # as `sciperf train` does
    backend = load_backend(framework, cfg.workload)
    train = workload.dataset.list_samples(folder, "train", fmt, n)
    evals = workload.dataset.list_samples(folder, "validation", fmt, n_eval)
    backend.setup(RunContext(cfg, workload, train, evals, gbs))
    peak_flops = backend.peak_flops(precision)  # before the row: its buffers not in its peak
    backend.device_memory_peak_mb()  # a GPU's peak counts from here
    warm = experiment not in cases.cold
    if warm:
        backend.train_epoch(0, workload.lr_for_epoch(cfg, 0))  # allocations, kernels
    samples, seconds, per_epoch = 0, 0.0, []
    for epoch in range(int(warm), epochs + int(warm)):
        result = backend.train_epoch(epoch, workload.lr_for_epoch(cfg, epoch))
        samples, seconds = samples + result.samples, seconds + result.seconds
        per_epoch.append(significant(result.samples / result.seconds))
    rate = samples / seconds
    flops = count_flops(model := workload.model_spec(cfg), counted_layers(cfg, model)[0]).train
    # the process's peak resident memory: the row's own in its own process (the default,
    # isolated_train_case); CPU runs only: a GPU's memory is not counted
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device_peak = backend.device_memory_peak_mb()
    return {"framework": framework, "model": experiment, "precision": precision,
            "device": _device(backend.info().get("device", "cpu")), "peak_rss_MB": round(peak),
            "malloc": malloc,
            "threads": backend.threads.as_dict() if hasattr(backend, "threads") else None,
            **({} if device_peak is None else {"peak_device_MB": round(device_peak)}),
            "overrides": list(extra),
            "input_size": cases.size(workload.model_spec(cfg)), "global_batch_size": gbs,
            "parameters": backend.parameter_count(), "samples": samples,
            "seconds": round(seconds, 3), "samples_per_s": significant(rate), "warm_up": warm,
            # each timed epoch's own rate: a total hides an epoch that ran late (tf.data's
            # autotuning once made some TensorFlow epochs end late: README, "Speed on a CPU")
            "samples_per_s_by_epoch": per_epoch,
            **_per_unit(cases, folder, fmt, train, rate),
            "peak_flops": peak_flops, "train_flops_per_sample": flops,
            "achieved_flops": significant(rate * flops),
            # of the measured matmul peak: how far the model is from the machine's ceiling
            "fraction_of_peak": significant(rate * flops / peak_flops, 3)}


def isolated_train_case(framework: str, experiment: str, precision: str, root: Path,
                        extra: list[str], shape: dict[str, int] | None = None
                        ) -> dict[str, Any]:
    """:func:`train_case` in a process of its own (spawned, not forked: no framework state
    is inherited): the row's peak memory, allocator and thread pools are its own —
    TensorFlow fixes its pools at its first op, so the mini's layout (small layers side by
    side, sciperf.threads) and the full model's could not both be timed in one process. A
    row that dies (the OOM killer on a full model) is named in one line; the rows done
    stay in the JSON."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_row, name=f"bench {framework} {experiment} {precision}",
                        args=(send, framework, experiment, precision, str(root), extra, shape))
    child.start()
    send.close()
    try:
        reply = json.loads(recv.recv_bytes())
    except EOFError:  # died without a word: a signal
        reply = None
    child.join()
    what = f"bench row {framework} {experiment} {precision}"
    if reply is None:
        raise SciperfError(f"{what}: its process ended with {_ended(child.exitcode)}")
    if "error" in reply:
        raise SciperfError(f"{what}: {reply['error']}")
    return reply["row"]


def _child_row(send: Any, framework: str, experiment: str, precision: str, root: str,
               extra: list[str], shape: dict[str, int] | None) -> None:
    """The spawned process of :func:`isolated_train_case`: one row, sent back as JSON."""
    try:
        row = {"row": train_case(framework, experiment, precision, Path(root), extra, shape)}
    except SciperfError as exc:
        row = {"error": str(exc)}
    send.send_bytes(json.dumps(row).encode())
    send.close()


def _ended(code: int | None) -> str:
    """A child's exit code in words (a negative one is the signal that ended it)."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        return name + (" (out of memory? the OOM killer sends it)" if -code == 9 else "")
    return f"exit code {code}"


def _device(name: str) -> str:
    """The row's device: the GPU's name, or the CPU model with its bf16 units (a row
    copied out of its JSON still says what it ran on: bf16 is 5× fp32 on one CPU and
    0.5× on the next)."""
    if name != "cpu":
        return name
    info = machine()
    units = [f for f in ("amx_bf16", "avx512_bf16") if info.get(f)]
    return f"{info['cpu']} ({info['cores']} cores, {', '.join(units) or 'no bf16 units'})"


def _per_unit(cases: Any, folder: Path, fmt: str, samples: list[Path],
              rate: float) -> dict[str, float]:
    """`<unit>_per_s` for the sizes that vary between samples (``BenchCases.extent``: an
    OC20 structure's atoms): samples/s alone would rank a run on small graphs first."""
    if cases.extent is None:
        return {}
    means = cases.extent(folder, fmt, samples)
    return {f"{unit}_per_sample": round(mean, 2) for unit, mean in means.items()} | {
        f"{unit}_per_s": round(rate * mean, 1) for unit, mean in means.items()}


def _units(row: dict[str, Any]) -> str:
    """`, 1234.5 atoms/s` for each per-unit rate of a row."""
    return "".join(f", {v} {k[:-len('_per_s')]}/s" for k, v in row.items()
                   if k.endswith("_per_s") and k not in ("samples_per_s", "MB_per_s"))


def _input_model(workload: Workload, sizes: dict[str, Any]) -> Any:
    """The default model spec of the workload at one input size."""
    return workload.model(**sizes)


def worker_counts(cores: int) -> list[int]:
    """1, 2, 4, … loader workers up to (and including) `cores`: whether the loader can feed
    a GPU's rate shows as the curve, not one point."""
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    return sorted({*counts, max(cores, 1)})


def input_case(workload: Workload, sizes: dict[str, Any], fmt: str, root: Path,
               n: int, workers: int = 2) -> dict[str, Any]:
    """Samples/s of the common prefetching loader alone (read + decode + the workload's
    collate) over one format of the workload, with `workers` reader processes."""
    cases, model = _cases(workload), _input_model(workload, sizes)
    folder = cases.dataset(root, model, fmt, n)
    files = workload.dataset.list_samples(folder, "train", fmt, n)
    items: list[Any] = files
    if workload.dataset.draw is not None:  # training items as the sampler draws them
        cfg = compose([f"workload={workload.name}", "train.global_batch_size=1",
                       f"train.val_every_iters={n}"])
        items = workload.dataset.draw(files, cfg, 0, 0, 1, n)
    loader = BatchLoader(items, workload.dataset.reader(folder, fmt, model), batch_size=4,
                         workers=workers, remainder="keep", collate=workload.dataset.collate)
    start = time.perf_counter()
    # batches may be dicts of variable-size arrays (graphs): count the loader's batch sizes
    count = sum(size for size, _ in zip(loader.sizes, loader.epoch(0), strict=True))
    seconds = time.perf_counter() - start
    # each file once: samples packed in one container file all name it
    mb = sum(f.stat().st_size for f in dict.fromkeys(
        f for p in files for f in workload.dataset.sample_files(p, fmt))) / 1e6
    return {"format": fmt, "input_size": cases.size(model), "workers": workers,
            "samples": count,
            "seconds": round(seconds, 3), "samples_per_s": round(count / seconds, 2),
            **_per_unit(cases, folder, fmt, files, count / seconds),
            "MB_per_s": round(mb / seconds, 1)}


def dali_case(workload: Workload, sizes: dict[str, Any], root: Path, n: int) -> dict[str, Any]:
    """Samples/s of the DALI pipeline over the npy format (read, transform, batch: what
    `data.loader=dali` feeds the frameworks), pipeline build included."""
    from sciperf.data import dali

    cases, model = _cases(workload), _input_model(workload, sizes)
    row: dict[str, Any] = {"format": "npy", "loader": "dali", "input_size": cases.size(model)}
    if not dali.available():
        return {**row, "skipped": dali.MISSING}
    folder = cases.dataset(root, model, "npy", n)
    files = workload.dataset.list_samples(folder, "train", "npy", n)
    reader = workload.dataset.reader(folder, "npy", model)
    start = time.perf_counter()
    p = dali.plan(files, 4, 0, True, workload=workload.name, root=folder,
                  shape=tuple(reader.x_shape))
    pipe = dali.build_pipeline(p, 0)
    pipe.build()
    count = 0
    for _ in range(p.steps):
        x, _y = pipe.run()
        count += int(x.as_array().shape[0])
    seconds = time.perf_counter() - start
    return {**row, "samples": count, "seconds": round(seconds, 3),
            "samples_per_s": round(count / seconds, 2)}


def _input_rows(workload: Workload, root: Path, result: dict[str, Any],
                workers: list[int]) -> None:
    """Every format at every input size the cases name over each loader worker count, then
    DALI where it applies."""
    for sizes, n in _cases(workload).input:
        for fmt in workload.formats:
            for count in workers:
                row = input_case(workload, dict(sizes), fmt, root, n, count)
                result["input"].append(row)
                print(f"input {fmt:<8} {row['input_size']} {count:>2} workers "
                      f"{row['samples_per_s']:8.2f} samples/s{_units(row)} "
                      f"({row['MB_per_s']} MB/s on disk)", flush=True)
        if workload.dali is not None:
            row = dali_case(workload, dict(sizes), root, n)
            result["input"].append(row)
            print(f"input npy/dali {row['input_size']} "
                  f"{row.get('samples_per_s', row.get('skipped'))} samples/s", flush=True)


def staging_case(folder: Path, repeats: int = 3) -> dict[str, Any]:
    """Staging a dataset (verify=size and =checksum) against `cp -r` of the same files.

    Each method copies into a fresh directory on the same file system, in rotating order,
    `repeats` times; medians are reported, plus the rerun that finds every file intact.
    """
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.parent != folder)
    total = sum(p.stat().st_size for p in files)
    times: dict[str, list[float]] = {"cp -r": [], "stage size": [], "stage checksum": []}
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".stage-bench-") as tmp:
        for i in range(repeats):
            for name in list(times)[i % 3:] + list(times)[:i % 3]:
                dst = Path(tmp) / name.replace(" ", "_")
                shutil.rmtree(dst, ignore_errors=True)
                start = time.perf_counter()
                if name == "cp -r":
                    subprocess.run(["cp", "-r", str(folder), str(dst)], check=True)
                else:
                    stage_files(files, folder, dst, workers=4, verify=name.split()[1],
                                progress=False)
                times[name].append(time.perf_counter() - start)
        start = time.perf_counter()
        rerun = stage_files(files, folder, Path(tmp) / "stage_size", progress=False)
        rerun_s = time.perf_counter() - start
    rows = {name: {"median_s": round(statistics.median(t), 3),
                   "MB_per_s": round(total / 1e6 / statistics.median(t), 1)}
            for name, t in times.items()}
    return {"files": len(files), "MB": round(total / 1e6, 1), "repeats": repeats,
            "methods": rows, "rerun_all_intact_s": round(rerun_s, 3),
            "rerun_skipped": rerun.skipped}


def scaling_case(workload: Workload, framework: str, root: Path,
                 epochs: int = 4) -> dict[str, Any]:
    """Mini training samples/s with 1 rank (2 threads) vs 2 ranks (1 thread each) on this
    host, through the real launcher; the first epoch (warm-up) is left out. The target is
    out of reach (every epoch runs)."""
    n = 256
    mini = compose([f"workload={workload.name}", "experiment=mini"])
    folder = _cases(workload).dataset(root, workload.model_spec(mini), "npy", n)
    never = 1e9 if workload.metric.higher_is_better else -1e9
    rows = []
    for ranks in (1, 2):
        with tempfile.TemporaryDirectory(prefix="sciperf-scaling-") as out:
            # TensorFlow's multi-rank path is Horovod, which needs MPI's rank environment
            launcher = (["launcher=mpirun", f"launcher.tasks_per_node={ranks}"]
                        if framework == "tensorflow" and ranks > 1
                        else ["launcher=local", f"launcher.nprocs={ranks}"])
            cmd = [sys.executable, "-m", "sciperf.cli", "launch", *launcher,
                   f"workload={workload.name}", "experiment=mini", f"framework={framework}",
                   f"data.dir={folder}", f"data.train_samples={n}",
                   f"data.eval_samples={n // 2}", f"train.max_epochs={epochs}",
                   f"train.target={never}", f"framework.threads={2 // ranks}",
                   f"output_dir={out}"]
            if framework == "tensorflow" and ranks > 1:
                cmd.append("distributed.backend=horovod")
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            summary_path = Path(out) / "summary.json"
            if not summary_path.is_file():
                rows.append({"ranks": ranks, "error": (proc.stderr.strip().splitlines()
                                                       or ["no summary"])[-1]})
                continue
            hist = json.loads(summary_path.read_text())["history"][1:]
            seconds = sum(h["train_s"] for h in hist)
            if not seconds:
                rows.append({"ranks": ranks, "error": "no timed epochs"})
                continue
            rows.append({"ranks": ranks, "threads_per_rank": 2 // ranks,
                         "samples_per_s": round(n * len(hist) / seconds, 2)})
    rates = [r.get("samples_per_s") for r in rows]
    speedup = rates[1] / rates[0] if all(rates) else None
    return {"framework": framework, "train_samples": n, "epochs_timed": epochs - 1,
            "runs": rows, "speedup_2_vs_1": round(speedup, 3) if speedup else None}


def bench(overrides: list[str]) -> int:
    """Run every case of the workload for the frameworks asked (framework=a,b) and write
    the JSON."""
    if stray := [o for o in overrides if "=" not in o]:  # was dropped: the whole bench ran
        raise SciperfError(f"Error parsing override '{stray[0]}': overrides are key=value")
    opts = dict(o.split("=", 1) for o in overrides)
    frameworks = opts.pop("framework", "pytorch").split(",")
    only = [c for c in opts.pop("bench.cases", "").split(",") if c]  # e.g. bench.cases=full
    precisions = [p for p in opts.pop("bench.precision", "fp32,bf16").split(",") if p]
    wrong = [p for p in precisions if p not in PRECISIONS]
    if wrong or not precisions:
        raise SciperfError(f"bench.precision={','.join(precisions)}: "
                           f"{wrong[0] if wrong else 'empty'} is not one of "
                           f"{', '.join(PRECISIONS)}")
    shape = {key: _positive(value, f"bench.{key}={value}") for key in ("samples", "batch", "epochs")
             if (value := opts.pop(f"bench.{key}", None)) is not None}
    asked = opts.pop("bench.workers", "")  # e.g. bench.workers=1,4,16
    workers = ([_positive(w, f"bench.workers={asked}") for w in asked.split(",")]
               if asked else worker_counts(cpu_count()))
    # every train row in a process of its own (bench.isolate=false: all in this one)
    isolate = _flag(opts.pop("bench.isolate", "true"), "bench.isolate")
    timed = isolated_train_case if isolate else train_case
    out = Path(opts.pop("output", "bench"))
    name = opts.get("workload", DEFAULT)
    workload = get(name)
    cases = _cases(workload)
    extra = [f"{k}={v}" for k, v in opts.items()]
    root = out / "data" / name
    result: dict[str, Any] = {"workload": name, "machine": machine(), "train": [],
                              "input": []}
    unknown = sorted(set(only) - set(cases.train) - {"input"})
    if unknown:
        raise SciperfError(f"bench.cases={','.join(only)}: {unknown[0]} is not one of "
                           f"{', '.join([*cases.train, 'input'])}")
    result["precision_auto"] = {fw: _auto_choice(fw, workload) for fw in frameworks}
    for fw, choice in result["precision_auto"].items():
        print(f"precision=auto ({fw}): {choice['precision']} ({choice['reason']})", flush=True)
    for fw in frameworks:
        for experiment in (e for e in cases.train if not only or e in only):
            for precision in precisions:
                row = timed(fw, experiment, precision, root, extra, shape)
                result["train"].append(row)
                _write(out, name, result, quiet=True)  # a later row killed (OOM) keeps it
                print(f"train {fw:<10} {experiment:<4} {precision:<4} "
                      f"{row['samples_per_s']:8.4g} samples/s, {row['seconds']:.1f} s, peak "
                      f"{row['peak_rss_MB']} MB{_units(row)}, "
                      f"{row['fraction_of_peak']:.1%} of the {precision} matmul peak"
                      f"{_epochs(row)}", flush=True)
    if not only or "input" in only:
        _input_rows(workload, root, result, workers)
    if cases.staging and not only:
        sizes, n = cases.input[-1]
        row = staging_case(cases.dataset(root, _input_model(workload, dict(sizes)), "npy", n))
        result["staging"] = row
        for method, m in row["methods"].items():
            print(f"staging {method:<15} {row['MB']} MB: {m['median_s']:.3f} s "
                  f"({m['MB_per_s']} MB/s)", flush=True)
    if cases.scaling and not only:
        result["scaling"] = []
        for fw in frameworks:
            row = scaling_case(workload, fw, root)
            result["scaling"].append(row)
            print(f"scaling {fw:<10} 1 vs 2 ranks: {row['runs']} speedup "
                  f"{row['speedup_2_vs_1']}", flush=True)
    return _write(out, name, result)


def _auto_choice(framework: str, workload: Workload) -> dict[str, Any]:
    """What `precision=auto` picks for this workload on this machine and why, beside the
    rows that time both precisions (the probe after the framework's thread setup, as in
    a run)."""
    runtime = load_backend(framework, workload.name).runtime
    runtime.setup_threads(0)
    return auto_precision.on_this_machine(auto_precision.AUTO, workload.hot_op,
                                          runtime).as_dict()


def _flag(value: str, name: str) -> bool:
    """`value` as true/false, or one line naming the override (`name`)."""
    if value.lower() not in ("true", "false"):
        raise SciperfError(f"{name}={value}: expected true or false")
    return value.lower() == "true"


def _positive(value: str, name: str) -> int:
    """`value` as a positive int, or one line naming the override (`name`)."""
    if not value.isdigit() or int(value) < 1:
        raise SciperfError(f"{name}: expected a positive integer")
    return int(value)


def _write(out: Path, workload: str, result: dict[str, Any], quiet: bool = False) -> int:
    """The JSON so far, written aside and renamed: a reader never sees half a file, and a
    run that dies later (a full row killed by the OOM killer) keeps the rows done."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{workload}.json"
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(result, indent=2))
    part.replace(path)
    if not quiet:
        print(f"wrote {path}")
    return 0
