"""One training or evaluation sample: a chain's sequence, MSAs, structure and templates turned
into the reference's feature dict (REF ``openfold/data/features.py`` + ``transforms.py``,
spec §7 "MSA pipeline" and "Model inputs").

The output has the reference's keys (:data:`FEATURE_SCHEMA`, its ``FEATURE_SHAPES`` plus
``use_clamped_fape`` in training), its dtypes (int64 indices, float32 values) and its layout:
every array is padded to the sizes (``N_res`` = crop, ``N_clust``, ``N_extra_seq``,
``N_templ``) and carries a trailing recycling axis of ``recycling_copies`` entries. The
copies differ only in their MSA sampling and BERT masking (seed ``s + i`` for copy ``i``);
the crop and the template subsampling are drawn once from ``s`` and shared.

Randomness is the reference's, draw for draw (:mod:`.rng` reproduces its torch CPU
streams). So, given the same inputs and seed, the arrays equal the reference's bit for bit,
except (1) the ``atan`` of deletion counts (numpy's vs torch's float32 ``atan``: at most
1 ulp) and (2) what :mod:`.geometry` derives from atoms (frames, torsions; float64 there,
float32 in the reference): about 1e-6 on frames and up to a few 1e-5 on torsion (sin, cos)
where the atoms exist, anything where the masks say they do not (both sides then work on
zeroed atoms, and the loss masks them).

This module owns the assembly: the crop and template draws shared by every copy, the
residue, atom and template features of the crop, the per-copy MSA features stacked along
the recycling axis, and the padding to the schema. The schema and sizes are
:mod:`.schema`, the MSA features :mod:`.msa`, the seeds and streams :mod:`.rng`; their
public names are re-exported here, where callers take them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import geometry
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.msa import (
    BERT_PROFILE_PROB,
    BERT_REPLACE_FRACTION,
    BERT_SAME_PROB,
    BERT_UNIFORM_PROB,
    GAP_AGREEMENT_WEIGHT,
    _msa_copy,
    _msa_profile,
    _one_hot,
    merge_alignments,
)
from sciperf.workloads.openfold.parsers import Alignment
from sciperf.workloads.openfold.rng import (
    TRAIN_SAMPLER_SEED_FORMAT,
    TorchCompatibleStream,
    eval_seed,
    seed_from_string,
    train_sample_seeds,
)
from sciperf.workloads.openfold.schema import (
    FEATURE_SCHEMA,
    MODES,
    N_CLUST,
    N_EXTRA,
    N_RES,
    N_TEMPL,
    TRAIN_ONLY_FEATURES,
    Chain,
    FeatureSizes,
    _Crop,
)
from sciperf.workloads.openfold.templates import TemplateFeatures

__all__ = [
    "BERT_PROFILE_PROB",
    "BERT_REPLACE_FRACTION",
    "BERT_SAME_PROB",
    "BERT_UNIFORM_PROB",
    "FEATURE_SCHEMA",
    "GAP_AGREEMENT_WEIGHT",
    "MODES",
    "N_CLUST",
    "N_EXTRA",
    "N_RES",
    "N_TEMPL",
    "TRAIN_ONLY_FEATURES",
    "TRAIN_SAMPLER_SEED_FORMAT",
    "USE_CLAMPED_FAPE_PROBABILITY",
    "Chain",
    "FeatureSizes",
    "TorchCompatibleStream",
    "eval_seed",
    "make_features",
    "merge_alignments",
    "seed_from_string",
    "sequence_aatype",
    "train_sample_seeds",
]

# Training samples use the clamped backbone FAPE with this probability (REF config).
USE_CLAMPED_FAPE_PROBABILITY = 0.9


def sequence_aatype(sequence: str) -> np.ndarray:
    """Residue types of a sequence (our order; a letter outside the 20 becomes X = 20)."""
    return rc.sequence_to_onehot(sequence, rc.RESTYPE_ORDER_WITH_X,
                                 map_unknown_to_x=True).argmax(-1).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# The sample
# ---------------------------------------------------------------------------------------------

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


def _pad(array: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Zero-pad every axis at its end up to ``shape``."""
    if array.ndim != len(shape) or any(a > s for a, s in zip(array.shape, shape, strict=True)):
        raise SciperfError(f"feature {name}: shape {array.shape} does not fit {shape}")
    if array.shape == shape:
        return array
    return np.pad(array, [(0, s - a) for a, s in zip(array.shape, shape, strict=True)])
