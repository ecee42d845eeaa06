"""Reading a hostile hhr takes time linear in its lines' length (issue 37).

The reference's patterns for a hit's summary line (eight greedy ``(.*)`` groups) and an
alignment line (blank and digit runs that may give characters to one another) backtrack: a
200 KB line took minutes to hours to refuse. The parsers now read them in one pass and
still agree with the reference's patterns on every line (checked against them here, on
lines built from the pieces that make them ambiguous). The template search's ``X``
wildcard match (the reference's regex, retried at every offset) is one pass too."""

from __future__ import annotations

import datetime
import random
import re

import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import parsers, templates

LONG = 200_000
# the reference's patterns (REF openfold/data/parsers.py): the oracle of what a line means
REF_SUMMARY = re.compile(
    r"Probab=(.*)[\t ]*E-value=(.*)[\t ]*Score=(.*)[\t ]*Aligned_cols=(.*)[\t ]*"
    r"Identities=(.*)%[\t ]*Similarity=(.*)[\t ]*Sum_probs=(.*)[\t ]*Template_Neff=(.*)")
REF_ALIGNED = re.compile(r"[\t ]*([0-9]*) ([A-Z-]*)[\t ]*([0-9]*) \([0-9]*\)")

SUMMARY = ("Probab=99.90  E-value=1.1e-20  Score=120.00  Aligned_cols=3  Identities=60%  "
           "Similarity=0.800  Sum_probs=2.5  Template_Neff=3.100")
QUERY = "Q 1abc_A            1 MKV    3 (12)"
TEMPLATE = "T 2xyz_B            3 MKI    5 (40)"


def _hhr(summary: str = SUMMARY, query: str = QUERY, template: str = TEMPLATE) -> str:
    """One hit: the summary is line 4, the query line 6."""
    return f"No 1\n>2xyz_B mol:protein\n{summary}\n\n{query}\n{template}\n"


def _refused(text: str) -> str:
    with pytest.raises(SciperfError) as err:
        parsers.parse_hhr(text, "pdb70_hits.hhr")
    line = str(err.value)
    assert "\n" not in line and line.startswith("pdb70_hits.hhr: line "), line
    return line


@pytest.mark.timeout(10)
@pytest.mark.parametrize("summary", [
    "Probab=" + " " * LONG,
    "Probab=" + "E-value=Score=" * (LONG // 14),
    "Probab=" + "E-value=Score=Aligned_cols=Identities=% Similarity=" * (LONG // 52),
    "Probab=" + " Similarity=" * (LONG // 12),
], ids=["blanks", "two-names", "six-names", "similarity"])
def test_a_long_line_that_is_no_summary_is_refused_at_once(summary: str) -> None:
    assert "line 3: expected the hit summary" in _refused(_hhr(summary=summary))


@pytest.mark.timeout(10)
@pytest.mark.parametrize("query", [
    "Q 1abc_A         " + " " * LONG,
    "Q 1abc_A         " + " " * LONG + "1",
    "Q 1abc_A            1 " + "1 " * (LONG // 2),
    "Q 1abc_A            1 MKV" + " " * LONG + "(12",
], ids=["blanks", "blanks-digit", "numbers", "no-close"])
def test_a_long_alignment_line_that_does_not_parse_is_refused_at_once(query: str) -> None:
    assert "line 5: cannot read 'start residues end (length)'" in _refused(_hhr(query=query))


@pytest.mark.timeout(10)
def test_long_lines_that_parse_are_read_in_one_pass() -> None:
    """Blanks anywhere the format allows them, and a block 100,000 columns wide."""
    summary = SUMMARY.replace("  ", " " * (LONG // 8))
    width = LONG // 2
    query = f"Q 1abc_A            1 {'A' * width} {width} ({width})"
    template = f"T 2xyz_B            1 {'C' * width} {width} ({width})"
    (hit,) = parsers.parse_hhr(_hhr(summary, query, template), "pdb70_hits.hhr")
    assert (hit.aligned_cols, hit.sum_probs) == (3, 2.5)
    assert hit.query == "A" * width and hit.indices_hit[-1] == width - 1


def test_summary_values_are_where_the_reference_pattern_puts_them() -> None:
    """Names repeated, out of order, ``%`` and blanks anywhere: the same eight values (or
    none) as the reference's greedy groups."""
    rng = random.Random(37)
    names = ["Probab=", "E-value=", "Score=", "Aligned_cols=", "Identities=", "%",
             "Similarity=", "Sum_probs=", "Template_Neff="]
    extra = [*names, " ", "\t", "  ", "1", "2.5", "x"]
    matched = 0
    for _ in range(20_000):
        parts = [p for name in names for p in (name, rng.choice(["", "1", " 2 "]))]
        for _ in range(rng.randint(0, 4)):
            at = rng.randrange(len(parts) + 1)
            if rng.random() < 0.3 and at < len(parts):
                del parts[at]
            else:
                parts.insert(at, rng.choice(extra))
        line = "".join(parts)
        reference = REF_SUMMARY.match(line)
        assert parsers._summary_values(line) == (list(reference.groups()) if reference
                                                 else None), line
        matched += reference is not None
    assert matched > 2_000  # both outcomes were exercised


def test_alignment_fields_are_where_the_reference_pattern_puts_them() -> None:
    """Blank, digit, residue and bracket runs added, replaced or removed: the same start,
    residues and end as the reference's pattern wherever that finds a start number (the
    only lines the parser accepts), and no match where it does not."""
    rng = random.Random(37)
    pieces = [" ", "\t", "  ", "1", "23", "A", "-", "(", ")", " (", "x", ""]
    matched = 0
    for _ in range(20_000):
        parts = [rng.choice(["", " ", "\t "]), rng.choice(["", "12"]), " ",
                 rng.choice(["", "AB-C"]), rng.choice(["", " ", " \t "]),
                 rng.choice(["", "34"]), " (", rng.choice(["", "56"]), ")",
                 rng.choice(["", " x"])]
        for _ in range(rng.randint(0, 2)):
            at = rng.randrange(len(parts))
            parts[at] = rng.choice(pieces) if rng.random() < 0.5 else parts[at] + \
                rng.choice(pieces)
        text = "".join(parts)
        reference = REF_ALIGNED.match(text)
        want = (reference.group(1), reference.group(2), reference.group(3) or "") \
            if reference and reference.group(1) else None
        ours = parsers._ALIGNED.match("Q 1abc_A" + " " * 9 + text, 17)
        got = (ours.group(1), ours.group(2), ours.group(3) or "") if ours else None
        assert got == want, repr(text)
        matched += want is not None
    assert matched > 2_000


def _entry(sequences: dict[str, str]) -> templates.TemplateEntry:
    return templates.TemplateEntry("1abc", datetime.date(2000, 1, 1), sequences, {})


@pytest.mark.timeout(10)
def test_a_long_hit_is_searched_for_with_wildcards_in_one_pass() -> None:
    """A hit's residues that occur nowhere, against a long chain of nearly the same
    letters: every offset matched all but the last letter."""
    length = LONG // 4
    entry = _entry({"A": "A" * (2 * length), "B": "A" * (length - 2) + "XC"})
    assert templates._find_in_entry(entry, "A", "A" * (length - 1) + "C") == ("B", 0)
    assert templates._find_in_entry(_entry({"A": "A" * (2 * length)}), "A",
                                    "A" * (length - 1) + "C") is None


def test_the_wildcard_search_finds_what_the_reference_regex_finds() -> None:
    rng = random.Random(37)
    for _ in range(20_000):
        residues = "".join(rng.choice("ACX") for _ in range(rng.randint(1, 5)))
        sequences = {name: "".join(rng.choice("ACGX") for _ in range(rng.randint(0, 10)))
                     for name in ("A", "B")}
        pattern = re.compile("".join("." if letter == "X" else f"(?:{letter}|X)"
                                     for letter in residues))
        want = next(((name, m.start()) for name, sequence in sequences.items()
                     if (m := pattern.search(sequence))), None)
        masks = templates._wildcard_masks(residues)
        got = next(((name, at) for name, sequence in sequences.items()
                    if (at := templates._wildcard_find(sequence, len(residues), masks)) >= 0),
                   None)
        assert got == want, (residues, sequences)
