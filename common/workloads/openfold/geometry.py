"""Protein geometry in numpy: the supervision features the reference computes from a chain's
atoms, and an idealised builder of atoms from torsion angles.

From (aatype [..., L], all_atom_positions [..., L, 37, 3], all_atom_mask [..., L, 37]) the
reference's data pipeline (REF ``data/transforms.py``: ``make_atom14_masks``,
``make_atom14_positions``, ``atom37_to_frames``, ``atom37_to_torsion_angles``,
``make_pseudo_beta``, ``get_backbone_frames``, ``get_chi_angles``, in that order) derives the
ground truth of the loss; :func:`supervision_features` returns the same keys. The same
torsion and pseudo-β functions serve the template features (which the caller prefixes with
``template_``). Everything is vectorised over any leading dimensions.

Conventions kept from the reference, since the loss compares against them:
- a frame is (R [..., 3, 3], t [..., 3]) mapping local to global (x_global = R x + t); as a
  4×4 it is [[R, t], [0, 0, 0, 1]]. :func:`frames_from_3_points` is the reference's
  Gram–Schmidt with its eps inside each square root (1e-8);
- the backbone frame has x along CA→C and N in the xy-plane (y > 0), origin CA;
- a torsion is (sin, cos) of the fourth atom's angle around the x axis of the frame of the
  first three; ψ is measured to O and turned by π (so it equals the N–CA–C–N(i+1) dihedral
  when O is trans to the next N); the "alt" torsions add π to the π-periodic chis, and the
  "alt" frames turn the last chi group of ASP/GLU/PHE/TYR by π about x;
- absent atoms gather index 0 (N) and are zeroed or masked afterwards, as in the reference.

Arithmetic is float64; float outputs are ``dtype`` (float32 by default, the features' type).
The reference computes frames and torsions in float32 whatever it is fed (its ``Rigid`` casts),
so resolved torsions differ from its values by up to ~1e-5 in sin/cos. Where the geometry is
degenerate (masked-out torsions with coincident or zero-padded atoms, e.g. residue 0's pre-ω)
the value is rounding noise in the reference (up to O(1)) and ~0 here; the loss masks such
entries, but the template angle feature passes them to the model unmasked, as the reference.
"""

from __future__ import annotations

import numpy as np

from sciperf.workloads.openfold import residue_constants as rc

FRAME_EPS = 1e-8  # inside the square roots of the Gram–Schmidt (REF eps)
TORSION_NORM_EPS = 1e-8  # inside the norm that normalises (sin, cos)

Frames = tuple[np.ndarray, np.ndarray]  # (rotations [..., 3, 3], translations [..., 3])


# ---------------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------------

def frames_from_3_points(p_neg_x_axis: np.ndarray, origin: np.ndarray, p_xy_plane: np.ndarray,
                         eps: float = FRAME_EPS) -> Frames:
    """The frame with its origin at ``origin``, x pointing from ``p_neg_x_axis`` to the origin
    and ``p_xy_plane`` in the xy-plane on the +y side (AF2 supplement Algorithm 21)."""
    e0 = np.asarray(origin, np.float64) - p_neg_x_axis
    e1 = np.asarray(p_xy_plane, np.float64) - origin
    e0 = e0 / np.sqrt(np.sum(e0 * e0, axis=-1, keepdims=True) + eps)
    e1 = e1 - e0 * np.sum(e0 * e1, axis=-1, keepdims=True)
    e1 = e1 / np.sqrt(np.sum(e1 * e1, axis=-1, keepdims=True) + eps)
    e2 = np.cross(e0, e1)
    return np.stack([e0, e1, e2], axis=-1), np.asarray(origin, np.float64).copy()


def apply_frames(frames: Frames, points: np.ndarray) -> np.ndarray:
    """Local → global: R p + t."""
    rot, trans = frames
    return np.einsum("...ij,...j->...i", rot, points) + trans


def invert_apply_frames(frames: Frames, points: np.ndarray) -> np.ndarray:
    """Global → local: Rᵀ (p − t)."""
    rot, trans = frames
    return np.einsum("...ji,...j->...i", rot, points - trans)


def compose_frames(outer: Frames, inner: Frames) -> Frames:
    """outer ∘ inner: first ``inner``, then ``outer``."""
    return outer[0] @ inner[0], apply_frames(outer, inner[1])


def frames_to_4x4(frames: Frames, dtype: type = np.float32) -> np.ndarray:
    rot, trans = frames
    out = np.zeros(rot.shape[:-2] + (4, 4), dtype)
    out[..., :3, :3] = rot
    out[..., :3, 3] = trans
    out[..., 3, 3] = 1.0
    return out


def frames_from_4x4(matrices: np.ndarray) -> Frames:
    matrices = np.asarray(matrices, np.float64)
    return matrices[..., :3, :3], matrices[..., :3, 3]


def _rotation_x(sin_cos: np.ndarray) -> np.ndarray:
    """[..., 3, 3] rotation about x by the angle whose (sin, cos) is given."""
    sin, cos = sin_cos[..., 0], sin_cos[..., 1]
    rot = np.zeros(sin_cos.shape[:-1] + (3, 3))
    rot[..., 0, 0] = 1.0
    rot[..., 1, 1], rot[..., 1, 2] = cos, -sin
    rot[..., 2, 1], rot[..., 2, 2] = sin, cos
    return rot


# ---------------------------------------------------------------------------------------------
# atom14 / atom37
# ---------------------------------------------------------------------------------------------

def _gather_atoms(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values [..., L, 37(, 3)] gathered at per-residue atom indices [..., L, K] (any K)."""
    if values.ndim == index.ndim:  # masks: [..., L, 37]
        return np.take_along_axis(values, index, axis=-1)
    return np.take_along_axis(values, index[..., None], axis=-2)


def atom14_masks(aatype: np.ndarray, dtype: type = np.float32) -> dict[str, np.ndarray]:
    """Per-residue atom14 ↔ atom37 maps and which atoms the residue type has."""
    aatype = np.asarray(aatype)
    return {
        "atom14_atom_exists": rc.RESTYPE_ATOM14_MASK[aatype].astype(dtype),
        "residx_atom14_to_atom37": rc.RESTYPE_ATOM14_TO_ATOM37[aatype],
        "residx_atom37_to_atom14": rc.RESTYPE_ATOM37_TO_ATOM14[aatype],
        "atom37_atom_exists": rc.RESTYPE_ATOM37_MASK[aatype].astype(dtype),
    }


def atom37_to_atom14(aatype: np.ndarray, atom37: np.ndarray) -> np.ndarray:
    """atom37 values [..., L, 37(, C)] in atom14 order [..., L, 14(, C)], absent slots 0."""
    aatype = np.asarray(aatype)
    gathered = _gather_atoms(np.asarray(atom37), rc.RESTYPE_ATOM14_TO_ATOM37[aatype])
    exists = rc.RESTYPE_ATOM14_MASK[aatype]
    return gathered * (exists if gathered.ndim == exists.ndim else exists[..., None])


def atom14_to_atom37(aatype: np.ndarray, atom14: np.ndarray) -> np.ndarray:
    """atom14 values [..., L, 14(, C)] in atom37 order [..., L, 37(, C)], absent slots 0."""
    aatype = np.asarray(aatype)
    atom14 = np.asarray(atom14)
    index = rc.RESTYPE_ATOM37_TO_ATOM14[aatype]
    if atom14.ndim == index.ndim:
        gathered = np.take_along_axis(atom14, index, axis=-1)
    else:
        gathered = np.take_along_axis(atom14, index[..., None], axis=-2)
    exists = rc.RESTYPE_ATOM37_MASK[aatype]
    return gathered * (exists if gathered.ndim == exists.ndim else exists[..., None])


def atom14_positions(aatype: np.ndarray, all_atom_positions: np.ndarray,
                     all_atom_mask: np.ndarray, dtype: type = np.float32
                     ) -> dict[str, np.ndarray]:
    """Ground-truth atom14 positions and mask, and the alternative ones with the names of
    symmetric atoms swapped (the loss keeps whichever naming fits the prediction better)."""
    aatype = np.asarray(aatype)
    positions = np.asarray(all_atom_positions, np.float64)
    mask = np.asarray(all_atom_mask, np.float64)
    exists = rc.RESTYPE_ATOM14_MASK[aatype].astype(np.float64)
    index = rc.RESTYPE_ATOM14_TO_ATOM37[aatype]
    gt_exists = exists * _gather_atoms(mask, index)
    gt_positions = gt_exists[..., None] * _gather_atoms(positions, index)
    renaming = rc.RESTYPE_AMBIGUOUS_RENAMING[aatype].astype(np.float64)
    return {
        "atom14_atom_exists": exists.astype(dtype),
        "atom14_gt_exists": gt_exists.astype(dtype),
        "atom14_gt_positions": gt_positions.astype(dtype),
        "atom14_alt_gt_positions": np.einsum("...rac,...rab->...rbc", gt_positions,
                                             renaming).astype(dtype),
        "atom14_alt_gt_exists": np.einsum("...ra,...rab->...rb", gt_exists,
                                          renaming).astype(dtype),
        "atom14_atom_is_ambiguous": rc.RESTYPE_ATOM14_IS_AMBIGUOUS[aatype].astype(dtype),
    }


# ---------------------------------------------------------------------------------------------
# Rigid-group frames of the ground truth
# ---------------------------------------------------------------------------------------------

def _rigid_group_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per residue type: the 3 atom37 indices defining each group's frame [21, 8, 3] (p_neg_x,
    origin, p_xy), which groups exist [21, 8], and which are π-ambiguous [21, 8].

    Backbone: (C, CA, N), then turned by π about y so x runs CA→C; ψ: (CA, C, O); chi k: the
    chi's atoms 2–4, i.e. the rotation axis and the dihedral-defining atom. The backbone and
    ψ groups "exist" for UNK too (the reference sets them for every row).
    """
    base = np.zeros((rc.RESTYPE_NUM + 1, 8, 3), np.int64)
    base[:, 0] = [rc.ATOM_ORDER[a] for a in ("C", "CA", "N")]
    base[:, 3] = [rc.ATOM_ORDER[a] for a in ("CA", "C", "O")]
    exists = np.zeros((rc.RESTYPE_NUM + 1, 8), np.float64)
    exists[:, [0, 3]] = 1.0
    ambiguous = np.zeros((rc.RESTYPE_NUM + 1, 8), np.float64)
    for restype, letter in enumerate(rc.RESTYPES):
        name = rc.RESTYPE_1TO3[letter]
        chis = rc.CHI_ANGLES_ATOMS[name]
        for k, atoms in enumerate(chis):
            base[restype, 4 + k] = [rc.ATOM_ORDER[a] for a in atoms[1:]]
            exists[restype, 4 + k] = 1.0
        if name in rc.RESIDUE_ATOM_RENAMING_SWAPS:
            ambiguous[restype, 3 + len(chis)] = 1.0
    for table in (base, exists, ambiguous):
        table.setflags(write=False)
    return base, exists, ambiguous


RESTYPE_RIGIDGROUP_BASE_ATOM37_IDX, RESTYPE_RIGIDGROUP_EXISTS, RESTYPE_RIGIDGROUP_IS_AMBIGUOUS = (
    _rigid_group_tables())

_FLIP_BACKBONE = np.diag([-1.0, 1.0, -1.0])  # π about y: x → −x, z → −z
_FLIP_AMBIGUOUS = np.diag([1.0, -1.0, -1.0])  # π about x: the symmetric group's other naming


def rigid_group_frames(aatype: np.ndarray, all_atom_positions: np.ndarray,
                       all_atom_mask: np.ndarray, eps: float = FRAME_EPS,
                       dtype: type = np.float32) -> dict[str, np.ndarray]:
    """The 8 rigid-group frames of the true structure as 4×4 [..., L, 8, 4, 4], which exist
    (group defined and its 3 atoms resolved), and the π-turned alternative frames."""
    aatype = np.asarray(aatype)
    positions = np.asarray(all_atom_positions, np.float64)
    mask = np.asarray(all_atom_mask, np.float64)
    index = RESTYPE_RIGIDGROUP_BASE_ATOM37_IDX[aatype]  # [..., L, 8, 3]
    flat = index.reshape(index.shape[:-2] + (24,))
    points = _gather_atoms(positions, flat).reshape(index.shape + (3,))
    rot, trans = frames_from_3_points(points[..., 0, :], points[..., 1, :], points[..., 2, :],
                                      eps)
    rot[..., 0, :, :] = rot[..., 0, :, :] @ _FLIP_BACKBONE
    group_exists = RESTYPE_RIGIDGROUP_EXISTS[aatype]
    atoms_exist = _gather_atoms(mask, flat).reshape(index.shape).min(axis=-1)
    is_ambiguous = RESTYPE_RIGIDGROUP_IS_AMBIGUOUS[aatype]
    alt_rot = np.where(is_ambiguous[..., None, None] > 0, rot @ _FLIP_AMBIGUOUS, rot)
    return {
        "rigidgroups_gt_frames": frames_to_4x4((rot, trans), dtype),
        "rigidgroups_gt_exists": (atoms_exist * group_exists).astype(dtype),
        "rigidgroups_group_exists": group_exists.astype(dtype),
        "rigidgroups_group_is_ambiguous": is_ambiguous.astype(dtype),
        "rigidgroups_alt_gt_frames": frames_to_4x4((alt_rot, trans), dtype),
    }


def backbone_frames(rigid_groups: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The backbone group's frame and mask (the FAPE loss's ground truth frames)."""
    return {"backbone_rigid_tensor": rigid_groups["rigidgroups_gt_frames"][..., 0, :, :],
            "backbone_rigid_mask": rigid_groups["rigidgroups_gt_exists"][..., 0]}


# ---------------------------------------------------------------------------------------------
# Torsion angles
# ---------------------------------------------------------------------------------------------

_PSI_SIGN = np.array([1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0])  # ψ measured to O is turned by π


def torsion_angles(aatype: np.ndarray, all_atom_positions: np.ndarray,
                   all_atom_mask: np.ndarray, dtype: type = np.float32) -> dict[str, np.ndarray]:
    """(sin, cos) of pre-ω, φ, ψ, χ1–χ4 [..., L, 7, 2], the alternative with π added to the
    π-periodic chis, and the mask [..., L, 7] (all four atoms resolved, torsion defined).

    The previous residue along L supplies CA and C of pre-ω and C of φ (none for the first
    residue). Residue types above 20 (a template's gap) count as unknown.
    """
    aatype = np.minimum(np.asarray(aatype), rc.UNK_RESTYPE_INDEX)
    positions = np.asarray(all_atom_positions, np.float64)
    mask = np.asarray(all_atom_mask, np.float64)
    prev_pos = np.concatenate([np.zeros_like(positions[..., :1, :, :]),
                               positions[..., :-1, :, :]], axis=-3)
    prev_mask = np.concatenate([np.zeros_like(mask[..., :1, :]), mask[..., :-1, :]], axis=-2)
    n, ca, c, o = (rc.ATOM_ORDER[a] for a in ("N", "CA", "C", "O"))

    backbone_pos = np.stack([
        np.stack([prev_pos[..., ca, :], prev_pos[..., c, :], positions[..., n, :],
                  positions[..., ca, :]], axis=-2),
        np.stack([prev_pos[..., c, :], positions[..., n, :], positions[..., ca, :],
                  positions[..., c, :]], axis=-2),
        positions[..., [n, ca, c, o], :],
    ], axis=-3)  # [..., L, 3, 4, 3]
    backbone_mask = np.stack([
        prev_mask[..., ca] * prev_mask[..., c] * mask[..., n] * mask[..., ca],
        prev_mask[..., c] * mask[..., n] * mask[..., ca] * mask[..., c],
        mask[..., n] * mask[..., ca] * mask[..., c] * mask[..., o],
    ], axis=-1)

    chi_index = rc.CHI_ATOM_INDICES[aatype]  # [..., L, 4, 4]
    flat = chi_index.reshape(chi_index.shape[:-2] + (16,))
    chi_pos = _gather_atoms(positions, flat).reshape(chi_index.shape + (3,))
    chi_mask = (rc.CHI_ANGLES_MASK[aatype].astype(np.float64)
                * np.prod(_gather_atoms(mask, flat).reshape(chi_index.shape), axis=-1))

    atoms = np.concatenate([backbone_pos, chi_pos], axis=-3)  # [..., L, 7, 4, 3]
    sin_cos = _dihedral_sin_cos(atoms) * _PSI_SIGN[:, None]
    periodic = rc.CHI_PI_PERIODIC[aatype].astype(np.float64)
    mirror = np.concatenate([np.ones(periodic.shape[:-1] + (3,)), 1.0 - 2.0 * periodic], -1)
    return {
        "torsion_angles_sin_cos": sin_cos.astype(dtype),
        "alt_torsion_angles_sin_cos": (sin_cos * mirror[..., None]).astype(dtype),
        "torsion_angles_mask": np.concatenate([backbone_mask, chi_mask], -1).astype(dtype),
    }


def _dihedral_sin_cos(atoms: np.ndarray) -> np.ndarray:
    """[..., 2] normalised (sin, cos) of the dihedral a0-a1-a2-a3 of atoms [..., 4, 3]: the
    fourth atom seen from the frame with origin a2, x from a1 to a2, a0 in the xy-plane."""
    frames = frames_from_3_points(atoms[..., 1, :], atoms[..., 2, :], atoms[..., 0, :])
    local = invert_apply_frames(frames, atoms[..., 3, :])
    sin_cos = np.stack([local[..., 2], local[..., 1]], axis=-1)
    return sin_cos / np.sqrt(np.sum(sin_cos * sin_cos, axis=-1, keepdims=True)
                             + TORSION_NORM_EPS)


def chi_angles(torsions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """χ1–χ4 of :func:`torsion_angles`: ``chi_angles_sin_cos`` [..., L, 4, 2], ``chi_mask``."""
    return {"chi_angles_sin_cos": torsions["torsion_angles_sin_cos"][..., 3:, :],
            "chi_mask": torsions["torsion_angles_mask"][..., 3:]}


# ---------------------------------------------------------------------------------------------
# Pseudo-β and the whole supervision set
# ---------------------------------------------------------------------------------------------

def pseudo_beta(aatype: np.ndarray, all_atom_positions: np.ndarray,
                all_atom_mask: np.ndarray, dtype: type = np.float32
                ) -> tuple[np.ndarray, np.ndarray]:
    """CB (CA for glycine) position [..., L, 3] and its mask [..., L]: the point the
    distogram and the template pair features measure between."""
    aatype = np.asarray(aatype)
    positions, mask = np.asarray(all_atom_positions), np.asarray(all_atom_mask)
    is_gly = aatype == rc.RESTYPE_ORDER["G"]
    ca, cb = rc.ATOM_ORDER["CA"], rc.ATOM_ORDER["CB"]
    position = np.where(is_gly[..., None], positions[..., ca, :], positions[..., cb, :])
    return position.astype(dtype), np.where(is_gly, mask[..., ca], mask[..., cb]).astype(dtype)


def supervision_features(aatype: np.ndarray, all_atom_positions: np.ndarray,
                         all_atom_mask: np.ndarray, dtype: type = np.float32
                         ) -> dict[str, np.ndarray]:
    """Every ground-truth feature the reference's pipeline adds for training and evaluation,
    under the reference's keys (before cropping and padding)."""
    out = atom14_masks(aatype, dtype)
    out.update(atom14_positions(aatype, all_atom_positions, all_atom_mask, dtype))
    groups = rigid_group_frames(aatype, all_atom_positions, all_atom_mask, dtype=dtype)
    out.update(groups)
    torsions = torsion_angles(aatype, all_atom_positions, all_atom_mask, dtype)
    out.update(torsions)
    out["pseudo_beta"], out["pseudo_beta_mask"] = pseudo_beta(
        aatype, all_atom_positions, all_atom_mask, dtype)
    out.update(backbone_frames(groups))
    out.update(chi_angles(torsions))
    return out


# ---------------------------------------------------------------------------------------------
# Building atoms from torsions (idealised geometry)
# ---------------------------------------------------------------------------------------------

def torsion_frames(aatype: np.ndarray, backbone: Frames, torsion_sin_cos: np.ndarray
                   ) -> Frames:
    """Global frames [..., L, 8] of the 8 rigid groups from the backbone frames [..., L] and
    (sin, cos) of the 7 torsions [..., L, 7, 2] (AF2 supplement Algorithm 24): each group's
    default frame turned about its x axis by its torsion, chi k chained onto chi k−1."""
    aatype = np.asarray(aatype)
    default = frames_from_4x4(rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME[aatype])
    angles = np.asarray(torsion_sin_cos, np.float64)
    angles = np.concatenate([np.broadcast_to([0.0, 1.0], angles.shape[:-2] + (1, 2)), angles],
                            axis=-2)  # the backbone group is not turned
    local = compose_frames(default, (_rotation_x(angles), np.zeros(angles.shape[:-1] + (3,))))
    rot, trans = local[0].copy(), local[1].copy()
    for group in (5, 6, 7):  # chi2..4 hang off the previous chi group
        parent = (rot[..., group - 1, :, :], trans[..., group - 1, :])
        rot[..., group, :, :], trans[..., group, :] = compose_frames(
            parent, (rot[..., group, :, :], trans[..., group, :]))
    bb_rot, bb_trans = (np.asarray(x, np.float64) for x in backbone)
    return compose_frames((bb_rot[..., None, :, :], bb_trans[..., None, :]), (rot, trans))


def atom14_from_torsions(aatype: np.ndarray, backbone: Frames, torsion_sin_cos: np.ndarray
                         ) -> np.ndarray:
    """Idealised atom14 positions [..., L, 14, 3] (float64; absent slots 0): every atom at
    its literature position in its rigid group's frame from :func:`torsion_frames`."""
    aatype = np.asarray(aatype)
    rot, trans = torsion_frames(aatype, backbone, torsion_sin_cos)
    group = rc.RESTYPE_ATOM14_TO_RIGID_GROUP[aatype]  # [..., L, 14]
    atom_rot = np.take_along_axis(rot, group[..., None, None], axis=-3)
    atom_trans = np.take_along_axis(trans, group[..., None], axis=-2)
    literature = rc.RESTYPE_ATOM14_RIGID_GROUP_POSITIONS[aatype].astype(np.float64)
    positions = apply_frames((atom_rot, atom_trans), literature)
    return positions * rc.RESTYPE_ATOM14_MASK[aatype][..., None]


def place_atom(a: np.ndarray, b: np.ndarray, c: np.ndarray, bond: float, angle: float,
               torsion: float) -> np.ndarray:
    """The atom d with |cd| = ``bond``, angle b-c-d = ``angle`` and dihedral a-b-c-d =
    ``torsion`` (radians; NeRF). Vectorised over leading dimensions of a, b, c."""
    bc = c - b
    bc = bc / np.linalg.norm(bc, axis=-1, keepdims=True)
    normal = np.cross(b - a, bc)
    normal = normal / np.linalg.norm(normal, axis=-1, keepdims=True)
    across = np.cross(normal, bc)
    local = bond * np.array([-np.cos(angle), np.sin(angle) * np.cos(torsion),
                             np.sin(angle) * np.sin(torsion)])
    return c + local[0] * bc + local[1] * across + local[2] * normal


def build_chain(aatype: np.ndarray, phi: np.ndarray, psi: np.ndarray, omega: np.ndarray,
                chi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An idealised chain from its dihedrals (radians): atom37 positions [L, 37, 3] and mask
    [L, 37] (every atom the residue type has; none for UNK).

    The backbone is grown with NeRF using each residue's literature N–CA, CA–C and N–CA–C and
    the tabulated peptide bond (C–N 1.329 Å, 1.341 Å before proline; angles from the
    between-residue cosines); ``phi[0]`` and ``omega[0]`` are unused (no previous residue),
    ``psi`` also places O, ``chi`` [L, 4] the side chains (ignored where undefined). The first
    residue's backbone frame is the identity (CA at the origin). An UNK residue has no atoms
    but keeps the chain going with ALA's backbone geometry.
    """
    aatype = np.asarray(aatype)
    n_res = len(aatype)
    ca_c_n = np.arccos(rc.BETWEEN_RES_COS_ANGLES_CA_C_N[0])
    c_n_ca = np.arccos(rc.BETWEEN_RES_COS_ANGLES_C_N_CA[0])
    lit = rc.RESTYPE_ATOM37_RIGID_GROUP_POSITIONS.astype(np.float64)
    n, ca, c = rc.ATOM_ORDER["N"], rc.ATOM_ORDER["CA"], rc.ATOM_ORDER["C"]
    backbone = np.zeros((n_res, 3, 3))  # N, CA, C
    shape_type = np.where(aatype < rc.UNK_RESTYPE_INDEX, aatype, rc.RESTYPE_ORDER["A"])
    backbone[0] = lit[shape_type[0], [n, ca, c]]
    for i in range(1, n_res):
        res = shape_type[i]
        n_ca = np.linalg.norm(lit[res, n])
        ca_c = np.linalg.norm(lit[res, c])
        n_ca_c = np.arccos(np.dot(lit[res, n], lit[res, c]) / (n_ca * ca_c))
        c_n = rc.BETWEEN_RES_BOND_LENGTH_C_N[int(res == rc.RESTYPE_ORDER["P"])]
        prev_n, prev_ca, prev_c = backbone[i - 1]
        new_n = place_atom(prev_n, prev_ca, prev_c, c_n, ca_c_n, psi[i - 1])
        new_ca = place_atom(prev_ca, prev_c, new_n, n_ca, c_n_ca, omega[i])
        new_c = place_atom(prev_c, new_n, new_ca, ca_c, n_ca_c, phi[i])
        backbone[i] = new_n, new_ca, new_c
    rot, trans = frames_from_3_points(backbone[:, 2], backbone[:, 1], backbone[:, 0], eps=0.0)
    rot = rot @ _FLIP_BACKBONE
    torsions = np.stack([omega, phi, psi, *np.asarray(chi, np.float64).T], axis=-1)
    sin_cos = np.stack([np.sin(torsions), np.cos(torsions)], axis=-1)
    atom14 = atom14_from_torsions(aatype, (rot, trans), sin_cos)
    return atom14_to_atom37(aatype, atom14), rc.RESTYPE_ATOM37_MASK[aatype].copy()
