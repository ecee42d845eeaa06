"""The two alignment formats OpenProteinSet ships per chain: a3m (MSAs) and hhr (template hits).

What the reference reads from them (REF ``openfold/data/parsers.py``; spec §7), kept
exactly, because the MSA rows, deletion counts and hit indices decide every feature:

* **a3m** is FASTA: a ``>`` line opens a record, ``#`` lines and blank lines are skipped,
  every other line (stripped) is appended to the open record. Lower-case letters are
  insertions relative to the query: they are removed from the aligned row and counted into
  the deletion value of the next kept column (insertions after the last kept column are
  dropped). Each aligned row must be as long as the first (the query).
* **hhr** (HHsearch/HHblits result): the hit paragraphs begin at lines starting ``No ``
  (the hit number is the line's last token); the next line is ``>`` and the hit's name; the
  next one the ``Probab=… Sum_probs=… Template_Neff=…`` summary. The alignment lines that
  follow are ``Q <name>`` / ``T <name>`` lines (not ``ss_dssp``, ``ss_pred`` or
  ``Consensus``) whose text from column 17 on reads ``start residues end (length)``; the
  residue indices of each side count up from ``start`` (1-based in the file, 0-based here)
  and are -1 at gaps.

Malformed input (a row of another width, a character outside ASCII, a summary or alignment
line that does not parse, a block whose width disagrees with its start/end numbers) raises
:class:`~sciperf.errors.SciperfError` with one line naming the file and the line; the
reference raises bare ``IndexError``/``RuntimeError``/``AssertionError`` there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sciperf.errors import SciperfError

_LOWER_A, _LOWER_Z = ord("a"), ord("z")
# The summary line of a hit: eight values after these names, in this order (the reference's
# pattern, ``Probab=(.*)[\t ]*E-value=(.*)[\t ]*…Identities=(.*)%[\t ]*Similarity=(.*)…``).
_SUMMARY_NAMES = ("Probab=", "E-value=", "Score=", "Aligned_cols=", "Identities=",
                  "Similarity=", "Sum_probs=", "Template_Neff=")
_BLANKS = "\t "
# Column 17 onwards of an alignment line: start, residues, end, (total length) — the
# reference's ``[\t ]*([0-9]*) ([A-Z-]*)[\t ]*([0-9]*) \([0-9]*\)`` with every run
# possessive, so no character is tried twice by one run: the runs' character classes are
# disjoint from what follows each, and the one place a run gives a character back (blanks
# before ``(`` where the end number is absent) is the second branch. A start number is
# required (the reference's empty one fails in the caller), so matching is linear in the
# line's length.
_ALIGNED = re.compile(r"[\t ]*+([0-9]++) ([A-Z-]*+)(?:[\t ]*+([0-9]++) |[\t ]++(?<= ))"
                      r"\([0-9]*+\)")
_ALIGNMENT_TEXT_COLUMN = 17
_NOT_RESIDUE_LINES = ("ss_dssp", "ss_pred", "Consensus")


@dataclass(frozen=True)
class Alignment:
    """One parsed a3m file: aligned rows (insertions removed) and their deletion counts.

    ``sequences[0]`` is the query. ``deletion_matrix[i, j]`` is the number of residues
    row ``i`` inserts before its column ``j`` (int32, shape ``[len(sequences), width]``).
    """

    sequences: tuple[str, ...]
    deletion_matrix: np.ndarray
    descriptions: tuple[str, ...]
    source: str

    @property
    def width(self) -> int:
        """Columns of the alignment (the query's length); 0 for an empty file."""
        return int(self.deletion_matrix.shape[1])


@dataclass(frozen=True)
class TemplateHit:
    """One hit paragraph of an hhr file (the fields the template pipeline reads)."""

    index: int
    name: str
    aligned_cols: int
    sum_probs: float
    query: str
    hit_sequence: str
    indices_query: tuple[int, ...]
    indices_hit: tuple[int, ...]


def parse_fasta(text: str, source: str = "<fasta>") -> tuple[list[str], list[str]]:
    """(sequences, descriptions) of FASTA text: ``#`` and blank lines skipped, lines joined."""
    sequences: list[list[str]] = []
    descriptions: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(">"):
            descriptions.append(line[1:])
            sequences.append([])
        elif not sequences:
            raise SciperfError(f"{source}: line {number}: sequence text before the first "
                               "'>' header (not FASTA/a3m)")
        else:
            sequences[-1].append(line)
    return ["".join(parts) for parts in sequences], descriptions


def parse_a3m(text: str, source: str = "<a3m>") -> Alignment:
    """An a3m file's aligned rows and deletion matrix (vectorised over the whole file)."""
    rows, descriptions = parse_fasta(text, source)
    if not rows:
        return Alignment((), np.zeros((0, 0), np.int32), (), source)
    try:
        buffer = np.frombuffer("".join(rows).encode("ascii"), np.uint8)
    except UnicodeEncodeError as err:
        raise SciperfError(f"{source}: non-ASCII character {err.object[err.start]!r} in an "
                           "alignment row") from None
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    kept = np.flatnonzero((buffer < _LOWER_A) | (buffer > _LOWER_Z))
    row_of_kept = np.searchsorted(starts, kept, side="right") - 1
    widths = np.bincount(row_of_kept, minlength=len(rows))
    bad = np.flatnonzero(widths != widths[0])
    if bad.size:
        row = int(bad[0])
        raise SciperfError(f"{source}: sequence {row + 1} ({descriptions[row][:40]!r}) has "
                           f"{widths[row]} aligned columns, the query has {widths[0]}")
    width = int(widths[0])
    # Between two kept columns of a row there are only insertions, so the deletion count of
    # a kept column is its distance to the previous kept column of the same row (or to the
    # row's start) minus one.
    previous = np.empty_like(kept)
    previous[1:] = kept[:-1] + 1
    first_of_row = np.ones(kept.size, bool)
    first_of_row[1:] = row_of_kept[1:] != row_of_kept[:-1]
    previous[first_of_row] = starts[row_of_kept[first_of_row]]
    deletions = (kept - previous).astype(np.int32).reshape(len(rows), width)
    aligned = buffer[kept].tobytes().decode("ascii")
    sequences = tuple(aligned[i * width:(i + 1) * width] for i in range(len(rows)))
    return Alignment(sequences, deletions, tuple(descriptions), source)


def parse_hhr(text: str, source: str = "<hhr>") -> list[TemplateHit]:
    """The hits of an hhr file, in file order (an empty list when it has none)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("No ")]
    ends = starts[1:] + [len(lines)] if starts else []
    return [_parse_hit(lines, begin, end, source) for begin, end in zip(starts, ends, strict=True)]


def _parse_hit(lines: list[str], begin: int, end: int, source: str) -> TemplateHit:
    """One ``No n`` paragraph (``lines[begin:end]``)."""
    def fail(offset: int, what: str) -> SciperfError:
        return SciperfError(f"{source}: line {begin + offset + 1}: {what}")

    if end - begin < 3:
        raise fail(min(end - begin, 2), "hit paragraph ends before its '>' name and "
                                        "'Probab=' summary lines")
    try:
        number = int(lines[begin].split()[-1])
    except ValueError:
        raise fail(0, f"hit number in {lines[begin].strip()!r} is not an integer") from None
    summary = _summary_values(lines[begin + 2])
    if summary is None:
        raise fail(2, "expected the hit summary 'Probab=… E-value=… Score=… Aligned_cols=… "
                      "Identities=…% Similarity=… Sum_probs=… Template_Neff=…'")
    try:
        numbers = [float(value) for value in summary]
    except ValueError:
        raise fail(2, "a value of the hit summary is not a number") from None
    query: list[str] = []
    hit: list[str] = []
    indices_query: list[int] = []
    indices_hit: list[int] = []
    block_width: int | None = None
    for offset in range(3, end - begin):
        line = lines[begin + offset]
        side = line[:2]
        if side not in ("Q ", "T ") or line[2:].startswith(_NOT_RESIDUE_LINES):
            continue
        match = _ALIGNED.match(line, _ALIGNMENT_TEXT_COLUMN)
        if match is None or (side == "Q " and not match.group(3)):
            raise fail(offset, f"cannot read 'start residues end (length)' from column "
                               f"{_ALIGNMENT_TEXT_COLUMN} of {line.strip()[:60]!r}")
        start, residues = int(match.group(1)) - 1, match.group(2)
        if side == "Q ":
            # The query line fixes the block's width: its residues plus its gaps.
            block_width = int(match.group(3)) - start + residues.count("-")
            if block_width != len(residues):
                raise fail(offset, f"query block has {len(residues)} columns but its "
                                   f"numbers say {block_width}")
            query.append(residues)
            indices_query.extend(_residue_indices(residues, start))
        elif block_width is None:
            raise fail(offset, "template alignment line before any query line")
        else:
            if block_width != len(residues):
                raise fail(offset, f"template block has {len(residues)} columns, its query "
                                   f"block {block_width}")
            hit.append(residues)
            indices_hit.extend(_residue_indices(residues, start))
    return TemplateHit(index=number, name=lines[begin + 1][1:], aligned_cols=int(numbers[3]),
                       sum_probs=numbers[6], query="".join(query), hit_sequence="".join(hit),
                       indices_query=tuple(indices_query), indices_hit=tuple(indices_hit))


def _summary_values(line: str) -> list[str] | None:
    """The eight values of a hit's summary line (None: not one), where the reference's
    greedy groups put them: each name at its last place that leaves room for the names
    before it, so each is searched from the right, left of the one after it. The
    Identities value ends at a ``%`` that only blanks part from ``Similarity=``. Each
    character is scanned a bounded number of times (the regex backtracks through every
    split of the line: its time grows with a power of the line's length)."""
    first, *names = _SUMMARY_NAMES
    if not line.startswith(first):
        return None
    places: list[tuple[int, int]] = []  # (start, end) of each later name, right to left
    end = len(line)
    for name in reversed(names):
        at = _name_at(line, name, len(first), end)
        if at is None:
            return None
        places.append(at)
        end = at[0]
    bounds = [len(first), *(e for _, e in reversed(places))]
    stops = [s for s, _ in reversed(places)] + [len(line)]
    return [line[b:s] for b, s in zip(bounds, stops, strict=True)]


def _name_at(line: str, name: str, low: int, high: int) -> tuple[int, int] | None:
    """(start, end) of the last `name` inside ``line[low:high]`` — for Similarity=, its start
    moved back over the blanks and the ``%`` that end the Identities value — or None."""
    while (at := line.rfind(name, low, high)) >= 0:
        if name != "Similarity=":
            return at, at + len(name)
        start = at
        while start > low and line[start - 1] in _BLANKS:
            start -= 1
        if start > low and line[start - 1] == "%":
            return start - 1, at + len(name)
        high = start  # the next candidate ends before these blanks (a name is no blank)
    return None


def _residue_indices(residues: str, start: int) -> list[int]:
    """0-based residue number of each column of a block, -1 at gaps."""
    out: list[int] = []
    counter = start
    for letter in residues:
        if letter == "-":
            out.append(-1)
        else:
            out.append(counter)
            counter += 1
    return out
