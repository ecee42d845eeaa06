"""Processed OpenFold files with values of the wrong type or form (a release date that is
not a date, a dicts entry whose ``atoms`` is a string): one LayoutError line naming the file
and the row or entry, never a ValueError/AttributeError from the reader that uses them."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciperf.workloads.openfold import layout
from sciperf.workloads.openfold.layout import dicts


def _row(pdb_id: str, date: str) -> layout.ChainRow:
    return layout.ChainRow(f"{pdb_id}_A", pdb_id, "A", ("A",), date, 2.0, 1, 3, "ACD")


def _assert_one_line(err: pytest.ExceptionInfo, *words: str) -> None:
    text = str(err.value)
    assert "\n" not in text, text
    for word in words:
        assert word in text, (word, text)


@pytest.mark.parametrize("date", ["notadate", "2021-02-30", "20210105", ""])
def test_a_bad_release_date_names_the_csv_line_chain_and_value(tmp_path: Path,
                                                               date: str) -> None:
    """Refused where chains.csv is read, before the template database parses it (and
    before the split rules compare it as a string)."""
    path = layout.write_chains(tmp_path, [_row("1abc", "2000-01-01"), _row("2xyz", date)])
    with pytest.raises(layout.LayoutError) as err:
        layout.template_database(tmp_path)
    _assert_one_line(err, str(path), "line 3", "chain 2xyz_A", f"release_date {date!r}")


def _entry(pdb_id: str = "1abc") -> layout.DictsEntry:
    atoms = {"A": layout.ChainAtoms(all_atom_positions=np.zeros((3, 37, 3), np.float32),
                                    all_atom_mask=np.ones((3, 37), bool))}
    return layout.DictsEntry(pdb_id=pdb_id, exptl_method="X-RAY DIFFRACTION",
                             release_date="2001-02-03", resolution=1.5, author_chain_ids=["A"],
                             entity_id_to_mmcif_chain_ids={"1": ["A"]},
                             mmcif_chain_id_to_author_chain_id={"A": "A"},
                             sequences={"A": "ACD"}, atoms=atoms)


@pytest.mark.parametrize(("key", "value"), [
    ("atoms", "oops"),
    ("atoms", {"A": "oops"}),
    ("sequences", {"A": 3}),
    ("sequences", ["ACD"]),
    ("author_chain_ids", "A"),
    ("mmcif_chain_id_to_author_chain_id", None),
    ("entity_id_to_mmcif_chain_ids", {"1": "A"}),
    ("resolution", "1.5"),
    ("release_date", "01/02/2001"),
    ("pdb_id", 7),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else v)
def test_a_dicts_value_of_the_wrong_type_names_the_file_and_entry(
        tmp_path: Path, key: str, value: Any) -> None:
    (path,) = layout.write_dicts(tmp_path, [_entry("1abc"), _entry("2abd")])
    entries = pickle.loads(path.read_bytes())
    entries["2abd"][key] = value
    path.write_bytes(pickle.dumps(entries, protocol=4))
    with pytest.raises(layout.LayoutError) as err:
        layout.load_chain(tmp_path, "2abd_A")
    _assert_one_line(err, str(path), "entry '2abd'", f"{key} is not")
    with pytest.raises(layout.LayoutError, match="entry '2abd'"):
        layout.load_entry(tmp_path, "2abd")  # the template search's way in
    assert layout.load_chain(tmp_path, "1abc_A").sequence == "ACD"  # its neighbour is fine


def test_every_entry_key_has_a_type_check() -> None:
    assert set(dicts._ENTRY_TYPES) == dicts._ENTRY_KEYS
