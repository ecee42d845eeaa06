"""`sciperf prepare`: make the dataset a run needs, or verify the one a user points at."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sciperf.data import synthetic
from sciperf.data.cosmoflow import list_samples
from sciperf.errors import SciperfError

SOURCES = ("synthetic", "existing")


def _request(cfg: Any) -> synthetic.GenerateRequest:
    return synthetic.GenerateRequest(
        root=str(Path(cfg.data.dir).resolve()), fmt=cfg.data.format,
        train_samples=int(cfg.data.train_samples), eval_samples=int(cfg.data.eval_samples),
        size=int(cfg.model.input_size), seed=int(cfg.seed))


def prepare(cfg: Any, force: bool = False) -> None:
    """Generate synthetic universes unless an identical complete set exists; else verify."""
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
    if not os.access(_existing_ancestor(Path(req.root)), os.W_OK):
        raise SciperfError(f"data.dir={req.root} is not writable")
    synthetic.generate(req)
    print(f"wrote {req.train_samples}+{req.eval_samples} synthetic {req.fmt} universes "
          f"({req.size}³×4) to {req.root}")


def _existing_ancestor(path: Path) -> Path:
    """The directory that decides whether `path` can be created (its nearest existing one)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
