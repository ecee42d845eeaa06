"""One mmCIF file → one processed ``dicts`` entry, as the reference's preprocessing makes it.

The reference (REF ``openfold/data/mmcif.py`` ``parse_mmcif_string``, run by
``scripts/preprocess_pdb_mmcif.py`` on every PDB file) reads the file twice over with
Biopython: the flat ``MMCIF2Dict`` tables for the metadata and the sequences, the
``MMCIFParser`` structure for the atoms. What it keeps, and therefore what this module keeps:

* ``pdb_id`` (``_entry.id``, lower case), ``exptl_method`` (``;``-joined), ``release_date``
  (the earliest ``_pdbx_audit_revision_history.revision_date``) and ``resolution``: the
  first of ``_refine.ls_d_res_high``, ``_em_3d_reconstruction.resolution``,
  ``_reflns.d_resolution_high`` that is *present* (a present but unusable ``.`` gives NaN even
  when a later key has a number), the largest number if it lists several, else NaN;
* the protein chains: entities with at least one monomer whose ``_chem_comp.type`` contains
  ``peptide``, each of their mmCIF chains named by its author chain (``auth_asym_id`` of its
  model-1 atoms); the sequence from ``_entity_poly_seq`` through Biopython's SCOP 3→1 table
  (``protein_letters_3to1_extended``, Biopython ≥ 1.80's home of ``SCOPData``), ``X`` for
  anything unknown or longer than one letter;
* ``mmcif_chain_id_to_author_chain_id`` over *all* model-1 atoms (ligand and water chains
  too: ``chains.csv`` lists them in ``mmcif_chain_ids``), ``entity_id_to_mmcif_chain_ids``;
* atom37 positions and mask per author chain from the first model: residue i of the sequence
  is the residue with ``label_seq_id`` = first number + i, found in Biopython's chain by its
  (hetero flag, author number, insertion code); atoms named in ``ATOM_ORDER`` are kept, the
  selenium of MSE goes to SD; a residue without atoms is all-zero and masked.

Files the reference would drop (it catches every exception and logs it) raise
:class:`MmcifError`, one line naming the file. One deliberate extension: a file without
``_pdbx_audit_revision_history`` (ChimeraX and other non-archive writers) takes
``default_release_date`` when the caller gives one; without it, that is an error.
"""

from __future__ import annotations

import datetime
import gzip
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.layout.dicts import ChainAtoms, DictsEntry

RELEASE_DATE_KEY = "_pdbx_audit_revision_history.revision_date"
# In this order; the first key present decides (REF _get_resolution).
RESOLUTION_KEYS = ("_refine.ls_d_res_high", "_em_3d_reconstruction.resolution",
                   "_reflns.d_resolution_high")
PEPTIDE_MARK = "peptide"  # a legal polymer has a monomer whose chem_comp type contains this
FIRST_MODEL = "1"
_ATOM_SITE = {  # our name → mmCIF column
    "residue_name": "_atom_site.label_comp_id", "author_chain": "_atom_site.auth_asym_id",
    "mmcif_chain": "_atom_site.label_asym_id", "author_number": "_atom_site.auth_seq_id",
    "mmcif_number": "_atom_site.label_seq_id", "insertion": "_atom_site.pdbx_PDB_ins_code",
    "group": "_atom_site.group_PDB", "model": "_atom_site.pdbx_PDB_model_num",
}
_WATER = ("HOH", "WAT")  # Biopython's hetero flag "W"
_UNSET_INSERTION = (".", "?")


class MmcifError(SciperfError):
    """An mmCIF file the preprocessing cannot turn into an entry (the line names it)."""


def read_mmcif(path: str | Path, *, default_release_date: str | None = None) -> DictsEntry:
    """Parse a ``.cif`` or ``.cif.gz`` file (see :func:`parse_mmcif`)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise MmcifError(f"{path}: cannot read the mmCIF file ({exc})") from None
    return parse_mmcif(text, str(path), default_release_date=default_release_date)


def parse_mmcif(text: str, source: str = "<mmcif>", *,
                default_release_date: str | None = None) -> DictsEntry:
    """The ``dicts`` entry of an mmCIF text (atoms as arrays; :mod:`.layout.dicts` compresses)."""
    from Bio.PDB import MMCIF2Dict, MMCIFParser

    parser = MMCIFParser(QUIET=True)
    try:
        structure = parser.get_structure(None, io.StringIO(text))
        fields = getattr(parser, "_mmcif_dict", None) or MMCIF2Dict.MMCIF2Dict(
            io.StringIO(text))
    except Exception as exc:  # noqa: BLE001 - Biopython raises many types on bad input
        raise MmcifError(f"{source}: Biopython cannot parse it ({type(exc).__name__}: "
                         f"{exc})") from None
    cif = _Fields(fields, source)
    try:
        return _entry(cif, structure, default_release_date)
    except (ValueError, KeyError, TypeError) as exc:
        raise MmcifError(f"{source}: {type(exc).__name__}: {exc}") from None


class _Fields:
    """The flat mmCIF tables, every lookup failing in one line naming the file."""

    def __init__(self, fields: dict[str, Any], source: str) -> None:
        self.fields, self.source = fields, source

    def __contains__(self, key: str) -> bool:
        return key in self.fields

    def values(self, key: str) -> list[str]:
        value = self.fields.get(key)
        if value is None:
            raise MmcifError(f"{self.source}: has no {key}")
        return list(value) if isinstance(value, list) else [value]

    def rows(self, *keys: str) -> list[tuple[str, ...]]:
        columns = [self.values(key) for key in keys]
        if len({len(c) for c in columns}) > 1:
            raise MmcifError(f"{self.source}: columns {', '.join(keys)} differ in length "
                             f"({', '.join(str(len(c)) for c in columns)})")
        return list(zip(*columns, strict=True))

    def fail(self, what: str) -> MmcifError:
        return MmcifError(f"{self.source}: {what}")


def _entry(cif: _Fields, structure: Any, default_release_date: str | None) -> DictsEntry:
    entity_chains = _entity_chains(cif)
    polymers = _protein_polymers(cif, entity_chains)
    if not polymers:
        raise cif.fail("has no protein chain (no entity with a peptide monomer)")
    sites = [dict(zip(_ATOM_SITE, row, strict=True))
             for row in cif.rows(*_ATOM_SITE.values()) if row[-1] == FIRST_MODEL]
    to_author = _author_chains(cif, sites)
    sequences = _sequences(cif, polymers, to_author)
    keys = _residue_keys(cif, polymers, sites, to_author)
    model = next(structure.get_models(), None)
    if model is None:
        raise cif.fail("has no model")
    atoms = {chain: _chain_atoms(cif, model, chain, keys[chain]) for chain in sequences}
    for chain, sequence in sequences.items():
        if len(atoms[chain]["all_atom_positions"]) != len(sequence):
            raise cif.fail(f"chain {chain}: {len(sequence)} residues in the sequence but "
                           f"{len(atoms[chain]['all_atom_positions'])} residue positions")
    return DictsEntry(pdb_id=_pdb_id(cif), exptl_method=_exptl_method(cif),
                      release_date=_release_date(cif, default_release_date),
                      resolution=_resolution(cif), author_chain_ids=list(sequences),
                      entity_id_to_mmcif_chain_ids=entity_chains,
                      mmcif_chain_id_to_author_chain_id=to_author, sequences=sequences,
                      atoms=atoms)


def _pdb_id(cif: _Fields) -> str:
    ids = cif.values("_entry.id")
    if len(ids) != 1 or len(ids[0]) != 4:
        raise cif.fail(f"_entry.id {ids} is not one 4-character PDB id")
    return ids[0].lower()


def _exptl_method(cif: _Fields) -> str:
    methods = cif.values("_exptl.method")
    if not methods:
        raise cif.fail("_exptl.method is empty")
    return ";".join(methods)


def _release_date(cif: _Fields, default: str | None) -> str:
    """The earliest revision date (YYYY-MM-DD), else `default`."""
    if RELEASE_DATE_KEY not in cif:
        if default is None:
            raise cif.fail(f"has no {RELEASE_DATE_KEY} (a file not from the PDB archive, e.g. "
                           "written by ChimeraX: give a default release date)")
        dates = [default]
    else:
        dates = cif.values(RELEASE_DATE_KEY)
    for date in dates:
        try:
            datetime.datetime.strptime(date, "%Y-%m-%d")
        except ValueError:
            raise cif.fail(f"release date {date!r} is not YYYY-MM-DD") from None
    if not dates:
        raise cif.fail(f"{RELEASE_DATE_KEY} is empty")
    return min(dates)


def _resolution(cif: _Fields) -> float:
    """The first present resolution key's largest number; NaN without one (a ChimeraX file
    has none)."""
    key = next((k for k in RESOLUTION_KEYS if k in cif), None)
    numbers = [] if key is None else [_number(v) for v in cif.values(key)]
    numbers = [n for n in numbers if not math.isnan(n)]
    return max(numbers) if numbers else math.nan


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _entity_chains(cif: _Fields) -> dict[str, list[str]]:
    """entity id → its mmCIF chains (``_struct_asym``), in file order."""
    out: dict[str, list[str]] = {}
    for chain, entity in cif.rows("_struct_asym.id", "_struct_asym.entity_id"):
        out.setdefault(entity, []).append(chain)
    return out


def _protein_polymers(cif: _Fields, entity_chains: dict[str, list[str]]
                      ) -> dict[str, list[tuple[int, str]]]:
    """mmCIF chain → its polymer's (number, monomer id) list, for protein entities only."""
    polymers: dict[str, list[tuple[int, str]]] = {}
    for entity, number, monomer in cif.rows("_entity_poly_seq.entity_id",
                                            "_entity_poly_seq.num", "_entity_poly_seq.mon_id"):
        polymers.setdefault(entity, []).append((int(number), monomer))
    types = dict(cif.rows("_chem_comp.id", "_chem_comp.type"))
    out: dict[str, list[tuple[int, str]]] = {}
    for entity, monomers in polymers.items():
        if any(PEPTIDE_MARK in _chem_type(cif, types, m) for _, m in monomers):
            for chain in entity_chains.get(entity) or _no_chains(cif, entity):
                if chain in out:
                    raise cif.fail(f"mmCIF chain {chain} belongs to two polymer entities")
                out[chain] = list(monomers)
    return out


def _chem_type(cif: _Fields, types: dict[str, str], monomer: str) -> str:
    if monomer not in types:
        raise cif.fail(f"monomer {monomer} of _entity_poly_seq is not in _chem_comp")
    return types[monomer]


def _no_chains(cif: _Fields, entity: str) -> list[str]:
    raise cif.fail(f"polymer entity {entity} has no chain in _struct_asym")


def _author_chains(cif: _Fields, sites: list[dict[str, str]]) -> dict[str, str]:
    """mmCIF chain → author chain, from every model-1 atom, in order of appearance."""
    out: dict[str, str] = {}
    for site in sites:
        known = out.setdefault(site["mmcif_chain"], site["author_chain"])
        if known != site["author_chain"]:
            raise cif.fail(f"mmCIF chain {site['mmcif_chain']} has atoms in author chains "
                           f"{known} and {site['author_chain']}")
    return out


def _sequences(cif: _Fields, polymers: dict[str, list[tuple[int, str]]],
               to_author: dict[str, str]) -> dict[str, str]:
    """author chain → one-letter sequence (SCOP's 3→1 table, X otherwise)."""
    from Bio.Data.PDBData import protein_letters_3to1_extended as three_to_one

    out: dict[str, str] = {}
    for mmcif_chain, monomers in polymers.items():
        author = to_author.get(mmcif_chain)
        if author is None:
            raise cif.fail(f"protein chain {mmcif_chain} has no atoms in model {FIRST_MODEL}")
        if author in out:
            raise cif.fail(f"author chain {author} holds two protein chains")
        letters = (three_to_one.get(m, "X") for _, m in monomers)
        out[author] = "".join(code if len(code) == 1 else "X" for code in letters)
    return out


ResidueKey = tuple[str, int, str]  # Biopython's residue id: (hetero flag, number, insertion)


def _residue_keys(cif: _Fields, polymers: dict[str, list[tuple[int, str]]],
                  sites: list[dict[str, str]], to_author: dict[str, str]
                  ) -> dict[str, list[ResidueKey | None]]:
    """author chain → per sequence position, the Biopython id of its residue or None."""
    first = {chain: min(n for n, _ in monomers) for chain, monomers in polymers.items()}
    found: dict[str, dict[int, ResidueKey]] = {}
    for site in sites:
        chain = site["mmcif_chain"]
        if chain not in polymers:
            continue
        flag = " "
        if site["group"] == "HETATM":
            flag = "W" if site["residue_name"] in _WATER else f"H_{site['residue_name']}"
        insertion = " " if site["insertion"] in _UNSET_INSERTION else site["insertion"]
        position = int(site["mmcif_number"]) - first[chain]
        # a later atom of the same position wins, as in the reference (and AlphaFold)
        found.setdefault(site["author_chain"], {})[position] = (
            flag, int(site["author_number"]), insertion)
    out: dict[str, list[ResidueKey | None]] = {}
    for chain, monomers in polymers.items():
        author = to_author[chain]
        keys = found.get(author, {})
        count = max(len(monomers), len(keys))
        if any(not 0 <= p < count for p in keys):
            raise cif.fail(f"chain {author}: a residue number lies outside its sequence")
        out[author] = [keys.get(p) for p in range(count)]
    return out


def _chain_atoms(cif: _Fields, model: Any, author: str,
                 keys: Sequence[ResidueKey | None]) -> ChainAtoms:
    """atom37 positions (float32) and mask (bool) of an author chain's residues."""
    chains = [chain for chain in model.get_chains() if chain.id == author]
    if len(chains) != 1:
        raise cif.fail(f"model {FIRST_MODEL} has {len(chains)} chains named {author}")
    positions = np.zeros((len(keys), rc.ATOM_TYPE_NUM, 3), np.float32)
    mask = np.zeros((len(keys), rc.ATOM_TYPE_NUM), bool)
    selenium_slot = rc.ATOM_ORDER["SD"]
    for i, key in enumerate(keys):
        if key is None:
            continue
        if key not in chains[0]:
            raise cif.fail(f"chain {author}: Biopython has no residue {key}")
        residue = chains[0][key]
        for atom in residue.get_atoms():
            name = atom.get_name()
            slot = rc.ATOM_ORDER.get(name)
            if slot is None and name.upper() == "SE" and residue.get_resname() == "MSE":
                slot = selenium_slot
            if slot is not None:
                positions[i, slot] = atom.get_coord()
                mask[i, slot] = True
    return ChainAtoms(all_atom_positions=positions, all_atom_mask=mask)
