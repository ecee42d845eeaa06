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
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sciperf import allocator
from sciperf import precision as auto_precision
from sciperf.backends import RunContext, load_backend
from sciperf.config import PRECISIONS, compose, key_roles, keys_with
from sciperf.data.layout import check_output_dir
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
    """Samples/s of train_epoch after one warm-up epoch (the real backend path), on the
    workload's fastest format, from the model's own initialisation (every file the run
    would read is set empty unless the bench's overrides name it: a row's speed does not
    depend on the weights, and the timing data has none).

    `shape` replaces the case's `samples`, `batch` or `epochs` (``bench.samples=`` …): the
    cases are sized for a 2-core CPU, where a GPU times two full steps in milliseconds."""
    base = compose([f"experiment={experiment}", f"framework={framework}"] + extra)
    workload = get(base.workload)
    cases = _cases(workload)
    extra = [*(f"{key}=" for key in keys_with("reads", workload)
               if OmegaConf.select(base, key, default=None)), *extra]
    case = cases.train[experiment]
    sized = case._asdict() | (shape or {})
    n, gbs, epochs = sized["samples"], sized["batch"], sized["epochs"]
    n_eval = max(n // 2, 1)
    fmt = workload.formats[-1]
    folder = cases.dataset(root, workload.model_spec(base), fmt, n)
    epoch = workload.plan.epoch_overrides(n, gbs)  # an epoch of n samples in batches of gbs
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
    warm = case.warm_up
    if warm:
        backend.train_epoch(0, workload.lr_for_epoch(cfg, 0))  # allocations, kernels
    samples, seconds, per_epoch = 0, 0.0, []
    for epoch in range(int(warm), epochs + int(warm)):
        result = backend.train_epoch(epoch, workload.lr_for_epoch(cfg, epoch))
        samples, seconds = samples + result.samples, seconds + result.seconds
        per_epoch.append(significant(result.samples / result.seconds)
                         if result.seconds else 0.0)
    if not samples or not seconds:  # a row of zeros would read as a measured rate
        raise SciperfError(f"bench row {framework} {experiment} {precision}: no training "
                           f"samples were timed ({n} samples in batches of {gbs})")
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
            **_per_unit(workload, workload.model_spec(cfg), folder, fmt, train, rate),
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
                        args=(send, framework, experiment, precision, str(root), extra, shape,
                              os.getpid()))
    try:  # Ctrl-C from here on stops the child: between its start and the wait a
        # KeyboardInterrupt left it running, and the exit joined the whole row
        child.start()
        send.close()
        try:
            reply = json.loads(recv.recv_bytes())
        except EOFError:  # died without a word: a signal
            reply = None
        child.join()
    except BaseException:
        # SIGTERM (Terminated) or Ctrl-C while the row runs: the parent decides, the row
        # stops now (multiprocessing would join a live child at exit: the whole row ran on)
        stop_child(child)
        raise
    what = f"bench row {framework} {experiment} {precision}"
    if reply is None:
        raise SciperfError(f"{what}: its process ended with {_ended(child.exitcode)}")
    if "error" in reply:
        raise SciperfError(f"{what}: {reply['error']}")
    return reply["row"]


def stop_child(child: Any, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`: a row stuck in a kernel still ends."""
    if child.is_alive():
        child.terminate()
        child.join(grace_s)
    if child.is_alive():
        child.kill()
        child.join()


def _child_row(send: Any, framework: str, experiment: str, precision: str, root: str,
               extra: list[str], shape: dict[str, int] | None, parent: int = 0) -> None:
    """The spawned process of :func:`isolated_train_case`: one row, sent back as JSON.

    Ctrl-C reaches the whole process group: the child ignores it and the parent stops it
    (one line, not the child's KeyboardInterrupt traceback beside the parent's). A parent
    gone (killed) leaves nobody to read the row: the child ends rather than time on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent:
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    try:
        row = {"row": train_case(framework, experiment, precision, Path(root), extra, shape)}
    except SciperfError as exc:
        row = {"error": str(exc)}
    try:
        send.send_bytes(json.dumps(row).encode())
        send.close()
    except (BrokenPipeError, ConnectionResetError):  # the parent left: nobody to tell
        return


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """Ends this process once `parent` is no longer its parent (it died; the orphan was
    re-parented)."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


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


def _per_unit(workload: Workload, model: Any, folder: Path, fmt: str, samples: list[Path],
              rate: float) -> dict[str, float]:
    """`<unit>_per_s` for the sizes that vary between samples (``Cost.on_data``'s units: an
    OC20 structure's atoms): samples/s alone would rank a run on small graphs first."""
    if workload.cost.on_data is None:
        return {}
    means = workload.cost.on_data(model, folder, fmt, samples).units
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


INPUT_BATCH = 4  # the loader rows' batch (bench.batch= replaces it)
INPUT_PREFETCH = 4  # batches the loader rows queue ahead (BatchLoader's default)
INPUT_PASSES = 2  # timed passes of a loader row after the warm-up (bench.epochs=)


def usable_workers(workers: int, n: int, batch: int, prefetch: int = INPUT_PREFETCH) -> int:
    """Reader threads that can be busy at once: the loader keeps at most
    batch × (prefetch + 1) reads in flight, and never more than the `n` samples — a row
    labelled 16 workers over 8 samples timed 8."""
    return max(1, min(workers, n, batch * (prefetch + 1)))


def input_case(workload: Workload, sizes: dict[str, Any], fmt: str, root: Path,
               n: int, workers: int = 2, batch: int = INPUT_BATCH, passes: int = 1,
               warm_up: bool = False) -> dict[str, Any]:
    """Samples/s of the common prefetching loader alone (read + decode + the workload's
    collate) over one format of the workload, with `workers` reader threads (as many as
    can be busy: :func:`usable_workers`), over `passes` timed passes; `warm_up`: one
    untimed pass first (the page cache, lazy imports: the first row of a format was
    otherwise the cold one)."""
    cases, model = _cases(workload), _input_model(workload, sizes)
    folder = cases.dataset(root, model, fmt, n)
    files = workload.dataset.list_samples(folder, "train", fmt, n)
    items: Sequence[Any] = files
    cfg = compose([f"workload={workload.name}", "train.global_batch_size=1",
                   *workload.plan.epoch_overrides(n, 1)])
    if (drawn := workload.plan.draws(files, cfg, 0, 1, 1)) is not None:
        items = drawn.items(0)  # training items as the workload's sampler draws them
    used = usable_workers(workers, len(items), batch)
    loader = BatchLoader(items, workload.dataset.reader(folder, fmt, model), batch_size=batch,
                         workers=used, prefetch=INPUT_PREFETCH, remainder="keep",
                         collate=workload.dataset.collate)
    if warm_up:
        _input_pass(loader, 0)
    count, seconds, by_pass = 0, 0.0, []
    for epoch in range(int(warm_up), passes + int(warm_up)):
        start = time.perf_counter()
        done = _input_pass(loader, epoch)
        took = time.perf_counter() - start
        count, seconds = count + done, seconds + took
        by_pass.append(round(done / took, 2))
    # each file once: samples packed in one container file all name it
    mb = sum(f.stat().st_size for f in dict.fromkeys(
        f for p in files for f in workload.dataset.sample_files(p, fmt))) / 1e6
    return {"format": fmt, "input_size": cases.size(model), "workers": used,
            **({"workers_asked": workers} if used != workers else {}),
            "batch": batch, "prefetch": INPUT_PREFETCH, "device": _device("cpu"),
            "samples": count, "passes": passes, "warm_up": warm_up,
            "seconds": round(seconds, 3), "samples_per_s": round(count / seconds, 2),
            **({"samples_per_s_by_pass": by_pass} if passes > 1 else {}),
            **_per_unit(workload, model, folder, fmt, files, count / seconds),
            "MB_per_s": round(mb * passes / seconds, 1)}


def _input_pass(loader: BatchLoader, epoch: int) -> int:
    """One pass of the loader: the samples it yielded (batches may be dicts of
    variable-size arrays, graphs: the loader's batch sizes count them)."""
    return sum(size for size, _ in zip(loader.sizes, loader.epoch(epoch), strict=True))


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


def _input_rows(workload: Workload, root: Path, result: dict[str, Any], workers: list[int],
                shape: dict[str, int], save: Any) -> None:
    """Every format at every input size the cases name over each loader worker count, then
    DALI where it applies. bench.samples/batch/epochs replace the samples, the loader's
    batch and the timed passes; a worker count no more of which can be busy than of one
    already timed is skipped, saying so (it would time the same loader again)."""
    batch = shape.get("batch", INPUT_BATCH)
    passes = shape.get("epochs", INPUT_PASSES)
    for sizes, case_n in _cases(workload).input:
        n = shape.get("samples", case_n)
        for fmt in workload.formats:
            timed: set[int] = set()
            for count in workers:
                if (used := usable_workers(count, n, batch)) in timed:
                    print(f"input {fmt:<8} {count:>2} workers: skipped, at most {used} reads "
                          f"in flight ({n} samples, batch {batch} × (prefetch "
                          f"{INPUT_PREFETCH} + 1))", flush=True)
                    continue
                timed.add(used)
                row = input_case(workload, dict(sizes), fmt, root, n, count, batch, passes,
                                 warm_up=len(timed) == 1)
                result["input"].append(row)
                save()
                print(f"input {fmt:<8} {row['input_size']} {used:>2} workers "
                      f"{row['samples_per_s']:8.2f} samples/s{_units(row)} "
                      f"({row['MB_per_s']} MB/s on disk)", flush=True)
        if workload.dali is not None:
            row = dali_case(workload, dict(sizes), root, n)
            result["input"].append(row)
            save()
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


# what a 1-vs-2-rank row sets itself (a bench override of these is not taken there)
SCALING_SETS = ("experiment", "framework", "framework.threads", "train.max_epochs",
                "train.target", "distributed.backend")


def scaling_overrides(extra: list[str]) -> tuple[list[str], list[str]]:
    """The bench's config overrides split into those the 1-vs-2-rank rows take and those
    they set themselves (thread layout, epochs, target, launcher): the rows ran the
    default config whatever was given (`framework.malloc=…` timed the training rows
    only)."""
    def key(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")

    def own(override: str) -> bool:
        return key(override) in SCALING_SETS or key(override).split(".")[0] == "launcher"
    extra = [o for o in extra if key(o) != "workload"]  # how the bench picked the rows'
    return [o for o in extra if not own(o)], [o for o in extra if own(o)]


def scaling_case(workload: Workload, framework: str, root: Path, epochs: int = 4,
                 extra: list[str] | None = None) -> dict[str, Any]:
    """Mini training samples/s with 1 rank (2 threads) vs 2 ranks (1 thread each) on this
    host, through the real launcher; the first epoch (warm-up) is left out. The target is
    out of reach (every epoch runs). The bench's config overrides are taken, but for the
    keys the row sets itself (recorded as `overrides_replaced`)."""
    taken, replaced = scaling_overrides(extra or [])
    n = 256
    mini = compose([f"workload={workload.name}", "experiment=mini", *taken])
    folder = _cases(workload).dataset(root, workload.model_spec(mini), "npy", n)
    # met only by a perfect model (a target outside the metric's values is refused)
    never = workload.metric.span[1 if workload.metric.higher_is_better else 0]
    rows = []
    for ranks in (1, 2):
        with tempfile.TemporaryDirectory(prefix="sciperf-scaling-") as out:
            # TensorFlow's multi-rank path is Horovod, which needs MPI's rank environment
            launcher = (["launcher=mpirun", f"launcher.tasks_per_node={ranks}"]
                        if framework == "tensorflow" and ranks > 1
                        else ["launcher=local", f"launcher.nprocs={ranks}"])
            cmd = [sys.executable, "-m", "sciperf.cli", "launch", *launcher, *taken,
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
            summary = json.loads(summary_path.read_text())
            hist = summary["history"][1:]
            seconds = sum(h["train_s"] for h in hist)
            if not seconds:
                rows.append({"ranks": ranks, "error": "no timed epochs"})
                continue
            rows.append({"ranks": ranks, "threads_per_rank": 2 // ranks,
                         # precision=auto, as a run takes it: what it chose and where
                         "precision": summary.get("precision"),
                         "device": _device(summary.get("versions", {}).get("device", "cpu")),
                         "samples_per_s": round(n * len(hist) / seconds, 2)})
    rates = [r.get("samples_per_s") for r in rows]
    speedup = rates[1] / rates[0] if all(rates) else None
    return {"framework": framework, "precision_asked": "auto", "train_samples": n,
            "epochs_timed": epochs - 1, "overrides": taken, "overrides_replaced": replaced,
            "runs": rows,
            "speedup_2_vs_1": round(speedup, 3) if speedup else None}


# the bench's own keys (the rest are config overrides every training row takes)
BENCH_KEYS = ("bench.cases", "bench.precision", "bench.samples", "bench.batch",
              "bench.epochs", "bench.workers", "bench.isolate", "bench.rounds")


def set_by_bench(workload: Workload) -> dict[str, str]:
    """Config keys each row sets itself (their role's ``bench``, sciperf.roles) → the bench
    option that says it: an override of one changed what a row measured while its labels
    kept the bench's values (`bench.precision=bf16 precision=fp32` timed fp32 in a row
    labelled bf16)."""
    return {key: r.bench for key, r in key_roles(workload).items() if r.bench}


@dataclass
class Plan:
    """What one `sciperf bench` times, every value checked before the first row."""

    name: str
    workload: Workload
    frameworks: list[str]
    only: list[str]  # bench.cases (empty: every case)
    precisions: list[str]
    shape: dict[str, int]  # bench.samples / batch / epochs given
    workers: list[int]
    isolate: bool
    out: Path
    extra: list[str]  # the config overrides of every training row
    rounds: int = 1  # bench.rounds: every training row once per round, interleaved
    precision_given: bool = False  # bench.precision named on the command line

    @property
    def experiments(self) -> list[str]:
        """The training cases that run, in the workload's order."""
        return [e for e in _cases(self.workload).train if not self.only or e in self.only]

    @property
    def train_rows(self) -> list[tuple[str, str, str]]:
        """(framework, case, precision) of one round's training rows, in the order timed."""
        return [(fw, experiment, precision) for fw in self.frameworks
                for experiment in self.experiments for precision in self.precisions]

    @property
    def runs(self) -> list[str]:
        """Every case that runs, by name (recorded in the JSON: a bench.cases=input file
        is not mistaken for a whole bench)."""
        cases = _cases(self.workload)
        return [*self.experiments, *(["input"] if not self.only or "input" in self.only else []),
                *([] if self.only else cases.rows)]

    def asked(self) -> dict[str, Any]:
        """The cases and options of this bench, as the JSON records them."""
        return {"cases": self.runs, "frameworks": self.frameworks,
                "precisions": self.precisions,
                **self.shape, "workers": self.workers,
                "isolate": self.isolate, "rounds": self.rounds, "overrides": self.extra}


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
    except SciperfError as exc:  # a row failed: the one line says where the others are
        err = SciperfError(f"{exc} ({files.left()})")
        err.exit_code = exc.exit_code
        raise err from exc
    except BaseException as exc:  # Ctrl-C, SIGTERM: the CLI's line names what is left
        exc.sciperf_records = files.left()  # type: ignore[attr-defined]
        raise
    result["complete"] = True
    files.finish(result)
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


def plan_bench(overrides: list[str]) -> Plan:
    """The bench's options, each checked in one line before any row runs (a typo, a key
    the bench sets itself, sizes that do not divide or an unusable output folder were
    found after minutes of rows, or not at all)."""
    opts = _options(overrides)
    out = _output(opts)
    name = opts.get("workload", DEFAULT)
    workload = get(name)
    own = set_by_bench(workload)
    for key in opts:
        if key.startswith("bench.") and key not in BENCH_KEYS:
            raise SciperfError(f"{key}={opts[key]}: not a bench option (they are "
                               f"{', '.join(BENCH_KEYS)})")
        if (bare := key.lstrip("+~")) in own:
            raise SciperfError(f"{key}={opts[key]}: the bench sets {bare} for each row "
                               f"itself; use {own[bare]}")
    cases = _cases(workload)
    frameworks = _list(opts, "framework", "pytorch")
    only = _list(opts, "bench.cases", None, [*cases.train, "input"])
    precision_given = "bench.precision" in opts
    precisions = _list(opts, "bench.precision", "fp32,bf16", list(PRECISIONS))
    shape = {key: _positive(value, f"bench.{key}={value}") for key in ("samples", "batch", "epochs")
             if (value := opts.pop(f"bench.{key}", None)) is not None}
    asked = opts.get("bench.workers")  # e.g. bench.workers=1,4,16
    workers = ([_positive(w, f"bench.workers={asked}")
                for w in _list(opts, "bench.workers", None)] if asked is not None
               else worker_counts(cpu_count()))
    # every train row in a process of its own (bench.isolate=false: all in this one)
    isolate = _flag(opts.pop("bench.isolate", "true"), "bench.isolate")
    rounds = opts.pop("bench.rounds", None)
    plan = Plan(name, workload, frameworks, only, precisions, shape, workers, isolate, out,
                [f"{k}={v}" for k, v in opts.items()],
                1 if rounds is None else _positive(rounds, f"bench.rounds={rounds}"),
                precision_given)
    if rounds is not None and not plan.experiments:
        raise SciperfError(f"bench.rounds={rounds}: bench.cases={','.join(plan.only)} times "
                           "no training row, and rounds repeat the training rows")
    _check_sizes(plan)
    _check_overrides(plan)
    check_output_dir(out, "output=")
    return plan


def _options(overrides: list[str]) -> dict[str, str]:
    """key → value of the command line; a word without `=` or a key given twice is one
    line (the last of two values was taken in silence)."""
    if stray := [o for o in overrides if "=" not in o]:  # was dropped: the whole bench ran
        raise SciperfError(f"Error parsing override '{stray[0]}': overrides are key=value")
    opts: dict[str, str] = {}
    for key, value in (o.split("=", 1) for o in overrides):
        if key in opts:
            raise SciperfError(f"{key} is given twice ({key}={opts[key]}, {key}={value})")
        opts[key] = value
    return opts


def _output(opts: dict[str, str]) -> Path:
    """The bench's folder (`output=`, default ./bench); `output_dir=` (the train key) was
    ignored, and an empty `output=` wrote the JSON and data/ into the working folder."""
    if "output_dir" in opts:
        raise SciperfError(f"output_dir={opts['output_dir']}: the bench's folder is "
                           "output= (default bench)")
    out = opts.pop("output", "bench")
    if not out.strip():
        raise SciperfError("output= is empty: name the bench's folder (default bench)")
    return Path(out)


def _list(opts: dict[str, str], key: str, default: str | None,
          choices: list[str] | None = None) -> list[str]:
    """A comma list option popped from `opts`: an empty value or item (`bench.cases=,`
    ran every case) and a repeated item (`bench.workers=1,1` timed one row twice) are one
    line; `choices`, where given, are the only names taken."""
    value = opts.pop(key, default)
    if value is None:
        return []
    items = value.split(",")
    if any(not item.strip() for item in items):
        raise SciperfError(f"{key}={value}: an empty name" + (
            f"; name one or more of {', '.join(choices)}" if choices else ""))
    if dup := next((i for n, i in enumerate(items) if i in items[:n]), None):
        raise SciperfError(f"{key}={value}: {dup} is named twice")
    if choices and (wrong := [i for i in items if i not in choices]):
        raise SciperfError(f"{key}={value}: {wrong[0]} is not one of {', '.join(choices)}")
    return items


def _check_sizes(plan: Plan) -> None:
    """Each training row's samples and batch: whole batches of the training samples and
    (where the validation loader takes whole batches) of the validation half, and at
    least one batch (`bench.samples=2 bench.batch=4` wrote a row of zeros; 20 in batches
    of 8 was a child's traceback)."""
    cases, data_plan = _cases(plan.workload), plan.workload.plan
    for experiment in plan.experiments:
        sized = cases.train[experiment]._asdict() | plan.shape
        n, gbs = sized["samples"], sized["batch"]
        what = (f"{_named('samples', n, plan.shape, experiment)}, "
                f"{_named('batch', gbs, plan.shape, experiment)}")
        if gbs > n:
            raise SciperfError(f"{what}: the batch is larger than the samples (a training "
                               "row takes whole batches)")
        if n % gbs:
            raise SciperfError(f"{what}: {n} samples do not divide into batches of {gbs} "
                               "(a training row takes whole batches)")
        eval_batch = data_plan.eval_batch(gbs)
        if data_plan.eval_remainder == "error" and max(n // 2, 1) % eval_batch:
            raise SciperfError(f"{what}: the {max(n // 2, 1)} validation samples (half) do "
                               f"not divide into batches of {eval_batch} ({plan.name} takes "
                               f"whole batches); use a multiple of {2 * eval_batch} samples")


def _named(key: str, value: int, shape: dict[str, int], experiment: str) -> str:
    """`bench.samples=20`, or `the mini case's 64 samples` where the case set it."""
    return f"bench.{key}={value}" if key in shape else f"the {experiment} case's {key}={value}"


def _check_overrides(plan: Plan) -> None:
    """The config overrides, composed once per framework and training case before any
    row: a typo (`train.foo=3`, `no_such_key=1`) was one child's traceback per row, or
    never looked at when no training row ran."""
    cases = _cases(plan.workload)
    for fw in plan.frameworks:
        for experiment in plan.experiments or [next(iter(cases.train))]:
            compose([f"experiment={experiment}", f"framework={fw}",
                     *([] if "workload" in (o.split("=")[0] for o in plan.extra)
                       else [f"workload={plan.name}"]), *plan.extra])
    unused = [o for o in plan.extra if not o.startswith("workload=")]
    if unused and not plan.experiments:
        raise SciperfError(f"{unused[0]}: bench.cases={','.join(plan.only)} times no "
                           "training row, and only training rows take config overrides")


class Outputs:
    """`<workload>.json` and the partial file the rows land in until the bench
    completes."""

    def __init__(self, out: Path, workload: str) -> None:
        self.path = out / f"{workload}.json"
        self.partial = out / f"{workload}.json.partial"

    def clear_partial(self) -> None:
        """A partial file of an earlier bench is not this bench's rows."""
        self.partial.unlink(missing_ok=True)

    def save(self, result: dict[str, Any]) -> None:
        """The rows so far, in the partial file (a later row killed, OOM, keeps them)."""
        _write_json(self.partial, result)

    def finish(self, result: dict[str, Any]) -> None:
        """The complete bench replaces `<workload>.json`; the partial file goes."""
        _write_json(self.path, result)
        self.partial.unlink(missing_ok=True)
        print(f"wrote {self.path}")

    def left(self) -> str:
        """What an unfinished bench left, in words."""
        kept = f"{self.path} is as it was" if self.path.exists() else f"no {self.path}"
        if self.partial.exists():
            return f"the rows done are in {self.partial}; {kept}"
        return f"no row finished; {kept}"


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


def _round(n: int, rounds: int) -> str:
    """`, round 2/5` on a row's line when the bench runs rounds."""
    return f", round {n}/{rounds}" if rounds > 1 else ""


def round_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each training row's rate over the rounds: the median, the spread (fastest over
    slowest round) and its ratio to the round's first row of the same case, round by
    round and their median.

    Why pairs: a shared VM's speed drifts by a quarter from one minute to the next (a
    whole model step 3.6–5.1 s with nothing else running), as much as the differences
    between frameworks and precisions a user compares; rows timed back to back in one
    round see the same machine, so their ratio holds where the rates themselves do
    not."""
    rate = {(row["round"], _key(row)): float(row["samples_per_s"]) for row in rows}
    rounds = sorted({n for n, _ in rate})
    keys = [key for n, key in rate if n == rounds[0]]
    lines = []
    for key in keys:
        base_key = next(k for k in keys if k[1] == key[1])
        rates = [rate[n, key] for n in rounds]
        bases = [rate[n, base_key] for n in rounds]
        if min(rates + bases) <= 0:  # (a row that timed nothing has no ratio)
            continue
        ratios = [r / b for r, b in zip(rates, bases, strict=True)]
        lines.append({"framework": key[0], "model": key[1], "precision": key[2],
                      "samples_per_s": rates,
                      "median_samples_per_s": significant(statistics.median(rates)),
                      "spread": round(max(rates) / min(rates), 3),
                      "vs": " ".join(base_key), "ratio": [round(r, 4) for r in ratios],
                      "median_ratio": round(statistics.median(ratios), 4)})
    return lines


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["framework"], row["model"], row["precision"]


def _write_json(path: Path, result: dict[str, Any]) -> None:
    """`result` written aside and renamed: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(result, indent=2))
    part.replace(path)
