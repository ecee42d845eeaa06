"""Which chains of ``chains.csv`` train and which validate (:func:`split_chains`; REF
``openfold/datasets.py``, ``train.py``): the rules, the CAMEO targets the benchmark validates
on, and ``validation_targets.txt``, which sciperf's synthetic sets write instead."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import spec
from sciperf.workloads.openfold.layout.alignment_shards import AlignmentIndex
from sciperf.workloads.openfold.layout.chains import NO_CLUSTER, ChainRow, read_chains
from sciperf.workloads.openfold.layout.paths import (
    CHAINS_CSV,
    VALIDATION_TARGETS,
    LayoutError,
    write_atomic,
)

SPLITS = ("train", "validation")

# CAMEO targets by submission date (REF data/cameo_targets.py, transcribed as data from
# cameo3d.org's 3-month list to 2021-12-11): "pdb_id [mmcif_chain_id]", occasionally an author
# chain id instead.
_CAMEO_TABLE = """
2021-09-18 7bgg:A 7bly:A 7cz9:B 7d2w:A 7e6g:A 7jta:A 7jua:A 7ksn:A 7lm0:A 7m1w:A 7o86:A 7rih:B
           7rij:A 7s3u:A 7s5n:B
2021-09-25 7ba4:A 7czo:A 7dg7:A 7dg9:A 7dlw:B 7du6:A 7du7:A 7dvr:A 7dxs:C 7dxv:B 7dxw:A 7e24:D
           7e57:C 7k3s:A 7ltc:A 7mbf:A 7mj0:C
2021-10-02 7a59:B 7a73:A 7aao:A 7agj:A 7aj6:L 7bmu:A 7bsx:A 7d3y:A 7d50:B 7e4m:A 7jyp:A 7n79:A
           7ny0:A 7og3:A 7p01:A 7sbc:C
2021-10-09 7d6l:A 7d8r:A 7d8s:A 7jrk:A 7p2f:A 7pmu:A 7r65:A 7rk1:C 7rk2:C 7s6e:B
2021-10-16 7amc:A 7da9:A 7dah:E 7dnm:B 7eea:A 7eft:B 7kgc:A 7nmb:A 7o62:B 7p1b:C 7p1v:A 7rrm:C
           7s13:C 7s13:L 7sh3:A
2021-10-23 7dck:A 7f17:B 7msj:A 7nwz:D 7nx0:B 7nx0:E 7og0:B 7pkx:A 7plq:B 7s6g:A 7siq:A
2021-10-30 7ar0:B 7cjs:B 7dcm:A 7ef6:A 7et8:A 7lc5:A 7ndr:A 7nl4:A 7o49:F 7s6b:A 7sir:A 7v1v:A
           7vmu:A
2021-11-06 6wmk:A 6wqc:A 7au7:A 7b3a:A 7bcz:A 7bhy:A 7dru:C 7eqx:A 7eqx:C 7esx:A 7f7n:A 7fbp:B
           7fe3:A 7lew:B 7mfw:B 7obm:A 7ool:A 7r84:A 7rwk:A
2021-11-13 6xqj:A 6z01:A 7atr:A 7dfe:A 7dtp:A 7kik:A 7kos:A 7ouq:A 7p82:C 7pbk:A 7q47:A 7re4:A
           7re6:A
2021-11-20 6tf4:A 7awk:A 7bcj:A 7djy:A 7dk9:A 7dvn:A 7kqv:D 7ls0:B 7ny6:A 7plb:B 7rbw:A 7vnb:A
2021-11-27 7b0d:A 7e2v:A 7f6e:B 7fbh:A 7fh3:A 7kiu:A 7kua:A 7l6j:A 7l6y:A 7lxc:A 7swh:A 7swk:B
2021-12-04 7b1k:B 7b1w:F 7b26:C 7b28:F 7b29:A 7b2a:A 7b2o:A 7bny:B 7dkk:A 7dko:A 7dmf:A 7dms:A
           7lbu:A 7ljh:A 7poh:B 7ppp:A 7q03:A
2021-12-11 7b4q:A 7dnu:A 7e37:A 7kuw:A 7kzh:A 7mfi:A 7p3t:B 7q1b:A 7sf6:A 7sy9:A 7t24:A 7v5y:B
           7vdy:A
"""


def _parse_cameo(table: str) -> dict[str, tuple[str, ...]]:
    targets: dict[str, list[str]] = {}
    date = ""
    for line in table.strip().splitlines():
        words = line.split()
        if not line.startswith(" "):
            date, words = words[0], words[1:]
        pairs = (word.split(":") for word in words)
        targets.setdefault(date, []).extend(f"{pdb} [{chain}]" for pdb, chain in pairs)
    return {d: tuple(v) for d, v in targets.items()}


CAMEO_TARGETS: Mapping[str, tuple[str, ...]] = _parse_cameo(_CAMEO_TABLE)  # 183 on 13 dates


@dataclass(frozen=True)
class SplitRules:
    """Which chains of ``chains.csv`` train and validate (REF datasets.py, train.py defaults;
    AF2 supplement 1.2.5 and 1.11.7). The MLLOG-logged dates and length are the spec's."""

    min_release_date: str = "1900-01-01"
    max_release_date: str = spec.TRAIN_MAX_PDB_RELEASE_DATE
    max_resolution: float = 9.0  # Å, strictly below (NaN resolutions are kept)
    max_aa_frequency: float = 0.8  # of the most common residue letter, at most
    cameo_min_date: str = spec.VAL_MIN_CAMEO_SUBMISSION_DATE
    cameo_max_date: str = spec.VAL_MAX_CAMEO_SUBMISSION_DATE
    max_validation_length: int = spec.VAL_MAX_SEQUENCE_LENGTH


def write_validation_targets(root: str | Path, targets: Iterable[tuple[str, str]]) -> Path:
    """``validation_targets.txt``: one ``pdb_id [mmcif_chain_id]`` line per target (the CAMEO
    list's form), which :func:`split_chains` then uses instead of the CAMEO list."""
    path = Path(root) / VALIDATION_TARGETS
    write_atomic(path, "".join(f"{pdb} [{chain}]\n" for pdb, chain in targets).encode())
    return path


def read_validation_targets(root: str | Path) -> list[str] | None:
    """The targets of ``validation_targets.txt`` (blank and ``#`` lines skipped), or None
    when the dataset has no such file (the benchmark: CAMEO)."""
    path = Path(root) / VALIDATION_TARGETS
    if not path.is_file():
        return None
    try:
        lines = [line.strip() for line in path.read_text().splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{path}: cannot read the validation targets ({exc})") from None
    targets = [line for line in lines if line and not line.startswith("#")]
    for line in targets:
        if len(line.split()) != 2:
            raise LayoutError(f"{path}: {line!r} is not 'pdb_id mmcif_chain_id'")
    return targets


def cameo_targets(rules: SplitRules = SplitRules()) -> list[str]:
    """The CAMEO targets submitted inside the rules' date window, in list order."""
    return [target for date, targets in CAMEO_TARGETS.items()
            if rules.cameo_min_date <= date <= rules.cameo_max_date for target in targets]


def split_chains(root: str | Path, split: str, rules: SplitRules = SplitRules(), *,
                 rows: Sequence[ChainRow] | None = None, index: AlignmentIndex | None = None,
                 filter_by_alignments: bool = False,
                 only: Collection[str] | None = None) -> list[ChainRow]:
    """The chains of a split, in ``chains.csv`` order (REF InitialTrainingDataset,
    ValidationDataset).

    train: released in [min, max] date, resolution below the maximum or unknown, no residue
    letter above the frequency cap, in a PDB40 cluster. validation: the targets of
    ``validation_targets.txt`` if the dataset has one, else the CAMEO targets of the date
    window; each mapped to its author chain through ``mmcif_chain_ids`` (or taken as an author
    chain), the first target of an author chain kept, then at most the length cap.
    `only` keeps just those pdb_chain_ids; every chain left must have alignments unless
    `filter_by_alignments` drops those without.
    """
    if split not in SPLITS:
        raise SciperfError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    rows = read_chains(root) if rows is None else rows
    chosen = _training_rows(rows, rules) if split == "train" else \
        _validation_rows(root, rows, rules)
    if only is not None:
        keep = set(only)
        chosen = [row for row in chosen if row.pdb_chain_id in keep]
    index = AlignmentIndex(root) if index is None else index
    missing = [row.pdb_chain_id for row in chosen if row.pdb_chain_id not in index]
    if filter_by_alignments:
        gone = set(missing)
        return [row for row in chosen if row.pdb_chain_id not in gone]
    if missing:
        raise LayoutError(f"{index.path}: {len(missing)} {split} chains have no alignments "
                          f"(e.g. {', '.join(missing[:3])}); filter_by_alignments drops them")
    return chosen


def _training_rows(rows: Sequence[ChainRow], rules: SplitRules) -> list[ChainRow]:
    return [row for row in rows
            if rules.min_release_date <= row.release_date <= rules.max_release_date
            and (math.isnan(row.resolution) or row.resolution < rules.max_resolution)
            and top_residue_frequency(row.sequence) <= rules.max_aa_frequency
            and row.pdb_cluster_id != NO_CLUSTER]


def top_residue_frequency(sequence: str) -> float:
    """The share of the most common letter (an empty sequence: above every cap)."""
    if not sequence:
        return math.inf
    return Counter(sequence).most_common(1)[0][1] / len(sequence)


def _validation_rows(root: str | Path, rows: Sequence[ChainRow], rules: SplitRules
                     ) -> list[ChainRow]:
    targets = read_validation_targets(root)
    targets = cameo_targets(rules) if targets is None else targets
    to_author = _mmcif_to_author(rows, Path(root) / CHAINS_CSV)
    selected: set[str] = set()
    for target in targets:
        pdb_id, mmcif_chain = target.split()
        author = to_author.get(f"{pdb_id.lower()}_{mmcif_chain.strip('[]')}")
        if author is not None:
            selected.add(author)  # a later target of the same author chain adds nothing
    return [row for row in rows if row.pdb_chain_id in selected
            and row.sequence_length <= rules.max_validation_length]


def _mmcif_to_author(rows: Sequence[ChainRow], source: Path) -> dict[str, str]:
    """"<pdb_id>_<mmcif chain>" → "<pdb_id>_<author chain>", plus every author chain as
    itself where no mmCIF chain has its name (CAMEO sometimes names author chains)."""
    mapping: dict[str, str] = {}
    for row in rows:
        for mmcif_chain in row.mmcif_chain_ids:
            key = f"{row.pdb_id}_{mmcif_chain}"
            if key in mapping:
                raise LayoutError(f"{source}: mmCIF chain {key} belongs to two author chains "
                                  f"({mapping[key]}, {row.pdb_chain_id})")
            mapping[key] = row.pdb_chain_id
    for row in rows:
        mapping.setdefault(row.pdb_chain_id, row.pdb_chain_id)
    return mapping
