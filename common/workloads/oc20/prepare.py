"""OC20's `sciperf prepare` sources: synthetic EMT slabs (both formats), the reference LMDB
→ npy shard conversion, or verification of existing data."""

from __future__ import annotations

import functools
import os
import shutil
import time
from pathlib import Path
from typing import Any

from sciperf.data import atomic, conversion
from sciperf.data.conversion import Conversion, Job
from sciperf.data.layout import check_writable
from sciperf.data.sharding import shard as rank_shard
from sciperf.distributed import discover
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads.oc20 import data, spec, synthetic


def prepare_synthetic(cfg: Any, force: bool = False) -> None:
    """EMT slabs in the reference LMDB format and the npy shards, unless identical ones
    exist; prints the training forces' statistics (the normaliser a mini config uses)."""
    req = synthetic.request_from_config(cfg)
    req.check()  # before data.dir is created: a refused request leaves no empty folder
    if not force and synthetic.dataset_complete(req):
        print(f"dataset ready: {req.root} ({req.train_samples}+{req.eval_samples} EMT slabs, "
              f"lmdb + npy, seed {req.seed})")
        return
    root = Path(cfg.data.dir)
    check_writable(root)
    with atomic.failing_as(root):
        root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    workers = min(int(cfg.data.prepare_workers), os.cpu_count() or 1)
    stats = synthetic.generate(req, workers=workers)
    print(f"wrote {req.train_samples}+{req.eval_samples} EMT slabs ({'/'.join(req.metals)}, "
          f"{'×'.join(map(str, req.slab))}, cutoff {req.cutoff} Å, ≤{req.max_neighbours} "
          f"neighbours) as lmdb + npy to {req.root} in {time.perf_counter() - start:.1f} s; "
          f"free-atom forces: std {stats['force_std']:.4f} eV/Å, MAE of predicting zero "
          f"{stats['force_mae_of_zero']:.4f} eV/Å")


def _jobs(root: Path) -> list[Job]:
    """Every reference container of both splits and the npy shard of its number."""
    jobs = []
    for split in spec.SPLITS:
        for container in data.containers(root, split, "lmdb"):
            number = container.name[len("data."):-len(".lmdb")]
            if not number.isdigit():
                raise SciperfError(f"{container}: not named data.NNNN.lmdb")
            jobs.append(Job(container, (root / split / f"shard.{number}",)))
    return jobs


def _convert_container(job: Job, cutoff: float) -> int:
    """One LMDB container as its npy shard, every record checked on the way (edges
    against `cutoff`); returns its structures."""
    reader = data.StructureReader("lmdb", cutoff)
    try:
        n = data.record_count(job.source, "lmdb")
        structures = [reader(job.source / str(i)) for i in range(n)]
    finally:
        reader.close()
    data.write_shard(job.outputs[0], structures)
    return n


def _remove_stale_shards(root: Path) -> None:
    """Shards of an earlier conversion whose LMDB is gone: a run would read them as data."""
    for split in spec.SPLITS:
        folder = root / split
        if not folder.is_dir():
            continue
        for shard in sorted(folder.glob("shard.*")):
            number = shard.name[len("shard."):]
            if not (folder / f"data.{number}.lmdb").is_file():
                shutil.rmtree(shard)
                print(f"removed {shard}: no {split}/data.{number}.lmdb beside it (left from "
                      "an earlier conversion)")


def _conversion(cutoff: float) -> Conversion:
    """Reference LMDB containers → npy shards beside them (same numbering), every record
    checked against the model's `cutoff`."""
    return Conversion(source="lmdb", target="npy", jobs=_jobs,
                      convert=functools.partial(_convert_container, cutoff=cutoff),
                      before=_remove_stale_shards, unit="structures",
                      configure=lambda cfg: _conversion(float(cfg.model.cutoff)))


CONVERSION = _conversion(spec.ModelSpec.cutoff)  # the contract's Dataset.conversion


def convert(cfg: Any, force: bool = False) -> None:
    """Reference LMDB containers → npy shards beside them (:data:`CONVERSION` for the
    model's cutoff), spread over the ranks of a launched prepare."""
    root = Path(cfg.data.dir)
    check_writable(root)
    result = conversion.run(CONVERSION.for_config(cfg), root, force=force,
                            program="sciperf prepare", summary=False)
    if result.reports:
        skipped = f"; {result.skipped} already converted" if result.skipped else ""
        print(f"converted {result.samples} structures in {result.converted} LMDB files to "
              f"npy shards under {root}{result.share}{skipped}")


def verify_existing(cfg: Any, force: bool = False) -> None:
    """Existing data: the split holds the structures asked for, and every structure reads
    and passes the reader's checks (fields, shapes, NaN/Inf, a free atom, edges within the
    cutoff) — one read of the dataset, each rank of a launched prepare its strided share
    (a NaN in the middle of a container passed when only its ends were read)."""
    root = Path(cfg.data.dir)
    fmt = str(cfg.data.format)
    info = discover()
    reader = data.StructureReader(fmt, float(cfg.model.cutoff))
    share = f"rank {info.rank}'s share" if info.world > 1 else "every structure"
    try:
        for split, n in (("train", cfg.data.train_samples),
                         ("validation", cfg.data.eval_samples)):
            files = data.list_samples(root, split, fmt, int(n))
            mine = rank_shard(files, info.rank, info.world)
            bar = Progress(len(mine), f"checking {split}", unit="structures")
            for path in mine:
                reader(path)
                bar.update()
            print(f"{root}/{split}: {len(files)} {fmt} structures ({share} read and checked)")
    finally:
        reader.close()


SOURCES = {"synthetic": prepare_synthetic, "existing": verify_existing, "convert": convert}
