"""Learnable synthetic proteins, written in the reference's processed layout (:mod:`.layout`),
so the real readers, MSA pipeline and template search run on them unchanged.

A chain (spec §11's sketch) is a random sequence of ``min_length``–``max_length`` residues:
with ``sequences="mixed"`` of every residue type, with ``"one_class"`` of one class's letters
only (helix formers or strand formers, either with probability ½: a whole helix or a whole
strand, which a small model learns in minutes). Its structure is a function of the sequence
alone, so a model can learn it:

* each residue's secondary-structure state is the majority class in the 5-residue window
  around it (clipped at the ends) of helix formers :data:`HELIX_FORMERS`, strand formers
  :data:`STRAND_FORMERS` and breakers :data:`BREAKERS` (a tie goes to loop, then helix);
* the state sets φ/ψ (helix −57/−47°, strand −120/+130°, loop −70/+140°, a loop glycine
  +80/+10°), ω = 180°;
* the backbone is grown from those dihedrals with NeRF on the reference's idealised geometry
  (:func:`.geometry.build_chain`: each residue type's literature N–CA, CA–C and N–CA–C, the
  C–N peptide bond 1.329 Å (1.341 Å before proline) and the tabulated C–N–CA / CA–C–N angles),
  CB and O placed from ``RIGID_GROUP_ATOM_POSITIONS``; side-chain atoms beyond CB are masked.

Its MSA is the query plus ``msa_depth`` copies mutated at 15–40 % of positions, each mutation
staying within the residue's class (so the copies share the query's structure), some rows
with a gap run and some with lower-case insertions (deletion counts are exercised), split
over ``uniref90_hits.a3m``, ``bfd_uniclust_hits.a3m`` and ``mgnify_hits.a3m``, each opening
with the query. With ``templates`` the ``pdb70_hits.hhr`` lists hits to training chains
released at least 60 days earlier (their residues aligned over a window with one gap; the
template search finds them in those chains' entries, so no kalign is needed); without, it is
an hhr with no hits. Training chains are released from 1990 to the training cut-off
(2021-09-16), validation chains in 2021-11-20..2021-12-10 and listed in
``validation_targets.txt``, so :func:`.layout.split_chains` selects exactly ``train`` and
``validation`` chains.

Chain k of a split depends only on (seed, split, k) and the knobs, so any worker count
writes identical bytes; the manifest entry (``sciperf_dataset.json``) is written last.
"""

from __future__ import annotations

import contextlib
import datetime
import shutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import atomic, manifest
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads.openfold import geometry, layout
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.spec import SYNTHETIC_SEQUENCES

HELIX_FORMERS = "ALMEQKR"
STRAND_FORMERS = "VIYFWTC"
BREAKERS = "GPNDSH"
RESIDUE_CLASSES = (HELIX_FORMERS, STRAND_FORMERS, BREAKERS)  # index = state
HELIX, STRAND, LOOP = 0, 1, 2
TIE_ORDER = (LOOP, HELIX, STRAND)  # who wins a tied vote
WINDOW = 5
PHI_PSI = {HELIX: (-57.0, -47.0), STRAND: (-120.0, 130.0), LOOP: (-70.0, 140.0)}  # degrees
GLYCINE_LOOP_PHI_PSI = (80.0, 10.0)
OMEGA = 180.0
KEPT_ATOMS = ("N", "CA", "C", "O", "CB")  # side chains beyond CB are masked

SEQUENCE_KINDS = SYNTHETIC_SEQUENCES
ONE_CLASS_LETTERS = (HELIX_FORMERS, STRAND_FORMERS)  # a one-class chain's alphabets
MUTATION_RATE = (0.15, 0.40)
A3M_SHARES = (0.5, 0.3, 0.2)  # of the homologs, in layout.A3M_FILES order
GAP_ROW_PROBABILITY = 0.3  # a homolog gets one run of gaps
INSERTION_ROW_PROBABILITY = 0.3  # a homolog gets 1-2 runs of lower-case insertions
MAX_INSERTION = 3
MAX_UNRESOLVED = 3  # terminal residues without atoms in a chain that has some
TRAIN_FIRST_RELEASE = "1990-01-01"
VALIDATION_RELEASES = ("2021-11-20", "2021-12-10")  # > 60 days after the training cut-off
RESOLUTION_RANGE = (1.5, 2.5)  # Å, inside the pLDDT loss's 0.1-3.0 window
EXPTL_METHOD = "X-RAY DIFFRACTION"
MIN_TEMPLATE_WINDOW = 12  # aligned columns of a hit (≥ 10 template residues, ratio > 0.1)
TEMPLATE_GAP_DAYS = 60
AUTHOR_CHAIN, WATER_CHAIN = "A", "B"  # mmCIF chain B holds the entry's water, author chain A
SPLIT_STREAMS = {"train": 0, "validation": 1}
GENERATOR_MARK = ".sciperf_synthetic_openfold"  # this root's layout is ours to replace
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_IDS_PER_DIGIT = 36**3
_TRAIN_DIGITS = 8  # training ids start with 1-8, validation ids with 9
# independent random streams of one chain
_SEQUENCE, _MSA, _MASK, _HITS, _META = range(5)


@dataclass(frozen=True)
class SyntheticRequest:
    """Everything that determines the bytes written (the manifest entry)."""

    root: str
    train: int
    validation: int
    seed: int
    min_length: int = 24
    max_length: int = 48
    msa_depth: int = 32  # homologs over the three a3m files (the query not counted)
    templates: bool = False
    max_hits: int = 4  # hhr hits per chain when templates are on
    unresolved_probability: float = 0.2  # a chain has 1-3 unresolved terminal residues
    sequences: str = "mixed"  # SEQUENCE_KINDS: every residue type, or one class a chain

    def check(self) -> None:
        if self.train < 1 or self.validation < 1:
            raise SciperfError(f"synthetic OpenFold data needs at least one chain per split "
                               f"(train={self.train}, validation={self.validation})")
        if self.train > _TRAIN_DIGITS * _IDS_PER_DIGIT or self.validation > _IDS_PER_DIGIT:
            raise SciperfError(f"at most {_TRAIN_DIGITS * _IDS_PER_DIGIT} training and "
                               f"{_IDS_PER_DIGIT} validation chains have synthetic PDB ids")
        if not 2 * MAX_UNRESOLVED + 2 <= self.min_length <= self.max_length:
            raise SciperfError(f"chain lengths {self.min_length}..{self.max_length}: need "
                               f"{2 * MAX_UNRESOLVED + 2} <= min_length <= max_length")
        if self.sequences not in SEQUENCE_KINDS:
            raise SciperfError(f"synthetic sequences {self.sequences!r} is not one of "
                               f"{', '.join(SEQUENCE_KINDS)}")
        if self.msa_depth < 0 or self.max_hits < 0 or \
                not 0.0 <= self.unresolved_probability <= 1.0:
            raise SciperfError("msa_depth and max_hits must be >= 0, unresolved_probability "
                               "in [0, 1]")


# ---------------------------------------------------------------------------------------------
# Sequence → structure
# ---------------------------------------------------------------------------------------------

_CLASS_OF = {letter: state for state, letters in enumerate(RESIDUE_CLASSES) for letter in letters}


def secondary_structure(sequence: str) -> np.ndarray:
    """Per residue HELIX, STRAND or LOOP: the majority class of its 5-residue window."""
    classes = np.array([_CLASS_OF[letter] for letter in sequence])
    states = np.empty(len(sequence), np.int8)
    half = WINDOW // 2
    for i in range(len(sequence)):
        counts = np.bincount(classes[max(i - half, 0):i + half + 1], minlength=3)
        states[i] = max(TIE_ORDER, key=lambda s: (counts[s], -TIE_ORDER.index(s)))
    return states


def backbone_dihedrals(sequence: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(φ, ψ, ω) per residue in radians; ``ω[i]`` is the peptide bond before residue i."""
    states = secondary_structure(sequence)
    phi_psi = np.array([GLYCINE_LOOP_PHI_PSI if state == LOOP and letter == "G"
                        else PHI_PSI[int(state)] for letter, state in zip(sequence, states,
                                                                          strict=True)])
    omega = np.full(len(sequence), OMEGA)
    return np.radians(phi_psi[:, 0]), np.radians(phi_psi[:, 1]), np.radians(omega)


def backbone_structure(sequence: str) -> tuple[np.ndarray, np.ndarray]:
    """The chain's atom37 positions (float32 [L, 37, 3]) and mask (bool [L, 37]): N, CA, C,
    O and CB of the idealised backbone; everything else masked and zero."""
    aatype = np.array([rc.RESTYPE_ORDER[letter] for letter in sequence])
    phi, psi, omega = backbone_dihedrals(sequence)
    chi = np.zeros((len(sequence), 4))
    positions, mask = geometry.build_chain(aatype, phi, psi, omega, chi)
    keep = np.zeros(rc.ATOM_TYPE_NUM, bool)
    keep[[rc.ATOM_ORDER[name] for name in KEPT_ATOMS]] = True
    mask = mask.astype(bool) & keep
    return (positions * mask[..., None]).astype(np.float32), mask


# ---------------------------------------------------------------------------------------------
# One chain
# ---------------------------------------------------------------------------------------------

def pdb_id(split: str, index: int) -> str:
    """Synthetic 4-character PDB ids: training 1000…8zzz, validation 9000…9zzz (sorted as
    generated, so the alignment packer sees chains in name order)."""
    number = index + (_TRAIN_DIGITS * _IDS_PER_DIGIT if split == "validation" else 0)
    first, rest = divmod(number, _IDS_PER_DIGIT)
    return str(first + 1) + "".join(_BASE36[(rest // 36**p) % 36] for p in (2, 1, 0))


def _rng(req: SyntheticRequest, split: str, index: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([req.seed, SPLIT_STREAMS[split], index, stream])


def chain_sequence(req: SyntheticRequest, split: str, index: int) -> str:
    """Chain `index`'s sequence (its own random stream, so hits can look it up cheaply);
    redrawn until no letter exceeds the training filter's frequency cap."""
    rng = _rng(req, split, index, _SEQUENCE)
    letters = rc.RESTYPES[:rc.RESTYPE_NUM]
    if req.sequences == "one_class":
        letters = ONE_CLASS_LETTERS[int(rng.integers(0, len(ONE_CLASS_LETTERS)))]
    while True:
        length = int(rng.integers(req.min_length, req.max_length + 1))
        sequence = "".join(letters[i] for i in rng.integers(0, len(letters), length))
        if layout.top_residue_frequency(sequence) <= layout.SplitRules().max_aa_frequency:
            return sequence


def release_date(req: SyntheticRequest, split: str, index: int) -> datetime.date:
    """Training chains spread evenly from 1990 to the training cut-off in index order,
    validation chains over :data:`VALIDATION_RELEASES`."""
    first, last, count = (TRAIN_FIRST_RELEASE, layout.SplitRules().max_release_date, req.train) \
        if split == "train" else (*VALIDATION_RELEASES, req.validation)
    start = datetime.date.fromisoformat(first)
    span = (datetime.date.fromisoformat(last) - start).days
    return start + datetime.timedelta(days=index * span // max(count, 1))


@dataclass(frozen=True)
class SyntheticChain:
    """One generated chain: its entry, csv row and alignment files."""

    entry: layout.DictsEntry
    row: layout.ChainRow
    files: tuple[tuple[str, bytes], ...]  # (path inside the chain directory, bytes)


def make_chain(req: SyntheticRequest, split: str, index: int) -> SyntheticChain:
    """Chain `index` of `split`: deterministic from (seed, split, index) and the knobs."""
    sequence = chain_sequence(req, split, index)
    positions, mask = backbone_structure(sequence)
    _unresolve_terminus(_rng(req, split, index, _MASK), positions, mask, req)
    pid = pdb_id(split, index)
    name = f"{pid}_{AUTHOR_CHAIN}"
    meta = _rng(req, split, index, _META)
    resolution = round(float(meta.uniform(*RESOLUTION_RANGE)), 2)
    released = release_date(req, split, index).isoformat()
    entry = layout.DictsEntry(
        pdb_id=pid, exptl_method=EXPTL_METHOD, release_date=released, resolution=resolution,
        author_chain_ids=[AUTHOR_CHAIN],
        entity_id_to_mmcif_chain_ids={"1": [AUTHOR_CHAIN], "2": [WATER_CHAIN]},
        mmcif_chain_id_to_author_chain_id={AUTHOR_CHAIN: AUTHOR_CHAIN,
                                           WATER_CHAIN: AUTHOR_CHAIN},
        sequences={AUTHOR_CHAIN: sequence},
        atoms={AUTHOR_CHAIN: layout.ChainAtoms(all_atom_positions=positions,
                                               all_atom_mask=mask)})
    cluster = index + (req.train if split == "validation" else 0)
    row = layout.chain_rows(entry, {f"{pid}_1".upper(): cluster})[0]
    a3m = _a3m_files(_rng(req, split, index, _MSA), name, sequence, req.msa_depth)
    hhr = _hhr_file(req, split, index, name, sequence)
    files = tuple((f"a3m/{file}", text.encode()) for file, text in a3m) + \
        ((f"hhr/{layout.HHR_FILE}", hhr.encode()),)
    return SyntheticChain(entry, row, files)


def _unresolve_terminus(rng: np.random.Generator, positions: np.ndarray, mask: np.ndarray,
                        req: SyntheticRequest) -> None:
    """With ``unresolved_probability``, 1-3 residues at one end lose their atoms (as real
    chains' disordered termini do; the metric and losses must skip them)."""
    if rng.random() >= req.unresolved_probability:
        return
    count = int(rng.integers(1, MAX_UNRESOLVED + 1))
    gone = slice(0, count) if rng.random() < 0.5 else slice(len(mask) - count, len(mask))
    positions[gone] = 0.0
    mask[gone] = False


def _a3m_files(rng: np.random.Generator, name: str, sequence: str, depth: int
               ) -> list[tuple[str, str]]:
    """The three a3m files: each the query then its share of the mutated homologs."""
    rows = [_homolog(rng, sequence) for _ in range(depth)]
    bounds = np.round(np.cumsum((0.0,) + A3M_SHARES) * depth).astype(int)
    out = []
    for k, file in enumerate(layout.A3M_FILES):
        lines = [f">{name}", sequence]
        for j in range(bounds[k], bounds[k + 1]):
            lines += [f">{name}_homolog_{j + 1} synthetic", rows[j]]
        out.append((file, "\n".join(lines) + "\n"))
    return out


def _homolog(rng: np.random.Generator, sequence: str) -> str:
    """The query mutated within residue classes, maybe with a gap run and insertions."""
    letters = list(sequence)
    rate = rng.uniform(*MUTATION_RATE)
    for i in np.flatnonzero(rng.random(len(letters)) < rate):
        family = RESIDUE_CLASSES[_CLASS_OF[letters[i]]].replace(letters[i], "")
        letters[i] = family[int(rng.integers(len(family)))]
    if rng.random() < GAP_ROW_PROBABILITY:
        run = int(rng.integers(1, max(len(letters) // 8, 1) + 1))
        start = int(rng.integers(0, len(letters) - run + 1))
        letters[start:start + run] = "-" * run
    if rng.random() < INSERTION_ROW_PROBABILITY:
        for _ in range(int(rng.integers(1, 3))):
            column = int(rng.integers(1, len(letters)))  # before a column, never after the last
            inserted = "".join(rc.RESTYPES[i] for i in rng.integers(
                0, rc.RESTYPE_NUM, int(rng.integers(1, MAX_INSERTION + 1)))).lower()
            letters[column] = inserted + letters[column]
    return "".join(letters)


def _hhr_file(req: SyntheticRequest, split: str, index: int, name: str, sequence: str) -> str:
    """An HHsearch-style result: a header, then one ``No n`` paragraph per hit."""
    lines = [f"Query         {name}", f"Match_columns {len(sequence)}",
             f"No_of_seqs    {req.msa_depth + 1} out of {req.msa_depth + 1}",
             "Command       sciperf synthetic OpenFold data (no search was run)", "",
             " No Hit                             Prob E-value P-value  Score    SS Cols"]
    rng = _rng(req, split, index, _HITS)
    hits = _template_hits(rng, req, split, index) if req.templates else []
    paragraphs = []
    for number, target in enumerate(hits, start=1):
        template = chain_sequence(req, "train", target)
        paragraphs += _hit_paragraph(rng, number, name, sequence, target, template)
    return "\n".join(lines + [""] + paragraphs) + "\n"


def _template_hits(rng: np.random.Generator, req: SyntheticRequest, split: str, index: int
                   ) -> list[int]:
    """Training chains released ≥ 60 days before this chain (a prefix of the training
    indices, dates rising with the index), up to ``max_hits`` of them at random."""
    latest = release_date(req, split, index) - datetime.timedelta(days=TEMPLATE_GAP_DAYS)
    low, high = 0, req.train  # count of training chains released on or before `latest`
    while low < high:
        mid = (low + high) // 2
        if release_date(req, "train", mid) <= latest:
            low = mid + 1
        else:
            high = mid
    eligible = low if split == "validation" else min(low, index)
    count = min(req.max_hits, eligible)
    return sorted(int(i) for i in rng.choice(eligible, size=count, replace=False)) \
        if count else []


def _hit_paragraph(rng: np.random.Generator, number: int, name: str, query: str,
                   target: int, template: str) -> list[str]:
    """A hit aligning a window of the query to a window of training chain `target`, with one
    gap on the template side (a query column without template residue)."""
    hit_name = f"{pdb_id('train', target)}_{AUTHOR_CHAIN}"
    width = int(rng.integers(MIN_TEMPLATE_WINDOW, min(len(query), len(template)) + 1))
    q_start = int(rng.integers(0, len(query) - width + 1))
    t_start = int(rng.integers(0, len(template) - width + 2))
    gap = int(rng.integers(0, width))
    residues = template[t_start:t_start + width - 1]
    t_row = residues[:gap] + "-" + residues[gap:]
    q_row = query[q_start:q_start + width]
    same = sum(a == b for a, b in zip(q_row, t_row, strict=True))
    probability = round(float(rng.uniform(20.0, 99.9)), 1)
    return [
        f"No {number}", f">{hit_name} synthetic training chain {target}",
        f"Probab={probability:.2f}  E-value={float(rng.uniform(1e-6, 1.0)):.2g}  "
        f"Score={float(rng.uniform(10, 200)):.2f}  Aligned_cols={width - 1}  "
        f"Identities={round(100 * same / width)}%  Similarity={same / width:.3f}  "
        f"Sum_probs={probability * (width - 1) / 100:.1f}  Template_Neff=1.000", "",
        f"{'Q ' + name:<17}{q_start + 1:>4} {q_row} {q_start + width:>4} ({len(query)})",
        f"{'Q Consensus':<17}{q_start + 1:>4} {q_row.lower()} {q_start + width:>4} "
        f"({len(query)})", "",
        f"{'T Consensus':<17}{t_start + 1:>4} {t_row.lower()} {t_start + width - 1:>4} "
        f"({len(template)})",
        f"{'T ' + hit_name:<17}{t_start + 1:>4} {t_row} {t_start + width - 1:>4} "
        f"({len(template)})", ""]


# ---------------------------------------------------------------------------------------------
# The dataset
# ---------------------------------------------------------------------------------------------

def _chain_job(args: tuple[SyntheticRequest, str, int]) -> SyntheticChain:
    return make_chain(*args)


def generate(root: str | Path, train: int, validation: int, seed: int, *,
             workers: int = 1, show_progress: bool = False, **knobs: Any) -> SyntheticRequest:
    """Write `train` + `validation` synthetic chains under `root` in the processed layout
    (replacing an earlier synthetic set; a dataset the generator did not write is refused),
    the manifest last. `knobs`: the other :class:`SyntheticRequest` fields."""
    unknown = sorted(set(knobs) - set(SyntheticRequest.__dataclass_fields__))
    if unknown:
        raise SciperfError(f"synthetic OpenFold data has no knob {unknown[0]!r}")
    req = SyntheticRequest(str(Path(root).resolve()), train, validation, seed, **knobs)
    req.check()
    root = Path(req.root)
    _clear(root)
    jobs = [(req, split, k) for split, n in (("train", train), ("validation", validation))
            for k in range(n)]
    bar = Progress(len(jobs), "synthetic proteins", unit="chains", enabled=show_progress)
    rows: list[layout.ChainRow] = []
    with contextlib.ExitStack() as stack:
        aligner = stack.enter_context(layout.AlignmentWriter(root))
        chains = stack.enter_context(ProcessPoolExecutor(workers)).map(
            _chain_job, jobs, chunksize=16) if workers > 1 else map(_chain_job, jobs)

        def entries() -> Iterator[layout.DictsEntry]:
            for chain in chains:
                aligner.add(chain.row.pdb_chain_id, chain.files)
                rows.append(chain.row)
                bar.update()
                yield chain.entry

        layout.write_dicts(root, entries())
    layout.write_chains(root, rows)
    layout.write_obsolete(root / layout.OBSOLETE_DAT,
                          [layout.ObsoleteEntry("01-JAN-00", "0000", pdb_id("train", 0))])
    layout.write_validation_targets(root, [(pdb_id("validation", k), AUTHOR_CHAIN)
                                           for k in range(validation)])
    manifest.record(root, layout.FORMAT, request_record(req))
    return req


def _clear(root: Path) -> None:
    """Forget and delete an earlier synthetic set. A layout without the generator's mark is
    someone's real (616 GiB) download: refused, nothing deleted."""
    present = [p for p in (layout.PDB_DIR, layout.ALIGNMENTS_DIR, layout.VALIDATION_TARGETS)
               if (root / p).exists()]
    if present and not (root / GENERATOR_MARK).is_file():
        raise SciperfError(f"{root / present[0]}: a dataset the synthetic generator did not "
                           "write; refusing to replace it (choose another data directory)")
    manifest.forget(root, layout.FORMAT, None)
    with atomic.failing_as(root):
        root.mkdir(parents=True, exist_ok=True)
    atomic.write_text(root / GENERATOR_MARK, "written by sciperf.workloads.openfold.synthetic\n")
    for path in present:
        if (root / path).is_dir():
            shutil.rmtree(root / path)
        else:
            (root / path).unlink()


def request_record(req: SyntheticRequest) -> dict[str, Any]:
    """The manifest entry of a request (JSON types)."""
    return asdict(req)


def dataset_complete(req: SyntheticRequest) -> bool:
    """`req.root` holds exactly this request's finished dataset."""
    return manifest.complete(req.root, layout.FORMAT, request_record(req))

