"""CosmoFlow's `sciperf prepare` sources: synthetic universes, the reference TFRecords → npy,
or an existing dataset (every sample read and checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.data import conversion
from sciperf.data.layout import check_writable
from sciperf.data.loader import BatchLoader
from sciperf.data.sharding import shard
from sciperf.distributed import discover
from sciperf.progress import Progress
from sciperf.workloads.cosmoflow import data, synthetic
from sciperf.workloads.cosmoflow.data import SampleReader, list_samples

CONVERSION = data.CONVERSION  # the contract's Dataset.conversion


def _request(cfg: Any) -> synthetic.GenerateRequest:
    return synthetic.GenerateRequest(
        root=str(Path(cfg.data.dir).resolve()), fmt=cfg.data.format,
        train_samples=int(cfg.data.train_samples), eval_samples=int(cfg.data.eval_samples),
        size=int(cfg.model.input_size), seed=int(cfg.seed))


def prepare_synthetic(cfg: Any, force: bool = False) -> None:
    """Generate synthetic universes unless an identical complete set exists."""
    req = _request(cfg)
    if not force and synthetic.dataset_complete(req):
        print(f"dataset ready: {req.root} ({req.train_samples}+{req.eval_samples} "
              f"{req.fmt} samples, {req.size}³, seed {req.seed})")
        return
    check_writable(Path(req.root))
    synthetic.generate(req)
    print(f"wrote {req.train_samples}+{req.eval_samples} synthetic {req.fmt} universes "
          f"({req.size}³×4) to {req.root}")


def convert(cfg: Any, force: bool = False) -> None:
    """Reference TFRecords → npy beside them (:data:`CONVERSION`), spread over the ranks of
    a launched prepare."""
    root = Path(cfg.data.dir)
    check_writable(root)
    result = conversion.run(CONVERSION.for_config(cfg), root, force=force,
                            program="sciperf prepare", summary=False)
    if result.reports:
        skipped = f", {result.skipped} already converted" if result.skipped else ""
        print(f"converted {result.converted} tfrecord samples to npy under {root}{result.share}"
              f"{skipped}")


def verify_existing(cfg: Any, force: bool = False) -> None:
    """An existing dataset: both splits hold the requested samples, and every sample reads
    and passes the reader's checks (shape, counts ≥ 0, finite targets): one read of the
    dataset, each rank of a launched prepare its strided share. The DALI loader reads the
    npy files itself, without these checks, and relies on this pass (sciperf.data.dali)."""
    info = discover()
    fmt = str(cfg.data.format)
    reader = SampleReader(fmt, (int(cfg.model.input_size),) * 3 + (int(cfg.model.in_channels),))
    share = f"rank {info.rank}'s share" if info.world > 1 else "every sample"
    for split, n in (("train", cfg.data.train_samples), ("validation", cfg.data.eval_samples)):
        files = list_samples(cfg.data.dir, split, fmt, n)
        _read_all(shard(files, info.rank, info.world), reader, int(cfg.data.prepare_workers),
                  f"checking {split}")
        print(f"{cfg.data.dir}/{split}: {len(files)} {fmt} samples ({share} read and checked)")


def _read_all(files: list[Path], reader: SampleReader, workers: int, label: str) -> None:
    """Read `files` for the reader's checks alone: `workers` threads, a bounded window of
    samples in memory (the common loader, file order, one sample a batch)."""
    loader = BatchLoader(files, reader, 1, shuffle=False, prefetch=workers, workers=workers,
                         remainder="keep")
    bar = Progress(len(files), label)
    for _ in loader.epoch(0):
        bar.update()


SOURCES = {"synthetic": prepare_synthetic, "existing": verify_existing, "convert": convert}
