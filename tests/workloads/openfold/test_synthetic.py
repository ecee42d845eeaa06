"""Synthetic proteins in the processed layout: read back by the real readers (splits, chains,
alignments, templates), byte-identical for any worker count, an idealised backbone with the
reference's bond lengths and exactly the dihedrals asked for, a structure that is a function
of the sequence, MSAs and hhr files that parse, and no overwriting of a real dataset."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import layout, parsers, spec, synthetic
from sciperf.workloads.openfold import residue_constants as rc

KNOBS = {"msa_depth": 10, "templates": True, "max_hits": 2, "unresolved_probability": 0.5}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synthetic-openfold")
    synthetic.generate(root, 8, 3, seed=5, **KNOBS)
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "sciperf_dataset.json"}


def test_the_readers_select_every_chain(dataset: Path) -> None:
    train = layout.split_chains(dataset, "train")
    val = layout.split_chains(dataset, "validation")
    assert [r.pdb_chain_id for r in train] == [f"100{k}_A" for k in range(8)]
    assert [r.pdb_chain_id for r in val] == ["9000_A", "9001_A", "9002_A"]
    assert all(r.release_date <= "2021-09-16" < v.release_date for r in train for v in val)
    assert all(24 <= r.sequence_length <= 48 and r.mmcif_chain_ids == ("A", "B")
               for r in train + val)
    assert len({r.pdb_cluster_id for r in train}) == 8
    for row in train + val:
        chain = layout.load_chain(dataset, row.pdb_chain_id)
        assert chain.sequence == row.sequence and 1.5 <= chain.resolution <= 2.5
        positions, mask = synthetic.backbone_structure(chain.sequence)
        kept = chain.all_atom_mask
        assert (kept <= mask).all() and kept[:, rc.ATOM_ORDER["CA"]].sum() >= len(mask) - 3
        np.testing.assert_array_equal(chain.all_atom_positions[kept], positions[kept])
        assert not chain.all_atom_positions[~kept].any()
    assert synthetic.dataset_complete(synthetic.SyntheticRequest(str(dataset.resolve()), 8, 3,
                                                                 5, **KNOBS))
    assert not synthetic.dataset_complete(synthetic.SyntheticRequest(str(dataset.resolve()), 8,
                                                                     3, 6, **KNOBS))


def test_msas_parse_with_insertions_and_gaps(dataset: Path) -> None:
    index = layout.AlignmentIndex(dataset)
    deletions = gaps = 0
    for row in layout.read_chains(dataset):
        files = index.read(row.pdb_chain_id)
        assert sorted(files) == sorted((*layout.A3M_FILES, layout.HHR_FILE))
        rows = 0
        for name in layout.A3M_FILES:
            alignment = parsers.parse_a3m(files[name], name)
            assert alignment.sequences[0] == row.sequence and alignment.width == len(row.sequence)
            rows += len(alignment.sequences) - 1
            deletions += int(alignment.deletion_matrix.sum())
            gaps += sum(s.count("-") for s in alignment.sequences)
            for homolog in alignment.sequences[1:]:  # mutations stay within the residue class
                states = [synthetic._CLASS_OF[a] == synthetic._CLASS_OF[b]
                          for a, b in zip(homolog, row.sequence, strict=True) if a != "-"]
                assert all(states)
        assert rows == KNOBS["msa_depth"]
    assert deletions > 0 and gaps > 0


def test_template_hits_are_found_in_earlier_chains(dataset: Path) -> None:
    templates = pytest.importorskip("sciperf.workloads.openfold.templates")
    rows = layout.read_chains(dataset)
    database = layout.template_database(dataset, rows)
    index = layout.AlignmentIndex(dataset)
    found = 0
    for row in rows:
        hits = parsers.parse_hhr(index.read(row.pdb_chain_id)[layout.HHR_FILE], "hhr")
        assert len(hits) == (min(2, int(row.pdb_id[-1])) if row.pdb_id < "9" else 2)
        released = datetime.date.fromisoformat(row.release_date)
        features = templates.template_features(
            row.sequence, hits, database, query_pdb_id=row.pdb_id,
            query_release_date=released, max_templates=4, shuffle_seed=None)
        assert features.count == len(hits)  # every hit usable without kalign
        found += features.count
    assert found > 0


def test_bytes_do_not_depend_on_workers_and_follow_the_seed(dataset: Path,
                                                             tmp_path: Path) -> None:
    synthetic.generate(tmp_path / "two", 8, 3, seed=5, workers=2, **KNOBS)
    assert _files(tmp_path / "two") == _files(dataset)
    synthetic.generate(tmp_path / "other", 8, 3, seed=6, **KNOBS)
    other = _files(tmp_path / "other")
    assert other.keys() == _files(dataset).keys() and other != _files(dataset)


def test_regeneration_replaces_its_own_set_and_refuses_a_real_one(tmp_path: Path) -> None:
    synthetic.generate(tmp_path / "a", 8, 3, seed=5, **KNOBS)
    synthetic.generate(tmp_path / "a", 4, 2, seed=5, msa_depth=2)
    synthetic.generate(tmp_path / "b", 4, 2, seed=5, msa_depth=2)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")  # nothing stale left
    manifest = json.loads((tmp_path / "a" / "sciperf_dataset.json").read_text())
    assert manifest[layout.FORMAT]["train"] == 4
    real = tmp_path / "real"
    layout.write_chains(real, [])
    with pytest.raises(SciperfError, match="did not write"):
        synthetic.generate(real, 2, 1, seed=0)
    assert (real / layout.CHAINS_CSV).is_file()


def _dihedral(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    axis = (c - b) / np.linalg.norm(c - b, axis=-1, keepdims=True)
    v = (a - b) - np.sum((a - b) * axis, -1, keepdims=True) * axis
    w = (d - c) - np.sum((d - c) * axis, -1, keepdims=True) * axis
    return np.degrees(np.arctan2(np.sum(np.cross(axis, v) * w, -1), np.sum(v * w, -1)))


def test_backbone_geometry_and_dihedrals() -> None:
    sequence = "GAVLPKEGSWMTPGDDNHQRCYFIAAAAVVVV"
    positions, mask = synthetic.backbone_structure(sequence)
    n, ca, c, o = (positions[:, rc.ATOM_ORDER[a]].astype(np.float64)
                   for a in ("N", "CA", "C", "O"))
    peptide = np.linalg.norm(n[1:] - c[:-1], axis=-1)
    expected = np.where(np.array(list(sequence[1:])) == "P", 1.341, 1.329)  # before proline
    np.testing.assert_allclose(peptide, expected, atol=1e-3)
    # N–CA and CA–C: each residue type's literature value (1.454–1.465 Å, 1.517–1.527 Å)
    literature = {name: {atom.atom: np.linalg.norm(atom.position) for atom in atoms}
                  for name, atoms in rc.RIGID_GROUP_ATOM_POSITIONS.items()}
    names = [rc.RESTYPE_1TO3[letter] for letter in sequence]
    np.testing.assert_allclose(np.linalg.norm(ca - n, axis=-1),
                               [literature[r]["N"] for r in names], atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(c - ca, axis=-1),
                               [literature[r]["C"] for r in names], atol=1e-3)
    assert (np.abs(np.linalg.norm(ca - n, axis=-1) - 1.458) < 8e-3).all()
    assert (np.abs(np.linalg.norm(c - ca, axis=-1) - 1.525) < 9e-3).all()
    phi, psi, omega = (np.degrees(x) for x in synthetic.backbone_dihedrals(sequence))
    np.testing.assert_allclose(_dihedral(c[:-1], n[1:], ca[1:], c[1:]), phi[1:], atol=1e-3)
    np.testing.assert_allclose(_dihedral(n[:-1], ca[:-1], c[:-1], n[1:]), psi[:-1], atol=1e-3)
    np.testing.assert_allclose(np.abs(_dihedral(ca[:-1], c[:-1], n[1:], ca[1:])), 180.0,
                               atol=1e-3)
    assert (omega == 180.0).all()
    # O trans to the next N: the N–CA–C–O dihedral is ψ + 180°
    np.testing.assert_allclose(np.cos(np.radians(_dihedral(n, ca, c, o) - psi)), -1.0,
                               atol=1e-6)
    kept = {rc.ATOM_ORDER[a] for a in synthetic.KEPT_ATOMS}
    assert all(set(np.flatnonzero(row)) <= kept for row in mask)
    assert mask[:, rc.ATOM_ORDER["CB"]].tolist() == [letter != "G" for letter in sequence]


def test_secondary_structure_vote_and_its_dihedrals() -> None:
    helix, strand, loop = synthetic.HELIX, synthetic.STRAND, synthetic.LOOP
    assert synthetic.secondary_structure("AAAAA").tolist() == [helix] * 5
    assert synthetic.secondary_structure("VVVVVV").tolist() == [strand] * 6
    # residue 2's window ALGVV: 2 helix, 1 loop, 2 strand → the tie goes to helix
    assert synthetic.secondary_structure("ALGVV").tolist() == [helix, helix, helix, strand,
                                                              strand]
    # AGV: every (clipped) window is a tie with loop in it → loop
    assert synthetic.secondary_structure("AGV").tolist() == [loop] * 3
    phi, psi, _ = synthetic.backbone_dihedrals("PGPGA")
    np.testing.assert_allclose(np.degrees(phi), [-70, 80, -70, 80, -70])
    np.testing.assert_allclose(np.degrees(psi), [140, 10, 140, 10, 140])
    first = synthetic.backbone_structure("MKVLAAGEDS")
    second = synthetic.backbone_structure("MKVLAAGEDS")
    np.testing.assert_array_equal(first[0], second[0])  # a function of the sequence


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SciperfError, match="at least one chain per split"):
        synthetic.generate(tmp_path, 0, 1, seed=0)
    with pytest.raises(SciperfError, match="min_length"):
        synthetic.generate(tmp_path, 1, 1, seed=0, min_length=4)
    with pytest.raises(SciperfError, match="'coil' is not one of mixed, one_class"):
        synthetic.generate(tmp_path, 1, 1, seed=0, sequences="coil")


def test_one_class_chains_are_a_whole_helix_or_a_whole_strand() -> None:
    """The mini's chains: each of one class's letters, so its structure is one ideal helix
    or one strand; both kinds drawn. "mixed" keeps every residue type, as before."""
    one = synthetic.SyntheticRequest("/nonexistent", 64, 1, 0, min_length=24, max_length=32,
                                     sequences="one_class")
    states = set()
    for k in range(64):
        sequence = synthetic.chain_sequence(one, "train", k)
        assert 24 <= len(sequence) <= 32
        kinds = set(synthetic.secondary_structure(sequence).tolist())
        assert kinds in ({synthetic.HELIX}, {synthetic.STRAND}), sequence
        states |= kinds
    assert states == {synthetic.HELIX, synthetic.STRAND}
    mixed = synthetic.SyntheticRequest("/nonexistent", 64, 1, 0)
    letters = set("".join(synthetic.chain_sequence(mixed, "train", k) for k in range(64)))
    assert letters == set(rc.RESTYPES)
    assert synthetic.SEQUENCE_KINDS == spec.SYNTHETIC_SEQUENCES
