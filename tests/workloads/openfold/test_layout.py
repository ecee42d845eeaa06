"""The reference's processed OpenFold layout: chains.csv as pandas writes and reads it, dicts
pickles that name no class (malicious ones refused with nothing run), the alignment shards
and super.index of the OpenProteinSet packer, obsolete.dat, and the train/validation
selection (every filter rule at its boundary, the CAMEO mapping, the sampler weight)."""

from __future__ import annotations

import json
import math
import os
import pickle
import zlib
from pathlib import Path

import numpy as np
import pytest

from sciperf.data import pickles
from sciperf.errors import SciperfError
from sciperf.workloads.openfold import layout


def _row(pdb_id: str, chain: str = "A", *, mmcif: tuple[str, ...] = ("A",),
         date: str = "2000-01-01", resolution: float = 2.0, cluster: int = 1,
         sequence: str = "ACDEFGHIKL") -> layout.ChainRow:
    return layout.ChainRow(f"{pdb_id}_{chain}", pdb_id, chain, mmcif, date, resolution, cluster,
                      len(sequence), sequence)


def _entry(pdb_id: str, chains: dict[str, str], seed: int = 0) -> layout.DictsEntry:
    rng = np.random.default_rng(seed)
    atoms = {c: layout.ChainAtoms(
        all_atom_positions=rng.normal(size=(len(s), 37, 3)).astype(np.float32),
        all_atom_mask=rng.random((len(s), 37)) < 0.5) for c, s in chains.items()}
    return layout.DictsEntry(pdb_id=pdb_id, exptl_method="X-RAY DIFFRACTION",
                        release_date="2001-02-03", resolution=1.5,
                        author_chain_ids=list(chains),
                        entity_id_to_mmcif_chain_ids={"1": list(chains)},
                        mmcif_chain_id_to_author_chain_id={c: c for c in chains},
                        sequences=dict(chains), atoms=atoms)


def _with_alignments(root: Path, rows: list[layout.ChainRow]) -> None:
    layout.write_chains(root, rows)
    with layout.AlignmentWriter(root) as writer:
        for row in sorted(rows, key=lambda r: r.pdb_chain_id):
            writer.add(row.pdb_chain_id, [("a3m/uniref90_hits.a3m", b">q\nAC\n")])


# ---------------------------------------------------------------------------------------------
# chains.csv

def test_chains_csv_bytes_and_round_trip(tmp_path: Path) -> None:
    rows = [_row("1abc", mmcif=("A", "C", "D"), resolution=1.85, cluster=7),
            _row("2xyz", "NA", mmcif=("B",), resolution=math.nan, cluster=-1, sequence="GG")]
    layout.write_chains(tmp_path, rows)
    text = (tmp_path / layout.CHAINS_CSV).read_text()
    assert text == ("pdb_chain_id,pdb_id,author_chain_id,mmcif_chain_ids,release_date,"
                    "resolution,pdb_cluster_id,sequence_length,sequence\n"
                    "1abc_A,1abc,A,A;C;D,2000-01-01,1.85,7,10,ACDEFGHIKL\n"
                    "2xyz_NA,2xyz,NA,B,2000-01-01,,-1,2,GG\n")
    back = layout.read_chains(tmp_path)
    assert back[0] == rows[0]
    assert back[1].author_chain_id == "NA" and math.isnan(back[1].resolution)
    assert back[1].pdb_cluster_id == -1 and back[1].mmcif_chain_ids == ("B",)


def test_chains_csv_reads_like_the_reference_pandas_reader(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    rows = [_row("1abc", resolution=3.0), _row("2xyz", "NA", resolution=math.nan, cluster=-1)]
    layout.write_chains(tmp_path, rows)
    # REF load_mmcif_chains_df: only empty fields are NaN, "NA" stays a chain name
    df = pd.read_csv(tmp_path / layout.CHAINS_CSV, na_values="", keep_default_na=False)
    assert list(df.columns) == list(layout.CHAIN_COLUMNS)
    assert list(df["author_chain_id"]) == ["A", "NA"]
    assert df["resolution"][0] == 3.0 and math.isnan(df["resolution"][1])
    assert list(df["pdb_cluster_id"]) == [1, -1]
    df.to_csv(tmp_path / "again.csv", index=False)  # pandas writes what we wrote
    assert (tmp_path / "again.csv").read_bytes() == (tmp_path / layout.CHAINS_CSV).read_bytes()


_HEADER = ",".join(layout.CHAIN_COLUMNS) + "\n"


@pytest.mark.parametrize(("text", "words"), [
    ("pdb_chain_id,pdb_id\n1abc_A,1abc\n", "columns"),
    (_HEADER + "1abc_A,1abc,A,A,2000-01-01,2.0,1,10\n", "line 2 has 8"),
    (_HEADER + "1abc_A,1abc,A,A,2000-01-01,high,1,3,ACD\n", "not a number"),
    (_HEADER + "1abc_A,1abc,A,A,2000-01-01,2.0,1,4,ACD\n", "sequence_length"),
])
def test_a_bad_chain_table_is_one_line_naming_it(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / layout.CHAINS_CSV
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(layout.LayoutError, match=words) as err:
        layout.read_chains(tmp_path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_chain_rows_join_mmcif_chains_and_pick_the_cluster() -> None:
    entry = _entry("1abc", {"A": "ACD", "B": "EF"})
    entry["mmcif_chain_id_to_author_chain_id"] = {"A": "A", "C": "A", "B": "B", "D": "A"}
    entry["entity_id_to_mmcif_chain_ids"] = {"1": ["A"], "2": ["B"], "3": ["C", "D"]}
    rows = layout.chain_rows(entry, {"1ABC_1": 11, "1ABC_3": 12, "1ABC_3X": 99})
    assert [r.mmcif_chain_ids for r in rows] == [("A", "C", "D"), ("B",)]
    assert rows[0].pdb_cluster_id in (11, 12) and rows[1].pdb_cluster_id == layout.NO_CLUSTER
    assert (rows[1].pdb_chain_id, rows[1].sequence_length, rows[1].resolution) == ("1abc_B", 2, 1.5)


def test_entity_clusters_are_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "clusters-by-entity-40.txt"
    path.write_text("1abc_1 2XYZ_2\n3def_1\n")
    assert layout.read_entity_clusters(path) == {"1ABC_1": 0, "2XYZ_2": 0, "3DEF_1": 1}


# ---------------------------------------------------------------------------------------------
# dicts

def test_dicts_round_trip_as_builtins_only(tmp_path: Path) -> None:
    entries = [_entry("1abc", {"A": "ACDE", "B": "GG"}, 1), _entry("2abd", {"A": "MK"}, 2),
               _entry("3xyz", {"C": "W"}, 3)]
    paths = layout.write_dicts(tmp_path, entries)
    assert [p.name for p in paths] == ["ab", "xy"]
    raw = pickle.loads((tmp_path / layout.DICTS_DIR / "ab").read_bytes())  # plain pickle reads it
    assert list(raw) == ["1abc", "2abd"]
    blob, shape = raw["1abc"]["atoms"]["A"]["all_atom_positions"]
    assert shape == (4, 37, 3) and isinstance(blob, bytes)
    stored = np.frombuffer(zlib.decompress(blob), np.float32).reshape(shape)
    np.testing.assert_array_equal(stored, entries[0]["atoms"]["A"]["all_atom_positions"])
    chain = layout.load_chain(tmp_path, "1abc_A")
    assert (chain.sequence, chain.resolution, chain.release_date) == ("ACDE", 1.5, "2001-02-03")
    assert chain.all_atom_positions.dtype == np.float32 and chain.all_atom_mask.dtype == bool
    np.testing.assert_array_equal(chain.all_atom_mask, entries[0]["atoms"]["A"]["all_atom_mask"])
    entry = layout.load_entry(tmp_path, "3xyz")
    assert entry["sequences"] == {"C": "W"}
    assert entry["atoms"]["C"]["all_atom_mask"].shape == (1, 37)
    with pytest.raises(layout.LayoutError, match="no chain 'Z'"):
        layout.load_chain(tmp_path, "1abc_Z")
    with pytest.raises(layout.LayoutError, match="no entry '1abz'"):
        layout.load_chain(tmp_path, "1abz_A")


class Harmless:
    """A class the dicts format must not contain (its instance is refused)."""


class Evil:
    """Pickles as a call of os.system (what a malicious dicts file would hold)."""

    def __reduce__(self) -> tuple:
        return (os.system, ("touch MARKER",))


@pytest.mark.parametrize("payload", [
    b"cos\nsystem\n(S'touch MARKER'\ntR.",  # GLOBAL + REDUCE (protocol 0)
    pickle.dumps({"1abc": Evil()}, protocol=4),  # STACK_GLOBAL + REDUCE
    pickle.dumps({"1abc": Harmless()}, protocol=4),  # a class instance
], ids=["global-reduce", "stack-global-reduce", "instance"])
def test_a_pickle_that_names_anything_is_refused_and_nothing_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload: bytes) -> None:
    monkeypatch.chdir(tmp_path)  # "touch MARKER" would create tmp_path/MARKER
    path = tmp_path / layout.DICTS_DIR / "ab"
    path.parent.mkdir(parents=True)
    path.write_bytes(payload)
    with pytest.raises(layout.LayoutError, match="refused to unpickle") as err:
        layout.load_chain(tmp_path, "1abc_A")
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "MARKER").exists()


def test_builtins_writer_refuses_numpy_scalars() -> None:
    with pytest.raises(TypeError, match=r"value\['resolution'\] is a numpy.float64"):
        pickles.dumps_builtins({"resolution": np.float64(1.5)})
    assert pickles.loads_builtins(pickles.dumps_builtins({"a": (b"x", [1, 2.5, None])}),
                                  "x") == {"a": (b"x", [1, 2.5, None])}


def test_corrupt_atoms_name_the_file(tmp_path: Path) -> None:
    layout.write_dicts(tmp_path, [_entry("1abc", {"A": "ACD"})])
    path = tmp_path / layout.DICTS_DIR / "ab"
    data = pickle.loads(path.read_bytes())
    blob, shape = data["1abc"]["atoms"]["A"]["all_atom_mask"]
    data["1abc"]["atoms"]["A"]["all_atom_mask"] = (blob[:-4] + b"xxxx", shape)
    path.write_bytes(pickle.dumps(data, protocol=4))
    with pytest.raises(layout.LayoutError, match="corrupt zlib") as err:
        layout.load_chain(tmp_path, "1abc_A")
    assert str(path) in str(err.value)
    data["1abc"]["atoms"]["A"]["all_atom_mask"] = (zlib.compress(b"\x01" * 10), shape)
    path.write_bytes(pickle.dumps(data, protocol=4))
    with pytest.raises(layout.LayoutError, match="holds 10 bytes"):
        layout.load_chain(tmp_path, "1abc_A")


# ---------------------------------------------------------------------------------------------
# alignments

def test_shard_rule_matches_the_reference_hash() -> None:
    # REF helpers.hash_string_into_number(name) % 10, computed with the reference
    assert [layout.shard_of(n) for n in ("101m_A", "1abc_B", "7bgg_A", "1000_A")] == [3, 6, 6, 5]


def test_alignment_shards_and_index(tmp_path: Path) -> None:
    files = {"101m_A": [("hhr/pdb70_hits.hhr", b"No hits\n"),
                        ("a3m/uniref90_hits.a3m", b">q\nMV\n"),
                        ("a3m/bfd_uniclust_hits.a3m", "\u00e9".encode())],
             "1abc_B": [("a3m/mgnify_hits.a3m", b">q\nAC\n")],
             "7bgg_A": [("a3m/uniref90_hits.a3m", b">q\nGG\n")]}
    with layout.AlignmentWriter(tmp_path) as writer:
        writer.add("101m_A", files["101m_A"], ["101m_A", "102m_A"])
        writer.add("1abc_B", files["1abc_B"])
        writer.add("7bgg_A", files["7bgg_A"])
    folder = tmp_path / layout.ALIGNMENTS_DIR
    assert sorted(p.name for p in folder.iterdir()) == [f"{n}.db" for n in range(10)] + \
        ["super.index"]
    index = json.loads((folder / "super.index").read_text())
    assert list(index) == ["101m_A", "102m_A", "1abc_B", "7bgg_A"]  # shard 3, then 6 (added order)
    assert index["101m_A"] == index["102m_A"] == {"db": "3.db", "files": [
        ["bfd_uniclust_hits.a3m", 0, 2], ["uniref90_hits.a3m", 2, 6], ["pdb70_hits.hhr", 8, 8]]}
    assert index["7bgg_A"] == {"db": "6.db", "files": [["uniref90_hits.a3m", 6, 6]]}
    assert (folder / "6.db").read_bytes() == b">q\nAC\n>q\nGG\n"
    reader = layout.AlignmentIndex(tmp_path)
    assert reader.read("102m_A") == {"bfd_uniclust_hits.a3m": "\u00e9",
                                     "uniref90_hits.a3m": ">q\nMV\n", "pdb70_hits.hhr": "No hits\n"}
    assert layout.alignments(tmp_path, "7bgg_A") == {"uniref90_hits.a3m": ">q\nGG\n"}
    assert "1abc_B" in reader and "1abc_A" not in reader and len(reader) == 4


def test_broken_alignments_name_the_file(tmp_path: Path) -> None:
    with layout.AlignmentWriter(tmp_path) as writer:
        writer.add("101m_A", [("a3m/uniref90_hits.a3m", b">q\nMVLSEGEWQLV\n")])
        writer.add("7bgg_A", [("a3m/uniref90_hits.a3m", b">q\n\xff\xfe\n")])
    folder = tmp_path / layout.ALIGNMENTS_DIR
    reader = layout.AlignmentIndex(tmp_path)
    with pytest.raises(layout.LayoutError, match="no alignments for chain 1abc_A") as err:
        reader.read("1abc_A")
    assert str(folder / "super.index") in str(err.value)
    with pytest.raises(layout.LayoutError, match="not UTF-8") as err:
        reader.read("7bgg_A")
    assert str(folder / "6.db") in str(err.value)
    (folder / "3.db").write_bytes(b">q\nMV")
    with pytest.raises(layout.LayoutError, match="truncated") as err:
        reader.read("101m_A")
    assert str(folder / "3.db") in str(err.value)
    (folder / "3.db").unlink()
    with pytest.raises(layout.LayoutError, match="cannot read alignments of 101m_A") as err:
        reader.read("101m_A")
    assert str(folder / "3.db") in str(err.value)
    (folder / "super.index").write_text('{"101m_A": {"db": "../3.db", "files": []}}')
    with pytest.raises(layout.LayoutError, match="names shard"):
        layout.AlignmentIndex(tmp_path).read("101m_A")
    (folder / "super.index").write_text("{not json")
    with pytest.raises(layout.LayoutError, match="not valid JSON"):
        layout.AlignmentIndex(tmp_path)


def test_pack_open_protein_set_reads_the_raw_tree(tmp_path: Path) -> None:
    raw = tmp_path / "pdb"
    for chain, text in (("1abc_A", ">q\nAC\n"), ("2xyz_B", ">q\nGG\n")):
        (raw / chain / "a3m").mkdir(parents=True)
        (raw / chain / "a3m" / "mgnify_hits.a3m").write_text(text)
    (tmp_path / "dup.txt").write_text("1abc_A 1abc_C\n2xyz_B\n")
    layout.pack_open_protein_set(raw, tmp_path / "dup.txt", tmp_path / "out")
    reader = layout.AlignmentIndex(tmp_path / "out")
    assert reader.read("1abc_C") == {"mgnify_hits.a3m": ">q\nAC\n"} and len(reader) == 3
    (tmp_path / "dup.txt").write_text("1abc_A\n")
    with pytest.raises(layout.LayoutError, match="no line for chain 2xyz_B"):
        layout.pack_open_protein_set(raw, tmp_path / "dup.txt", tmp_path / "out2")


# ---------------------------------------------------------------------------------------------
# obsolete.dat

def test_obsolete_round_trip_and_reference_columns(tmp_path: Path) -> None:
    path = tmp_path / "obsolete.dat"
    layout.write_obsolete(path, [layout.ObsoleteEntry("31-JUL-94", "116l", "216l")])
    assert path.read_text().splitlines()[1] == "OBSLTE    31-JUL-94 116L     216L"
    with path.open("a") as f:
        f.write("OBSLTE    26-SEP-06 2H33     2JM5 2OWI\nOBSLTE    01-JAN-99 1ABC\n")
    assert layout.read_obsolete(path) == {"116l": "216l", "2h33": "2jm5"}  # no successor: skipped


# ---------------------------------------------------------------------------------------------
# split selection

def test_training_filter_rules_at_their_boundaries(tmp_path: Path) -> None:
    rows = [_row("1aaa", date="2021-09-16"), _row("1aab", date="2021-09-17"),
            _row("1aac", resolution=8.99), _row("1aad", resolution=9.0),
            _row("1aae", resolution=math.nan), _row("1aaf", sequence="AAAAAAAACD"),
            _row("1aag", sequence="AAAAAAAAAC"), _row("1aah", cluster=-1),
            _row("1aai", date="1899-12-31"), _row("1aaj", sequence="")]
    _with_alignments(tmp_path, rows)
    chosen = [r.pdb_id for r in layout.split_chains(tmp_path, "train")]
    assert chosen == ["1aaa", "1aac", "1aae", "1aaf"]
    rules = layout.SplitRules(max_release_date="2021-09-17", max_aa_frequency=0.9)
    assert [r.pdb_id for r in layout.split_chains(tmp_path, "train", rules)] == \
        ["1aaa", "1aab", "1aac", "1aae", "1aaf", "1aag"]
    assert [r.pdb_id for r in layout.split_chains(tmp_path, "train", only={"1aac_A"})] == ["1aac"]


def test_training_chains_need_alignments_unless_filtered(tmp_path: Path) -> None:
    rows = [_row("1aaa"), _row("1aab")]
    _with_alignments(tmp_path, rows[:1])
    layout.write_chains(tmp_path, rows)
    with pytest.raises(layout.LayoutError, match="1 train chains have no alignments"):
        layout.split_chains(tmp_path, "train")
    kept = layout.split_chains(tmp_path, "train", filter_by_alignments=True)
    assert [r.pdb_id for r in kept] == ["1aaa"]


def test_validation_maps_cameo_targets_to_author_chains(tmp_path: Path) -> None:
    rows = [_row("7bgg", "X", mmcif=("A", "C")),  # "7bgg [A]" names mmCIF chain A
            _row("7s13", "H", mmcif=("C", "L")),  # "7s13 [C]" and "[L]": one author chain
            _row("7aj6", "L", mmcif=("A",)),  # "7aj6 [L]" names the author chain
            _row("7rih", "B", mmcif=("B",), sequence="A" * 3 + "C" * 698),  # too long
            _row("7cz9", "A", mmcif=("A",)),  # "7cz9 [B]": no such chain
            _row("1xyz", "A")]  # not a CAMEO target
    _with_alignments(tmp_path, rows)
    val = layout.split_chains(tmp_path, "validation")
    assert [r.pdb_chain_id for r in val] == ["7bgg_X", "7s13_H", "7aj6_L"]
    narrow = layout.SplitRules(cameo_min_date="2021-10-02")  # 7bgg was submitted 2021-09-18
    assert [r.pdb_chain_id for r in layout.split_chains(tmp_path, "validation", narrow)] == \
        ["7s13_H", "7aj6_L"]
    assert len(layout.cameo_targets()) == 183 and len(layout.CAMEO_TARGETS) == 13
    (tmp_path / layout.VALIDATION_TARGETS).write_text("# ours\n1xyz [A]\n7bgg C\n")
    assert [r.pdb_chain_id for r in layout.split_chains(tmp_path, "validation")] == \
        ["7bgg_X", "1xyz_A"]
    rows.append(_row("7bgg", "Y", mmcif=("C",)))
    layout.write_chains(tmp_path, rows)
    with pytest.raises(layout.LayoutError, match="7bgg_C belongs to two author chains"):
        layout.split_chains(tmp_path, "validation")
    with pytest.raises(SciperfError, match="split 'test'"):
        layout.split_chains(tmp_path, "test")


def test_sampler_weight() -> None:
    assert layout.sampler_weight(100, 1) == 0.5  # short chains count as 256
    assert layout.sampler_weight(384, 4) == pytest.approx(0.75 / 2)
    assert layout.sampler_weight(2000, 9) == pytest.approx(1 / 3)  # long chains count as 512
    assert layout.sampler_weight(300, 0) == pytest.approx(300 / 512)  # no cluster: factor 1
    rows = [_row("1aaa", cluster=5), _row("1aab", cluster=5), _row("1aac", cluster=6),
            _row("1aad", cluster=5), _row("1aae", cluster=5)]
    np.testing.assert_allclose(layout.training_weights(rows), [0.25, 0.25, 0.5, 0.25, 0.25])
