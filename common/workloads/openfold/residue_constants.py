"""AlphaFold2's residue constants, as the MLPerf-HPC OpenFold reference defines them.

Two kinds of content live here. The *literature tables* (idealised rigid-group atom positions,
atom names, chi-angle atoms, π-periodic chis, van der Waals radii, bond lengths and angles of
the stereo-chemical table) are transcribed as data, in the reference's order, because the
model's side-chain builder, the loss and the data pipeline must read exactly the same numbers
(REF ``openfold/data/residue_constants.py`` and ``resources/stereo_chemical_props.txt``).
The *derived arrays* (the default frame of each of the 8 rigid groups per residue type, the
atom14/atom37 maps and masks, the ambiguous-atom renaming, the violation bounds) are computed
here from those tables at import time. Every exported table was compared with the reference
module's (tests/workloads/openfold/test_residue_constants.py keeps the proof as hashes).

Conventions kept from the reference, because every other piece indexes by them:
- residue types in the order ``ARNDCQEGHILKMFPSTWYV`` (alphabetical by 3-letter code), index
  20 = unknown (``X``/``UNK``); arrays indexed by residue type have 21 rows, the UNK row holds
  zeros (no atoms, no groups, no chis) unless stated otherwise;
- atom37: a fixed slot per heavy-atom name over all residues (``ATOM_TYPES``, 1 = CA);
  atom14: the residue's own atoms, backbone first (``RESTYPE_NAME_TO_ATOM14_NAMES``);
- rigid groups: 0 backbone, 1 pre-ω, 2 φ, 3 ψ, 4–7 χ1–χ4.

numpy arrays are read-only (shared module state must not be changed by a caller by accident);
mappings are read-only views; lists are tuples.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from sciperf.errors import SciperfError


def _frozen(array: np.ndarray) -> np.ndarray:
    """Mark a module-level table read-only, so no caller changes it for everyone."""
    array.setflags(write=False)
    return array


# ---------------------------------------------------------------------------------------------
# Residue and MSA alphabets
# ---------------------------------------------------------------------------------------------

RESTYPES: tuple[str, ...] = tuple("ARNDCQEGHILKMFPSTWYV")
RESTYPE_NUM = len(RESTYPES)  # 20
UNK_RESTYPE_INDEX = RESTYPE_NUM  # the catch-all residue type, 20
RESTYPES_WITH_X: tuple[str, ...] = RESTYPES + ("X",)
RESTYPE_ORDER: Mapping[str, int] = MappingProxyType({r: i for i, r in enumerate(RESTYPES)})
RESTYPE_ORDER_WITH_X: Mapping[str, int] = MappingProxyType(
    {r: i for i, r in enumerate(RESTYPES_WITH_X)})

_THREE_LETTER = ("ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE",
                 "LEU", "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL")
RESTYPE_1TO3: Mapping[str, str] = MappingProxyType(
    dict(zip(RESTYPES, _THREE_LETTER, strict=True)))
# A strict one-to-one inverse: the 20 standard residues only (Biopython's table maps many
# modified residues too; mmCIF parsing decides about those, not this table).
RESTYPE_3TO1: Mapping[str, str] = MappingProxyType({v: k for k, v in RESTYPE_1TO3.items()})
UNK_RESTYPE = "UNK"
RESNAMES: tuple[str, ...] = _THREE_LETTER + (UNK_RESTYPE,)
RESNAME_TO_IDX: Mapping[str, int] = MappingProxyType({r: i for i, r in enumerate(RESNAMES)})

# HHblits' amino-acid code (alignment files): B→D, Z→E, U→C, J/O→X, 20 = X, 21 = gap.
HHBLITS_AA_TO_ID: Mapping[str, int] = MappingProxyType({
    "A": 0, "B": 2, "C": 1, "D": 2, "E": 3, "F": 4, "G": 5, "H": 6, "I": 7, "J": 20,
    "K": 8, "L": 9, "M": 10, "N": 11, "O": 20, "P": 12, "Q": 13, "R": 14, "S": 15, "T": 16,
    "U": 1, "V": 17, "W": 18, "X": 20, "Y": 19, "Z": 3, "-": 21,
})
_HHBLITS_ID_ORDER = "ACDEFGHIKLMNPQRSTVWYX-"  # the letter each HHblits id stands for
ID_TO_HHBLITS_AA: Mapping[int, str] = MappingProxyType(dict(enumerate(_HHBLITS_ID_ORDER)))
RESTYPES_WITH_X_AND_GAP: tuple[str, ...] = RESTYPES_WITH_X + ("-",)
# HHblits id → our id (gap stays 21): index an HHblits-coded MSA with it.
MAP_HHBLITS_AATYPE_TO_OUR_AATYPE: tuple[int, ...] = tuple(
    RESTYPES_WITH_X_AND_GAP.index(letter) for letter in _HHBLITS_ID_ORDER)
MSA_GAP_ID = 21
MSA_MASK_ID = 22  # the BERT mask token
MSA_NUM_CLASSES = 23  # 20 residues + X + gap + mask


def sequence_to_onehot(sequence: str, mapping: Mapping[str, int],
                       map_unknown_to_x: bool = False) -> np.ndarray:
    """[len(sequence), n_classes] int32 one-hot of a sequence under ``mapping``.

    With ``map_unknown_to_x`` an upper-case letter outside the mapping becomes ``X`` (as the
    reference does for mmCIF and template sequences); anything else outside it is refused.
    """
    n_classes = max(mapping.values()) + 1
    if sorted(set(mapping.values())) != list(range(n_classes)):
        raise SciperfError(f"one-hot mapping must use every index 0..{n_classes - 1} once "
                           f"or more without gaps, got {sorted(set(mapping.values()))}")
    index = np.empty(len(sequence), np.int64)
    for pos, letter in enumerate(sequence):
        if map_unknown_to_x and letter.isalpha() and letter.isupper():
            index[pos] = mapping.get(letter, mapping["X"])
        elif not map_unknown_to_x and letter in mapping:
            index[pos] = mapping[letter]
        else:
            raise SciperfError(f"sequence has {letter!r} at position {pos}, which the "
                               f"one-hot mapping does not take")
    onehot = np.zeros((len(sequence), n_classes), np.int32)
    onehot[np.arange(len(sequence)), index] = 1
    return onehot


# ---------------------------------------------------------------------------------------------
# Atom names: atom37 (one slot per name over all residues) and atom14 (per residue)
# ---------------------------------------------------------------------------------------------

ATOM_TYPES: tuple[str, ...] = (
    "N", "CA", "C", "CB", "O", "CG", "CG1", "CG2", "OG", "OG1", "SG", "CD", "CD1", "CD2",
    "ND1", "ND2", "OD1", "OD2", "SD", "CE", "CE1", "CE2", "CE3", "NE", "NE1", "NE2", "OE1",
    "OE2", "CH2", "NH1", "NH2", "OH", "CZ", "CZ2", "CZ3", "NZ", "OXT")
ATOM_ORDER: Mapping[str, int] = MappingProxyType({a: i for i, a in enumerate(ATOM_TYPES)})
ATOM_TYPE_NUM = len(ATOM_TYPES)  # 37

# The residue's heavy atoms in atom14 order (backbone N, CA, C, O first, then the side chain);
# unused slots are "".
_ATOM14_TABLE = """
ALA N CA C O CB
ARG N CA C O CB CG CD NE CZ NH1 NH2
ASN N CA C O CB CG OD1 ND2
ASP N CA C O CB CG OD1 OD2
CYS N CA C O CB SG
GLN N CA C O CB CG CD OE1 NE2
GLU N CA C O CB CG CD OE1 OE2
GLY N CA C O
HIS N CA C O CB CG ND1 CD2 CE1 NE2
ILE N CA C O CB CG1 CG2 CD1
LEU N CA C O CB CG CD1 CD2
LYS N CA C O CB CG CD CE NZ
MET N CA C O CB CG SD CE
PHE N CA C O CB CG CD1 CD2 CE1 CE2 CZ
PRO N CA C O CB CG CD
SER N CA C O CB OG
THR N CA C O CB OG1 CG2
TRP N CA C O CB CG CD1 CD2 NE1 CE2 CE3 CZ2 CZ3 CH2
TYR N CA C O CB CG CD1 CD2 CE1 CE2 CZ OH
VAL N CA C O CB CG1 CG2
UNK
"""


def _parse_atom14(table: str) -> dict[str, tuple[str, ...]]:
    rows = {}
    for line in table.strip().splitlines():
        name, *atoms = line.split()
        rows[name] = tuple(atoms) + ("",) * (14 - len(atoms))
    return rows


RESTYPE_NAME_TO_ATOM14_NAMES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    _parse_atom14(_ATOM14_TABLE))

# ---------------------------------------------------------------------------------------------
# Side-chain torsions
# ---------------------------------------------------------------------------------------------

# Each residue's chi angles are consecutive 4-atom windows along one chain of atoms:
# chi_k is the dihedral of atoms k..k+3 of the chain (ARG's chi5 is ~0 and left out).
_CHI_CHAINS = {
    "ALA": "", "ARG": "N CA CB CG CD NE CZ", "ASN": "N CA CB CG OD1",
    "ASP": "N CA CB CG OD1", "CYS": "N CA CB SG", "GLN": "N CA CB CG CD OE1",
    "GLU": "N CA CB CG CD OE1", "GLY": "", "HIS": "N CA CB CG ND1", "ILE": "N CA CB CG1 CD1",
    "LEU": "N CA CB CG CD1", "LYS": "N CA CB CG CD CE NZ", "MET": "N CA CB CG SD CE",
    "PHE": "N CA CB CG CD1", "PRO": "N CA CB CG CD", "SER": "N CA CB OG",
    "THR": "N CA CB OG1", "TRP": "N CA CB CG CD1", "TYR": "N CA CB CG CD1",
    "VAL": "N CA CB CG1",
}


def _chi_windows(chain: str) -> tuple[tuple[str, str, str, str], ...]:
    atoms = chain.split()
    return tuple(tuple(atoms[k:k + 4]) for k in range(len(atoms) - 3))


CHI_ANGLES_ATOMS: Mapping[str, tuple[tuple[str, str, str, str], ...]] = MappingProxyType(
    {name: _chi_windows(chain) for name, chain in _CHI_CHAINS.items()})

# chi1..4 defined for the residue type; the UNK row (20) has none.
CHI_ANGLES_MASK = _frozen(np.array(
    [[float(k < len(CHI_ANGLES_ATOMS[RESTYPE_1TO3[r]])) for k in range(4)] for r in RESTYPES]
    + [[0.0] * 4], np.float32))

# Chis that may turn by π without changing the structure (symmetric terminal groups).
_PI_PERIODIC_CHI = {"ASP": 2, "GLU": 3, "PHE": 2, "TYR": 2}  # residue -> chi number (1-based)


def _pi_periodic() -> np.ndarray:
    table = np.zeros((RESTYPE_NUM + 1, 4), np.float32)
    for name, chi in _PI_PERIODIC_CHI.items():
        table[RESNAME_TO_IDX[name], chi - 1] = 1.0
    return _frozen(table)


CHI_PI_PERIODIC = _pi_periodic()


def _chi_atom_indices() -> np.ndarray:
    """[21, 4, 4] atom37 indices of each chi's 4 atoms; 0 (N) for chis a residue lacks."""
    table = np.zeros((RESTYPE_NUM + 1, 4, 4), np.int64)
    for restype, letter in enumerate(RESTYPES):
        for k, atoms in enumerate(CHI_ANGLES_ATOMS[RESTYPE_1TO3[letter]]):
            table[restype, k] = [ATOM_ORDER[a] for a in atoms]
    return _frozen(table)


CHI_ATOM_INDICES = _chi_atom_indices()

# ---------------------------------------------------------------------------------------------
# Idealised atom positions in each residue's rigid groups (literature data)
# ---------------------------------------------------------------------------------------------

# residue, atom, rigid group, position (Å) relative to the group's frame. Backbone-group atoms
# are relative to CA (x towards C, N in the xy-plane); a chi group's atoms are relative to the
# axis-end atom of its rotation axis, x along the axis, the atom defining the dihedral in the
# xy-plane with y > 0. PRO's CD is the reference's "angle made 2 degrees larger" value.
_RIGID_GROUP_TABLE = """
ALA  N    0   -0.525   1.363   0.000
ALA  CA   0    0.000   0.000   0.000
ALA  C    0    1.526   0.000   0.000
ALA  CB   0   -0.529  -0.774  -1.205
ALA  O    3    0.627   1.062   0.000
ARG  N    0   -0.524   1.362   0.000
ARG  CA   0    0.000   0.000   0.000
ARG  C    0    1.525   0.000   0.000
ARG  CB   0   -0.524  -0.778  -1.209
ARG  O    3    0.626   1.062   0.000
ARG  CG   4    0.616   1.390   0.000
ARG  CD   5    0.564   1.414   0.000
ARG  NE   6    0.539   1.357   0.000
ARG  NH1  7    0.206   2.301   0.000
ARG  NH2  7    2.078   0.978   0.000
ARG  CZ   7    0.758   1.093   0.000
ASN  N    0   -0.536   1.357   0.000
ASN  CA   0    0.000   0.000   0.000
ASN  C    0    1.526   0.000   0.000
ASN  CB   0   -0.531  -0.787  -1.200
ASN  O    3    0.625   1.062   0.000
ASN  CG   4    0.584   1.399   0.000
ASN  ND2  5    0.593  -1.188   0.001
ASN  OD1  5    0.633   1.059   0.000
ASP  N    0   -0.525   1.362   0.000
ASP  CA   0    0.000   0.000   0.000
ASP  C    0    1.527   0.000   0.000
ASP  CB   0   -0.526  -0.778  -1.208
ASP  O    3    0.626   1.062   0.000
ASP  CG   4    0.593   1.398   0.000
ASP  OD1  5    0.610   1.091   0.000
ASP  OD2  5    0.592  -1.101  -0.003
CYS  N    0   -0.522   1.362   0.000
CYS  CA   0    0.000   0.000   0.000
CYS  C    0    1.524   0.000   0.000
CYS  CB   0   -0.519  -0.773  -1.212
CYS  O    3    0.625   1.062   0.000
CYS  SG   4    0.728   1.653   0.000
GLN  N    0   -0.526   1.361   0.000
GLN  CA   0    0.000   0.000   0.000
GLN  C    0    1.526   0.000   0.000
GLN  CB   0   -0.525  -0.779  -1.207
GLN  O    3    0.626   1.062   0.000
GLN  CG   4    0.615   1.393   0.000
GLN  CD   5    0.587   1.399   0.000
GLN  NE2  6    0.593  -1.189  -0.001
GLN  OE1  6    0.634   1.060   0.000
GLU  N    0   -0.528   1.361   0.000
GLU  CA   0    0.000   0.000   0.000
GLU  C    0    1.526   0.000   0.000
GLU  CB   0   -0.526  -0.781  -1.207
GLU  O    3    0.626   1.062   0.000
GLU  CG   4    0.615   1.392   0.000
GLU  CD   5    0.600   1.397   0.000
GLU  OE1  6    0.607   1.095   0.000
GLU  OE2  6    0.589  -1.104  -0.001
GLY  N    0   -0.572   1.337   0.000
GLY  CA   0    0.000   0.000   0.000
GLY  C    0    1.517   0.000   0.000
GLY  O    3    0.626   1.062   0.000
HIS  N    0   -0.527   1.360   0.000
HIS  CA   0    0.000   0.000   0.000
HIS  C    0    1.525   0.000   0.000
HIS  CB   0   -0.525  -0.778  -1.208
HIS  O    3    0.625   1.063   0.000
HIS  CG   4    0.600   1.370   0.000
HIS  CD2  5    0.889  -1.021   0.003
HIS  ND1  5    0.744   1.160   0.000
HIS  CE1  5    2.030   0.851   0.002
HIS  NE2  5    2.145  -0.466   0.004
ILE  N    0   -0.493   1.373   0.000
ILE  CA   0    0.000   0.000   0.000
ILE  C    0    1.527   0.000   0.000
ILE  CB   0   -0.536  -0.793  -1.213
ILE  O    3    0.627   1.062   0.000
ILE  CG1  4    0.534   1.437   0.000
ILE  CG2  4    0.540  -0.785  -1.199
ILE  CD1  5    0.619   1.391   0.000
LEU  N    0   -0.520   1.363   0.000
LEU  CA   0    0.000   0.000   0.000
LEU  C    0    1.525   0.000   0.000
LEU  CB   0   -0.522  -0.773  -1.214
LEU  O    3    0.625   1.063   0.000
LEU  CG   4    0.678   1.371   0.000
LEU  CD1  5    0.530   1.430   0.000
LEU  CD2  5    0.535  -0.774   1.200
LYS  N    0   -0.526   1.362   0.000
LYS  CA   0    0.000   0.000   0.000
LYS  C    0    1.526   0.000   0.000
LYS  CB   0   -0.524  -0.778  -1.208
LYS  O    3    0.626   1.062   0.000
LYS  CG   4    0.619   1.390   0.000
LYS  CD   5    0.559   1.417   0.000
LYS  CE   6    0.560   1.416   0.000
LYS  NZ   7    0.554   1.387   0.000
MET  N    0   -0.521   1.364   0.000
MET  CA   0    0.000   0.000   0.000
MET  C    0    1.525   0.000   0.000
MET  CB   0   -0.523  -0.776  -1.210
MET  O    3    0.625   1.062   0.000
MET  CG   4    0.613   1.391   0.000
MET  SD   5    0.703   1.695   0.000
MET  CE   6    0.320   1.786   0.000
PHE  N    0   -0.518   1.363   0.000
PHE  CA   0    0.000   0.000   0.000
PHE  C    0    1.524   0.000   0.000
PHE  CB   0   -0.525  -0.776  -1.212
PHE  O    3    0.626   1.062   0.000
PHE  CG   4    0.607   1.377   0.000
PHE  CD1  5    0.709   1.195   0.000
PHE  CD2  5    0.706  -1.196   0.000
PHE  CE1  5    2.102   1.198   0.000
PHE  CE2  5    2.098  -1.201   0.000
PHE  CZ   5    2.794  -0.003  -0.001
PRO  N    0   -0.566   1.351   0.000
PRO  CA   0    0.000   0.000   0.000
PRO  C    0    1.527   0.000   0.000
PRO  CB   0   -0.546  -0.611  -1.293
PRO  O    3    0.621   1.066   0.000
PRO  CG   4    0.382   1.445   0.000
PRO  CD   5    0.477   1.424   0.000
SER  N    0   -0.529   1.360   0.000
SER  CA   0    0.000   0.000   0.000
SER  C    0    1.525   0.000   0.000
SER  CB   0   -0.518  -0.777  -1.211
SER  O    3    0.626   1.062   0.000
SER  OG   4    0.503   1.325   0.000
THR  N    0   -0.517   1.364   0.000
THR  CA   0    0.000   0.000   0.000
THR  C    0    1.526   0.000   0.000
THR  CB   0   -0.516  -0.793  -1.215
THR  O    3    0.626   1.062   0.000
THR  CG2  4    0.550  -0.718  -1.228
THR  OG1  4    0.472   1.353   0.000
TRP  N    0   -0.521   1.363   0.000
TRP  CA   0    0.000   0.000   0.000
TRP  C    0    1.525   0.000   0.000
TRP  CB   0   -0.523  -0.776  -1.212
TRP  O    3    0.627   1.062   0.000
TRP  CG   4    0.609   1.370   0.000
TRP  CD1  5    0.824   1.091   0.000
TRP  CD2  5    0.854  -1.148  -0.005
TRP  CE2  5    2.186  -0.678  -0.007
TRP  CE3  5    0.622  -2.530  -0.007
TRP  NE1  5    2.140   0.690  -0.004
TRP  CH2  5    3.028  -2.890  -0.013
TRP  CZ2  5    3.283  -1.543  -0.011
TRP  CZ3  5    1.715  -3.389  -0.011
TYR  N    0   -0.522   1.362   0.000
TYR  CA   0    0.000   0.000   0.000
TYR  C    0    1.524   0.000   0.000
TYR  CB   0   -0.522  -0.776  -1.213
TYR  O    3    0.627   1.062   0.000
TYR  CG   4    0.607   1.382   0.000
TYR  CD1  5    0.716   1.195   0.000
TYR  CD2  5    0.713  -1.194  -0.001
TYR  CE1  5    2.107   1.200  -0.002
TYR  CE2  5    2.104  -1.201  -0.003
TYR  OH   5    4.168  -0.002  -0.005
TYR  CZ   5    2.791  -0.001  -0.003
VAL  N    0   -0.494   1.373   0.000
VAL  CA   0    0.000   0.000   0.000
VAL  C    0    1.527   0.000   0.000
VAL  CB   0   -0.533  -0.795  -1.213
VAL  O    3    0.627   1.062   0.000
VAL  CG1  4    0.540   1.429   0.000
VAL  CG2  4    0.533  -0.776   1.203
"""


class RigidGroupAtom(NamedTuple):
    """One row of the rigid-group table: an atom, its group (0..7) and its position there."""

    atom: str
    group: int
    position: tuple[float, float, float]


def _parse_rigid_groups(table: str) -> dict[str, tuple[RigidGroupAtom, ...]]:
    rows: dict[str, list[RigidGroupAtom]] = {}
    for line in table.strip().splitlines():
        name, atom, group, x, y, z = line.split()
        rows.setdefault(name, []).append(
            RigidGroupAtom(atom, int(group), (float(x), float(y), float(z))))
    return {name: tuple(atoms) for name, atoms in rows.items()}


RIGID_GROUP_ATOM_POSITIONS: Mapping[str, tuple[RigidGroupAtom, ...]] = MappingProxyType(
    _parse_rigid_groups(_RIGID_GROUP_TABLE))

# Atom pairs whose names a symmetric side chain makes ambiguous (the 180°-flip of the last chi
# group); the loss scores the better of the two namings. LEU/VAL/ARG are resolvable and absent.
RESIDUE_ATOM_RENAMING_SWAPS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "ASP": MappingProxyType({"OD1": "OD2"}),
    "GLU": MappingProxyType({"OE1": "OE2"}),
    "PHE": MappingProxyType({"CD1": "CD2", "CE1": "CE2"}),
    "TYR": MappingProxyType({"CD1": "CD2", "CE1": "CE2"}),
})

# ---------------------------------------------------------------------------------------------
# Stereochemistry for the violation terms (literature data)
# ---------------------------------------------------------------------------------------------

CA_CA = 3.80209737096  # Å between consecutive CAs of a trans (ω = 180°) peptide

# van der Waals radii (Å) by element, the first letter of a PDB heavy-atom name.
VAN_DER_WAALS_RADIUS: Mapping[str, float] = MappingProxyType(
    {"C": 1.7, "N": 1.55, "O": 1.52, "S": 1.8})

# Peptide bond C(i)-N(i+1): (general, next residue is proline).
BETWEEN_RES_BOND_LENGTH_C_N: tuple[float, float] = (1.329, 1.341)
BETWEEN_RES_BOND_LENGTH_STDDEV_C_N: tuple[float, float] = (0.014, 0.016)
# cos of the angles at the peptide bond: (mean, stddev).
BETWEEN_RES_COS_ANGLES_C_N_CA: tuple[float, float] = (-0.5203, 0.0353)  # 121.352 ± 2.315°
BETWEEN_RES_COS_ANGLES_CA_C_N: tuple[float, float] = (-0.4473, 0.0311)  # 116.568 ± 1.995°

# The reference's resources/stereo_chemical_props.txt (the lDDT tool's stereochemistry table),
# the two sections it reads (its third, non-bonded distances, is unused there and left out):
# intra-residue bond lengths (Å): residue, bond, mean, stddev.
_BOND_TABLE = """
ALA  CA-CB   1.520  0.021
ALA  N-CA    1.459  0.020
ALA  CA-C    1.525  0.026
ALA  C-O     1.229  0.019
ARG  CA-CB   1.535  0.022
ARG  CB-CG   1.521  0.027
ARG  CG-CD   1.515  0.025
ARG  CD-NE   1.460  0.017
ARG  NE-CZ   1.326  0.013
ARG  CZ-NH1  1.326  0.013
ARG  CZ-NH2  1.326  0.013
ARG  N-CA    1.459  0.020
ARG  CA-C    1.525  0.026
ARG  C-O     1.229  0.019
ASN  CA-CB   1.527  0.026
ASN  CB-CG   1.506  0.023
ASN  CG-OD1  1.235  0.022
ASN  CG-ND2  1.324  0.025
ASN  N-CA    1.459  0.020
ASN  CA-C    1.525  0.026
ASN  C-O     1.229  0.019
ASP  CA-CB   1.535  0.022
ASP  CB-CG   1.513  0.021
ASP  CG-OD1  1.249  0.023
ASP  CG-OD2  1.249  0.023
ASP  N-CA    1.459  0.020
ASP  CA-C    1.525  0.026
ASP  C-O     1.229  0.019
CYS  CA-CB   1.526  0.013
CYS  CB-SG   1.812  0.016
CYS  N-CA    1.459  0.020
CYS  CA-C    1.525  0.026
CYS  C-O     1.229  0.019
GLU  CA-CB   1.535  0.022
GLU  CB-CG   1.517  0.019
GLU  CG-CD   1.515  0.015
GLU  CD-OE1  1.252  0.011
GLU  CD-OE2  1.252  0.011
GLU  N-CA    1.459  0.020
GLU  CA-C    1.525  0.026
GLU  C-O     1.229  0.019
GLN  CA-CB   1.535  0.022
GLN  CB-CG   1.521  0.027
GLN  CG-CD   1.506  0.023
GLN  CD-OE1  1.235  0.022
GLN  CD-NE2  1.324  0.025
GLN  N-CA    1.459  0.020
GLN  CA-C    1.525  0.026
GLN  C-O     1.229  0.019
GLY  N-CA    1.456  0.015
GLY  CA-C    1.514  0.016
GLY  C-O     1.232  0.016
HIS  CA-CB   1.535  0.022
HIS  CB-CG   1.492  0.016
HIS  CG-ND1  1.369  0.015
HIS  CG-CD2  1.353  0.017
HIS  ND1-CE1 1.343  0.025
HIS  CD2-NE2 1.415  0.021
HIS  CE1-NE2 1.322  0.023
HIS  N-CA    1.459  0.020
HIS  CA-C    1.525  0.026
HIS  C-O     1.229  0.019
ILE  CA-CB   1.544  0.023
ILE  CB-CG1  1.536  0.028
ILE  CB-CG2  1.524  0.031
ILE  CG1-CD1 1.500  0.069
ILE  N-CA    1.459  0.020
ILE  CA-C    1.525  0.026
ILE  C-O     1.229  0.019
LEU  CA-CB   1.533  0.023
LEU  CB-CG   1.521  0.029
LEU  CG-CD1  1.514  0.037
LEU  CG-CD2  1.514  0.037
LEU  N-CA    1.459  0.020
LEU  CA-C    1.525  0.026
LEU  C-O     1.229  0.019
LYS  CA-CB   1.535  0.022
LYS  CB-CG   1.521  0.027
LYS  CG-CD   1.520  0.034
LYS  CD-CE   1.508  0.025
LYS  CE-NZ   1.486  0.025
LYS  N-CA    1.459  0.020
LYS  CA-C    1.525  0.026
LYS  C-O     1.229  0.019
MET  CA-CB   1.535  0.022
MET  CB-CG   1.509  0.032
MET  CG-SD   1.807  0.026
MET  SD-CE   1.774  0.056
MET  N-CA    1.459  0.020
MET  CA-C    1.525  0.026
MET  C-O     1.229  0.019
PHE  CA-CB   1.535  0.022
PHE  CB-CG   1.509  0.017
PHE  CG-CD1  1.383  0.015
PHE  CG-CD2  1.383  0.015
PHE  CD1-CE1 1.388  0.020
PHE  CD2-CE2 1.388  0.020
PHE  CE1-CZ  1.369  0.019
PHE  CE2-CZ  1.369  0.019
PHE  N-CA    1.459  0.020
PHE  CA-C    1.525  0.026
PHE  C-O     1.229  0.019
PRO  CA-CB   1.531  0.020
PRO  CB-CG   1.495  0.050
PRO  CG-CD   1.502  0.033
PRO  CD-N    1.474  0.014
PRO  N-CA    1.468  0.017
PRO  CA-C    1.524  0.020
PRO  C-O     1.228  0.020
SER  CA-CB   1.525  0.015
SER  CB-OG   1.418  0.013
SER  N-CA    1.459  0.020
SER  CA-C    1.525  0.026
SER  C-O     1.229  0.019
THR  CA-CB   1.529  0.026
THR  CB-OG1  1.428  0.020
THR  CB-CG2  1.519  0.033
THR  N-CA    1.459  0.020
THR  CA-C    1.525  0.026
THR  C-O     1.229  0.019
TRP  CA-CB   1.535  0.022
TRP  CB-CG   1.498  0.018
TRP  CG-CD1  1.363  0.014
TRP  CG-CD2  1.432  0.017
TRP  CD1-NE1 1.375  0.017
TRP  NE1-CE2 1.371  0.013
TRP  CD2-CE2 1.409  0.012
TRP  CD2-CE3 1.399  0.015
TRP  CE2-CZ2 1.393  0.017
TRP  CE3-CZ3 1.380  0.017
TRP  CZ2-CH2 1.369  0.019
TRP  CZ3-CH2 1.396  0.016
TRP  N-CA    1.459  0.020
TRP  CA-C    1.525  0.026
TRP  C-O     1.229  0.019
TYR  CA-CB   1.535  0.022
TYR  CB-CG   1.512  0.015
TYR  CG-CD1  1.387  0.013
TYR  CG-CD2  1.387  0.013
TYR  CD1-CE1 1.389  0.015
TYR  CD2-CE2 1.389  0.015
TYR  CE1-CZ  1.381  0.013
TYR  CE2-CZ  1.381  0.013
TYR  CZ-OH   1.374  0.017
TYR  N-CA    1.459  0.020
TYR  CA-C    1.525  0.026
TYR  C-O     1.229  0.019
VAL  CA-CB   1.543  0.021
VAL  CB-CG1  1.524  0.021
VAL  CB-CG2  1.524  0.021
VAL  N-CA    1.459  0.020
VAL  CA-C    1.525  0.026
VAL  C-O     1.229  0.019
"""

# intra-residue bond angles (degrees): residue, angle, mean, stddev.
_ANGLE_TABLE = """
ALA  N-CA-CB     110.1  1.4
ALA  CB-CA-C     110.1  1.5
ALA  N-CA-C      111.0  2.7
ALA  CA-C-O      120.1  2.1
ARG  N-CA-CB     110.6  1.8
ARG  CB-CA-C     110.4  2.0
ARG  CA-CB-CG    113.4  2.2
ARG  CB-CG-CD    111.6  2.6
ARG  CG-CD-NE    111.8  2.1
ARG  CD-NE-CZ    123.6  1.4
ARG  NE-CZ-NH1   120.3  0.5
ARG  NE-CZ-NH2   120.3  0.5
ARG  NH1-CZ-NH2  119.4  1.1
ARG  N-CA-C      111.0  2.7
ARG  CA-C-O      120.1  2.1
ASN  N-CA-CB     110.6  1.8
ASN  CB-CA-C     110.4  2.0
ASN  CA-CB-CG    113.4  2.2
ASN  CB-CG-ND2   116.7  2.4
ASN  CB-CG-OD1   121.6  2.0
ASN  ND2-CG-OD1  121.9  2.3
ASN  N-CA-C      111.0  2.7
ASN  CA-C-O      120.1  2.1
ASP  N-CA-CB     110.6  1.8
ASP  CB-CA-C     110.4  2.0
ASP  CA-CB-CG    113.4  2.2
ASP  CB-CG-OD1   118.3  0.9
ASP  CB-CG-OD2   118.3  0.9
ASP  OD1-CG-OD2  123.3  1.9
ASP  N-CA-C      111.0  2.7
ASP  CA-C-O      120.1  2.1
CYS  N-CA-CB     110.8  1.5
CYS  CB-CA-C     111.5  1.2
CYS  CA-CB-SG    114.2  1.1
CYS  N-CA-C      111.0  2.7
CYS  CA-C-O      120.1  2.1
GLU  N-CA-CB     110.6  1.8
GLU  CB-CA-C     110.4  2.0
GLU  CA-CB-CG    113.4  2.2
GLU  CB-CG-CD    114.2  2.7
GLU  CG-CD-OE1   118.3  2.0
GLU  CG-CD-OE2   118.3  2.0
GLU  OE1-CD-OE2  123.3  1.2
GLU  N-CA-C      111.0  2.7
GLU  CA-C-O      120.1  2.1
GLN  N-CA-CB     110.6  1.8
GLN  CB-CA-C     110.4  2.0
GLN  CA-CB-CG    113.4  2.2
GLN  CB-CG-CD    111.6  2.6
GLN  CG-CD-OE1   121.6  2.0
GLN  CG-CD-NE2   116.7  2.4
GLN  OE1-CD-NE2  121.9  2.3
GLN  N-CA-C      111.0  2.7
GLN  CA-C-O      120.1  2.1
GLY  N-CA-C      113.1  2.5
GLY  CA-C-O      120.6  1.8
HIS  N-CA-CB     110.6  1.8
HIS  CB-CA-C     110.4  2.0
HIS  CA-CB-CG    113.6  1.7
HIS  CB-CG-ND1   123.2  2.5
HIS  CB-CG-CD2   130.8  3.1
HIS  CG-ND1-CE1  108.2  1.4
HIS  ND1-CE1-NE2 109.9  2.2
HIS  CE1-NE2-CD2 106.6  2.5
HIS  NE2-CD2-CG  109.2  1.9
HIS  CD2-CG-ND1  106.0  1.4
HIS  N-CA-C      111.0  2.7
HIS  CA-C-O      120.1  2.1
ILE  N-CA-CB     110.8  2.3
ILE  CB-CA-C     111.6  2.0
ILE  CA-CB-CG1   111.0  1.9
ILE  CB-CG1-CD1  113.9  2.8
ILE  CA-CB-CG2   110.9  2.0
ILE  CG1-CB-CG2  111.4  2.2
ILE  N-CA-C      111.0  2.7
ILE  CA-C-O      120.1  2.1
LEU  N-CA-CB     110.4  2.0
LEU  CB-CA-C     110.2  1.9
LEU  CA-CB-CG    115.3  2.3
LEU  CB-CG-CD1   111.0  1.7
LEU  CB-CG-CD2   111.0  1.7
LEU  CD1-CG-CD2  110.5  3.0
LEU  N-CA-C      111.0  2.7
LEU  CA-C-O      120.1  2.1
LYS  N-CA-CB     110.6  1.8
LYS  CB-CA-C     110.4  2.0
LYS  CA-CB-CG    113.4  2.2
LYS  CB-CG-CD    111.6  2.6
LYS  CG-CD-CE    111.9  3.0
LYS  CD-CE-NZ    111.7  2.3
LYS  N-CA-C      111.0  2.7
LYS  CA-C-O      120.1  2.1
MET  N-CA-CB     110.6  1.8
MET  CB-CA-C     110.4  2.0
MET  CA-CB-CG    113.3  1.7
MET  CB-CG-SD    112.4  3.0
MET  CG-SD-CE    100.2  1.6
MET  N-CA-C      111.0  2.7
MET  CA-C-O      120.1  2.1
PHE  N-CA-CB     110.6  1.8
PHE  CB-CA-C     110.4  2.0
PHE  CA-CB-CG    113.9  2.4
PHE  CB-CG-CD1   120.8  0.7
PHE  CB-CG-CD2   120.8  0.7
PHE  CD1-CG-CD2  118.3  1.3
PHE  CG-CD1-CE1  120.8  1.1
PHE  CG-CD2-CE2  120.8  1.1
PHE  CD1-CE1-CZ  120.1  1.2
PHE  CD2-CE2-CZ  120.1  1.2
PHE  CE1-CZ-CE2  120.0  1.8
PHE  N-CA-C      111.0  2.7
PHE  CA-C-O      120.1  2.1
PRO  N-CA-CB     103.3  1.2
PRO  CB-CA-C     111.7  2.1
PRO  CA-CB-CG    104.8  1.9
PRO  CB-CG-CD    106.5  3.9
PRO  CG-CD-N     103.2  1.5
PRO  CA-N-CD     111.7  1.4
PRO  N-CA-C      112.1  2.6
PRO  CA-C-O      120.2  2.4
SER  N-CA-CB     110.5  1.5
SER  CB-CA-C     110.1  1.9
SER  CA-CB-OG    111.2  2.7
SER  N-CA-C      111.0  2.7
SER  CA-C-O      120.1  2.1
THR  N-CA-CB     110.3  1.9
THR  CB-CA-C     111.6  2.7
THR  CA-CB-OG1   109.0  2.1
THR  CA-CB-CG2   112.4  1.4
THR  OG1-CB-CG2  110.0  2.3
THR  N-CA-C      111.0  2.7
THR  CA-C-O      120.1  2.1
TRP  N-CA-CB     110.6  1.8
TRP  CB-CA-C     110.4  2.0
TRP  CA-CB-CG    113.7  1.9
TRP  CB-CG-CD1   127.0  1.3
TRP  CB-CG-CD2   126.6  1.3
TRP  CD1-CG-CD2  106.3  0.8
TRP  CG-CD1-NE1  110.1  1.0
TRP  CD1-NE1-CE2 109.0  0.9
TRP  NE1-CE2-CD2 107.3  1.0
TRP  CE2-CD2-CG  107.3  0.8
TRP  CG-CD2-CE3  133.9  0.9
TRP  NE1-CE2-CZ2 130.4  1.1
TRP  CE3-CD2-CE2 118.7  1.2
TRP  CD2-CE2-CZ2 122.3  1.2
TRP  CE2-CZ2-CH2 117.4  1.0
TRP  CZ2-CH2-CZ3 121.6  1.2
TRP  CH2-CZ3-CE3 121.2  1.1
TRP  CZ3-CE3-CD2 118.8  1.3
TRP  N-CA-C      111.0  2.7
TRP  CA-C-O      120.1  2.1
TYR  N-CA-CB     110.6  1.8
TYR  CB-CA-C     110.4  2.0
TYR  CA-CB-CG    113.4  1.9
TYR  CB-CG-CD1   121.0  0.6
TYR  CB-CG-CD2   121.0  0.6
TYR  CD1-CG-CD2  117.9  1.1
TYR  CG-CD1-CE1  121.3  0.8
TYR  CG-CD2-CE2  121.3  0.8
TYR  CD1-CE1-CZ  119.8  0.9
TYR  CD2-CE2-CZ  119.8  0.9
TYR  CE1-CZ-CE2  119.8  1.6
TYR  CE1-CZ-OH   120.1  2.7
TYR  CE2-CZ-OH   120.1  2.7
TYR  N-CA-C      111.0  2.7
TYR  CA-C-O      120.1  2.1
VAL  N-CA-CB     111.5  2.2
VAL  CB-CA-C     111.4  1.9
VAL  CA-CB-CG1   110.9  1.5
VAL  CA-CB-CG2   110.9  1.5
VAL  CG1-CB-CG2  110.9  1.6
VAL  N-CA-C      111.0  2.7
VAL  CA-C-O      120.1  2.1
"""


class Bond(NamedTuple):
    """A (real or virtual) bond: two atom names, length and stddev in Å."""

    atom1_name: str
    atom2_name: str
    length: float
    stddev: float


class BondAngle(NamedTuple):
    """A bond angle atom1-atom2-atom3 (atom2 the vertex), mean and stddev in radians."""

    atom1_name: str
    atom2_name: str
    atom3_name: str
    angle_rad: float
    stddev: float


def _table_rows(table: str) -> list[tuple[str, list[str], float, float]]:
    rows = []
    for line in table.strip().splitlines():
        name, atoms, mean, stddev = line.split()
        rows.append((name, atoms.split("-"), float(mean), float(stddev)))
    return rows


def _bond_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _virtual_bond(angle: BondAngle, bond1: Bond, bond2: Bond) -> Bond:
    """The atom1–atom3 distance an angle implies (law of cosines), with its stddev from
    first-order propagation of the three independent uncertainties."""
    a, b, gamma = bond1.length, bond2.length, angle.angle_rad
    length = float(np.sqrt(a * a + b * b - 2.0 * a * b * np.cos(gamma)))
    d_gamma = a * b * np.sin(gamma) / length
    d_a = (a - b * np.cos(gamma)) / length
    d_b = (b - a * np.cos(gamma)) / length
    stddev = float(np.sqrt((d_gamma * angle.stddev) ** 2 + (d_a * bond1.stddev) ** 2
                           + (d_b * bond2.stddev) ** 2))
    return Bond(angle.atom1_name, angle.atom3_name, length, stddev)


@functools.cache
def stereo_chemical_props() -> tuple[Mapping[str, tuple[Bond, ...]],
                                     Mapping[str, tuple[Bond, ...]],
                                     Mapping[str, tuple[BondAngle, ...]]]:
    """(bonds, virtual bonds, bond angles) per 3-letter residue name, "UNK" empty.

    A virtual bond is the distance between the outer atoms of a bond angle: the violation
    loss bounds it like a bond, which penalises wrong angles without computing any angle.
    """
    bonds: dict[str, list[Bond]] = {}
    for name, (a1, a2), mean, stddev in _table_rows(_BOND_TABLE):
        bonds.setdefault(name, []).append(Bond(a1, a2, mean, stddev))
    angles: dict[str, list[BondAngle]] = {}
    for name, (a1, a2, a3), mean, stddev in _table_rows(_ANGLE_TABLE):
        angles.setdefault(name, []).append(
            BondAngle(a1, a2, a3, mean / 180.0 * np.pi, stddev / 180.0 * np.pi))
    virtual: dict[str, list[Bond]] = {}
    for name, res_angles in angles.items():
        lookup = {_bond_key(b.atom1_name, b.atom2_name): b for b in bonds[name]}
        virtual[name] = [
            _virtual_bond(ang, lookup[_bond_key(ang.atom1_name, ang.atom2_name)],
                          lookup[_bond_key(ang.atom2_name, ang.atom3_name)])
            for ang in res_angles]
    for table in (bonds, virtual, angles):
        table["UNK"] = []
    return tuple(MappingProxyType({k: tuple(v) for k, v in t.items()})  # type: ignore[return-value]
                 for t in (bonds, virtual, angles))


@functools.cache
def atom14_dists_bounds(overlap_tolerance: float = 1.5,
                        bond_length_tolerance_factor: float = 15.0) -> Mapping[str, np.ndarray]:
    """Allowed intra-residue atom14 distances for the violation loss: float32 [21, 14, 14]
    ``lower_bound``, ``upper_bound`` and ``stddev``.

    Every pair of distinct present atoms is a potential clash: lower bound = sum of the van
    der Waals radii minus ``overlap_tolerance``, upper bound 1e10, stddev 0. Bonded and
    angle-related (virtual-bond) pairs are then bounded by length ± factor · stddev instead.
    """
    lower = np.zeros((RESTYPE_NUM + 1, 14, 14), np.float32)
    upper = np.zeros_like(lower)
    stddev = np.zeros_like(lower)
    bonds, virtual, _ = stereo_chemical_props()
    for restype, letter in enumerate(RESTYPES):
        name = RESTYPE_1TO3[letter]
        names = RESTYPE_NAME_TO_ATOM14_NAMES[name]
        present = np.array([bool(a) for a in names])
        radius = np.array([VAN_DER_WAALS_RADIUS[a[0]] if a else 0.0 for a in names])
        pair = present[:, None] & present[None, :] & ~np.eye(14, dtype=bool)
        lower[restype][pair] = (radius[:, None] + radius[None, :] - overlap_tolerance)[pair]
        upper[restype][pair] = 1e10
        for bond in bonds[name] + virtual[name]:
            i, j = names.index(bond.atom1_name), names.index(bond.atom2_name)
            spread = bond_length_tolerance_factor * bond.stddev
            for a, b in ((i, j), (j, i)):
                lower[restype, a, b] = bond.length - spread
                upper[restype, a, b] = bond.length + spread
                stddev[restype, a, b] = bond.stddev
    return MappingProxyType({"lower_bound": _frozen(lower), "upper_bound": _frozen(upper),
                             "stddev": _frozen(stddev)})


# ---------------------------------------------------------------------------------------------
# Derived per-residue-type arrays (21 rows, UNK last)
# ---------------------------------------------------------------------------------------------

def _atom_maps() -> dict[str, np.ndarray]:
    """atom14 <-> atom37 index maps and masks, and each atom's rigid group and position.

    Absent slots map to index 0: a gather through them reads some real atom, so every user
    multiplies by the matching mask (as the reference's data pipeline does).
    """
    n = RESTYPE_NUM + 1
    out = {
        "atom14_to_atom37": np.zeros((n, 14), np.int64),
        "atom37_to_atom14": np.zeros((n, ATOM_TYPE_NUM), np.int64),
        "atom14_mask": np.zeros((n, 14), np.float32),
        "atom37_mask": np.zeros((n, ATOM_TYPE_NUM), np.float32),
        "atom14_to_group": np.zeros((n, 14), np.int64),
        "atom37_to_group": np.zeros((n, ATOM_TYPE_NUM), np.int64),
        "atom14_group_positions": np.zeros((n, 14, 3), np.float32),
        "atom37_group_positions": np.zeros((n, ATOM_TYPE_NUM, 3), np.float32),
    }
    for restype, letter in enumerate(RESTYPES):
        name = RESTYPE_1TO3[letter]
        names = RESTYPE_NAME_TO_ATOM14_NAMES[name]
        for slot, atom in enumerate(names):
            if atom:
                out["atom14_to_atom37"][restype, slot] = ATOM_ORDER[atom]
                out["atom37_to_atom14"][restype, ATOM_ORDER[atom]] = slot
                out["atom14_mask"][restype, slot] = 1.0
        for atom, group, position in RIGID_GROUP_ATOM_POSITIONS[name]:
            slot, a37 = names.index(atom), ATOM_ORDER[atom]
            out["atom37_mask"][restype, a37] = 1.0
            out["atom14_to_group"][restype, slot] = group
            out["atom37_to_group"][restype, a37] = group
            out["atom14_group_positions"][restype, slot] = position
            out["atom37_group_positions"][restype, a37] = position
    return {key: _frozen(value) for key, value in out.items()}


_MAPS = _atom_maps()
RESTYPE_ATOM14_TO_ATOM37 = _MAPS["atom14_to_atom37"]
RESTYPE_ATOM37_TO_ATOM14 = _MAPS["atom37_to_atom14"]
RESTYPE_ATOM14_MASK = _MAPS["atom14_mask"]
RESTYPE_ATOM37_MASK = _MAPS["atom37_mask"]
RESTYPE_ATOM14_TO_RIGID_GROUP = _MAPS["atom14_to_group"]
RESTYPE_ATOM37_TO_RIGID_GROUP = _MAPS["atom37_to_group"]
RESTYPE_ATOM14_RIGID_GROUP_POSITIONS = _MAPS["atom14_group_positions"]
RESTYPE_ATOM37_RIGID_GROUP_POSITIONS = _MAPS["atom37_group_positions"]


def _frame_4x4(x_direction: np.ndarray, xy_direction: np.ndarray,
               origin: np.ndarray) -> np.ndarray:
    """The rigid transform whose x axis points along ``x_direction``, whose xy-plane holds
    ``xy_direction`` (Gram–Schmidt), z = x × y, and whose origin is ``origin``."""
    ex = x_direction / np.linalg.norm(x_direction)
    ey = xy_direction - np.dot(xy_direction, ex) * ex
    ey = ey / np.linalg.norm(ey)
    frame = np.eye(4)
    frame[:3, :3] = np.stack([ex, ey, np.cross(ex, ey)], axis=1)
    frame[:3, 3] = origin
    return frame


def _default_frames() -> np.ndarray:
    """[21, 8, 4, 4]: each rigid group's frame in its parent's frame at zero torsion.

    Parents: φ, ψ and χ1 hang off the backbone frame, χ(k+1) off χk. The φ and ψ frames put
    the rotation axis (CA→N, CA→C) on x; χ1 uses CA→CB with N in the xy-plane; χ2..4 use the
    axis-end atom of the previous group (its position *is* the axis in the parent frame) with
    the parent's −x in the plane. Groups a residue lacks, and the UNK row, stay all-zero.
    """
    frames = np.zeros((RESTYPE_NUM + 1, 8, 4, 4))
    for restype, letter in enumerate(RESTYPES):
        name = RESTYPE_1TO3[letter]
        pos = {atom: np.array(p) for atom, _, p in RIGID_GROUP_ATOM_POSITIONS[name]}
        frames[restype, 0] = frames[restype, 1] = np.eye(4)
        frames[restype, 2] = _frame_4x4(pos["N"] - pos["CA"], np.array([1.0, 0.0, 0.0]),
                                        pos["N"])
        frames[restype, 3] = _frame_4x4(pos["C"] - pos["CA"], pos["CA"] - pos["N"], pos["C"])
        for k, (a0, a1, a2, _) in enumerate(CHI_ANGLES_ATOMS[name]):
            if k == 0:
                frames[restype, 4] = _frame_4x4(pos[a2] - pos[a1], pos[a0] - pos[a1], pos[a2])
            else:
                frames[restype, 4 + k] = _frame_4x4(pos[a2], np.array([-1.0, 0.0, 0.0]),
                                                    pos[a2])
    return _frozen(frames.astype(np.float32))


RESTYPE_RIGID_GROUP_DEFAULT_FRAME = _default_frames()


def _ambiguity_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[21,14] is-ambiguous flags, [21,14] swap partner index (identity when none) and the
    [21,14,14] permutation matrices P with alt[b] = Σ_a P[a, b] · gt[a]."""
    is_ambiguous = np.zeros((RESTYPE_NUM + 1, 14), np.float32)
    partner = np.tile(np.arange(14, dtype=np.int64), (RESTYPE_NUM + 1, 1))
    for name, swaps in RESIDUE_ATOM_RENAMING_SWAPS.items():
        restype = RESNAME_TO_IDX[name]
        names = RESTYPE_NAME_TO_ATOM14_NAMES[name]
        for atom1, atom2 in swaps.items():
            i, j = names.index(atom1), names.index(atom2)
            is_ambiguous[restype, [i, j]] = 1.0
            partner[restype, i], partner[restype, j] = j, i
    renaming = np.zeros((RESTYPE_NUM + 1, 14, 14), np.float32)
    rows = np.arange(RESTYPE_NUM + 1)[:, None]
    renaming[rows, np.arange(14)[None, :], partner] = 1.0
    return _frozen(is_ambiguous), _frozen(partner), _frozen(renaming)


(RESTYPE_ATOM14_IS_AMBIGUOUS, RESTYPE_ATOM14_AMBIGUOUS_SWAP_IDX,
 RESTYPE_AMBIGUOUS_RENAMING) = _ambiguity_tables()


def aatype_to_sequence(aatype: np.ndarray) -> str:
    """One-letter string of residue-type indices (20 → X)."""
    return "".join(RESTYPES_WITH_X[int(i)] for i in np.asarray(aatype).reshape(-1))
