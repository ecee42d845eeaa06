"""What `sciperf bench` times for OpenFold: cases, sizes, the timing dataset.

A training sample's cost is set by its padded sizes, not by the chain: every sample is
cropped or padded to ``model.crop_size`` residues, ``max_msa_clusters`` MSA rows,
``max_extra_msa`` extra sequences and ``max_templates`` templates. Short synthetic chains
padded to the full sizes therefore cost what real chains of those sizes cost, and the
timing set is small synthetic proteins for every model (the reader and feature pipeline
still run on it). Each training step runs 1–4 recycling passes as the reference's stream
draws them; rows report chains/s (samples/s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.workloads.base import BenchCases, TrainCase
from sciperf.workloads.openfold import synthetic
from sciperf.workloads.openfold.sizes import MINI


def size(model: Any) -> list[int]:
    """A row's sample sizes: [crop, MSA clusters, extra sequences, templates]."""
    return [int(model.crop_size), int(model.max_msa_clusters), int(model.max_extra_msa),
            int(model.max_templates)]


def dataset(root: Path, model: Any, fmt: str, n_train: int) -> Path:
    """Synthetic chains for timing (re-used when complete); the validation split holds half
    as many, as bench's training rows list it. Templates on when the model has slots."""
    templates = int(model.max_templates) > 0
    folder = root / f"synthetic{'_templates' if templates else ''}" / f"n{n_train}"
    train, validation = n_train, max(n_train // 2, 1)
    req = synthetic.SyntheticRequest(str(folder.resolve()), train, validation, 0,
                                     templates=templates)
    if not synthetic.dataset_complete(req):
        synthetic.generate(folder, train, validation, 0, templates=templates)
    return folder


CASES = BenchCases(
    # mini: 4 steps of 4 chains per epoch, 2 timed epochs; full: the reference model at
    # crop 256 / 124 clusters / 1,024 extra / 4 templates, one chain a step, one timed step
    # (a step is minutes on 2 CPU cores: timed cold, its one-time costs in)
    train={"mini": TrainCase(16, 4, 2), "full": TrainCase(1, 1, 1, warm_up=False)},
    input=((MINI, 32), ({}, 8)),
    dataset=dataset,
    size=size,
)
