"""What one OpenFold sample is: its input chain, its padded sizes and its feature schema.

The feature dict has the reference's keys (:data:`FEATURE_SCHEMA`, its ``FEATURE_SHAPES``
plus :data:`TRAIN_ONLY_FEATURES` in training), dtypes (int64 indices, float32 values) and
symbolic shapes (``N_res``, ``N_clust``, ``N_extra_seq``, ``N_templ``), which
:class:`FeatureSizes` fixes; every array also carries a trailing recycling axis. The
pipeline that fills it is :mod:`.features` (assembly) and :mod:`.msa` (the MSA features),
which both take these types from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sciperf.errors import SciperfError

__all__ = [
    "FEATURE_SCHEMA",
    "MODES",
    "N_CLUST",
    "N_EXTRA",
    "N_RES",
    "N_TEMPL",
    "TRAIN_ONLY_FEATURES",
    "Chain",
    "FeatureSizes",
]

MODES = ("train", "eval")

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


@dataclass(frozen=True)
class _Crop:
    """The draws shared by every recycling copy: residue window and chosen templates."""

    start: int
    size: int
    templates: np.ndarray  # indices into the sample's templates, in their new order
