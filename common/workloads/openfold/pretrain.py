"""The mini's starting checkpoint: a short pre-training on the synthetic set.

The benchmark does not train AlphaFold2 from scratch: every run starts from the reference
checkpoint (mean lDDT-Cα ≈ 0.70 on the validation set) and trains to 0.8. The mini does the
same, from a checkpoint `sciperf prepare` makes by training the mini model for
``data.pretrain_epochs`` train/validation cycles through the real driver (its records in
``<data.dir>/pretrain/``) and keeping the last state as ``<data.dir>/pretrained.pt``. That
file is a sciperf checkpoint's ``state.pt``, which is also the reference's resumable format
(``alphafold_state_dict``, ``optimizer_state_dict``): the timed run loads it through
``train.init_checkpoint`` exactly as a closed run loads the reference's.

Deterministic given the data and the config (the driver's seeds); re-used while
``pretrained.json`` (what it was made from) matches.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sciperf import jsondata
from sciperf.data import atomic
from sciperf.errors import SciperfError

PRETRAINED = "pretrained.pt"
RECORD = "pretrained.json"
FOLDER = "pretrain"


def _recipe(cfg: Any) -> dict[str, Any]:
    """What the checkpoint depends on (model, optimizer, seed, data, the cycles). The data
    is the generator's own record of the set (lengths, MSA depth, templates…): chains
    regenerated with other settings kept the checkpoint trained on the old ones."""
    from sciperf.data import manifest
    from sciperf.workloads.openfold import layout
    return {"data": manifest.entry(cfg.data.dir, layout.FORMAT),
            "model": OmegaConf.to_container(cfg.model), "opt": OmegaConf.to_container(cfg.opt),
            "seed": int(cfg.seed), "framework": str(cfg.framework.name),
            "precision": str(cfg.precision), "epochs": int(cfg.data.pretrain_epochs),
            "global_batch_size": int(cfg.train.global_batch_size),
            "val_every_iters": int(cfg.train.val_every_iters),
            "train_samples": int(cfg.data.train_samples),
            "eval_samples": int(cfg.data.eval_samples)}


def ready(cfg: Any) -> bool:
    """The data folder holds the checkpoint this config would make — wherever the folder
    lies now (the recipe's data entry names no path; the ``root`` an earlier version's
    record kept there is ignored)."""
    from sciperf.data import manifest
    root = Path(cfg.data.dir)
    record = root / RECORD
    if not (root / PRETRAINED).is_file() or not record.is_file():
        return False
    try:
        saved = jsondata.loads(record.read_text())
    except ValueError:
        return False
    if isinstance(saved, dict) and "data" in saved:
        saved["data"] = manifest.content(saved["data"])
    return saved == _recipe(cfg)


def pretrain(cfg: Any, force: bool = False) -> Path | None:
    """Train the mini from scratch for data.pretrain_epochs cycles and keep its state as
    the starting checkpoint (None when data.pretrain_epochs is 0)."""
    epochs = int(cfg.data.pretrain_epochs)
    root = Path(cfg.data.dir)
    if epochs <= 0:
        return None
    if not force and ready(cfg):
        print(f"starting checkpoint ready: {root / PRETRAINED}")
        return root / PRETRAINED
    from sciperf import checkpoint
    from sciperf.run import train

    run = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    out = root / FOLDER
    OmegaConf.update(run, "output_dir", str(out))
    for key, value in (("max_epochs", epochs), ("checkpoint_every", epochs),
                       ("checkpoint_keep", 1), ("init_checkpoint", ""), ("overwrite", True),
                       ("resume", ""), ("target", 2.0)):  # lDDT never reaches 2: every cycle
        OmegaConf.update(run, f"train.{key}", value)
    OmegaConf.update(run, "data.stage_dir", None)
    print(f"pre-training the starting checkpoint: {epochs} cycles of "
          f"{cfg.train.val_every_iters} steps × {cfg.train.global_batch_size} chains "
          f"(records in {out})", flush=True)
    summary = train(run)
    if summary.get("status") != "aborted" or int(summary.get("epochs", 0)) != epochs:
        # stopped early (SIGTERM: a mid-cycle checkpoint): that is no starting checkpoint
        raise SciperfError(f"{out}: the pre-training ended {summary.get('status')} after "
                           f"{summary.get('epochs')} of {epochs} cycles; no starting "
                           "checkpoint written (run prepare again)")
    found = checkpoint.latest(out)
    if found is None or found.epoch != epochs:
        raise SciperfError(f"{out}: the pre-training wrote no checkpoint after cycle {epochs}")
    state, recipe = found.path / "state.pt", json.dumps(_recipe(cfg), indent=2)
    # the pair is renamed into place only when both are whole: a refused write (one line
    # naming its file) leaves the earlier checkpoint beside its own record
    atomic.replace_together({root / PRETRAINED: lambda tmp: shutil.copyfile(state, tmp),
                             root / RECORD: lambda tmp: tmp.write_text(recipe)})
    print(f"starting checkpoint {root / PRETRAINED}: validation mean lDDT-Cα "
          f"{summary['final_metric']:.4f} after {epochs} cycles")
    return root / PRETRAINED
