"""DeepCAM's `sciperf prepare` sources: synthetic climate (+ stats.h5), hdf5 → npy
conversion, stats.h5 over an existing train split, or verification of existing data
(every sample read and checked)."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from sciperf.data import conversion
from sciperf.data.layout import check_writable
from sciperf.data.loader import BatchLoader
from sciperf.data.sharding import shard
from sciperf.distributed import discover
from sciperf.progress import Progress
from sciperf.workloads.deepcam import data as dc
from sciperf.workloads.deepcam import synthetic as climate

CONVERSION = dc.CONVERSION  # the contract's Dataset.conversion


def prepare_synthetic(cfg: Any, force: bool = False) -> None:
    """Synthetic climate samples and their stats.h5, unless an identical set exists."""
    root = Path(cfg.data.dir)
    req = climate.GenerateRequest(
        root=str(root.resolve()), fmt=cfg.data.format, train_samples=int(cfg.data.train_samples),
        eval_samples=int(cfg.data.eval_samples), height=int(cfg.model.height),
        width=int(cfg.model.width), seed=int(cfg.seed))
    if not force and climate.dataset_complete(req):
        print(f"dataset ready: {req.root} ({req.train_samples}+{req.eval_samples} {req.fmt} "
              f"samples, {req.height}×{req.width}×16, seed {req.seed})")
        return
    check_writable(root)
    freq = climate.generate(req)
    shares = ", ".join(f"{k} {v:.5f}" for k, v in freq.items())
    print(f"wrote {req.train_samples}+{req.eval_samples} synthetic {req.fmt} climate samples "
          f"({req.height}×{req.width}×16) and stats.h5 to {req.root}; train classes: {shares}")


def convert(cfg: Any, force: bool = False) -> None:
    """Reference hdf5 → npy beside it (:data:`CONVERSION`), spread over the ranks of a
    launched prepare."""
    root = Path(cfg.data.dir)
    check_writable(root)
    result = conversion.run(CONVERSION.for_config(cfg), root, force=force,
                            program="sciperf prepare", summary=False)
    if not result.reports:
        return
    skipped = f", {result.skipped} already converted" if result.skipped else ""
    stats_file = dc.stats_path(root)
    where = f"stats: {stats_file}" if stats_file.is_file() else \
        "no stats.h5 yet: data.source=stats computes it"
    print(f"converted {result.converted} hdf5 samples to npy under {root}{result.share}{skipped} "
          f"({where})")


def stats(cfg: Any, force: bool = False) -> None:
    """stats.h5 over an existing train split (e.g. a dataset that came without one), each
    rank of a launched `sciperf prepare` reading its share."""
    root = Path(cfg.data.dir)
    check_writable(root)
    info = discover()
    start = time.perf_counter()
    path = dc.parallel_stats(root, cfg.data.format, int(cfg.data.train_samples), info.rank,
                             info.world, workers=int(cfg.data.prepare_workers),
                             timeout_s=float(cfg.distributed.timeout_s))
    if path is not None:
        n = len(dc.list_samples(root, "train", cfg.data.format, int(cfg.data.train_samples)))
        print(f"wrote {path} over {n} {cfg.data.format} train samples with {info.world} "
              f"rank(s) in {time.perf_counter() - start:.1f} s")


def verify_existing(cfg: Any, force: bool = False) -> None:
    """Existing data: the files are there, stats.h5 is readable and finite, and every
    sample reads and passes the reader's checks (shape, finite data, labels 0..2): one read
    of the dataset, each rank of a launched prepare its strided share. The DALI loader
    reads the npy files itself, without these checks, and relies on this pass
    (sciperf.data.dali)."""
    root = Path(cfg.data.dir)
    dc.normalisation(dc.stats_path(root))
    info = discover()
    fmt = str(cfg.data.format)
    shape = (int(cfg.model.height), int(cfg.model.width), int(cfg.model.in_channels))
    share = f"rank {info.rank}'s share" if info.world > 1 else "every sample"
    for split, n in (("train", cfg.data.train_samples), ("validation", cfg.data.eval_samples)):
        files = dc.list_samples(root, split, fmt, n)
        mine = shard(files, info.rank, info.world)
        workers, bar = int(cfg.data.prepare_workers), Progress(len(mine), f"checking {split}")
        read = functools.partial(dc.read_raw, fmt=fmt, shape=shape)
        # threads, file order, about 2 × workers samples in memory
        for _ in BatchLoader(mine, read, 1, shuffle=False, prefetch=workers, workers=workers,
                             remainder="keep").epoch(0):
            bar.update()
        print(f"{root}/{split}: {len(files)} {fmt} samples ({share} read and checked)")


SOURCES = {"synthetic": prepare_synthetic, "existing": verify_existing, "convert": convert,
           "stats": stats}
