"""CosmoFlow's `sciperf prepare` sources: synthetic universes, or an existing dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.data.layout import check_writable
from sciperf.workloads.cosmoflow import synthetic
from sciperf.workloads.cosmoflow.data import list_samples


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


def verify_existing(cfg: Any, force: bool = False) -> None:
    """An existing dataset: both splits hold the requested samples."""
    for split, n in (("train", cfg.data.train_samples), ("validation", cfg.data.eval_samples)):
        files = list_samples(cfg.data.dir, split, cfg.data.format, n)
        print(f"{cfg.data.dir}/{split}: {len(files)} {cfg.data.format} samples")


SOURCES = {"synthetic": prepare_synthetic, "existing": verify_existing}
