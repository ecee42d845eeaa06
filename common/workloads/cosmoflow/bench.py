"""What `sciperf bench` times for CosmoFlow: cases, input sizes, the timing dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.workloads.base import BenchCases, TrainCase
from sciperf.workloads.cosmoflow import synthetic


def dataset(root: Path, model: Any, fmt: str, n_train: int) -> Path:
    """A small synthetic set for timing (re-used when already complete)."""
    size = int(model.input_size)
    folder = root / f"{size}" / fmt
    req = synthetic.GenerateRequest(str(folder), fmt, n_train, n_train // 2, size, 0)
    if not synthetic.dataset_complete(req):
        synthetic.generate(req, show_progress=False)
    return folder


CASES = BenchCases(
    # experiment → (samples, GBS, epochs): ~1 s timed for the mini (0.2 s varied 1.2× run
    # to run), 4 full-size steps
    train={"mini": TrainCase(64, 16, 8), "full": TrainCase(16, 4, 1)},
    input=(({"input_size": 32}, 64), ({"input_size": 128}, 8)),
    dataset=dataset,
    size=lambda model: int(model.input_size),
    rows=("staging", "scaling"),
)
