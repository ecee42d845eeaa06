"""What `sciperf bench` times for GPT-2: cases, sizes, the timing dataset.

A window costs the same whatever its tokens, so the timing set is the synthetic Markov
stream at the model's vocabulary, sized for the row's windows. Rows report windows/s
(samples/s); tokens/s is that × ``model.context`` (the row's ``input_size``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.workloads.base import BenchCases, TrainCase
from sciperf.workloads.gpt2 import data, synthetic


def size(model: Any) -> int:
    """A row's sample size: the context (tokens per window)."""
    return int(model.context)


def dataset(root: Path, model: Any, fmt: str, n_train: int) -> Path:
    """A synthetic set for timing (re-used when complete): n_train windows of training
    tokens, and validation for half as many windows of the grid (bench lists n/2)."""
    folder = root / f"synthetic_v{int(model.vocab_size)}_t{int(model.context)}" / f"n{n_train}"
    train = n_train * int(model.context) + 1
    evals = max(n_train // 2, 1) * data.EVAL_STRIDE + 1
    req = synthetic.GenerateRequest(str(folder.resolve()), train, evals,
                                    int(model.vocab_size), 0)
    if not synthetic.dataset_complete(req):
        synthetic.generate(req, show_progress=False)
    return folder


CASES = BenchCases(
    # mini: 8 steps of 16 windows per epoch, 2 timed epochs; full: GPT-2 small at context
    # 1,024, 2 steps of 2 windows (one timed epoch; a step is seconds on 2 CPU cores)
    train={"mini": TrainCase(128, 16, 2), "full": TrainCase(4, 2, 1)},
    input=(({"context": 128, "vocab_size": 256}, 256), ({}, 64)),
    dataset=dataset,
    size=size,
)
