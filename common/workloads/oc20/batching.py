"""OC20 graph batches: structures of different sizes concatenated into one graph.

Samples vary in size (20–200 atoms, up to 50 neighbours per atom), so a batch is not a
stack: atoms, edges and labels are concatenated, edge indices shifted to batch-global atom
numbers, and ``batch`` says which graph each atom belongs to. :func:`collate` is the
workload contract's ``Dataset.collate``, which the generic loader calls in place of its
default stacking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["collate"]


def collate(structures: Sequence[Mapping[str, Any]]) -> tuple[dict[str, np.ndarray],
                                                                dict[str, np.ndarray]]:
    """Structures → (model inputs, labels) of one batch, vectorised.

    Inputs: ``atomic_numbers`` int64 [N], ``pos`` float32 [N,3], ``cell`` float32 [B,3,3],
    ``batch`` int64 [N] (graph of each atom), ``edge_index`` int64 [2,E] (neighbour j,
    centre i; batch-global atom indices), ``cell_offsets`` float32 [E,3]. Labels: ``force``
    float32 [N,3], ``fixed`` float32 [N], ``energy`` float32 [B]."""
    natoms = np.array([len(s["atomic_numbers"]) for s in structures], np.int64)
    nedges = np.array([s["edge_index"].shape[1] for s in structures], np.int64)
    first = np.cumsum(natoms) - natoms
    edges = np.concatenate([s["edge_index"] for s in structures], axis=1).astype(np.int64)
    edges += np.repeat(first, nedges)[None, :]
    inputs = {
        "atomic_numbers": np.concatenate([s["atomic_numbers"] for s in structures]
                                         ).astype(np.int64),
        "pos": np.concatenate([s["pos"] for s in structures]).astype(np.float32, copy=False),
        "cell": np.stack([s["cell"] for s in structures]).astype(np.float32, copy=False),
        "batch": np.repeat(np.arange(len(structures), dtype=np.int64), natoms),
        "edge_index": edges,
        "cell_offsets": np.concatenate([s["cell_offsets"] for s in structures]).astype(np.float32),
    }
    labels = {
        "force": np.concatenate([s["force"] for s in structures]).astype(np.float32, copy=False),
        "fixed": np.concatenate([s["fixed"] for s in structures]).astype(np.float32),
        "energy": np.array([s["energy"] for s in structures], np.float32),
    }
    return inputs, labels
