"""OC20's `sciperf prepare` sources: synthetic EMT slabs (both formats), the reference LMDB
→ npy shard conversion, or verification of existing data."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from sciperf.data import atomic
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


def convert(cfg: Any, force: bool = False) -> None:
    """Reference LMDB containers → npy shards beside them (same numbering), every record
    checked on the way; each rank of a launched prepare converts containers[rank::world]."""
    root = Path(cfg.data.dir)
    check_writable(root)
    info = discover()
    reader = data.StructureReader("lmdb", float(cfg.model.cutoff))
    every = [(split, c) for split in spec.SPLITS for c in data.containers(root, split, "lmdb")]
    if info.rank == 0:
        _remove_stale_shards(root, every)
    mine = every[info.rank::info.world]
    total = sum(data.record_count(c, "lmdb") for _, c in mine)
    bar = Progress(total, "lmdb → npy", unit="structures", enabled=True)
    for split, container in mine:
        number = container.name[len("data."):-len(".lmdb")]
        if not number.isdigit():
            raise SciperfError(f"{container}: not named data.NNNN.lmdb")
        n = data.record_count(container, "lmdb")
        structures = [reader(container / str(i)) for i in range(n)]
        data.write_shard(root / split / f"shard.{number}", structures)
        bar.update(n)
    reader.close()
    share = f" (rank {info.rank}'s share of {info.world})" if info.world > 1 else ""
    print(f"converted {total} structures in {len(mine)} LMDB files to npy shards under "
          f"{root}{share}")


def _remove_stale_shards(root: Path, lmdbs: list[tuple[str, Path]]) -> None:
    """Shards of an earlier conversion whose LMDB is gone: a run would read them as data."""
    wanted = {(split, c.name[len("data."):-len(".lmdb")]) for split, c in lmdbs}
    for split in spec.SPLITS:
        folder = root / split
        for shard in sorted(folder.glob("shard.*")) if folder.is_dir() else []:
            if (split, shard.name[len("shard."):]) not in wanted:
                shutil.rmtree(shard)
                print(f"removed {shard}: no {split}/data.{shard.name[len('shard.'):]}.lmdb "
                      "beside it (left from an earlier conversion)")


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
