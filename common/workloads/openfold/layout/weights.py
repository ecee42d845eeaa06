"""The training sampler's weight of each chain (AF2 supplement 1.2.5, REF ``_get_weight``):
a length term times one over the square root of the chain's cluster size. The sampler
(:mod:`sciperf.workloads.openfold.sampler`) draws chains by these weights."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from sciperf.workloads.openfold.layout.chains import NO_CLUSTER, ChainRow

# The training sampler's length term (AF2 supplement 1.2.5): max(min(L, 512), 256) / 512.
SAMPLER_LENGTH_CAP = 512
SAMPLER_LENGTH_FLOOR = 256


def sampler_weight(sequence_length: int, cluster_size: int) -> float:
    """A training chain's sampling weight (AF2 supplement 1.2.5, REF ``_get_weight``):
    max(min(L, 512), 256)/512 × 1/√(cluster size); a chain without cluster counts 1."""
    length = max(min(sequence_length, SAMPLER_LENGTH_CAP), SAMPLER_LENGTH_FLOOR)
    cluster = 1.0 / math.sqrt(cluster_size) if cluster_size > 0 else 1.0
    return length / SAMPLER_LENGTH_CAP * cluster


def training_weights(rows: Sequence[ChainRow]) -> np.ndarray:
    """float64 weights of the training chains, cluster sizes counted among `rows` (the
    training set, as the reference counts them after filtering)."""
    sizes = Counter(row.pdb_cluster_id for row in rows if row.pdb_cluster_id != NO_CLUSTER)
    return np.array([sampler_weight(row.sequence_length, sizes.get(row.pdb_cluster_id, 0))
                     for row in rows], np.float64)
