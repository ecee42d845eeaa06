"""OC20's counted layers for `sciperf characterize` (the convention is there).

DimeNet++ has no fixed input size: a structure's cost depends on its atoms A, its edges E
(directed, neighbour j → centre i) and its triplets T (k → j → i). Every dense layer runs
on one of those three row counts, read off the forward (spec/oc20.md §1.2, the models'
``_embedding``/``_interaction``/``_output``):

* per edge: the embedding block's ``dense_rbf`` and ``dense``; an output block's
  ``dense_rbf``; an interaction block's ``dense_rbf1``/``dense_rbf2``, ``dense_kj``,
  ``dense_ji``, ``down_projection``, ``up_projection`` (after the triplet sum into edges),
  the residual layers and ``final_before_skip``;
* per triplet: an interaction block's ``dense_sbf1``/``dense_sbf2``;
* per atom: an output block's ``up_projection`` (after the sum of edges into atoms), its
  ``dense_layers`` and ``dense_final``.

The embedding table and the radial frequencies are parameters without multiply-adds
(a lookup, an elementwise sine). Gathers, scatter sums, the bases and the activations are
elementwise and left out, as characterize's convention leaves them out everywhere.

:func:`layers` (``Cost.layers``, what characterize counts) counts a typical OC20 structure
of the reference graph (6 Å, at most 50 neighbours); :func:`layers_for` counts any sizes,
e.g. the means :func:`graph_sizes` measures on a dataset's structures, which
:func:`cost_on_data` (``Cost.on_data``) reads from the files a run trains on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.workloads.base import DataCost, Layer
from sciperf.workloads.oc20 import data, graph
from sciperf.workloads.oc20.spec import ModelSpec

# A typical OC20 S2EF structure. Atoms: the OC20 paper (Chanussot et al., ACS Catal. 2021)
# reports 7–225 atoms per structure with a mean of about 73 (also data.payload_bytes).
TYPICAL_ATOMS = 73
# Edges per atom at the reference's 6 Å / 50 neighbours: spec/oc20.md §7 derives 45–49 on
# an fcc(111) metal slab; the middle is taken.
EDGES_PER_ATOM = 47
# Triplets per edge: the edge j → i meets every edge k → j into its source, less the
# back-tracking one (k = i, same image), i.e. the in-degree of j minus 1. With 47 in-edges
# per atom that is 46, so T/A = 47·46 = 2,162, inside §7's 1,800–2,400 per atom.
TRIPLETS_PER_EDGE = EDGES_PER_ATOM - 1


@dataclass(frozen=True)
class GraphSizes:
    """Mean atoms, edges and triplets per structure (what a forward's cost depends on)."""

    atoms: float
    edges: float
    triplets: float


TYPICAL = GraphSizes(TYPICAL_ATOMS, TYPICAL_ATOMS * EDGES_PER_ATOM,
                     TYPICAL_ATOMS * EDGES_PER_ATOM * TRIPLETS_PER_EDGE)

_PER_TRIPLET = ("/dense_sbf1", "/dense_sbf2")
_PER_ATOM_IN_OUTPUT = ("/up_projection", "/dense_final")


def _rows(layer: str, sizes: GraphSizes) -> float:
    """The rows a dense layer of canonical name `layer` runs on (module docstring)."""
    if layer.startswith("int_blocks/") and layer.endswith(_PER_TRIPLET):
        return sizes.triplets
    if layer.startswith("output_blocks/") and (layer.endswith(_PER_ATOM_IN_OUTPUT)
                                                or "/dense_layers/" in layer):
        return sizes.atoms
    return sizes.edges


def _grouped(model: ModelSpec) -> dict[str, dict[str, tuple[int, ...]]]:
    """The spec's weight entries grouped by layer (``a/b/kernel`` → layer ``a/b``), in the
    spec's module order."""
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, shape in model.weight_shapes().items():
        layer, _, param = name.rpartition("/")
        out.setdefault(layer, {})[param] = shape
    return out


def layers_for(model: ModelSpec, atoms: float, edges: float, triplets: float) -> list[Layer]:
    """Every weight layer of `model` with its forward multiply-adds for a structure of
    `atoms` atoms, `edges` edges and `triplets` triplets (means allowed; rounded).

    Layers come in the spec's module order, whose first entry is the radial frequencies
    (0 MACs): characterize's backward rule (2×forward − forward of the first layer) then
    counts every input gradient, which force training needs down to the positions."""
    sizes = GraphSizes(float(atoms), float(edges), float(triplets))
    out = []
    for layer, params in _grouped(model).items():
        count = sum(math.prod(shape) for shape in params.values())
        kernel = params.get("kernel")
        if kernel is not None:
            rows = _rows(layer, sizes)
            out.append(Layer(layer, "dense", round(rows * math.prod(kernel)), count,
                             round(rows * kernel[-1])))
        elif "embeddings" in params:
            out.append(Layer(layer, "embedding", 0, count))
        else:  # the trainable radial frequencies
            out.append(Layer(layer, "basis", 0, count))
    return out


def layers(model: ModelSpec) -> list[Layer]:
    """The counted layers of `model` for a typical OC20 structure (:data:`TYPICAL`: 73
    atoms of the reference graph). The model's cutoff does not change these sizes; count
    another graph (the mini's 5 Å / 20 neighbours) with :func:`layers_for` and
    :func:`graph_sizes` of its data."""
    return layers_for(model, TYPICAL.atoms, TYPICAL.edges, TYPICAL.triplets)


def graph_sizes(structures: Iterable[Mapping[str, Any]]) -> GraphSizes:
    """Mean atoms, edges and triplets per structure of `structures` (dicts as the data
    readers return them: ``atomic_numbers``, ``edge_index``, ``cell_offsets``), triplets
    counted by the numpy reference the models' builders equal."""
    totals = np.zeros(3, np.float64)
    n = 0
    for s in structures:
        edge_index = np.asarray(s["edge_index"])
        idx_kj, _ = graph.triplets(edge_index, np.asarray(s["cell_offsets"]))
        totals += (len(s["atomic_numbers"]), edge_index.shape[1], len(idx_kj))
        n += 1
    if n == 0:
        raise ValueError("graph_sizes needs at least one structure")
    atoms, edges, triplets = totals / n
    return GraphSizes(float(atoms), float(edges), float(triplets))


def sizes_on_data(fmt: str, samples: Sequence[Path], cutoff: float = math.inf) -> GraphSizes:
    """Mean graph sizes of `samples` as stored (every structure read and checked)."""
    reader = data.StructureReader(fmt, cutoff)
    try:
        return graph_sizes(reader(p) for p in samples)
    finally:
        reader.close()


def cost_on_data(model: ModelSpec, folder: Path, fmt: str,
                 samples: Sequence[Path]) -> DataCost:
    """The counted layers on the mean graph of `samples` (``Cost.on_data``), a line saying
    so (the mini's 4 Å / 12-neighbour slabs cost a fraction of OC20's), and the mean atoms
    and edges per structure (bench's per-atom rates)."""
    sizes = sizes_on_data(fmt, samples, float(model.cutoff))
    source = (f"mean of {len(samples)} training structures in {folder}: {sizes.atoms:.1f} "
              f"atoms, {sizes.edges:.1f} edges, {sizes.triplets:.1f} triplets")
    return DataCost(layers_for(model, sizes.atoms, sizes.edges, sizes.triplets), source,
                    {"atoms": sizes.atoms, "edges": sizes.edges})


# `sciperf project`'s one calibrated number per accelerator kind: the share of the roofline
# a training step reaches (η), fitted on the published MLPerf HPC v2.0 + v3.0 groups
# (docs/projection.md; `sciperf project ROUND_TREES --json` prints the fit)
EFFICIENCY = {
    "A100": 0.0457,  # 7 groups
    "H100": 0.0454,  # 2 groups
}
