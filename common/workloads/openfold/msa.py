"""The MSA features of an OpenFold sample (spec §7 "MSA pipeline"), the reference's draw for draw.

A chain's alignments become one MSA (:func:`merge_alignments`), then each recycling copy
samples, masks and clusters it with its own seed (:func:`_msa_copy`, seed ``s + i`` for
copy ``i``). Per copy, in the reference's order: sample the MSA (query first, the rest
shuffled; the first ``N_clust`` rows are the clusters, the others extra sequences) →
BERT-mask the clusters (15 % of positions; a masked position becomes a uniform amino acid,
a draw from the MSA profile, itself, or the mask token with probabilities 0.1/0.1/0.1/0.7)
→ assign every extra sequence to the cluster it agrees with most (gaps and mask tokens
count 0) → cluster profile and mean deletion (over the extra sequences and the cluster
centre) → keep a random ``N_extra_seq`` of the extra sequences → ``msa_feat`` (49) and the
extra-MSA features. Profiles and features are computed on the crop's columns only: every
one of them is column-wise, and the draws and the cluster assignment still see the full
length. The draws are the reference's (:mod:`.rng`); the crop and the padding to the
schema's sizes are :mod:`.features`'.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.parsers import Alignment
from sciperf.workloads.openfold.rng import TorchCompatibleStream
from sciperf.workloads.openfold.schema import FeatureSizes, _Crop

__all__ = [
    "BERT_PROFILE_PROB",
    "BERT_REPLACE_FRACTION",
    "BERT_SAME_PROB",
    "BERT_UNIFORM_PROB",
    "GAP_AGREEMENT_WEIGHT",
    "merge_alignments",
]

# BERT masking of the clustered MSA (REF config: masked_msa_*): the fraction of positions
# replaced, and what a replaced position becomes; the remaining 0.7 is the mask token.
BERT_REPLACE_FRACTION = 0.15
BERT_UNIFORM_PROB = 0.1
BERT_PROFILE_PROB = 0.1
BERT_SAME_PROB = 0.1
# Agreement weight of two gaps when assigning extra sequences to clusters (mask tokens: 0).
GAP_AGREEMENT_WEIGHT = 0.0

_MSA_CLASSES = rc.MSA_NUM_CLASSES  # 23: 20 residues, X, gap, mask token
_PROFILE_CLASSES = 22  # the MSA profile has no mask-token column
_AGREEING_CLASSES = 21  # residues and X agree with weight 1; gap and mask token with 0
_ONEHOT_CHUNK_BYTES = 8 << 20  # one chunk of the extra-MSA one-hot (cache-sized)


# ---------------------------------------------------------------------------------------------
# The chain's MSA
# ---------------------------------------------------------------------------------------------

def _letter_table() -> np.ndarray:
    """Byte → our residue index for MSA letters (HHblits code, then AF order); -1: invalid."""
    table = np.full(256, -1, np.int64)
    for letter, hhblits_id in rc.HHBLITS_AA_TO_ID.items():
        table[ord(letter)] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[hhblits_id]
    return table


_MSA_LETTERS = _letter_table()


def merge_alignments(sequence: str, alignments: Sequence[Alignment | None]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The chain's MSA: its alignments concatenated in the order given, duplicates dropped.

    The reference passes uniref90, bfd_uniclust, mgnify (a missing file is ``None``); a row
    already seen (same aligned letters) is skipped with its deletions. Without any alignment
    the MSA is the sequence alone. Returns (msa [N, L] int64 in our residue order with 21 =
    gap, deletions [N, L] float32).
    """
    present = [a for a in alignments if a is not None]
    for alignment in present:
        if not alignment.sequences:
            raise SciperfError(f"{alignment.source}: alignment has no sequences")
        if alignment.width != len(sequence):
            raise SciperfError(f"{alignment.source}: alignment has {alignment.width} columns, "
                               f"the chain's sequence {len(sequence)} residues")
    if not present:
        present = [Alignment((sequence,), np.zeros((1, len(sequence)), np.int32), ("",),
                             "<query>")]
    seen: set[str] = set()
    codes: list[np.ndarray] = []
    deletions: list[np.ndarray] = []
    for alignment in present:
        keep = []
        for index, row in enumerate(alignment.sequences):
            if row not in seen:
                seen.add(row)
                keep.append(index)
        codes.append(_alignment_codes(alignment, keep))
        deletions.append(alignment.deletion_matrix[keep])
    return np.concatenate(codes), np.concatenate(deletions).astype(np.float32)


def _alignment_codes(alignment: Alignment, rows: list[int]) -> np.ndarray:
    """[len(rows), width] residue indices of some rows of an alignment; a letter outside the
    HHblits code is one line naming the file, the row and the column."""
    text = "".join(alignment.sequences[i] for i in rows)
    codes = _MSA_LETTERS[np.frombuffer(text.encode("ascii"), np.uint8)]
    if (codes < 0).any():
        row, column = divmod(int(np.flatnonzero(codes < 0)[0]), alignment.width)
        raise SciperfError(f"{alignment.source}: sequence {rows[row] + 1} has "
                           f"{text[row * alignment.width + column]!r} at column {column + 1}, "
                           "not a residue letter of the HHblits code")
    return codes.reshape(len(rows), alignment.width)


# ---------------------------------------------------------------------------------------------
# One recycling copy
# ---------------------------------------------------------------------------------------------

def _msa_profile(msa: np.ndarray) -> np.ndarray:
    """[L, 22] frequency of each residue class per column over the whole MSA (float32)."""
    n_rows, length = msa.shape
    flat = (np.arange(length) * _PROFILE_CLASSES + msa).ravel()
    counts = np.bincount(flat, minlength=length * _PROFILE_CLASSES).astype(np.float32)
    return counts.reshape(length, _PROFILE_CLASSES) / np.float32(n_rows)


def _msa_copy(msa: np.ndarray, deletions: np.ndarray, profile: np.ndarray, crop: _Crop,
              sizes: FeatureSizes, seed: int) -> dict[str, np.ndarray]:
    """The MSA features of one recycling copy (seed = sample seed + copy index)."""
    n_rows = msa.shape[0]
    order = np.concatenate(([0], TorchCompatibleStream(seed).randperm(n_rows - 1) + 1))
    n_clusters = min(sizes.msa_clusters, n_rows)
    clusters, extra = order[:n_clusters], order[n_clusters:]
    true_msa = msa[clusters]
    bert_mask, masked = _bert_mask(true_msa, profile, seed)
    assignment = _nearest_clusters(masked, msa[extra])
    window = slice(crop.start, crop.start + crop.size)
    profile_c, deletion_mean = _summarise_clusters(
        masked[:, window], deletions[clusters, window], msa[extra, window],
        deletions[extra, window], assignment)
    kept = extra[TorchCompatibleStream(seed).randperm(extra.size)[:sizes.extra_msa]]
    cluster_deletions = deletions[clusters, window]
    extra_deletions = deletions[kept, window]
    msa_feat = np.concatenate([
        _one_hot(masked[:, window], _MSA_CLASSES),
        np.clip(cluster_deletions, 0.0, 1.0)[..., None],
        _deletion_value(cluster_deletions)[..., None],
        profile_c,
        _deletion_value(deletion_mean)[..., None],
    ], axis=-1)
    return {
        "msa_feat": msa_feat,
        "msa_mask": np.ones((n_clusters, crop.size), np.float32),
        "msa_row_mask": np.ones(n_clusters, np.float32),
        "bert_mask": bert_mask[:, window].astype(np.float32),
        "true_msa": true_msa[:, window],
        "extra_msa": msa[kept, window],
        "extra_msa_mask": np.ones((kept.size, crop.size), np.float32),
        "extra_msa_row_mask": np.ones(kept.size, np.float32),
        "extra_has_deletion": np.clip(extra_deletions, 0.0, 1.0),
        "extra_deletion_value": _deletion_value(extra_deletions),
    }


def _bert_mask(msa: np.ndarray, profile: np.ndarray, seed: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(positions replaced [N, L] bool, the masked MSA) — the reference's draws and order.

    A fresh stream of ``seed``: first ``rand`` over [N, L] picks the positions, then one
    categorical draw per position over 23 classes (``argmax(p / Exp(1))``, with the
    reference's float32 probabilities + 1e-10); only the picked positions use theirs.
    """
    stream = TorchCompatibleStream(seed)
    n_rows, length = msa.shape
    replace = stream.rand((n_rows, length)) < BERT_REPLACE_FRACTION
    words = stream.exponential_words(n_rows * length * _MSA_CLASSES).reshape(
        n_rows, length, _MSA_CLASSES)
    rows, cols = np.nonzero(replace)
    uniform = np.zeros(_PROFILE_CLASSES, np.float32)
    uniform[:rc.RESTYPE_NUM] = 0.05
    base = np.float32(BERT_UNIFORM_PROB) * uniform + np.float32(BERT_PROFILE_PROB) * profile
    probs = np.empty((rows.size, _MSA_CLASSES), np.float32)
    probs[:, :_PROFILE_CLASSES] = base[cols] + np.float32(BERT_SAME_PROB) * _one_hot(
        msa[rows, cols], _PROFILE_CLASSES)
    probs[:, _PROFILE_CLASSES] = np.float32(
        1.0 - BERT_UNIFORM_PROB - BERT_PROFILE_PROB - BERT_SAME_PROB)
    probs += np.float32(1e-10)
    exponential = TorchCompatibleStream.exponential_of(words[rows, cols])
    masked = msa.copy()
    masked[rows, cols] = np.argmax(probs / exponential, axis=-1)
    return replace, masked


def _nearest_clusters(clusters: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """For each extra row, the cluster with most agreeing residues (first on ties).

    Agreement counts columns where both rows hold the same residue or X (gaps and mask
    tokens weigh :data:`GAP_AGREEMENT_WEIGHT` = 0 and 0). Integer counts in float32 matrix
    products are exact, so the result equals the reference's float32 ``argmax``. The extra
    rows' one-hot is built chunk by chunk in one reused buffer (it would be E·L·21 floats).
    """
    n_extra, length = extra.shape
    if n_extra == 0:
        return np.zeros(0, np.int64)
    if GAP_AGREEMENT_WEIGHT != 0.0:
        raise NotImplementedError("only the reference's gap weight 0 is implemented")
    width = length * _AGREEING_CLASSES
    centre = _one_hot(clusters, _AGREEING_CLASSES).reshape(clusters.shape[0], width)
    chunk = max(1, min(n_extra, _ONEHOT_CHUNK_BYTES // (4 * width)))
    buffer = np.empty(chunk * width, np.float32)
    columns = np.arange(length) * _AGREEING_CLASSES
    out = np.empty(n_extra, np.int64)
    for begin in range(0, n_extra, chunk):
        rows = extra[begin:begin + chunk]
        used = buffer[:rows.shape[0] * width]
        used.fill(0.0)
        cells = (np.arange(rows.shape[0])[:, None] * width + columns + rows)[
            rows < _AGREEING_CLASSES]
        used[cells] = 1.0
        out[begin:begin + rows.shape[0]] = np.argmax(
            used.reshape(rows.shape[0], width) @ centre.T, axis=1)
    return out


def _summarise_clusters(centres: np.ndarray, centre_deletions: np.ndarray,
                        extra: np.ndarray, extra_deletions: np.ndarray,
                        assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster and column: class profile [C, L, 23] and mean deletion [C, L] over the
    cluster's centre and its assigned extra rows (the reference's float32 operation order)."""
    n_clusters, length = centres.shape
    members = np.bincount(assignment, minlength=n_clusters).astype(np.float32)
    counts = (np.float32(1e-6) + np.float32(1.0)) + members  # centre + members (+1e-6)
    flat = (assignment[:, None] * length + np.arange(length)) * _MSA_CLASSES + extra
    histogram = np.bincount(flat.ravel(), minlength=n_clusters * length * _MSA_CLASSES)
    histogram = histogram.reshape(n_clusters, length, _MSA_CLASSES).astype(np.float32)
    histogram += _one_hot(centres, _MSA_CLASSES)
    profile = histogram / counts[:, None, None]
    cells = (assignment[:, None] * length + np.arange(length)).ravel()
    deletion_sum = np.bincount(cells, weights=extra_deletions.ravel(),
                               minlength=n_clusters * length).reshape(n_clusters, length)
    deletion_sum = deletion_sum.astype(np.float32) + centre_deletions
    return profile, deletion_sum / counts[:, None]


def _deletion_value(deletions: np.ndarray) -> np.ndarray:
    """Deletion counts squashed to [0, 1): atan(d / 3) · 2/π (float32)."""
    return np.arctan(deletions / np.float32(3.0)) * np.float32(2.0 / np.pi)


def _one_hot(indices: np.ndarray, classes: int) -> np.ndarray:
    """float32 one-hot along a new last axis (indices >= classes give all zeros); written
    by index into zeros, which is several times faster than comparing with every class."""
    flat = np.asarray(indices).reshape(-1)
    out = np.zeros(flat.size * classes, np.float32)
    cells = np.arange(flat.size) * classes + flat
    out[cells[flat < classes]] = 1.0
    return out.reshape(np.shape(indices) + (classes,))
