"""One training or evaluation sample: a chain's sequence, MSAs, structure and templates turned
into the reference's feature dict (REF ``openfold/data/features.py`` + ``transforms.py``,
spec §7 "MSA pipeline" and "Model inputs").

The output has the reference's keys (:data:`FEATURE_SCHEMA`, its ``FEATURE_SHAPES`` plus
``use_clamped_fape`` in training), its dtypes (int64 indices, float32 values) and its layout:
every array is padded to the sizes (``N_res`` = crop, ``N_clust``, ``N_extra_seq``,
``N_templ``) and carries a trailing recycling axis of ``recycling_copies`` entries. The
copies differ only in their MSA sampling and BERT masking (seed ``s + i`` for copy ``i``);
the crop and the template subsampling are drawn once from ``s`` and shared.

Randomness is the reference's, draw for draw. Its transforms seed a fresh
``torch.Generator`` per step and call ``randperm``/``rand``/``multinomial``/``randint`` on
it; :class:`TorchCompatibleStream` reproduces those CPU streams with numpy's MT19937 (the
same Mersenne Twister, same seeding, same conversions; compared with torch 2.13 CPU, whose
``multinomial`` of one sample is ``argmax(p / Exp(1))`` on float32). So, given the same inputs
and seed, the arrays equal the reference's bit for bit, except (1) the ``atan`` of deletion
counts (numpy's vs torch's float32 ``atan``: at most 1 ulp) and (2) what :mod:`.geometry`
derives from atoms (frames, torsions; float64 there, float32 in the reference): about 1e-6
on frames and up to a few 1e-5 on torsion (sin, cos) where the atoms exist, anything where
the masks say they do not (both sides then work on zeroed atoms, and the loss masks them).

Per copy, in the reference's order: sample the MSA (query first, the rest shuffled; the first
``N_clust`` rows are the clusters, the others extra sequences) → BERT-mask the clusters
(15 % of positions; a masked position becomes a uniform amino acid, a draw from the MSA
profile, itself, or the mask token with probabilities 0.1/0.1/0.1/0.7) → assign every extra
sequence to the cluster it agrees with most (gaps and mask tokens count 0) → cluster profile
and mean deletion (over the extra sequences and the cluster centre) → keep a random
``N_extra_seq`` of the extra sequences → ``msa_feat`` (49) and the extra-MSA features.
Profiles and features are computed on the crop's columns only: every one of them is
column-wise, and the draws and the cluster assignment still see the full length.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import geometry
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.parsers import Alignment
from sciperf.workloads.openfold.templates import TemplateFeatures

MODES = ("train", "eval")
# BERT masking of the clustered MSA (REF config: masked_msa_*): the fraction of positions
# replaced, and what a replaced position becomes; the remaining 0.7 is the mask token.
BERT_REPLACE_FRACTION = 0.15
BERT_UNIFORM_PROB = 0.1
BERT_PROFILE_PROB = 0.1
BERT_SAME_PROB = 0.1
# Agreement weight of two gaps when assigning extra sequences to clusters (mask tokens: 0).
GAP_AGREEMENT_WEIGHT = 0.0
# Training samples use the clamped backbone FAPE with this probability (REF config).
USE_CLAMPED_FAPE_PROBABILITY = 0.9
# The strings the reference hashes into seeds (REF train.py, samplers.py).
TRAIN_SAMPLER_SEED_FORMAT = "initial_training_sampler_{seed}"

_MSA_CLASSES = rc.MSA_NUM_CLASSES  # 23: 20 residues, X, gap, mask token
_PROFILE_CLASSES = 22  # the MSA profile has no mask-token column
_AGREEING_CLASSES = 21  # residues and X agree with weight 1; gap and mask token with 0
_ONEHOT_CHUNK_BYTES = 8 << 20  # one chunk of the extra-MSA one-hot (cache-sized)

# Symbolic sizes of the schema.
N_RES, N_CLUST, N_EXTRA, N_TEMPL = "N_res", "N_clust", "N_extra_seq", "N_templ"
# name -> (shape before the trailing recycling axis, dtype): REF config.FEATURE_SHAPES.
FEATURE_SCHEMA: Mapping[str, tuple[tuple[str | int, ...], str]] = {
    "aatype": ((N_RES,), "int64"),
    "all_atom_mask": ((N_RES, 37), "float32"),
    "all_atom_positions": ((N_RES, 37, 3), "float32"),
    "atom14_alt_gt_exists": ((N_RES, 14), "float32"),
    "atom14_alt_gt_positions": ((N_RES, 14, 3), "float32"),
    "atom14_atom_exists": ((N_RES, 14), "float32"),
    "atom14_atom_is_ambiguous": ((N_RES, 14), "float32"),
    "atom14_gt_exists": ((N_RES, 14), "float32"),
    "atom14_gt_positions": ((N_RES, 14, 3), "float32"),
    "atom37_atom_exists": ((N_RES, 37), "float32"),
    "backbone_rigid_mask": ((N_RES,), "float32"),
    "backbone_rigid_tensor": ((N_RES, 4, 4), "float32"),
    "bert_mask": ((N_CLUST, N_RES), "float32"),
    "chi_angles_sin_cos": ((N_RES, 4, 2), "float32"),
    "chi_mask": ((N_RES, 4), "float32"),
    "extra_deletion_value": ((N_EXTRA, N_RES), "float32"),
    "extra_has_deletion": ((N_EXTRA, N_RES), "float32"),
    "extra_msa": ((N_EXTRA, N_RES), "int64"),
    "extra_msa_mask": ((N_EXTRA, N_RES), "float32"),
    "extra_msa_row_mask": ((N_EXTRA,), "float32"),
    "is_distillation": ((), "float32"),
    "msa_feat": ((N_CLUST, N_RES, 49), "float32"),
    "msa_mask": ((N_CLUST, N_RES), "float32"),
    "msa_row_mask": ((N_CLUST,), "float32"),
    "pseudo_beta": ((N_RES, 3), "float32"),
    "pseudo_beta_mask": ((N_RES,), "float32"),
    "residue_index": ((N_RES,), "int64"),
    "residx_atom14_to_atom37": ((N_RES, 14), "int64"),
    "residx_atom37_to_atom14": ((N_RES, 37), "int64"),
    "resolution": ((), "float32"),
    "rigidgroups_alt_gt_frames": ((N_RES, 8, 4, 4), "float32"),
    "rigidgroups_group_exists": ((N_RES, 8), "float32"),
    "rigidgroups_group_is_ambiguous": ((N_RES, 8), "float32"),
    "rigidgroups_gt_exists": ((N_RES, 8), "float32"),
    "rigidgroups_gt_frames": ((N_RES, 8, 4, 4), "float32"),
    "seq_length": ((), "int64"),
    "seq_mask": ((N_RES,), "float32"),
    "target_feat": ((N_RES, 22), "float32"),
    "template_aatype": ((N_TEMPL, N_RES), "int64"),
    "template_all_atom_mask": ((N_TEMPL, N_RES, 37), "float32"),
    "template_all_atom_positions": ((N_TEMPL, N_RES, 37, 3), "float32"),
    "template_alt_torsion_angles_sin_cos": ((N_TEMPL, N_RES, 7, 2), "float32"),
    "template_mask": ((N_TEMPL,), "float32"),
    "template_pseudo_beta": ((N_TEMPL, N_RES, 3), "float32"),
    "template_pseudo_beta_mask": ((N_TEMPL, N_RES), "float32"),
    "template_sum_probs": ((N_TEMPL, 1), "float32"),
    "template_torsion_angles_mask": ((N_TEMPL, N_RES, 7), "float32"),
    "template_torsion_angles_sin_cos": ((N_TEMPL, N_RES, 7, 2), "float32"),
    "true_msa": ((N_CLUST, N_RES), "int64"),
}
TRAIN_ONLY_FEATURES: Mapping[str, tuple[tuple[str | int, ...], str]] = {
    "use_clamped_fape": ((), "float32"),
}


@dataclass(frozen=True)
class FeatureSizes:
    """The padded sizes of a sample (the benchmark's values live in the workload's spec)."""

    crop: int  # N_res of a training sample; evaluation keeps the whole chain
    msa_clusters: int  # N_clust
    extra_msa: int  # N_extra_seq
    templates: int  # N_templ
    recycling_copies: int  # the trailing axis: num_recycling_iters + 1

    def __post_init__(self) -> None:
        for name in ("crop", "msa_clusters", "extra_msa", "recycling_copies"):
            if getattr(self, name) < 1:
                raise SciperfError(f"feature size {name} must be >= 1, got {getattr(self, name)}")
        if self.templates < 0:
            raise SciperfError(f"feature size templates must be >= 0, got {self.templates}")


@dataclass(frozen=True)
class Chain:
    """What the pipeline needs of one PDB chain (its atoms as the processed dicts hold them)."""

    chain_id: str  # pdb_chain_id, "<pdb_id>_<author_chain_id>"
    sequence: str
    all_atom_positions: np.ndarray  # [L, 37, 3]
    all_atom_mask: np.ndarray  # [L, 37], bool or 0/1
    resolution: float


# ---------------------------------------------------------------------------------------------
# Seeds
# ---------------------------------------------------------------------------------------------

def seed_from_string(text: str) -> int:
    """The reference's string → uint64 seed: ``random.Random(text).getrandbits(64)``."""
    return random.Random(text).getrandbits(64)


def eval_seed(chain_id: str) -> int:
    """An evaluation sample's seed: the hash of its ``pdb_chain_id`` (REF ValidationSampler)."""
    return seed_from_string(chain_id)


def train_sample_seeds(global_seed: int, count: int) -> np.ndarray:
    """The first ``count`` per-sample seeds of a training run (REF InitialTrainingSampler).

    The sampler seeds a generator with the hash of ``initial_training_sampler_<seed>`` and
    draws ``randint(0, 2**63 - 1)`` once per sample of the global batch sequence; rank ``r``
    of ``w`` takes every ``w``-th (sample ``k`` of the run is entry ``k``).
    """
    stream = TorchCompatibleStream(seed_from_string(TRAIN_SAMPLER_SEED_FORMAT.format(
        seed=global_seed)))
    return stream.randint64(2**63 - 1, count)


class TorchCompatibleStream:
    """The draws of ``torch.Generator().manual_seed(seed)`` on CPU, with numpy only.

    torch's CPU generator is MT19937 initialised from the low 32 bits of the seed by the
    standard recurrence; ``random()`` is one 32-bit output, ``random64()`` two (high word
    first). On top of them (ATen's CPU kernels, checked against torch 2.13): ``rand`` keeps
    24 bits of ``random()``; ``randperm(n)`` is a Fisher–Yates pass swapping ``i`` with
    ``i + random() % (n - i)``; ``randint`` below 2**32 is ``low + random() % range`` and
    above it uses ``random64()``; ``exponential_`` is ``-log1p(-u)`` of a 53-bit ``u`` from
    ``random64()``, rounded to float32.
    """

    def __init__(self, seed: int) -> None:
        key = np.empty(624, np.uint32)
        value = seed & 0xFFFFFFFF
        key[0] = value
        for i in range(1, 624):
            value = (1812433253 * (value ^ (value >> 30)) + i) & 0xFFFFFFFF
            key[i] = value
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": 624}}

    def random(self, count: int) -> np.ndarray:
        """``count`` 32-bit outputs (uint64 array)."""
        return self._bits.random_raw(count).astype(np.uint64)

    def random64(self, count: int) -> np.ndarray:
        """``count`` 64-bit outputs (uint64 array)."""
        words = self.random(2 * count)
        return (words[0::2] << np.uint64(32)) | words[1::2]

    def rand(self, shape: tuple[int, ...]) -> np.ndarray:
        """``torch.rand(shape)``: float32 uniforms in [0, 1), row-major."""
        words = self.random(int(np.prod(shape, dtype=np.int64)))
        return ((words & np.uint64(0xFFFFFF)).astype(np.float64) / 2.0**24).astype(
            np.float32).reshape(shape)

    def randperm(self, n: int) -> np.ndarray:
        """``torch.randperm(n)`` (int64)."""
        perm = list(range(n))
        words = self.random(max(n - 1, 0)).tolist()
        for i, word in enumerate(words):
            j = i + word % (n - i)
            perm[i], perm[j] = perm[j], perm[i]
        return np.array(perm, np.int64)

    def randint(self, low: int, high: int) -> int:
        """One ``torch.randint(low, high)`` draw (``high`` exclusive, range below 2**32)."""
        return low + int(self.random(1)[0]) % (high - low)

    def randint64(self, high: int, count: int) -> np.ndarray:
        """``torch.randint(0, high, [count])`` for a range of at least 2**32 (int64)."""
        return (self.random64(count) % np.uint64(high)).astype(np.int64)

    def exponential_words(self, count: int) -> np.ndarray:
        """The raw 64-bit words of ``torch.empty(count).exponential_()`` (convert them with
        :meth:`exponential_of`, possibly only a subset: the stream advances either way)."""
        return self.random64(count)

    @staticmethod
    def exponential_of(words: np.ndarray) -> np.ndarray:
        """Exp(1) float32 values of raw 64-bit words (see :meth:`exponential_words`)."""
        uniform = (words & np.uint64((1 << 53) - 1)).astype(np.float64) / 2.0**53
        return (-np.log1p(-uniform)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Raw inputs
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


def sequence_aatype(sequence: str) -> np.ndarray:
    """Residue types of a sequence (our order; a letter outside the 20 becomes X = 20)."""
    return rc.sequence_to_onehot(sequence, rc.RESTYPE_ORDER_WITH_X,
                                 map_unknown_to_x=True).argmax(-1).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# The sample
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Crop:
    """The draws shared by every recycling copy: residue window and chosen templates."""

    start: int
    size: int
    templates: np.ndarray  # indices into the sample's templates, in their new order


def make_features(chain: Chain, alignments: Sequence[Alignment | None],
                  templates: TemplateFeatures | None, *, mode: str, sizes: FeatureSizes,
                  seed: int | None = None) -> dict[str, np.ndarray]:
    """The feature dict of one sample (see the module docstring).

    ``alignments``: the chain's parsed a3m files in the reference's order (uniref90,
    bfd_uniclust, mgnify; ``None`` where one is missing). ``templates``: the chain's
    template hits featurised by :mod:`.templates` (``None``: no templates). ``seed``: the
    sample's seed (training: from the sampler; evaluation: default :func:`eval_seed`).
    Evaluation keeps the whole chain (``N_res`` = its length) and the templates in hit order.
    """
    if mode not in MODES:
        raise SciperfError(f"feature mode must be one of {MODES}, got {mode!r}")
    if seed is None:
        if mode != "eval":
            raise SciperfError("a training sample needs its seed (from the sampler)")
        seed = eval_seed(chain.chain_id)
    if seed < 0:
        raise SciperfError(f"sample seed must be >= 0, got {seed}")
    length = len(chain.sequence)
    if length == 0:
        raise SciperfError(f"chain {chain.chain_id}: empty sequence")
    if templates is None:
        templates = TemplateFeatures.empty(length)
    _check_shapes(chain, templates)
    msa, deletions = merge_alignments(chain.sequence, alignments)
    aatype = sequence_aatype(chain.sequence)
    crop = _draw_crop(length, templates.count, mode, sizes, seed)
    n_res = sizes.crop if mode == "train" else length

    shared = _residue_features(chain, aatype, crop)
    shared.update(_template_features(templates, crop, sizes.templates))
    profile = _msa_profile(msa)
    copies = [_msa_copy(msa, deletions, profile, crop, sizes, seed + i)
              for i in range(sizes.recycling_copies)]
    sizes_of = {N_RES: n_res, N_CLUST: sizes.msa_clusters, N_EXTRA: sizes.extra_msa,
                N_TEMPL: sizes.templates}
    out: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in FEATURE_SCHEMA.items():
        target = tuple(sizes_of.get(dim, dim) for dim in shape)
        if name in shared:
            padded = _pad(shared[name], target, name)
            out[name] = np.repeat(padded[..., None], sizes.recycling_copies, axis=-1)
        else:
            out[name] = np.stack([_pad(copy[name], target, name) for copy in copies], axis=-1)
        out[name] = out[name].astype(dtype, copy=False)
    if mode == "train":
        clamped = random.Random(seed).uniform(0, 1) < USE_CLAMPED_FAPE_PROBABILITY
        out["use_clamped_fape"] = np.full(sizes.recycling_copies, float(clamped), np.float32)
    return out


def _check_shapes(chain: Chain, templates: TemplateFeatures) -> None:
    """One line naming the chain when its arrays disagree with its sequence."""
    length = len(chain.sequence)
    if np.shape(chain.all_atom_positions) != (length, rc.ATOM_TYPE_NUM, 3) or \
            np.shape(chain.all_atom_mask) != (length, rc.ATOM_TYPE_NUM):
        raise SciperfError(f"chain {chain.chain_id}: atoms have shapes "
                           f"{np.shape(chain.all_atom_positions)} / "
                           f"{np.shape(chain.all_atom_mask)}, expected ({length}, 37, 3) / "
                           f"({length}, 37) for its {length} residues")
    if templates.aatype.shape[1:] != (length,):
        raise SciperfError(f"chain {chain.chain_id}: templates cover "
                           f"{templates.aatype.shape[1:]} residues, the chain {length}")


def _draw_crop(length: int, n_templates: int, mode: str, sizes: FeatureSizes,
               seed: int) -> _Crop:
    """Template subsampling and the residue window, in the reference's draw order.

    Training draws a first template position in ``[0, n_templates]`` (so possibly none), a
    permutation of the templates, and the window's start; evaluation takes the first
    templates in hit order and the whole chain.
    """
    stream = TorchCompatibleStream(seed)
    size = min(length, sizes.crop) if mode == "train" else length
    if mode == "train" and n_templates > 0:
        first = stream.randint(0, n_templates + 1)
        order = stream.randperm(n_templates)
    else:
        first, order = 0, np.arange(n_templates)
    chosen = order[first:first + min(n_templates - first, sizes.templates)]
    start = stream.randint(0, length - size + 1)
    return _Crop(start=start, size=size, templates=chosen)


def _residue_features(chain: Chain, aatype: np.ndarray, crop: _Crop) -> dict[str, np.ndarray]:
    """Sequence, atom and supervision features of the crop (the same for every copy)."""
    window = slice(crop.start, crop.start + crop.size)
    aatype = aatype[window]
    positions = np.asarray(chain.all_atom_positions, np.float32)[window]
    mask = np.asarray(chain.all_atom_mask).astype(np.float32)[window]
    out = {
        "aatype": aatype,
        "residue_index": np.arange(crop.start, crop.start + crop.size, dtype=np.int64),
        "seq_length": np.array(crop.size, np.int64),
        "seq_mask": np.ones(crop.size, np.float32),
        "resolution": np.array(chain.resolution, np.float32),
        "is_distillation": np.array(0.0, np.float32),
        "all_atom_positions": positions,
        "all_atom_mask": mask,
        "target_feat": np.concatenate(
            [np.zeros((crop.size, 1), np.float32), _one_hot(aatype, 21)], axis=-1),
    }
    out.update(geometry.supervision_features(aatype, positions, mask))
    return out


def _template_features(templates: TemplateFeatures, crop: _Crop,
                       n_templates: int) -> dict[str, np.ndarray]:
    """The chosen templates, cropped to the residue window."""
    pick, window = crop.templates, slice(crop.start, crop.start + crop.size)
    return {
        "template_aatype": templates.aatype[pick, window],
        "template_all_atom_positions": templates.all_atom_positions[pick, window],
        "template_all_atom_mask": templates.all_atom_mask[pick, window],
        "template_sum_probs": templates.sum_probs[pick],
        "template_mask": np.ones(len(pick), np.float32),
        "template_pseudo_beta": templates.pseudo_beta[pick, window],
        "template_pseudo_beta_mask": templates.pseudo_beta_mask[pick, window],
        "template_torsion_angles_sin_cos": templates.torsion_angles_sin_cos[pick, window],
        "template_alt_torsion_angles_sin_cos":
            templates.alt_torsion_angles_sin_cos[pick, window],
        "template_torsion_angles_mask": templates.torsion_angles_mask[pick, window],
    }


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


def _pad(array: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Zero-pad every axis at its end up to ``shape``."""
    if array.ndim != len(shape) or any(a > s for a, s in zip(array.shape, shape, strict=True)):
        raise SciperfError(f"feature {name}: shape {array.shape} does not fit {shape}")
    if array.shape == shape:
        return array
    return np.pad(array, [(0, s - a) for a, s in zip(array.shape, shape, strict=True)])
