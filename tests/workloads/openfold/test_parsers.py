"""OpenFold a3m and hhr parsing: hand-written files with every rule the reference applies
(comments, blank lines, records over several lines, insertions before a column and after the
last one, the hhr columns from 17 on, several blocks per hit, the lines to ignore), and every
kind of malformed input as one SciperfError line naming the file (and line)."""

from __future__ import annotations

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import parsers

A3M = """\
# a comment before the first record
>query some description
MKV
LA
>hit1/1-5
M-vvKL-a
>hit2

mKVLAG
#another comment
>hit3 trailing insertion
MKVLAxy
"""

# Columns: "Q <name padded to 14> " is 17 characters, then "start residues end (length)".
HHR = """\
Query         1abc_A
Match_columns 12
No_of_seqs    10 out of 20

 No Hit                             Prob E-value P-value  Score    SS Cols Query HMM
  1 2xyz_B mol:protein             99.9 1.1E-20 2.2E-25  120.0   0.0   10    1-10

No 1
>2xyz_B mol:protein length:40  EXAMPLE
Probab=99.90  E-value=1.1e-20  Score=120.00  Aligned_cols=10  Identities=60%  \
Similarity=0.800  Sum_probs=9.5  Template_Neff=3.100

Q ss_pred             CCHHHHHCC
Q 1abc_A            1 MKVLAG-TW    8 (12)
Q Consensus         1 mkvlag-tw    8 (12)
                      ||.|||  |
T Consensus         3 mkilagstw   11 (40)
T 2xyz_B            3 MKILAGSTW   11 (40)
T ss_dssp             CCHHHHHHC
T ss_pred             CCHHHHHHC
Confidence            999999999

Q 1abc_A            9 YP-   10 (12)
Q Consensus         9 yp-   10 (12)
                      |
T Consensus        12 y-r   13 (40)
T 2xyz_B           12 Y-R   13 (40)

No 2
>3pqr_A another template
Probab=45.10  E-value=3.2  Score=12.50  Aligned_cols=5  Identities=20%  Similarity=0.100  \
Sum_probs=3.2  Template_Neff=1.000

Q 1abc_A            3 VLAGT    7 (12)
T 3pqr_A            1 VIAGS    5 (22)

Done!
"""


def test_a3m_rows_and_deletions() -> None:
    """Records join their lines; comments and blank lines vanish; lower-case letters are
    counted into the next kept column and dropped after the last one."""
    alignment = parsers.parse_a3m(A3M, "uniref90_hits.a3m")
    assert alignment.sequences == ("MKVLA", "M-KL-", "KVLAG", "MKVLA")
    assert alignment.descriptions == ("query some description", "hit1/1-5", "hit2",
                                      "hit3 trailing insertion")
    assert alignment.deletion_matrix.dtype == np.int32
    np.testing.assert_array_equal(alignment.deletion_matrix, [
        [0, 0, 0, 0, 0],
        [0, 0, 2, 0, 0],
        [1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0],
    ])
    assert alignment.width == 5 and alignment.source == "uniref90_hits.a3m"


def test_a3m_without_records_is_empty() -> None:
    alignment = parsers.parse_a3m("# only a comment\n\n", "mgnify_hits.a3m")
    assert alignment.sequences == () and alignment.deletion_matrix.shape == (0, 0)


@pytest.mark.parametrize(("text", "message"), [
    ("MKVLA\n>q\nMKVLA\n", "mgnify_hits.a3m: line 1: sequence text before the first '>'"),
    (">q\nMKVLA\n>short\nMKVL\n", "mgnify_hits.a3m: sequence 2 ('short') has 4 aligned"),
    (">q\nMKVLA\n>odd\nMKVLÄ\n", "mgnify_hits.a3m: non-ASCII character 'Ä'"),
])
def test_a3m_malformed_is_one_line(text: str, message: str) -> None:
    with pytest.raises(SciperfError) as err:
        parsers.parse_a3m(text, "mgnify_hits.a3m")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_hhr_hits() -> None:
    """Both hits with their summary numbers, the blocks joined, indices 0-based and -1 at
    gaps; ss_pred/ss_dssp/Consensus/Confidence lines and the table above are ignored."""
    first, second = parsers.parse_hhr(HHR, "pdb70_hits.hhr")
    assert first.index == 1 and first.name == "2xyz_B mol:protein length:40  EXAMPLE"
    assert first.aligned_cols == 10 and first.sum_probs == 9.5
    assert first.query == "MKVLAG-TWYP-" and first.hit_sequence == "MKILAGSTWY-R"
    assert first.indices_query == (0, 1, 2, 3, 4, 5, -1, 6, 7, 8, 9, -1)
    assert first.indices_hit == (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1, 12)
    assert second.index == 2 and second.name.startswith("3pqr_A")
    assert (second.aligned_cols, second.sum_probs) == (5, 3.2)
    assert second.query == "VLAGT" and second.indices_query == (2, 3, 4, 5, 6)
    assert second.indices_hit == (0, 1, 2, 3, 4)


def test_hhr_without_hits() -> None:
    assert parsers.parse_hhr("Query x\nMatch_columns 3\n\nDone!\n", "pdb70_hits.hhr") == []


def _broken(old: str, new: str) -> str:
    assert old in HHR
    return HHR.replace(old, new, 1)


@pytest.mark.parametrize(("text", "message"), [
    (_broken("Probab=99.90  E-value", "Prob=99.90  E-value"),
     "pdb70_hits.hhr: line 10: expected the hit summary"),
    (_broken("1 MKVLAG-TW    8 (12)", "1 MKVLAG-TW    9 (12)"),
     "pdb70_hits.hhr: line 13: query block has 9 columns but its numbers say 10"),
    (_broken("3 MKILAGSTW   11 (40)", "3 MKILAGST   10 (40)"),
     "pdb70_hits.hhr: line 17: template block has 8 columns, its query block 9"),
    (_broken("1 MKVLAG-TW    8 (12)", "  MKVLAG-TW    8 (12)"),
     "pdb70_hits.hhr: line 13: cannot read 'start residues end (length)'"),
    (_broken("Q 1abc_A            3 VLAGT    7 (12)\n", ""),
     "pdb70_hits.hhr: line 32: template alignment line before any query line"),
    (_broken("No 2\n", "No two\n"), "pdb70_hits.hhr: line 28: hit number in 'No two'"),
    ("No 1\n>1abc_A\n", "pdb70_hits.hhr: line 3: hit paragraph ends before"),
])
def test_hhr_malformed_is_one_line(text: str, message: str) -> None:
    with pytest.raises(SciperfError) as err:
        parsers.parse_hhr(text, "pdb70_hits.hhr")
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)
