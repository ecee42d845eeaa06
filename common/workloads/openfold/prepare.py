"""OpenFold's `sciperf prepare` sources: learnable synthetic proteins in the reference's
processed layout, or verification of an existing processed dataset (the reference's
download, or an earlier synthetic one)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sciperf.data.layout import check_writable
from sciperf.progress import Progress
from sciperf.workloads.openfold import data, layout, pretrain, synthetic


def _request_knobs(cfg: Any) -> dict[str, Any]:
    d = cfg.data
    return {"min_length": int(d.min_length), "max_length": int(d.max_length),
            "msa_depth": int(d.msa_depth), "templates": bool(d.templates),
            "sequences": str(d.sequences)}


def prepare_synthetic(cfg: Any, force: bool = False) -> None:
    """Synthetic chains (structure a function of the sequence, mutated MSAs) in the
    processed layout, unless the identical complete set exists."""
    root = Path(cfg.data.dir)
    train, validation = int(cfg.data.train_samples), int(cfg.data.eval_samples)
    req = synthetic.SyntheticRequest(str(root.resolve()), train, validation, int(cfg.seed),
                                     **_request_knobs(cfg))
    if not force and synthetic.dataset_complete(req):
        print(f"dataset ready: {root} ({train}+{validation} synthetic chains, seed {cfg.seed})")
        return
    check_writable(root)
    start = time.perf_counter()
    workers = min(int(cfg.data.prepare_workers), os.cpu_count() or 1)
    synthetic.generate(root, train, validation, int(cfg.seed), workers=workers,
                       show_progress=True, **_request_knobs(cfg))
    print(f"wrote {train}+{validation} synthetic chains ({cfg.data.min_length}–"
          f"{cfg.data.max_length} residues, {cfg.data.msa_depth} MSA homologs"
          f"{', templates' if cfg.data.templates else ''}) in the processed layout to {root} "
          f"in {time.perf_counter() - start:.1f} s")


def prepare_synthetic_and_start(cfg: Any, force: bool = False) -> None:
    """The synthetic set, then the starting checkpoint when data.pretrain_epochs asks for
    one (``pretrain``). The checkpoint is trained through `framework=`: a framework without
    OpenFold is refused before the chains are generated, not after."""
    if int(cfg.data.pretrain_epochs) > 0:
        from sciperf.backends import require_pair
        require_pair(cfg.framework.name, cfg.workload)
    prepare_synthetic(cfg, force)
    pretrain.pretrain(cfg, force)


def verify_existing(cfg: Any, force: bool = False) -> None:
    """An existing processed dataset: every chain of both splits loads (dicts entry,
    alignments parsed as the reader parses them: a3m, and hhr when the model has template
    slots) and the first of each split becomes a feature dict (kalign included when its
    hits need realigning). Training draws any chain: a malformed one is found here, not
    mid-run."""
    root = Path(cfg.data.dir)
    model = data.ModelSpec(**dict(cfg.model))
    reader = data.model_reader(root, cfg.data.format, model)
    for split, n in (("train", cfg.data.train_samples), ("validation", cfg.data.eval_samples)):
        files = data.list_samples(root, split, cfg.data.format, int(n))
        index = layout.AlignmentIndex(root)
        bar = Progress(len(files), f"{split} chains", unit="chains", enabled=True)
        for path in files:
            layout.load_chain(root, path.name)
            data.parse_alignments(root, path.name, index.read(path.name),
                                  templates=model.max_templates > 0)
            bar.update()
        first = data.Draw(files[0], 0) if split == "train" else files[0]
        reader(first)
        print(f"{root}: {len(files)} {split} chains load (entries, alignments parsed); "
              f"{files[0].name}'s features built")


SOURCES = {"synthetic": prepare_synthetic_and_start, "existing": verify_existing}
