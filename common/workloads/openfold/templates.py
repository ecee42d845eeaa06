"""Template features of a chain from its hhr hits (REF ``openfold/data/templates.py`` and
``data/tools/kalign.py``; spec §7 "Templates").

For a query chain, :func:`template_features` walks the hits of its ``pdb70_hits.hhr`` as the
reference's ``TemplateHitFeaturizer`` does:

1. **Prefilter** every hit (no structure read yet): its ``PDBID_chain`` (an obsolete id
   replaced by its successor when the id itself is unknown) must be a chain of the processed
   PDB, another entry than the query, released at least :data:`MIN_DAYS_BEFORE_QUERY` days
   before the query, aligned over more than :data:`MIN_ALIGN_RATIO` of the query, not a
   near-copy of it (a sub-sequence longer than :data:`MAX_SUBSEQUENCE_RATIO` of the query)
   and at least :data:`MIN_TEMPLATE_RESIDUES` residues long.
2. **Order** the survivors by ``Sum_probs`` (descending, stable); in training shuffle the
   first :data:`SHUFFLE_TOP_K` with ``random.Random(sample_seed)``; in evaluation keep them.
3. **Featurise** in that order until ``max_templates`` succeeded: find the hit's residues in
   the template entry (exact sub-sequence of the hit's chain, of any chain, or with ``X`` as a
   wildcard), otherwise realign the hit to the chain's actual sequence with the external
   ``kalign`` program and require 90 % identity; copy the zero-centred atoms of the aligned
   residues onto the query's positions. A hit whose structure is missing, unaligned, broken
   (consecutive CAs over 150 Å apart) or nearly empty (< 5 atoms) is skipped.

A template's features then get the per-residue geometry of :mod:`.geometry` (pseudo-β,
torsion angles) on the full query length; :mod:`.features` subsamples and crops them.

The PDB is reached through :class:`TemplateDatabase`: the release dates and chain ids of
``chains.csv``, the obsolete map, and a callback returning one entry (all its chains'
sequences and atoms — the search may match any chain of the entry), so it works on the
reference's processed layout or on anything that can answer the same questions.

Deliberate differences from the reference: a missing ``kalign`` is one line naming the fix
(the reference silently drops every hit that needed realignment), kalign may take
:data:`KALIGN_TIMEOUT_S` (the reference gives it 1 s and drops the hit on a busy machine), and
data that would crash the reference (a hit name without a PDB id, an atom array shorter than
its sequence, a letter outside the HHblits code) is a :class:`SciperfError`.
"""

from __future__ import annotations

import datetime
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sciperf.data import atomic
from sciperf.errors import SciperfError
from sciperf.workloads.openfold import geometry
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.parsers import TemplateHit, parse_a3m

MIN_DAYS_BEFORE_QUERY = 60
MIN_ALIGN_RATIO = 0.1  # aligned columns / query length must exceed this
MAX_SUBSEQUENCE_RATIO = 0.95  # a sub-sequence of the query longer than this is a duplicate
MIN_TEMPLATE_RESIDUES = 10
SHUFFLE_TOP_K = 20  # training shuffles this many best prefiltered hits
MAX_CA_CA_DISTANCE = 150.0  # Å between consecutive resolved CAs ("essentially infinite")
MIN_TEMPLATE_ATOMS = 5  # fewer resolved atoms on the query's residues: no template
MIN_REALIGN_IDENTITY = 0.9  # of the hit's sequence to the entry's actual chain sequence
KALIGN_MIN_LENGTH = 6  # kalign refuses shorter sequences
KALIGN_TIMEOUT_S = 60.0
KALIGN_INSTALL_HINT = "apt-get install kalign (3.3.5, Debian/Ubuntu) or containers/install.sh"
_HIT_NAME = re.compile(r"[a-zA-Z\d]{4}_[a-zA-Z0-9.]+")


@dataclass(frozen=True)
class TemplateEntry:
    """One PDB entry as the template search reads it (REF: a processed ``dicts`` entry)."""

    pdb_id: str
    release_date: datetime.date
    sequences: Mapping[str, str]  # author chain id -> sequence, in the entry's chain order
    atoms: Mapping[str, tuple[np.ndarray, np.ndarray]]  # chain -> ([L, 37, 3], [L, 37] bool)


@dataclass(frozen=True)
class TemplateDatabase:
    """What the featuriser knows about the PDB: ``chains.csv`` facts and an entry loader."""

    release_dates: Mapping[str, datetime.date]  # pdb_id -> release date
    chain_ids: frozenset[str]  # "<pdb_id>_<author_chain_id>" usable as templates
    obsolete: Mapping[str, str]  # obsolete pdb_id -> its replacement (obsolete.dat)
    load_entry: Callable[[str], TemplateEntry]  # pdb_id -> entry
    kalign: str = "kalign"  # the program's name on PATH, or its path


@dataclass(frozen=True)
class TemplateFeatures:
    """Featurised templates of one query, in the order they were accepted (T of them).

    ``aatype`` is in our residue order with 21 = no residue aligned there; positions are
    zero-centred per template and zero where nothing is aligned.
    """

    domain_names: tuple[str, ...]  # "<pdb_id>_<chain>" of each template
    aatype: np.ndarray  # [T, L] int64
    all_atom_positions: np.ndarray  # [T, L, 37, 3] float32
    all_atom_mask: np.ndarray  # [T, L, 37] float32
    sum_probs: np.ndarray  # [T, 1] float32
    pseudo_beta: np.ndarray  # [T, L, 3] float32
    pseudo_beta_mask: np.ndarray  # [T, L] float32
    torsion_angles_sin_cos: np.ndarray  # [T, L, 7, 2] float32
    alt_torsion_angles_sin_cos: np.ndarray  # [T, L, 7, 2] float32
    torsion_angles_mask: np.ndarray  # [T, L, 7] float32

    @property
    def count(self) -> int:
        return int(self.aatype.shape[0])

    @classmethod
    def empty(cls, length: int) -> TemplateFeatures:
        """No templates for a query of ``length`` residues."""
        return cls.build((), np.zeros((0, length), np.int64),
                         np.zeros((0, length, rc.ATOM_TYPE_NUM, 3), np.float32),
                         np.zeros((0, length, rc.ATOM_TYPE_NUM), np.float32),
                         np.zeros((0, 1), np.float32))

    @classmethod
    def build(cls, names: Sequence[str], aatype: np.ndarray, positions: np.ndarray,
              mask: np.ndarray, sum_probs: np.ndarray) -> TemplateFeatures:
        """Add the per-residue geometry (pseudo-β, torsions over the whole query length)."""
        pseudo_beta, pseudo_beta_mask = geometry.pseudo_beta(aatype, positions, mask)
        torsions = geometry.torsion_angles(aatype, positions, mask)
        return cls(tuple(names), aatype.astype(np.int64), positions.astype(np.float32),
                   mask.astype(np.float32), sum_probs.astype(np.float32), pseudo_beta,
                   pseudo_beta_mask, torsions["torsion_angles_sin_cos"],
                   torsions["alt_torsion_angles_sin_cos"], torsions["torsion_angles_mask"])


class _HitUnusableError(Exception):
    """A hit the reference drops (missing or unusable structure); the search goes on."""


def template_features(query_sequence: str, hits: Sequence[TemplateHit],
                      database: TemplateDatabase, *, query_pdb_id: str | None,
                      query_release_date: datetime.date, max_templates: int,
                      shuffle_seed: int | None) -> TemplateFeatures:
    """Up to ``max_templates`` templates for the query (see the module docstring).

    ``shuffle_seed``: the training sample's seed (the best :data:`SHUFFLE_TOP_K` hits are
    shuffled with it); ``None`` in evaluation (hit order by ``Sum_probs``).
    """
    latest = query_release_date - datetime.timedelta(days=MIN_DAYS_BEFORE_QUERY)
    candidates = [hit for hit in hits
                  if _acceptable(hit, query_sequence, query_pdb_id, latest, database)]
    candidates = sorted(candidates, key=lambda hit: hit.sum_probs, reverse=True)
    if shuffle_seed is not None:
        top = candidates[:SHUFFLE_TOP_K]
        random.Random(shuffle_seed).shuffle(top)
        candidates = top + candidates[SHUFFLE_TOP_K:]
    accepted: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, float]] = []
    for hit in candidates:
        if len(accepted) >= max_templates:
            break
        try:
            accepted.append((*_featurise(hit, query_sequence, database, latest), hit.sum_probs))
        except _HitUnusableError:
            continue
    if not accepted:
        return TemplateFeatures.empty(len(query_sequence))
    names, aatype, positions, mask, sum_probs = zip(*accepted, strict=True)
    return TemplateFeatures.build(names, np.stack(aatype), np.stack(positions), np.stack(mask),
                                  np.array(sum_probs, np.float32)[:, None])


def hit_pdb_chain(hit: TemplateHit, database: TemplateDatabase) -> tuple[str, str]:
    """(pdb_id, chain) of a hit's ``PDBID_chain`` name; an obsolete id that the PDB no longer
    knows is replaced by its successor."""
    match = _HIT_NAME.match(hit.name)
    if match is None:
        raise SciperfError(f"template hit {hit.index}: name {hit.name[:40]!r} does not start "
                           "with PDBID_chain")
    pdb_id, chain = match.group(0).split("_")
    pdb_id = pdb_id.lower()
    if pdb_id not in database.release_dates:
        pdb_id = database.obsolete.get(pdb_id, pdb_id)
    return pdb_id, chain


def _acceptable(hit: TemplateHit, query: str, query_pdb_id: str | None,
                latest: datetime.date, database: TemplateDatabase) -> bool:
    """The reference's prefilter (no structure read)."""
    pdb_id, chain = hit_pdb_chain(hit, database)
    if f"{pdb_id}_{chain}" not in database.chain_ids:
        return False
    if query_pdb_id is not None and pdb_id == query_pdb_id.lower():
        return False
    released = database.release_dates.get(pdb_id)
    if released is not None and released > latest:
        return False
    if hit.aligned_cols / len(query) <= MIN_ALIGN_RATIO:
        return False
    residues = hit.hit_sequence.replace("-", "")
    if residues in query and len(residues) / len(query) > MAX_SUBSEQUENCE_RATIO:
        return False
    return len(residues) >= MIN_TEMPLATE_RESIDUES


def query_to_hit_mapping(query: str, hit: TemplateHit) -> dict[int, int]:
    """Query residue index → index into the hit's gap-free residues.

    The hhr alignment covers a piece of the query; it is located by searching its residues in
    the query (as the reference does: ``str.find``, so -1 when absent, which shifts every key
    by one — kept), and both sides' indices are made relative to their first aligned residue.
    """
    if not hit.query:
        return {}
    offset = query.find(hit.query.replace("-", ""))
    hit_length = len(hit.hit_sequence.replace("-", ""))
    hit_first = min((i for i in hit.indices_hit if i > -1), default=None)
    query_first = min((i for i in hit.indices_query if i > -1), default=None)
    if hit_first is None or query_first is None:
        return {}  # nothing aligned (the reference fails here)
    mapping: dict[int, int] = {}
    for q, t in zip(hit.indices_query, hit.indices_hit, strict=False):
        if q < 0 or t < 0:
            continue
        q, t = q - query_first + offset, t - hit_first
        if t < hit_length and q < len(query):
            mapping[q] = t
    return mapping


def _featurise(hit: TemplateHit, query: str, database: TemplateDatabase, latest: datetime.date
               ) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """(name, aatype [L], positions [L, 37, 3], mask [L, 37]) of one hit; raises
    :class:`_HitUnusableError` for a hit the reference drops."""
    pdb_id, chain = hit_pdb_chain(hit, database)
    mapping = query_to_hit_mapping(query, hit)
    residues = hit.hit_sequence.replace("-", "")
    entry = database.load_entry(pdb_id)
    if not entry.sequences:
        raise _HitUnusableError
    if entry.release_date > latest:
        raise SciperfError(f"template {pdb_id}: its entry says released {entry.release_date}, "
                           f"after {latest}, but the release dates said otherwise")
    found = _find_in_entry(entry, chain, residues)
    if found is not None:
        # The letters stay the hit's own (an X wildcard match keeps the hit's letter); the
        # atoms come from the chain at the match's offset.
        chain, offset = found
        letters_of = residues
    else:
        letters_of, mapping = _realign(entry, chain, residues, mapping, database.kalign)
        offset = 0
    if chain not in entry.atoms:
        raise _HitUnusableError
    positions, mask = _centred_atoms(entry, chain)
    out_positions = np.zeros((len(query), rc.ATOM_TYPE_NUM, 3), np.float32)
    out_mask = np.zeros((len(query), rc.ATOM_TYPE_NUM), np.float32)
    letters = ["-"] * len(query)
    for q, t in mapping.items():
        # A query residue the realignment left unmatched maps to -1, and -1 + offset indexes
        # from the end, exactly as in the reference (and AlphaFold): kept, not "fixed".
        atom = t + offset
        if not -positions.shape[0] <= atom < positions.shape[0]:
            raise SciperfError(f"template {pdb_id}_{chain}: residue {atom} beyond its "
                               f"{positions.shape[0]} atom records")
        out_positions[q], out_mask[q] = positions[atom], mask[atom]
        letters[q] = letters_of[t]
    if out_mask.sum() < MIN_TEMPLATE_ATOMS:
        raise _HitUnusableError
    return f"{pdb_id}_{chain}", _template_aatype("".join(letters), pdb_id), out_positions, \
        out_mask


def _find_in_entry(entry: TemplateEntry, chain: str, residues: str) -> tuple[str, int] | None:
    """(chain, offset) where the hit's residues occur in the entry: in the hit's own chain,
    else in any chain, else in any chain with ``X`` as a wildcard on either side."""
    own = entry.sequences.get(chain)
    if own and residues in own:
        return chain, own.find(residues)
    for name, sequence in entry.sequences.items():
        if sequence and residues in sequence:
            return name, sequence.find(residues)
    allowed = _wildcard_masks(residues)
    for name, sequence in entry.sequences.items():
        if (offset := _wildcard_find(sequence, len(residues), allowed)) >= 0:
            return name, offset
    return None


def _wildcard_masks(residues: str) -> Callable[[str], int]:
    """For a letter of a chain, the bit mask of the positions of `residues` it may stand at
    (bit j: position j): its own letter, an ``X`` of the hit (any letter but a line break,
    the reference's ``.``), and every position where the chain's letter is ``X``."""
    by_letter: dict[str, int] = {}
    for j, letter in enumerate(residues):
        by_letter[letter] = by_letter.get(letter, 0) | 1 << j
    wild = by_letter.get("X", 0)
    everything = (1 << len(residues)) - 1
    cache: dict[str, int] = {"X": everything, "\n": by_letter.get("\n", 0)}

    def allowed(letter: str) -> int:
        if letter not in cache:
            cache[letter] = by_letter.get(letter, 0) | wild
        return cache[letter]
    return allowed


def _wildcard_find(sequence: str, length: int, allowed: Callable[[str], int]) -> int:
    """The first offset of `sequence` where the hit's residues (`length` of them, their
    masks `allowed`) occur with ``X`` a wildcard on either side, or -1 — the reference's
    regex search (``(?:L|X)`` per letter, ``.`` per X) as one shift-and pass: bit j of
    `state` says the last j + 1 letters match the residues' first j + 1, so each letter of
    the chain is read once (the regex retries every offset: time the product of the
    lengths)."""
    if length == 0:
        return 0
    state, last = 0, 1 << (length - 1)
    for i, letter in enumerate(sequence):
        state = (state << 1 | 1) & allowed(letter)
        if state & last:
            return i - length + 1
    return -1


def _realign(entry: TemplateEntry, chain: str, residues: str, mapping: dict[int, int],
             kalign: str) -> tuple[str, dict[int, int]]:
    """The hit realigned to the entry's actual chain sequence with kalign: (that sequence,
    query → its residue mapping); skipped below :data:`MIN_REALIGN_IDENTITY` identity."""
    actual = entry.sequences.get(chain, "")
    if not actual:
        if len(entry.sequences) != 1:
            raise _HitUnusableError
        actual = next(iter(entry.sequences.values()))
    try:
        old_row, new_row = kalign_align([residues, actual], kalign)
    except KalignError:
        raise _HitUnusableError from None
    old_to_new: dict[int, int] = {}
    old_index = new_index = -1
    same = 0
    for old_letter, new_letter in zip(old_row, new_row, strict=True):
        old_index += old_letter != "-"
        new_index += new_letter != "-"
        if old_letter != "-" and new_letter != "-":
            old_to_new[old_index] = new_index
            same += old_letter == new_letter
    if same / min(len(residues), len(actual)) < MIN_REALIGN_IDENTITY:
        raise _HitUnusableError
    return actual.replace("-", ""), {q: old_to_new.get(t, -1) for q, t in mapping.items()}


def _centred_atoms(entry: TemplateEntry, chain: str) -> tuple[np.ndarray, np.ndarray]:
    """The chain's atoms with the mean resolved atom at the origin, and its float mask;
    :class:`_HitUnusableError` when two consecutive resolved CAs are over 150 Å apart."""
    positions, mask = entry.atoms[chain]
    positions = np.array(positions, np.float32)
    present = np.asarray(mask).astype(bool)
    if positions.shape[:2] != present.shape or positions.shape[1:] != (rc.ATOM_TYPE_NUM, 3):
        raise SciperfError(f"template {entry.pdb_id}_{chain}: atom arrays of shapes "
                           f"{positions.shape} and {present.shape} do not match")
    if present.any():
        positions[present] -= positions[present].mean(axis=0)
    ca = rc.ATOM_ORDER["CA"]
    both = present[1:, ca] & present[:-1, ca]
    step = np.linalg.norm(positions[1:, ca] - positions[:-1, ca], axis=-1)
    if (both & (step > MAX_CA_CA_DISTANCE)).any():
        raise _HitUnusableError
    return positions, present.astype(np.float32)


def _template_aatype(letters: str, pdb_id: str) -> np.ndarray:
    """Our residue index per letter of an aligned template sequence ('-' = 21)."""
    out = np.empty(len(letters), np.int64)
    for i, letter in enumerate(letters):
        code = rc.HHBLITS_AA_TO_ID.get(letter)
        if code is None:
            raise SciperfError(f"template {pdb_id}: residue letter {letter!r} is not in the "
                               "HHblits code")
        out[i] = rc.MAP_HHBLITS_AATYPE_TO_OUR_AATYPE[code]
    return out


# ---------------------------------------------------------------------------------------------
# kalign
# ---------------------------------------------------------------------------------------------

class KalignError(Exception):
    """kalign ran but gave no usable alignment (the template search drops the hit, as the
    reference does; not a user error)."""


def require_kalign(executable: str = "kalign") -> str:
    """The kalign program's path, or one line naming the install command (a run can call
    this at setup: the pipeline itself needs kalign only when a hit must be realigned)."""
    program = shutil.which(executable)
    if program is None:
        raise SciperfError(f"kalign not found on PATH (looked for {executable!r}): "
                           f"{KALIGN_INSTALL_HINT}; template realignment needs it")
    return program


def _refuse_if_full(folder: Path, target: Path) -> None:
    """An unusable kalign output on a disk with no block or inode left is the disk's
    failure, not the hit's: kalign exits 0 with an empty or cut output when its write is
    refused, and the hit must not be dropped for it."""
    try:
        room = os.statvfs(folder)
    except OSError:
        return
    if room.f_bavail == 0 or room.f_favail == 0:
        raise SciperfError(f"{target}: cannot be written (No space left on device; is the "
                           "disk full?)")


def kalign_align(sequences: Sequence[str], executable: str = "kalign",
                 timeout: float = KALIGN_TIMEOUT_S) -> list[str]:
    """The sequences aligned by the external ``kalign`` (gapped rows, input order).

    Runs ``kalign -i in.fasta -o out.fasta -format fasta`` in a private temporary folder (as
    the reference does). A missing program is a :class:`SciperfError` naming the install
    command, and so is a temporary folder, input or output file the disk refuses (one line
    in :mod:`sciperf.data.atomic`'s words: the folder goes, and a hit is never dropped for
    it); a failed, timed-out or unreadable run, or a sequence shorter than
    :data:`KALIGN_MIN_LENGTH`, raises :class:`KalignError`.
    """
    program = require_kalign(executable)
    if len(sequences) < 2 or any(len(s) < KALIGN_MIN_LENGTH for s in sequences):
        raise KalignError("kalign needs two or more sequences of >= 6 residues")
    try:
        folder = tempfile.mkdtemp(prefix="sciperf-kalign-")
    except OSError as exc:  # tempfile.tempdir stays None when no candidate was usable
        where = tempfile.tempdir or "the temporary directory"
        raise SciperfError(f"{where}: cannot be written ({atomic.why(exc)})") from None
    try:
        source, target = Path(folder) / "input.fasta", Path(folder) / "output.fasta"
        with atomic.failing_as(source):
            source.write_text("".join(f">sequence {i}\n{s}\n"
                                      for i, s in enumerate(sequences, start=1)))
        try:
            done = subprocess.run([program, "-i", str(source), "-o", str(target),
                                   "-format", "fasta"], capture_output=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise KalignError(f"kalign took over {timeout} s") from None
        try:
            return _kalign_rows(done.returncode, target, len(sequences))
        except KalignError:
            _refuse_if_full(Path(folder), target)
            raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _kalign_rows(returncode: int, target: Path, count: int) -> list[str]:
    """The aligned rows of kalign's output, in input order (:class:`KalignError`: none)."""
    if returncode != 0 or not target.is_file():
        raise KalignError(f"kalign exited with {returncode}")
    try:
        aligned = parse_a3m(target.read_text(), "kalign output")
    except SciperfError as err:
        raise KalignError(str(err)) from None
    rows = dict(zip(aligned.descriptions, aligned.sequences, strict=True))
    try:
        return [rows[f"sequence {i}"] for i in range(1, count + 1)]
    except KeyError:
        raise KalignError("kalign output lacks an input sequence") from None
