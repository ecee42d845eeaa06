"""The bench's input rows: samples/s of the common prefetching loader over each on-disk
format, input size and loader worker count, and of the DALI pipeline where the workload
has one.

The loader's batch, prefetch depth and timed passes are this module's (`bench.batch=`,
`bench.epochs=` replace the first and last), and so is the rule of how many reader
threads can be busy at once, which the options take to pick default worker counts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sciperf.config import compose
from sciperf.data.loader import BatchLoader
from sciperf.tools.bench.rows import _cases, _device, _input_model, _per_unit, _units
from sciperf.workloads.base import Workload

INPUT_BATCH = 4  # the loader rows' batch (bench.batch= replaces it)
INPUT_PREFETCH = 4  # batches the loader rows queue ahead (BatchLoader's default)
INPUT_PASSES = 2  # timed passes of a loader row after the warm-up (bench.epochs=)


def worker_counts(cores: int) -> list[int]:
    """1, 2, 4, … loader workers up to (and including) `cores`: whether the loader can feed
    a GPU's rate shows as the curve, not one point."""
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    return sorted({*counts, max(cores, 1)})


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
