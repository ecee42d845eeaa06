"""The bench's training row: samples/s of the real backend's training epochs (the path
`sciperf train` takes), with the row's memory peaks, threads, allocator, FLOPs and
fraction of the machine's matmul peak.

The row runs in whichever process calls it: :mod:`.isolation` gives it a process of its
own (the default), `bench.isolate=false` runs it in the bench's.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sciperf import allocator
from sciperf.backends import RunContext, load_backend
from sciperf.config import compose
from sciperf.config_keys import keys_with
from sciperf.errors import SciperfError
from sciperf.tools.bench.rows import _cases, _device, _per_unit, significant
from sciperf.tools.characterize import count_flops, counted_layers
from sciperf.workloads import get


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
            # autotuning once made some TensorFlow epochs end late:
            # bench/cpu-2026-11-26-epyc-zen5.md)
            "samples_per_s_by_epoch": per_epoch,
            **_per_unit(workload, workload.model_spec(cfg), folder, fmt, train, rate),
            "peak_flops": peak_flops, "train_flops_per_sample": flops,
            "achieved_flops": significant(rate * flops),
            # of the measured matmul peak: how far the model is from the machine's ceiling
            "fraction_of_peak": significant(rate * flops / peak_flops, 3)}


def _epochs(row: dict[str, Any]) -> str:
    """', epochs 3.68 / 3.12' where a row timed more than one epoch (old rows: nothing)."""
    rates = row.get("samples_per_s_by_epoch") or []
    return f", epochs {' / '.join(f'{r:.4g}' for r in rates)}" if len(rates) > 1 else ""
