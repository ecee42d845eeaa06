"""What `sciperf bench` times for DeepCAM: cases, input sizes, the timing dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.workloads.base import BenchCases, TrainCase
from sciperf.workloads.deepcam import synthetic as climate


def dataset(root: Path, model: Any, fmt: str, n_train: int) -> Path:
    """Synthetic climate for timing (re-used when already complete)."""
    height, width = int(model.height), int(model.width)
    folder = root / f"{height}x{width}" / fmt
    req = climate.GenerateRequest(str(folder), fmt, n_train, max(n_train // 2, 1), height,
                                  width, 0)
    if not climate.dataset_complete(req):
        climate.generate(req, show_progress=False)
    return folder


CASES = BenchCases(
    # mini: ~2 s timed; full: one sample per epoch, one warm-up step and one timed step
    # (3 steps)
    train={"mini": TrainCase(32, 8, 8), "full": TrainCase(3, 1, 1)},
    input=(({"height": 96, "width": 144}, 64), ({"height": 768, "width": 1152}, 8)),
    dataset=dataset,
    size=lambda model: [int(model.height), int(model.width)],
)
