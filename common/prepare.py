"""`sciperf prepare`: make the dataset a run needs, or verify the one a user points at."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sciperf.data import synthetic
from sciperf.data.cosmoflow import list_samples
from sciperf.distributed import discover
from sciperf.errors import SciperfError

SOURCES = ("synthetic", "existing")
DEEPCAM_SOURCES = ("synthetic", "existing", "convert", "stats")


def _request(cfg: Any) -> synthetic.GenerateRequest:
    return synthetic.GenerateRequest(
        root=str(Path(cfg.data.dir).resolve()), fmt=cfg.data.format,
        train_samples=int(cfg.data.train_samples), eval_samples=int(cfg.data.eval_samples),
        size=int(cfg.model.input_size), seed=int(cfg.seed))


def prepare(cfg: Any, force: bool = False) -> None:
    """Generate synthetic data unless an identical complete set exists; else verify."""
    if cfg.benchmark == "deepcam":
        prepare_deepcam(cfg, force)
        return
    if cfg.data.source not in SOURCES:
        raise SciperfError(f"data.source={cfg.data.source} is not one of {', '.join(SOURCES)}")
    if cfg.data.source == "existing":
        for split, n in (("train", cfg.data.train_samples), ("validation", cfg.data.eval_samples)):
            files = list_samples(cfg.data.dir, split, cfg.data.format, n)
            print(f"{cfg.data.dir}/{split}: {len(files)} {cfg.data.format} samples")
        return
    req = _request(cfg)
    if not force and synthetic.dataset_complete(req):
        print(f"dataset ready: {req.root} ({req.train_samples}+{req.eval_samples} "
              f"{req.fmt} samples, {req.size}³, seed {req.seed})")
        return
    _check_writable(Path(req.root))
    synthetic.generate(req)
    print(f"wrote {req.train_samples}+{req.eval_samples} synthetic {req.fmt} universes "
          f"({req.size}³×4) to {req.root}")


def prepare_deepcam(cfg: Any, force: bool = False) -> None:
    """DeepCAM: synthetic climate (+ stats.h5), hdf5 → npy conversion, or verification."""
    from sciperf.data import climate
    from sciperf.data import deepcam as dc

    source, root = cfg.data.source, Path(cfg.data.dir)
    if source not in DEEPCAM_SOURCES:
        raise SciperfError(f"data.source={source} is not one of {', '.join(DEEPCAM_SOURCES)}")
    if source == "convert":
        _check_writable(root)
        info = discover()
        count = dc.convert(root, rank=info.rank, world=info.world)
        share = f" (rank {info.rank}'s share of {info.world})" if info.world > 1 else ""
        print(f"converted {count} hdf5 samples to npy under {root}{share} "
              f"(stats: {dc.stats_path(root)})")
        return
    if source == "stats":
        _stats(cfg, root)
        return
    if source == "existing":
        _verify_deepcam(cfg)
        return
    req = climate.GenerateRequest(
        root=str(root.resolve()), fmt=cfg.data.format, train_samples=int(cfg.data.train_samples),
        eval_samples=int(cfg.data.eval_samples), height=int(cfg.model.height),
        width=int(cfg.model.width), seed=int(cfg.seed))
    if not force and climate.dataset_complete(req):
        print(f"dataset ready: {req.root} ({req.train_samples}+{req.eval_samples} {req.fmt} "
              f"samples, {req.height}×{req.width}×16, seed {req.seed})")
        return
    _check_writable(root)
    freq = climate.generate(req)
    shares = ", ".join(f"{k} {v:.5f}" for k, v in freq.items())
    print(f"wrote {req.train_samples}+{req.eval_samples} synthetic {req.fmt} climate samples "
          f"({req.height}×{req.width}×16) and stats.h5 to {req.root}; train classes: {shares}")


def _stats(cfg: Any, root: Path) -> None:
    """stats.h5 over an existing train split (e.g. a dataset that came without one), each
    rank of a launched `sciperf prepare` reading its share."""
    from sciperf.data import deepcam as dc

    _check_writable(root)
    info = discover()
    start = time.perf_counter()
    path = dc.parallel_stats(root, cfg.data.format, int(cfg.data.train_samples), info.rank,
                             info.world, workers=int(cfg.data.prepare_workers),
                             timeout_s=float(cfg.distributed.timeout_s))
    if path is not None:
        n = len(dc.list_samples(root, "train", cfg.data.format, int(cfg.data.train_samples)))
        print(f"wrote {path} over {n} {cfg.data.format} train samples with {info.world} "
              f"rank(s) in {time.perf_counter() - start:.1f} s")


def _verify_deepcam(cfg: Any) -> None:
    """Existing data: the files are there, the stats are readable, one sample fits."""
    from sciperf.data import deepcam as dc

    root = Path(cfg.data.dir)
    dc.normalisation(dc.stats_path(root))
    shape = (int(cfg.model.height), int(cfg.model.width), int(cfg.model.in_channels))
    for split, n in (("train", cfg.data.train_samples), ("validation", cfg.data.eval_samples)):
        files = dc.list_samples(root, split, cfg.data.format, n)
        dc.read_raw(files[0], cfg.data.format, shape)
        print(f"{root}/{split}: {len(files)} {cfg.data.format} samples")


def _check_writable(root: Path) -> None:
    if not os.access(_existing_ancestor(root), os.W_OK):
        raise SciperfError(f"data.dir={root} is not writable")


def _existing_ancestor(path: Path) -> Path:
    """The directory that decides whether `path` can be created (its nearest existing one)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
