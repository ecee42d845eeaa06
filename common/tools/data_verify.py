"""`sciperf data verify`: is a data directory complete and sound?

Each problem is one line naming its file (one line per file: the first problem found
there), then a summary; exit 0 when there is none, 1 otherwise. The format checked is
``data.format``. What is checked, in order:

* **Counts.** The samples of each split against the counts the set declares, the first of:
  its subset record (``sciperf_subset.json``, written by `sciperf data subset`: its own
  counts, and its format), the synthetic generator's record of ``data.format``
  (``sciperf_dataset.json``: a count per split, named by the split or as
  ``train_samples``/``eval_samples``), the workload's reference counts
  (``Dataset.sources.counts``: a full download). A set with none of them declares no
  counts: they are reported, not checked. The summary names the counts' origin.
* **Files.** Every file of every sample exists (samples that are records inside shared
  containers: those of the samples read below, the containers having been opened by the
  listing). Every file of ``sciperf_files.json`` is present with its recorded size (an
  archive `download` unpacked may be gone: its unpacked marker stands for it). Its
  SHA-256 is compared, with ``--full``, for every recorded file; without, for the
  recorded files at the top of the data directory up to :data:`SMALL` bytes (what every
  sample shares: statistics, indexes, tables) and for up to :data:`HASHED` recorded files
  of the samples read below, drawn with a fixed seed (a sample's own files; a few of the
  containers or the layout that record samples share) — a cost bounded by file counts,
  not by the set's size. Published checksums (md5/sha256 of the workload's
  ``sources``, files present under their ``name``: a checkpoint, an archive kept after
  unpacking) are always compared.
* **Samples.** :data:`SAMPLED` samples per split, drawn with a fixed seed so two runs read
  the same ones (``--full``: every sample), read through the workload's own reader — the
  checks training makes (shapes, dtypes, finite values within the format's bounds).
  Building the reader opens what every sample shares (DeepCAM's ``stats.h5``).

Hashing and reading run on ``data.prepare_workers`` threads. The rate in the summary
counts files hashed plus samples read per second, and GB/s their bytes: each file's size,
or for a record inside a container the bytes of the arrays the reader returned.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import filemanifest, manifest, unpack
from sciperf.data.sources import DataSources
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.tools import data_subset
from sciperf.workloads import get
from sciperf.workloads.base import Dataset

SAMPLED = 16  # samples per split read without --full
SAMPLE_SEED = 0  # which ones: the same on every run
SMALL = 64 << 20  # recorded files at the top of data.dir up to this size are always hashed
HASHED = 64  # recorded files of the samples read hashed without --full
CHUNK = 4 << 20
# a generator's record names a split's count by the split or by the data.* key it came from
GENERATOR_KEYS = {"train": "train_samples", "validation": "eval_samples"}


@dataclass
class Report:
    """What one verification found and how fast it went."""

    root: Path
    fmt: str
    counts_from: str | None = None  # the record that declares the counts (None: nothing)
    counts: dict[str, dict[str, int | None]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    hashed_files: int = 0
    hashed_bytes: int = 0
    read_samples: int = 0
    read_bytes: int = 0
    seconds: float = 0.0

    @property
    def files_per_s(self) -> float:
        return (self.hashed_files + self.read_samples) / max(self.seconds, 1e-9)

    @property
    def gb_per_s(self) -> float:
        return (self.hashed_bytes + self.read_bytes) / 1e9 / max(self.seconds, 1e-9)

    def as_json(self) -> dict[str, Any]:
        return {"data_dir": str(self.root), "format": self.fmt, "ok": not self.problems,
                "problems": list(self.problems), "counts": self.counts,
                "counts_from": self.counts_from,
                "hashed": {"files": self.hashed_files, "bytes": self.hashed_bytes},
                "read": {"samples": self.read_samples, "bytes": self.read_bytes},
                "seconds": round(self.seconds, 3), "files_per_s": round(self.files_per_s, 1),
                "gb_per_s": round(self.gb_per_s, 3)}

    def summary(self) -> str:
        state = "complete and sound" if not self.problems else \
            f"{len(self.problems)} problem{'s' * (len(self.problems) != 1)}"
        counts = ", ".join(f"{split} {c['found']}" + (f"/{c['expected']}"
                                                      if c["expected"] is not None else "")
                           for split, c in self.counts.items())
        origin = f"held to {self.counts_from}" if self.counts_from else "no counts declared"
        return (f"{self.root}: {state}; {self.fmt} samples {counts} ({origin}); hashed "
                f"{self.hashed_files} files ({self.hashed_bytes / 1e9:.3f} GB), read "
                f"{self.read_samples} samples ({self.read_bytes / 1e9:.3f} GB) in "
                f"{self.seconds:.1f} s: {self.files_per_s:.1f} files/s, "
                f"{self.gb_per_s:.3f} GB/s")


class _Problems:
    """One line per file (or split, or shared piece): the first problem found there."""

    def __init__(self, report: Report, echo: bool):
        self.report, self.echo = report, echo
        self.keys: set[str] = set()

    def add(self, key: Path | str, line: str) -> None:
        if str(key) in self.keys:
            return
        self.keys.add(str(key))
        line = " ".join(line.split())
        self.report.problems.append(line)
        if self.echo:
            print(line, flush=True)

    def has(self, key: Path | str) -> bool:
        return str(key) in self.keys


def run(cfg: Any, full: bool, as_json: bool) -> int:
    """`sciperf data verify workload=NAME data.dir=DIR [--full] [--json]`: 0 when complete
    and sound, 1 otherwise (the problems and a summary on stdout)."""
    workload = get(str(cfg.workload))
    report = verify(workload.dataset, workload.model_spec(cfg), Path(str(cfg.data.dir)),
                    str(cfg.data.format), full, workers=int(cfg.data.prepare_workers),
                    echo=not as_json)
    print(json.dumps(report.as_json(), indent=1) if as_json else report.summary())
    return 1 if report.problems else 0


def expected_counts(ds: Dataset, root: Path, fmt: str) -> tuple[dict[str, int], str | None]:
    """The counts the set declares and the record declaring them (module docstring)."""
    record = data_subset.read_record(root)
    if record is not None:
        if record.fmt != fmt:
            raise SciperfError(f"{root / data_subset.RECORD}: a subset of {record.fmt} "
                               f"samples; verify it with data.format={record.fmt}")
        return record.counts, data_subset.RECORD
    made = manifest.entry(root, fmt)
    if isinstance(made, dict):
        declared = {split: made.get(split, made.get(GENERATOR_KEYS.get(split, "")))
                    for split in ds.splits}
        if all(isinstance(n, int) and not isinstance(n, bool) for n in declared.values()):
            return declared, manifest.MANIFEST
    if ds.sources.counts:
        return dict(ds.sources.counts), "the reference counts"
    return {}, None


def verify(ds: Dataset, model: Any, root: Path, fmt: str, full: bool = False, *,
           workers: int = 4, echo: bool = True, show_progress: bool = True) -> Report:
    """Check the data directory `root` (module docstring)."""
    if not root.is_dir():
        raise SciperfError(f"data.dir={root} does not exist")
    if fmt not in ds.formats:
        raise SciperfError(f"data.format={fmt} is not one of {', '.join(ds.formats)}")
    start = time.perf_counter()
    report = Report(root, fmt)
    problems = _Problems(report, echo)
    expected, report.counts_from = expected_counts(ds, root, fmt)
    listed = _listed(ds, root, fmt, problems)
    for split, samples in listed.items():
        want = expected.get(split)
        report.counts[split] = {"found": len(samples), "expected": want}
        if want is not None and samples and len(samples) != want:
            problems.add(root / split, f"{root / split}: {len(samples)} {fmt} samples, "
                         f"expected {want} ({report.counts_from})")
    picks = {split: samples if full else
             data_subset.choose(samples, min(SAMPLED, len(samples)), SAMPLE_SEED, split)
             for split, samples in listed.items()}
    _check_present(ds, fmt, listed, picks, full, problems)
    picked_files = list(dict.fromkeys(f for samples in picks.values() for s in samples
                                      for f in ds.sample_files(s, fmt)))
    jobs = _recorded(root, full, picked_files, problems)
    for path, wants in _published(ds.sources, root, problems).items():
        jobs.setdefault(path, []).extend(wants)
    _hash(jobs, report, problems, workers, show_progress)
    _read(ds, model, root, fmt, picks, report, problems, workers, show_progress)
    report.seconds = time.perf_counter() - start
    return report


def _listed(ds: Dataset, root: Path, fmt: str, problems: _Problems) -> dict[str, list[Path]]:
    """Each split's sorted samples; a split that cannot be listed is a problem, and empty."""
    listed = {}
    for split in ds.splits:
        try:
            listed[split] = ds.list_samples(root, split, fmt, 0)
        except SciperfError as exc:
            problems.add(root / split, str(exc))
            listed[split] = []
    return listed


def _check_present(ds: Dataset, fmt: str, listed: Mapping[str, list[Path]],
                   picks: Mapping[str, list[Path]], full: bool, problems: _Problems) -> None:
    """Every file of every sample exists (record samples: those of the picked ones)."""
    seen: set[Path] = set()
    for split, samples in listed.items():
        records = bool(samples) and data_subset.is_record(ds, samples[0], fmt)
        for sample in picks[split] if records and not full else samples:
            for path in ds.sample_files(sample, fmt):
                if path not in seen:
                    seen.add(path)
                    if not path.exists():
                        problems.add(path, f"{path}: missing (a file of sample {sample})")


# what a file's digests should be: (algorithm, expected hex digest, who expects it)
Wants = list[tuple[str, str, str]]


def _recorded(root: Path, full: bool, picked: list[Path],
              problems: _Problems) -> dict[Path, Wants]:
    """Sizes of every file of sciperf_files.json now; the SHA-256s to compare (module
    docstring: every recorded file, or the shared ones and a few of the samples read)."""
    try:
        recorded = filemanifest.read(root)
    except SciperfError as exc:
        problems.add(root / filemanifest.MANIFEST, str(exc))
        return {}
    sound: dict[Path, tuple[int, str]] = {}  # files of the recorded size: (size, sha256)
    for name, entry in recorded.items():
        path = root / name
        if problems.has(path):
            continue
        try:
            size = path.stat().st_size
        except OSError:
            if not unpack.unpacked_marker(path).is_file():  # an archive unpacked, removed
                problems.add(path, f"{path}: missing (recorded in {filemanifest.MANIFEST})")
            continue
        if size != entry["size"]:
            problems.add(path, f"{path}: {size} bytes, {filemanifest.MANIFEST} records "
                         f"{entry['size']}")
        else:
            sound[path] = size, entry["sha256"]
    if full:
        chosen = list(sound)
    else:
        read = [p for p in picked if p in sound]
        chosen = [p for p, (size, _) in sound.items() if p.parent == root and size <= SMALL]
        chosen += data_subset.choose(read, min(HASHED, len(read)), SAMPLE_SEED, "sha256")
    return {path: [("sha256", sound[path][1], filemanifest.MANIFEST)] for path in chosen}


def _published(sources: DataSources, root: Path, problems: _Problems) -> dict[Path, Wants]:
    """The published sizes now, and the published checksums to compare, of the source
    files present in `root`."""
    jobs: dict[Path, Wants] = {}
    for part in sources.parts:
        who = f"the published {part.name} checksum"
        for remote in part.https:
            path = root / remote.name
            if not path.is_file() or problems.has(path):
                continue
            size = path.stat().st_size
            if remote.size is not None and size != remote.size:
                problems.add(path, f"{path}: {size} bytes, {part.name} is published with "
                             f"{remote.size}")
                continue
            wants = [(algo, want.lower(), who) for algo, want in
                     (("md5", remote.md5), ("sha256", remote.sha256)) if want]
            if wants:
                jobs[path] = wants
    return jobs


def _digests(path: Path, algorithms: list[str]) -> tuple[dict[str, str], int]:
    """The hex digests of one file in one read, and its bytes."""
    digests = {algo: hashlib.new(algo) for algo in algorithms}
    size = 0
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            size += len(block)
            for digest in digests.values():
                digest.update(block)
    return {algo: d.hexdigest() for algo, d in digests.items()}, size


def _hash(jobs: dict[Path, Wants], report: Report, problems: _Problems, workers: int,
          show_progress: bool) -> None:
    """Compare each file's digests with what is expected of it."""
    paths = sorted(jobs)

    def one(path: Path) -> tuple[Path, dict[str, str] | None, int, str]:
        try:
            return (path, *_digests(path, sorted({w[0] for w in jobs[path]})), "")
        except OSError as exc:
            return path, None, 0, exc.strerror or str(exc)

    bar = Progress(len(paths), "verifying checksums", unit="files", enabled=show_progress)
    for path, got, size, error in data_subset.in_threads(one, paths, workers):
        bar.update()
        if got is None:
            problems.add(path, f"{path}: cannot be read ({error})")
            continue
        report.hashed_files += 1
        report.hashed_bytes += size
        for algo, want, who in jobs[path]:
            if got[algo] != want:
                problems.add(path, f"{path}: {algo} {got[algo]} differs from {who} {want}")


def _nbytes(value: Any) -> int:
    """The bytes of the arrays in what a reader returned (tuples, lists, dicts of them)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return 0


def _read(ds: Dataset, model: Any, root: Path, fmt: str, picks: Mapping[str, list[Path]],
          report: Report, problems: _Problems, workers: int, show_progress: bool) -> None:
    """The picked samples through the workload's reader; a sample whose files already have
    a problem is not read again."""
    try:
        reader = ds.reader(root, fmt, model)
    except SciperfError as exc:
        problems.add("reader", str(exc))
        return
    items = [(s, ds.sample_files(s, fmt)) for samples in picks.values() for s in samples]
    items = [(s, files) for s, files in items if not any(problems.has(f) for f in files)]

    def one(item: tuple[Path, list[Path]]) -> tuple[Path, int, str]:
        sample, files = item
        try:
            out = reader(sample)
        except Exception as exc:  # noqa: BLE001 - any failure to read is this sample's fault
            text = str(exc) if isinstance(exc, SciperfError) else \
                f"{sample}: cannot be read ({type(exc).__name__}: {exc})"
            return sample, 0, text
        if sample in files:
            return sample, sum(f.stat().st_size for f in files), ""
        return sample, _nbytes(out), ""

    bar = Progress(len(items), "reading samples", enabled=show_progress)
    for sample, size, error in data_subset.in_threads(one, items, workers):
        bar.update()
        if error:
            problems.add(sample, error)
        else:
            report.read_samples += 1
            report.read_bytes += size
