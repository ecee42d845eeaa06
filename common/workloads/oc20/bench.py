"""What `sciperf bench` times for OC20: cases, graph sizes, the timing dataset.

A structure's cost is set by its graph, not by a tensor shape: the model's cutoff, the
data's neighbour cap and slab size decide the atoms, edges and triplets. A model at the
reference cutoff (6 Å) is timed on the reference graph (≤ 50 neighbours per atom,
``spec.DataSpec``'s 3×3×4 slab: ≈ 37 atoms, ≈ 1,700 edges, ≈ 80k triplets); a smaller
cutoff is the mini's, timed on the mini experiment's slab and cap as its config gives them
(configs/workload_experiment/oc20_mini.yaml, read, not copied). The rows report
structures/s and, from the timed structures' mean sizes, atoms/s and edges/s.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sciperf.workloads.base import BenchCases, TrainCase
from sciperf.workloads.oc20 import spec, synthetic

# The mini input row's cutoff: oc20_mini.yaml's model.cutoff (the tests compare the two).
MINI_CUTOFF = 4.0


@functools.cache
def _mini_graph() -> tuple[int, tuple[int, ...]]:
    """(neighbour cap, slab) of the mini experiment's data."""
    from sciperf.config import compose  # lazily: the config imports the workload registry

    d = compose([f"workload={spec.NAME}", "experiment=mini"]).data
    return int(d.max_neighbours), tuple(int(v) for v in d.slab)


def graph(model: Any) -> tuple[int, tuple[int, ...]]:
    """(neighbour cap, slab) of the timing structures for `model`: the reference's at the
    reference cutoff or above, the mini experiment's below it."""
    if float(model.cutoff) >= spec.ModelSpec().cutoff:
        return spec.MAX_NEIGHBOURS, tuple(spec.DataSpec().slab)
    return _mini_graph()


def size(model: Any) -> list[Any]:
    """The graph a row ran on: [cutoff Å, neighbour cap, slab cells (a, b, layers)]."""
    cap, slab = graph(model)
    return [float(model.cutoff), cap, list(slab)]


def dataset(root: Path, model: Any, fmt: str, n_train: int) -> Path:
    """Synthetic EMT slabs for timing, both formats in one folder (re-used when complete);
    the validation split holds half as many, as bench's training rows list it."""
    cap, slab = graph(model)
    cutoff = float(model.cutoff)
    folder = root / f"cutoff{cutoff:g}_max{cap}_slab{'x'.join(map(str, slab))}" / f"n{n_train}"
    d = spec.DataSpec()
    req = synthetic.GenerateRequest(
        root=str(folder.resolve()), train_samples=n_train, eval_samples=max(n_train // 2, 1),
        seed=0, cutoff=cutoff, max_neighbours=cap, slab=slab, metals=tuple(d.metals),
        rattle=d.rattle, adsorbate_probability=d.adsorbate_probability,
        per_container=max(n_train, 1))
    if not synthetic.dataset_complete(req):
        synthetic.generate(req, show_progress=False)
    return folder


CASES = BenchCases(
    # mini: 4 steps of 8 per epoch, 2 timed epochs; full: the reference model on
    # reference-sized graphs, 2 steps of 2 structures per epoch, 2 timed (≈ 1 s a step on
    # 2 cores): a single timed step varied by 1.5× between runs
    # mini: ~1.5 s timed (0.3 s varied)
    train={"mini": TrainCase(32, 8, 8), "full": TrainCase(4, 2, 2)},
    input=(({"cutoff": MINI_CUTOFF}, 128), ({}, 64)),
    dataset=dataset,
    size=size,
)
