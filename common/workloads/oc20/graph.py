"""Periodic neighbour lists, computed once at prepare time as the reference ships them.

The reference's preprocessing (``AtomsToGraphs(max_neigh=50, radius=6)``) takes every
periodic image within the cutoff (pymatgen ``get_neighbor_list``), drops zero-length pairs
(d < 1e-8), keeps the ``max_neighbours`` nearest per **centre** atom (so the graph may be
asymmetric) and stores ``edge_index = (neighbour j, centre i)`` with ``cell_offsets`` S of
the neighbour's image: vec_ji = pos[j] − pos[i] + S·cell. ASE's ``primitive_neighbor_list``
enumerates the same pairs with the same sign convention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_DISTANCE = 1e-8  # the reference drops pairs closer than this


@dataclass(frozen=True)
class Graph:
    """Edges of one structure: (2, E) (neighbour j, centre i), (E, 3) image offsets, (E,)
    lengths. Sorted by centre, nearest first."""

    edge_index: np.ndarray
    cell_offsets: np.ndarray
    distances: np.ndarray


def neighbour_graph(positions: np.ndarray, cell: np.ndarray, cutoff: float,
                    max_neighbours: int, pbc: tuple[bool, bool, bool] = (True, True, True)
                    ) -> Graph:
    """The reference's radius graph with periodic images, capped per centre atom."""
    from ase.neighborlist import primitive_neighbor_list  # optional at import time

    pos = np.asarray(positions, np.float64)
    centre, neigh, dist, shift = primitive_neighbor_list(
        "ijdS", pbc, np.asarray(cell, np.float64), pos, float(cutoff),
        self_interaction=False, use_scaled_positions=False)
    keep = dist >= MIN_DISTANCE
    centre, neigh, dist, shift = centre[keep], neigh[keep], dist[keep], shift[keep]
    order = np.lexsort((neigh, dist, centre))  # by centre, then nearest, ties by index
    centre, neigh, dist, shift = centre[order], neigh[order], dist[order], shift[order]
    rank = _rank_within(centre)
    keep = rank < max_neighbours
    return Graph(np.stack([neigh[keep], centre[keep]]).astype(np.int64),
                 shift[keep].astype(np.int64), dist[keep])


def _rank_within(sorted_groups: np.ndarray) -> np.ndarray:
    """0, 1, 2… within each run of equal values of a sorted array (vectorised)."""
    n = len(sorted_groups)
    if n == 0:
        return np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    lengths = np.diff(np.r_[starts, n])
    return np.arange(n) - np.repeat(starts, lengths)


def edge_vectors(positions: np.ndarray, cell: np.ndarray, graph: Graph) -> np.ndarray:
    """(E, 3) vec_ji = pos[j] − pos[i] + S·cell (the reference's get_pbc_distances)."""
    j, i = graph.edge_index
    return positions[j] - positions[i] + graph.cell_offsets @ np.asarray(cell)


def triplets(edge_index: np.ndarray, cell_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(idx_kj, idx_ji) of every triplet k→j→i: for each edge e = (j→i), every edge (k→j)
    into its source; the back-tracking one (k == i in the same image: offsets summing to
    zero) is left out. The numpy reference the frameworks' vectorised builders equal."""
    src, dst = np.asarray(edge_index)
    order = np.argsort(dst, kind="stable")  # in-edges of each atom, contiguous
    n = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    counts = np.bincount(dst, minlength=n)
    ptr = np.r_[0, np.cumsum(counts)]
    per_edge = counts[src]  # in-edges of j for each edge j→i
    idx_ji = np.repeat(np.arange(len(src)), per_edge)
    within = np.arange(len(idx_ji)) - np.repeat(np.cumsum(per_edge) - per_edge, per_edge)
    idx_kj = order[np.repeat(ptr[src], per_edge) + within]
    off = np.asarray(cell_offsets)
    back = (src[idx_kj] == dst[idx_ji]) & np.all(off[idx_kj] + off[idx_ji] == 0, axis=1)
    return idx_kj[~back], idx_ji[~back]
