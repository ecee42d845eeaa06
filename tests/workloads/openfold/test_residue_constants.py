"""OpenFold residue constants: equal to the reference's tables, and internally consistent.

The proof of equality with the reference (mlcommons/hpc @2c627d45,
openfold/openfold/data/residue_constants.py, its stereo_chemical_props.txt and the tables that
data/transforms.py builds) was made by running that module beside this one and comparing every
exported table exactly (all equal bit for bit, float32 included; the float64 virtual bonds to
1.4e-17). What this file keeps of that proof without the reference: spot values read from the
reference source, and the sha256 of every table in the canonical serialisation below, which
were computed from the REFERENCE's objects with this very function (and equal ours).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import residue_constants as rc


def _canonical(obj: object) -> object:
    """A JSON-able form that ignores container types (list/tuple/namedtuple, dict/mapping
    proxy) and dtypes, keeps order, rounds floats (6 decimals for arrays, 9 for scalars:
    float32 tables are compared at their precision) and folds -0.0 into 0.0."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "f":
            values = [float(v) + 0.0 for v in np.round(obj.astype(np.float64), 6).ravel()]
        else:
            values = obj.astype(np.int64).ravel().tolist()
        return {"shape": list(obj.shape), "values": values}
    if isinstance(obj, Mapping):
        return [[str(key), _canonical(value)] for key, value in obj.items()]
    if isinstance(obj, list | tuple):
        return [_canonical(value) for value in obj]
    if isinstance(obj, float | np.floating):
        return round(float(obj), 9) + 0.0
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def table_sha256(obj: object) -> str:
    return hashlib.sha256(json.dumps(_canonical(obj), separators=(",", ":")).encode()).hexdigest()


# Our side of each hashed table (the reference's objects were: its lists/dicts of the same
# names, CHI_ANGLES_MASK with transforms' appended UNK row, transforms' get_chi_atom_indices,
# make_atom14_masks' maps, make_atom14_positions' renaming matrices,
# RESTYPE_ATOM14_AMBIGUOUS_ATOMS[_SWAP_IDX], load_stereo_chemical_props()).
MINE: dict[str, Callable[[], object]] = {
    "RESTYPES": lambda: rc.RESTYPES,
    "RESTYPE_1TO3": lambda: rc.RESTYPE_1TO3,
    "RESNAMES": lambda: rc.RESNAMES,
    "ATOM_TYPES": lambda: rc.ATOM_TYPES,
    "RESTYPE_NAME_TO_ATOM14_NAMES": lambda: rc.RESTYPE_NAME_TO_ATOM14_NAMES,
    "HHBLITS_AA_TO_ID": lambda: rc.HHBLITS_AA_TO_ID,
    "MAP_HHBLITS_AATYPE_TO_OUR_AATYPE": lambda: rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE,
    "CHI_ANGLES_ATOMS": lambda: rc.CHI_ANGLES_ATOMS,
    "CHI_ANGLES_MASK": lambda: rc.CHI_ANGLES_MASK,
    "CHI_PI_PERIODIC": lambda: rc.CHI_PI_PERIODIC,
    "CHI_ATOM_INDICES": lambda: rc.CHI_ATOM_INDICES,
    "RIGID_GROUP_ATOM_POSITIONS": lambda: rc.RIGID_GROUP_ATOM_POSITIONS,
    "RESIDUE_ATOM_RENAMING_SWAPS": lambda: rc.RESIDUE_ATOM_RENAMING_SWAPS,
    "VAN_DER_WAALS_RADIUS": lambda: rc.VAN_DER_WAALS_RADIUS,
    "BETWEEN_RES": lambda: [rc.BETWEEN_RES_BOND_LENGTH_C_N, rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N,
                            rc.BETWEEN_RES_COS_ANGLES_C_N_CA, rc.BETWEEN_RES_COS_ANGLES_CA_C_N,
                            rc.CA_CA],
    "stereo_chemical_props": rc.stereo_chemical_props,
    "atom14_dists_bounds": rc.atom14_dists_bounds,
    "atom14_dists_bounds_12": lambda: rc.atom14_dists_bounds(1.5, 12.0),
    "RESTYPE_ATOM14_TO_ATOM37": lambda: rc.RESTYPE_ATOM14_TO_ATOM37,
    "RESTYPE_ATOM37_TO_ATOM14": lambda: rc.RESTYPE_ATOM37_TO_ATOM14,
    "RESTYPE_ATOM14_MASK": lambda: rc.RESTYPE_ATOM14_MASK,
    "RESTYPE_ATOM37_MASK": lambda: rc.RESTYPE_ATOM37_MASK,
    "RESTYPE_ATOM14_TO_RIGID_GROUP": lambda: rc.RESTYPE_ATOM14_TO_RIGID_GROUP,
    "RESTYPE_ATOM37_TO_RIGID_GROUP": lambda: rc.RESTYPE_ATOM37_TO_RIGID_GROUP,
    "RESTYPE_ATOM14_RIGID_GROUP_POSITIONS": lambda: rc.RESTYPE_ATOM14_RIGID_GROUP_POSITIONS,
    "RESTYPE_ATOM37_RIGID_GROUP_POSITIONS": lambda: rc.RESTYPE_ATOM37_RIGID_GROUP_POSITIONS,
    "RESTYPE_RIGID_GROUP_DEFAULT_FRAME": lambda: rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME,
    "RESTYPE_ATOM14_IS_AMBIGUOUS": lambda: rc.RESTYPE_ATOM14_IS_AMBIGUOUS,
    "RESTYPE_ATOM14_AMBIGUOUS_SWAP_IDX": lambda: rc.RESTYPE_ATOM14_AMBIGUOUS_SWAP_IDX,
    "RESTYPE_AMBIGUOUS_RENAMING": lambda: rc.RESTYPE_AMBIGUOUS_RENAMING,
}

# Computed by table_sha256 on the reference's objects (see the module docstring).
TABLE_SHA256: dict[str, str] = {
    "RESTYPES": "98b3ae4cc96d159bb3fee91f2482766958de6fcae6817c3bb1faa81f5d54fce1",
    "RESTYPE_1TO3": "c98f4750ecddfb46a523713ddce6a48a66e74070042a164affde144d8165d501",
    "RESNAMES": "b9d0b6141ec35e11549b902bf3658c188cd5fdd2ac172243cb4a087a43f2189c",
    "ATOM_TYPES": "df924bd5f3e02ee3c8ac6a5dfdf0a8fcefd400791ba83b292e1205ac64e15ed9",
    "RESTYPE_NAME_TO_ATOM14_NAMES":
        "c9819a58dc5a80bafb315a31827de396ca3c0f798b63e22179c2417c5f23441d",
    "HHBLITS_AA_TO_ID": "79c000f753f0e89b5467dd094ccd3eba9745adbaf2391c29aa941028cd55639c",
    "MAP_HHBLITS_AATYPE_TO_OUR_AATYPE":
        "3b95287747974f1bce1f68a706d8ef5d04f71a109974ce7a04d2ea287605c6a7",
    "CHI_ANGLES_ATOMS": "dac4ba7ae765dd4d96b196e67ab1dd9e3ba09004d5444f09896b45ed9f05e40a",
    "CHI_ANGLES_MASK": "840f630364df2da75d968cf29309677f60a19625a2baf954fe1991094a74f241",
    "CHI_PI_PERIODIC": "550591cac40e29b8a927d9b8cb14c237f51c301204de8e6eda4716c02740c688",
    "CHI_ATOM_INDICES": "331e15061186837d9447ee96d27075bd072c9a8a8439b1d8941370ea2448642d",
    "RIGID_GROUP_ATOM_POSITIONS":
        "66344782992f4ca31f06481c0d831b29af7f54ab3c07e3aa748281a7617e033e",
    "RESIDUE_ATOM_RENAMING_SWAPS":
        "2105bc9d2b6c0c4256fbec866b4d3e9d9ac77324424ff962e48f28141fc52429",
    "VAN_DER_WAALS_RADIUS": "a33791761a340669e79b9c2ac30d3a7edf97a6c11ed71374e781186ec421a409",
    "BETWEEN_RES": "2bf9a79eb88eb43236426ac837b814d2de0fc291f9ee4bee864c5c8b63dedb62",
    "stereo_chemical_props": "cfea25218dec9409768c5bd660404601e5c15bbc78fb3084bad2cf365256bd86",
    "atom14_dists_bounds": "afdc0ed0bee103c0c775b54ff07c07b02006e9fb136d7f9aecda57a1e3645d95",
    "atom14_dists_bounds_12": "7ee0d7c39c8bcd4934816fb4a7d76bbbb4849e90e52ce787d58425546944b499",
    "RESTYPE_ATOM14_TO_ATOM37": "84465f4afbf9870c83af315c46d20c8949fdd5509c3ba76ff84f9f91a7e05e3d",
    "RESTYPE_ATOM37_TO_ATOM14": "737826ddb419b6a7e703a290f75f1b6486a5ef00d5441c858486b399edac676c",
    "RESTYPE_ATOM14_MASK": "2511406a902566d42f29a5d7381d150eb9faa20cdf0117842635f4d11c4eec23",
    "RESTYPE_ATOM37_MASK": "7622d17b3b815e0dc0e98a612dd9febe2cb256328b0a94edd962b7ad374df068",
    "RESTYPE_ATOM14_TO_RIGID_GROUP":
        "7afe80e386c75db08885d8950ed36b72f6f923c49b735b5393b9f5566107f8eb",
    "RESTYPE_ATOM37_TO_RIGID_GROUP":
        "ad03b8f83a6a2b536018a8e9329daabd7a37d2365126bb23fe0826b09b508baa",
    "RESTYPE_ATOM14_RIGID_GROUP_POSITIONS":
        "eced61fbaf038ffebb411ad6e81ac416b35773c1f8c0138f64ce28860d023cee",
    "RESTYPE_ATOM37_RIGID_GROUP_POSITIONS":
        "8530194e2533990ddb26dea99d406d97a2197065c7a0e7989b07c9aa75302dec",
    "RESTYPE_RIGID_GROUP_DEFAULT_FRAME":
        "41b102351993a93e2a7c52443604290201ad0e834a7c0312e9e73e2ea34a33ae",
    "RESTYPE_ATOM14_IS_AMBIGUOUS":
        "19dd12548bd9e896d5a75ace03f7cf4a99406213a3b225393209bfb99341dd9e",
    "RESTYPE_ATOM14_AMBIGUOUS_SWAP_IDX":
        "797e7d846d0c92d684a4b5c359cfd57771f1e90afef524a27bd7c6ac470cfc80",
    "RESTYPE_AMBIGUOUS_RENAMING":
        "cfda1386afb8951c1866e8f03e172de99487a9dea843d84103aa8d854255fff3",
}


@pytest.mark.parametrize("name", sorted(MINE))
def test_table_hash_equals_reference(name):
    assert table_sha256(MINE[name]()) == TABLE_SHA256[name]


def test_alphabets_spot_values():
    assert "".join(rc.RESTYPES) == "ARNDCQEGHILKMFPSTWYV"
    assert rc.RESTYPE_NUM == 20 and rc.RESTYPES_WITH_X[20] == "X"
    assert rc.RESTYPE_1TO3["W"] == "TRP" and rc.RESTYPE_3TO1["GLN"] == "Q"
    assert rc.RESNAME_TO_IDX["PRO"] == 14 and rc.RESNAMES[20] == "UNK"
    assert rc.ATOM_TYPE_NUM == 37 and rc.ATOM_TYPES[1] == "CA" and rc.ATOM_TYPES[36] == "OXT"
    assert rc.ATOM_ORDER["CB"] == 3 and rc.ATOM_ORDER["NZ"] == 35
    # HHblits order is alphabetical by one-letter code; ours by three-letter code
    assert rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[:4] == (0, 4, 3, 6)
    assert rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[20:] == (20, 21)
    assert (rc.MSA_GAP_ID, rc.MSA_MASK_ID, rc.MSA_NUM_CLASSES) == (21, 22, 23)
    assert rc.HHBLITS_AA_TO_ID["B"] == rc.HHBLITS_AA_TO_ID["D"]


def test_literature_spot_values():
    ala = {a.atom: a for a in rc.RIGID_GROUP_ATOM_POSITIONS["ALA"]}
    assert ala["N"].position == (-0.525, 1.363, 0.0)
    assert ala["C"].position == (1.526, 0.0, 0.0)
    assert ala["CB"].position == (-0.529, -0.774, -1.205) and ala["CB"].group == 0
    assert ala["O"].group == 3
    pro_cd = {a.atom: a for a in rc.RIGID_GROUP_ATOM_POSITIONS["PRO"]}["CD"]
    assert pro_cd.position == (0.477, 1.424, 0.0) and pro_cd.group == 5
    assert rc.CHI_ANGLES_ATOMS["ARG"] == (("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD"),
                                          ("CB", "CG", "CD", "NE"), ("CG", "CD", "NE", "CZ"))
    assert rc.CHI_ANGLES_ATOMS["ILE"][1] == ("CA", "CB", "CG1", "CD1")
    assert rc.CHI_ANGLES_ATOMS["GLY"] == ()
    assert rc.RESTYPE_NAME_TO_ATOM14_NAMES["TRP"][13] == "CH2"
    assert rc.VAN_DER_WAALS_RADIUS["S"] == 1.8 and rc.CA_CA == 3.80209737096
    assert rc.BETWEEN_RES_BOND_LENGTH_C_N == (1.329, 1.341)
    bonds, virtual, angles = rc.stereo_chemical_props()
    assert bonds["CYS"][1] == ("CB", "SG", 1.812, 0.016)
    assert angles["ALA"][0][:3] == ("N", "CA", "CB")
    assert angles["ALA"][0].angle_rad == pytest.approx(np.deg2rad(110.1))
    assert bonds["UNK"] == () and virtual["UNK"] == ()


def test_chi_tables_spot_values():
    np.testing.assert_array_equal(rc.CHI_ANGLES_MASK[rc.RESTYPE_ORDER["R"]], [1, 1, 1, 1])
    np.testing.assert_array_equal(rc.CHI_ANGLES_MASK[rc.RESTYPE_ORDER["S"]], [1, 0, 0, 0])
    np.testing.assert_array_equal(rc.CHI_ANGLES_MASK[20], [0, 0, 0, 0])
    rows, cols = np.nonzero(rc.CHI_PI_PERIODIC)
    periodic = {(rc.RESTYPES[r], k + 1) for r, k in zip(rows, cols, strict=True)}
    assert periodic == {("D", 2), ("E", 3), ("F", 2), ("Y", 2)}
    # LYS chi4 = CG, CD, CE, NZ
    np.testing.assert_array_equal(rc.CHI_ATOM_INDICES[rc.RESTYPE_ORDER["K"], 3], [5, 11, 19, 35])


def test_derived_spot_values():
    arg = rc.RESTYPE_ORDER["R"]
    # ARG chi2 frame in the chi1 frame: rotation from CG's position (0.616, 1.390, 0)
    np.testing.assert_allclose(rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME[arg, 5, :, 3],
                               [0.616, 1.390, 0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME[arg, 5, 0, :2],
                               [0.4051618, -0.914245], atol=1e-6)
    bounds = rc.atom14_dists_bounds()
    # ARG N-CA bond 1.459 ± 15 * 0.020; N-C virtual bond (angle N-CA-C 111.0 deg)
    assert bounds["lower_bound"][arg, 0, 1] == pytest.approx(1.159, abs=1e-6)
    assert bounds["upper_bound"][arg, 0, 1] == pytest.approx(1.759, abs=1e-6)
    assert bounds["lower_bound"][arg, 0, 2] == pytest.approx(1.7371972, abs=1e-6)
    # clash bound for an unbonded pair: N...NH1 = 1.55 + 1.55 - 1.5
    assert bounds["lower_bound"][arg, 0, 9] == pytest.approx(1.6)
    assert bounds["upper_bound"][arg, 0, 9] == pytest.approx(1e10)
    assert rc.atom14_dists_bounds(1.5, 12.0)["upper_bound"][arg, 0, 1] == pytest.approx(1.699)


def test_tables_are_read_only():
    with pytest.raises(ValueError):
        rc.RESTYPE_ATOM14_MASK[0, 0] = 5.0
    with pytest.raises(ValueError):
        rc.atom14_dists_bounds()["lower_bound"][0, 0, 0] = 1.0
    with pytest.raises(TypeError):
        rc.ATOM_ORDER["X"] = 99  # type: ignore[index]


def test_default_frames_are_proper_rigid_transforms():
    frames = rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME.astype(np.float64)
    exists = np.zeros((21, 8), bool)
    exists[:20, [0, 1, 2, 3]] = True
    exists[:20, 4:] = rc.CHI_ANGLES_MASK[:20] > 0
    rot = frames[exists][:, :3, :3]
    np.testing.assert_allclose(rot @ np.swapaxes(rot, -1, -2),
                               np.broadcast_to(np.eye(3), rot.shape), atol=1e-6)
    np.testing.assert_allclose(np.linalg.det(rot), 1.0, atol=1e-6)
    np.testing.assert_array_equal(frames[exists][:, 3],
                                  np.broadcast_to([0, 0, 0, 1], (exists.sum(), 4)))
    assert not frames[~exists].any()  # absent groups and UNK are all-zero, as the reference


def test_default_frames_rebuild_the_literature_geometry():
    """Chaining each chi frame onto its parents puts the chi's defining atom at its table
    position: the frames are consistent with the atom table they were derived from."""
    for restype, letter in enumerate(rc.RESTYPES):
        name = rc.RESTYPE_1TO3[letter]
        table = {a.atom: (a.group, np.array(a.position))
                 for a in rc.RIGID_GROUP_ATOM_POSITIONS[name]}
        frames = rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME[restype].astype(np.float64)
        to_backbone = {0: np.eye(4), 3: frames[3], 4: frames[4]}
        for k in range(1, len(rc.CHI_ANGLES_ATOMS[name])):
            to_backbone[4 + k] = to_backbone[3 + k] @ frames[4 + k]
        for k, atoms in enumerate(rc.CHI_ANGLES_ATOMS[name]):
            # the axis end (atom 3 of the chi) is the origin of the chi group's frame
            group, pos = table[atoms[2]]
            np.testing.assert_allclose(to_backbone[4 + k][:3, 3],
                                       (to_backbone[group] @ np.r_[pos, 1])[:3], atol=1e-5)
        psi_o = to_backbone[3] @ np.r_[table["O"][1], 1]
        assert np.linalg.norm(psi_o[:3] - table["C"][1]) == pytest.approx(1.23, abs=0.01)


def test_atom14_and_atom37_maps_invert_each_other():
    for restype in range(21):
        present14 = np.nonzero(rc.RESTYPE_ATOM14_MASK[restype])[0]
        a37 = rc.RESTYPE_ATOM14_TO_ATOM37[restype, present14]
        np.testing.assert_array_equal(rc.RESTYPE_ATOM37_TO_ATOM14[restype, a37], present14)
        present37 = np.nonzero(rc.RESTYPE_ATOM37_MASK[restype])[0]
        np.testing.assert_array_equal(np.sort(a37), present37)
        # absent slots point at index 0, as the reference's gathers expect
        assert not rc.RESTYPE_ATOM14_TO_ATOM37[restype, rc.RESTYPE_ATOM14_MASK[restype] == 0].any()
    assert rc.RESTYPE_ATOM14_MASK.sum(axis=1)[rc.RESTYPE_ORDER["W"]] == 14
    assert rc.RESTYPE_ATOM14_MASK[20].sum() == 0 and rc.RESTYPE_ATOM37_MASK[:, 36].sum() == 0


def test_rigid_group_of_each_atom_agrees_between_atom14_and_atom37():
    for restype in range(20):
        slots = np.nonzero(rc.RESTYPE_ATOM14_MASK[restype])[0]
        a37 = rc.RESTYPE_ATOM14_TO_ATOM37[restype, slots]
        np.testing.assert_array_equal(rc.RESTYPE_ATOM14_TO_RIGID_GROUP[restype, slots],
                                      rc.RESTYPE_ATOM37_TO_RIGID_GROUP[restype, a37])
        np.testing.assert_array_equal(rc.RESTYPE_ATOM14_RIGID_GROUP_POSITIONS[restype, slots],
                                      rc.RESTYPE_ATOM37_RIGID_GROUP_POSITIONS[restype, a37])


def test_ambiguous_renaming_is_a_permutation_involution():
    renaming = rc.RESTYPE_AMBIGUOUS_RENAMING.astype(np.int64)
    eye = np.broadcast_to(np.eye(14, dtype=np.int64), renaming.shape)
    np.testing.assert_array_equal(renaming.sum(axis=1), 1)
    np.testing.assert_array_equal(renaming.sum(axis=2), 1)
    np.testing.assert_array_equal(renaming @ renaming, eye)
    np.testing.assert_array_equal(renaming, np.swapaxes(renaming, 1, 2))
    moved = (renaming != eye).any(axis=2).astype(np.float32)
    np.testing.assert_array_equal(moved, rc.RESTYPE_ATOM14_IS_AMBIGUOUS)
    phe = rc.RESTYPE_ORDER["F"]
    names = rc.RESTYPE_NAME_TO_ATOM14_NAMES["PHE"]
    swapped = [names[j] for j in renaming[phe].argmax(axis=1)]
    assert swapped[6:10] == ["CD2", "CD1", "CE2", "CE1"]
    assert rc.RESTYPE_ATOM14_IS_AMBIGUOUS.sum() == 12  # ASP 2, GLU 2, PHE 4, TYR 4


def test_dists_bounds_are_symmetric_and_only_for_present_atoms():
    bounds = rc.atom14_dists_bounds()
    for key in ("lower_bound", "upper_bound", "stddev"):
        np.testing.assert_array_equal(bounds[key], np.swapaxes(bounds[key], 1, 2))
    present = rc.RESTYPE_ATOM14_MASK > 0
    pair = present[:, :, None] & present[:, None, :] & ~np.eye(14, dtype=bool)
    assert not bounds["upper_bound"][~pair].any()
    assert (bounds["lower_bound"][pair] < bounds["upper_bound"][pair]).all()


def test_sequence_to_onehot():
    onehot = rc.sequence_to_onehot("ARX", rc.RESTYPE_ORDER_WITH_X)
    np.testing.assert_array_equal(onehot.argmax(1), [0, 1, 20])
    assert onehot.dtype == np.int32 and onehot.shape == (3, 21)
    np.testing.assert_array_equal(
        rc.sequence_to_onehot("AUB", rc.RESTYPE_ORDER_WITH_X, map_unknown_to_x=True).argmax(1),
        [0, 20, 20])
    with pytest.raises(SciperfError, match="'B' at position 1"):
        rc.sequence_to_onehot("AB", rc.RESTYPE_ORDER_WITH_X)
    with pytest.raises(SciperfError, match="'-' at position 0"):
        rc.sequence_to_onehot("-A", rc.RESTYPE_ORDER_WITH_X, map_unknown_to_x=True)
    assert rc.aatype_to_sequence(np.array([0, 19, 20])) == "AVX"
