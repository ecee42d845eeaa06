"""OpenFold template features from hhr hits: a small hand-written PDB (idealised helices
from the geometry module) and hhr file with a hit for every rule of the reference's
TemplateHitFeaturizer — exact match with an offset, match in another way, realignment by the
real ``kalign`` program (and its 90 % identity floor), the release-date, same-entry, unknown
chain, obsolete id, align-ratio, duplicate and length filters, the broken-chain check, the
Sum_probs order, the training shuffle and max_templates — plus a missing kalign as one line.

The same featuriser agreed with the reference's (mlcommons/hpc openfold/data/templates.py,
run in /tmp on a generated PDB of 21 entries and these rules, with shuffling and without):
the same templates in the same order, bitwise-equal positions, masks and residue types.
"""

from __future__ import annotations

import datetime
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import geometry
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold import templates as tpl
from sciperf.workloads.openfold.features import sequence_aatype
from sciperf.workloads.openfold.parsers import parse_hhr

NEEDS_KALIGN = pytest.mark.skipif(
    shutil.which("kalign") is None,
    reason="kalign not installed (containers/install.sh installs Debian's kalign 3.3.5; "
           "apt-get install kalign)")

QUERY = "MKTAYIAKQRQISFVKSHFSRQLEERLGLI"
QUERY_DATE = datetime.date(2021, 2, 1)  # templates must be released by 2020-12-03
CHAINS = {  # pdb_id -> (release date, {author chain: sequence})
    "1aaa": ("2010-01-01", {"A": "GSMKTAYLAKQRQGISFVKSHFSRQAAAA"}),
    "2bbb": ("2011-01-01", {"A": "TAYIAKQRQIWSFVKSHFSRQLEER"}),  # W not in the hit
    "3ccc": ("2012-01-01", {"A": "PGWPGWPGWPGWPGWPG"}),  # unrelated to its hit
    "4ddd": ("2021-01-01", {"A": QUERY}),  # too recent
    "9qry": ("2000-01-01", {"B": QUERY}),  # the query's own entry
    "1new": ("2009-01-01", {"A": "QRQISFVKSHFSRQLEERLGK"}),  # replaces obsolete 1old
    "6fff": ("2013-01-01", {"A": "AKQRQISFVKSHFSRQLEE"}),  # broken chain (see world())
    "7ggg": ("2000-01-01", {"A": "KQRQISFVK"}),
    "8hhh": ("2000-01-01", {"A": QUERY}),
    "9iii": ("2000-01-01", {"A": "AKQRQISFVKSH"}),
}


def _hit(number: int, name: str, q_start: int, q_row: str, t_start: int, t_row: str,
         aligned: int, sum_probs: float) -> str:
    """One hit paragraph in HHsearch's layout (name column 14 wide, 1-based starts)."""
    q_end = q_start + len(q_row) - q_row.count("-") - 1
    t_end = t_start + len(t_row) - t_row.count("-") - 1
    return (f"No {number}\n>{name} mol:protein\n"
            f"Probab=99.00  E-value=1e-10  Score=50.00  Aligned_cols={aligned}  "
            f"Identities=50%  Similarity=0.500  Sum_probs={sum_probs}  Template_Neff=2.000\n\n"
            f"Q ss_pred             {'C' * len(q_row)}\n"
            f"Q {'9qry_A':<14} {q_start:>4} {q_row} {q_end:>4} (30)\n"
            f"Q Consensus      {q_start:>4} {q_row.lower()} {q_end:>4} (30)\n\n"
            f"T {name[:6]:<14} {t_start:>4} {t_row} {t_end:>4} (40)\n\n")


HITS = {
    "1aaa_A": _hit(1, "1aaa_A", 1, "MKTAYIAKQRQ-ISFVKSHFSRQ", 3, "MKTAYLAKQRQGISFVKSHFSRQ",
                   22, 20.0),
    "2bbb_A": _hit(2, "2bbb_A", 3, "TAYIAKQRQISFVKSHFSRQLEER", 1, "TAYIAKQRQISFVKSHFSRQLEER",
                   24, 18.0),
    "3ccc_A": _hit(3, "3ccc_A", 5, "YIAKQRQISFVKSH", 1, "YIAKQRQISFVKSH", 14, 19.0),
    "4ddd_A": _hit(4, "4ddd_A", 1, QUERY[:25], 1, QUERY[:25], 25, 30.0),
    "9qry_B": _hit(5, "9qry_B", 1, QUERY[:25], 1, QUERY[:25], 25, 29.0),
    "5eee_A": _hit(6, "5eee_A", 1, QUERY[:25], 1, QUERY[:25], 25, 28.0),
    "1old_A": _hit(7, "1old_A", 9, "QRQISFVKSHFSRQLEERLG", 1, "QRQISFVKSHFSRQLEERLG", 20,
                   15.0),
    "6fff_A": _hit(8, "6fff_A", 8, "KQRQISFVKSHFSRQLEE", 2, "KQRQISFVKSHFSRQLEE", 18, 19.5),
    "7ggg_A": _hit(9, "7ggg_A", 9, "KQRQISFVK", 1, "KQRQISFVK", 9, 10.0),
    "8hhh_A": _hit(10, "8hhh_A", 1, QUERY, 1, QUERY, 30, 31.0),
    "9iii_A": _hit(11, "9iii_A", 7, "AKQRQISFVKSH", 1, "AKQRQISFVKSH", 3, 12.0),
}
HHR = "Query         9qry_A\nMatch_columns 30\n\n" + "".join(HITS.values()) + "Done!\n"
FEATURISED = ("1aaa_A", "2bbb_A", "1new_A")  # what survives, in Sum_probs order


class World:
    """The PDB of CHAINS as a TemplateDatabase, recording which entries were loaded."""

    def __init__(self, kalign: str = "kalign") -> None:
        self.atoms: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        for k, (pdb_id, (_, chains)) in enumerate(sorted(CHAINS.items())):
            self.atoms[pdb_id] = {}
            for chain, sequence in chains.items():
                n = len(sequence)
                positions, mask = geometry.build_chain(
                    sequence_aatype(sequence), np.full(n, -1.0), np.full(n, -0.8),
                    np.full(n, np.pi), np.zeros((n, 4)))
                mask = mask.astype(bool)
                mask[1, 4:] = False  # a residue without side chain
                positions = (positions + [10.0 * k, 5.0, -3.0]) * mask[..., None]
                self.atoms[pdb_id][chain] = (positions.astype(np.float32), mask)
        positions, _ = self.atoms["6fff"]["A"]
        positions[12:] += 200.0  # consecutive resolved CAs 200+ Å apart
        self.loaded: list[str] = []
        dates = {p: datetime.date.fromisoformat(d) for p, (d, _) in CHAINS.items()}
        chain_ids = frozenset(f"{p}_{c}" for p, (_, cs) in CHAINS.items() for c in cs)
        self.database = tpl.TemplateDatabase(dates, chain_ids, {"1old": "1new"}, self.load,
                                             kalign)

    def load(self, pdb_id: str) -> tpl.TemplateEntry:
        self.loaded.append(pdb_id)
        date, chains = CHAINS[pdb_id]
        return tpl.TemplateEntry(pdb_id, datetime.date.fromisoformat(date), dict(chains),
                                 self.atoms[pdb_id])

    def centred(self, pdb_id: str, chain: str) -> np.ndarray:
        positions, mask = self.atoms[pdb_id][chain]
        return np.where(mask[..., None], positions - positions[mask].mean(0), 0.0)


def _features(world: World, text: str = HHR, max_templates: int = 4,
              shuffle_seed: int | None = None) -> tpl.TemplateFeatures:
    return tpl.template_features(QUERY, parse_hhr(text, "pdb70_hits.hhr"), world.database,
                                 query_pdb_id="9qry", query_release_date=QUERY_DATE,
                                 max_templates=max_templates, shuffle_seed=shuffle_seed)


def _expect(world: World, feats: tpl.TemplateFeatures, index: int, pdb_chain: str,
            mapping: dict[int, int], letters: str, offset: int = 0) -> None:
    """Template ``index`` holds, on each mapped query residue, the template's centred atoms
    at ``mapped + offset`` and the letter ``letters[mapped]``; elsewhere nothing."""
    pdb_id, chain = pdb_chain.split("_")
    centred, (_, mask) = world.centred(pdb_id, chain), world.atoms[pdb_id][chain]
    aatype = np.full(len(QUERY), 21)
    for q, t in mapping.items():
        np.testing.assert_allclose(feats.all_atom_positions[index, q], centred[t + offset],
                                   atol=1e-4)
        np.testing.assert_array_equal(feats.all_atom_mask[index, q], mask[t + offset])
        aatype[q] = sequence_aatype(letters[t])[0]
    np.testing.assert_array_equal(feats.aatype[index], aatype)
    unmapped = [q for q in range(len(QUERY)) if q not in mapping]
    assert not feats.all_atom_mask[index, unmapped].any()
    assert not feats.all_atom_positions[index, unmapped].any()


@NEEDS_KALIGN
def test_evaluation_templates() -> None:
    """Hit order by Sum_probs; the broken chain and the failed realignment are skipped after
    loading; the filtered hits are never loaded; atoms, letters and masks land on the query
    residues the alignment maps (the realigned hit through kalign's alignment)."""
    world = World()
    feats = _features(world)
    assert feats.domain_names == FEATURISED
    assert world.loaded == ["1aaa", "6fff", "3ccc", "2bbb", "1new"]
    np.testing.assert_array_equal(feats.sum_probs, [[20.0], [18.0], [15.0]])
    # 1aaa: the query's gap skips template residue 11; the hit starts at chain offset 2
    first = {q: q for q in range(11)} | {q: q + 1 for q in range(11, 22)}
    _expect(world, feats, 0, "1aaa_A", first, "MKTAYLAKQRQGISFVKSHFSRQ", offset=2)
    # 2bbb: realigned around the W the hit lacks (template residues 10+ shift by one)
    second = {q: (q - 2 if q - 2 < 10 else q - 1) for q in range(2, 26)}
    _expect(world, feats, 1, "2bbb_A", second, CHAINS["2bbb"][1]["A"])
    # obsolete 1old is read as 1new
    third = {q: q - 8 for q in range(8, 28)}
    _expect(world, feats, 2, "1new_A", third, "QRQISFVKSHFSRQLEERLG")


@NEEDS_KALIGN
def test_geometry_is_attached() -> None:
    """Pseudo-β (CB, CA for glycine) and the torsions come from the template's atoms."""
    feats = _features(World())
    cb, ca = rc.ATOM_ORDER["CB"], rc.ATOM_ORDER["CA"]
    gly = feats.aatype == rc.RESTYPE_ORDER["G"]
    expected = np.where(gly[..., None], feats.all_atom_positions[..., ca, :],
                        feats.all_atom_positions[..., cb, :])
    np.testing.assert_array_equal(feats.pseudo_beta, expected)
    assert feats.torsion_angles_sin_cos.shape == (3, 30, 7, 2)
    assert not feats.torsion_angles_mask[feats.aatype == 21].any()
    assert feats.torsion_angles_mask[0, 5, 2] == 1.0  # ψ of a resolved residue


@NEEDS_KALIGN
def test_training_shuffles_the_best_hits() -> None:
    """Training: the prefiltered hits sorted by Sum_probs, the first 20 shuffled with
    random.Random(sample seed), then featurised in that order up to max_templates."""
    survivors = ["1aaa_A", "6fff_A", "3ccc_A", "2bbb_A", "1old_A"]  # by Sum_probs
    featurisable = {"1aaa_A": "1aaa_A", "2bbb_A": "2bbb_A", "1old_A": "1new_A"}
    orders = set()
    for seed in (1, 2, 3, 4):
        shuffled = list(survivors)
        random.Random(seed).shuffle(shuffled)
        expected = tuple(featurisable[h] for h in shuffled if h in featurisable)[:2]
        got = _features(World(), max_templates=2, shuffle_seed=seed).domain_names
        assert got == expected
        orders.add(got)
    assert len(orders) > 1


@NEEDS_KALIGN
def test_max_templates() -> None:
    assert _features(World(), max_templates=2).domain_names == FEATURISED[:2]
    assert _features(World(), max_templates=1).domain_names == FEATURISED[:1]


@pytest.mark.parametrize("name", ["4ddd_A", "9qry_B", "5eee_A", "7ggg_A", "8hhh_A", "9iii_A"])
def test_prefilter(name: str) -> None:
    """Too recent, the query's own entry, not a chain of the processed PDB, shorter than 10
    residues, a copy of the query, aligned over <= 10 % of it: dropped without loading."""
    world = World()
    feats = _features(world, HITS[name])
    assert feats.count == 0 and world.loaded == []
    assert feats.aatype.shape == (0, 30) and feats.torsion_angles_sin_cos.shape == (0, 30, 7, 2)


def test_unusable_structures_are_skipped() -> None:
    """A broken chain (CA jump > 150 Å) yields no template, but its entry was read."""
    world = World()
    assert _features(world, HITS["6fff_A"]).count == 0 and world.loaded == ["6fff"]


def test_query_to_hit_mapping() -> None:
    hit = parse_hhr(HITS["1aaa_A"])[0]
    mapping = tpl.query_to_hit_mapping(QUERY, hit)
    assert mapping == {q: q for q in range(11)} | {q: q + 1 for q in range(11, 22)}
    # the hhr's own start numbers only count relative to the first aligned residue: the
    # piece is located by searching its residues in the query (here it starts at 8, not 10)
    misnumbered = parse_hhr(HITS["1old_A"].replace("9 QRQISFVKSHFSRQLEERLG   28",
                                                   "11 QRQISFVKSHFSRQLEERLG   30"))[0]
    assert misnumbered.indices_query[0] == 10
    assert tpl.query_to_hit_mapping(QUERY, misnumbered) == {q: q - 8 for q in range(8, 28)}


@NEEDS_KALIGN
def test_kalign_aligns() -> None:
    rows = tpl.kalign_align(["TAYIAKQRQISFVKSH", "TAYIAKQRQIWSFVKSH"])
    assert rows == ["TAYIAKQRQI-SFVKSH", "TAYIAKQRQIWSFVKSH"]


def test_missing_kalign_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Realignment without the program: a clear line naming the fix (the reference would
    silently drop the hit)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SciperfError) as err:
        _features(World(), HITS["2bbb_A"])
    message = str(err.value)
    assert message.startswith("kalign not found on PATH") and "apt-get install kalign" in message
    assert "\n" not in message
    with pytest.raises(SciperfError, match="looked for 'no-such-kalign'"):
        tpl.kalign_align(["MKTAYIAK", "MKTAYIAK"], "no-such-kalign")


def test_bad_hit_name_is_one_line() -> None:
    text = HITS["1aaa_A"].replace(">1aaa_A", ">template-1")
    with pytest.raises(SciperfError, match="template hit 1: name 'template-1 mol:protein' does "
                                           "not start with PDBID_chain"):
        _features(World(), text)
