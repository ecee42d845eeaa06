"""`sciperf data subset`: a deterministic smaller set carved from a full one (DeepCAM's 512
training samples, a CosmoFlow or OC20 set small enough for one node).

Which samples: per split, ``n`` positions drawn without replacement from the split's
sorted sample list by a generator seeded with ``(seed, crc32(split))`` and kept in the
list's order. The choice depends only on that sorted list, ``seed`` (``cfg.seed``) and the
count: the same full set, seed and counts give the same subset on any machine, another
seed another one. Sample files keep their names, so the subset lists its samples in the
full set's order.

What is written: under ``--out``, every file of each chosen sample (``Dataset.sample_files``)
at its place relative to ``data.dir`` — hard-linked where ``--out`` shares the file
system, copied otherwise — and the files every sample shares. The contract names no such
files (staging leaves them in ``data.dir``; the driver opens them by building the reader
there), so the rule here is: every regular file at the top of ``data.dir``, sciperf's own
records and dot-files excepted (DeepCAM's ``stats.h5`` — the full training set's
statistics, which the reference normalises with — OC20's ``force_stats.json``).
Samples that are records inside container files (OC20's ``<container>/<index>``) are read
through the reader and written as new containers by the workload's ``pack`` hook; a
workload without one (OpenFold's chains, whose files are the whole layout) is refused in
one line. Then ``sciperf_files.json`` (the SHA-256 of every file written, each with its
source) and ``sciperf_subset.json`` (:func:`record`: the source set, the format, seed and
counts — what `sciperf data verify` holds the subset to).

The set is built in a folder beside ``--out`` and renamed into place when whole
(``sciperf.data.atomic.folder_aside``): a failure leaves nothing half-written. A hard link
shares the source's bytes; sciperf's writers replace files by renaming, never in place,
so rewriting the full set does not change the subset.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf import jsondata
from sciperf.data import atomic, filemanifest, manifest
from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads import get
from sciperf.workloads.base import Dataset

RECORD = "sciperf_subset.json"
VERSION = "sciperf-subset/1"
OWN_FILES = frozenset({filemanifest.MANIFEST, manifest.MANIFEST, RECORD})  # never carried
PACK_CHUNK = 4096  # records per container a subset writes (the reader's output in memory)

# (split folder, container number, format, samples as the reader returned them) → the
# files written: the workload's writer of record samples (Dataset.pack, when it has one)
Pack = Callable[[Path, int, str, Sequence[Any]], list[Path]]


@dataclass(frozen=True)
class Record:
    """What a subset is: carved from `source` in `fmt` with `seed`, holding `counts`."""

    source: str
    fmt: str
    seed: int
    counts: dict[str, int]


def read_record(root: str | Path) -> Record | None:
    """The subset record of `root` (None: not a subset); a malformed one is one line."""
    path = Path(root) / RECORD
    if not path.is_file():
        return None
    try:
        data = jsondata.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SciperfError(f"{path}: unreadable subset record ({exc})") from None
    counts = data.get("counts") if isinstance(data, dict) else None
    if not (isinstance(data, dict) and data.get("format") == VERSION
            and isinstance(counts, dict) and isinstance(data.get("data_format"), str)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in counts.values())):
        raise SciperfError(f"{path}: not a sciperf subset record ({VERSION})")
    return Record(str(data.get("source", "")), data["data_format"], int(data.get("seed", 0)),
                  dict(counts))


def choose(samples: Sequence[Path], n: int, seed: int, split: str) -> list[Path]:
    """`n` of the sorted `samples`, drawn with (seed, crc32(split)), in the list's order."""
    entropy = [seed & (2**64 - 1), zlib.crc32(split.encode())]
    rng = np.random.default_rng(np.random.SeedSequence(entropy))
    picked = np.sort(rng.choice(len(samples), size=n, replace=False))
    return [samples[int(i)] for i in picked]


def shared_files(root: Path) -> list[Path]:
    """The files every sample shares: the regular files at the top of the data directory,
    sciperf's own records and dot-files excepted."""
    return sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")
                  and p.name not in OWN_FILES)


def is_record(ds: Dataset, sample: Path, fmt: str) -> bool:
    """Whether a sample is a record inside files it shares (not among its own files)."""
    return Path(sample) not in ds.sample_files(Path(sample), fmt)


def _pack_hook(ds: Dataset) -> Pack | None:
    """The contract's writer of record samples (None: samples are whole files)."""
    return ds.pack


def run(cfg: Any, out: Path, counts: dict[str, int], force: bool) -> int:
    """`sciperf data subset workload=NAME data.dir=FULL --out SMALL train=N validation=M`."""
    workload = get(str(cfg.workload))
    ds = workload.dataset
    written = carve(ds, workload.model_spec(cfg), Path(str(cfg.data.dir)), Path(out),
                    str(cfg.data.format), counts, int(cfg.seed), force, pack=_pack_hook(ds),
                    workers=int(cfg.data.prepare_workers), name=workload.name)
    shown = " ".join(f"{split}={n}" for split, n in counts.items())
    print(f"wrote {out}: {shown} {cfg.data.format} samples of {cfg.data.dir} (seed "
          f"{cfg.seed}), {written} files; `sciperf data verify workload={workload.name} "
          f"data.dir={out}` checks it")
    return 0


def carve(ds: Dataset, model: Any, root: Path, out: Path, fmt: str, counts: dict[str, int],
          seed: int, force: bool = False, *, pack: Pack | None = None, workers: int = 4,
          name: str = "this workload", show_progress: bool = True) -> int:
    """Write the subset of `root` to `out` (module docstring); returns the files written."""
    if not root.is_dir():
        raise SciperfError(f"data.dir={root} does not exist")
    if fmt not in ds.formats:
        raise SciperfError(f"data.format={fmt} is not one of {', '.join(ds.formats)}")
    if unknown := sorted(set(counts) - set(ds.splits)):
        raise SciperfError(f"{unknown[0]}= is not a split of {name} "
                           f"({', '.join(ds.splits)})")
    _check_out(root, out, force)
    ds.reader(root, fmt, model)  # what every sample shares is there and sound
    chosen: dict[str, list[Path]] = {}
    for split in ds.splits:
        samples = ds.list_samples(root, split, fmt, 0)
        if pack is None and is_record(ds, samples[0], fmt):
            raise SciperfError(f"workload={name}: its {fmt} samples ({samples[0]}) are "
                               "records inside files other samples share, which subset "
                               "cannot carve")
        if split not in counts:
            raise SciperfError(f"{split}= missing: give a count for every split ({split} of "
                               f"{root} holds {len(samples)} {fmt} samples)")
        if counts[split] < 1:
            raise SciperfError(f"{split}={counts[split]}: a subset needs at least one sample "
                               "per split")
        if counts[split] > len(samples):
            raise SciperfError(f"{split}={counts[split]}: {root / split} holds only "
                               f"{len(samples)} {fmt} samples")
        chosen[split] = choose(samples, counts[split], seed, split)
    records = any(is_record(ds, picked[0], fmt) for picked in chosen.values())
    with atomic.folder_aside(out, replace=force) as tmp:
        if records:
            assert pack is not None
            written = _pack_all(ds, model, root, tmp, out, fmt, chosen, pack, workers,
                                show_progress)
        else:
            written = _link_all(ds, root, tmp, out, fmt, chosen, workers, show_progress)
        written.update(_link_files([(p, p.name) for p in shared_files(root)], tmp, out,
                                   workers, None))
        filemanifest.add_many(tmp, written)
        atomic.write_text(tmp / RECORD, json.dumps(
            {"format": VERSION, "source": str(root.absolute()), "data_format": fmt,
             "seed": seed, "counts": {split: counts[split] for split in ds.splits},
             "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")},
            indent=1), named=out / RECORD)
    return len(written)


def _check_out(root: Path, out: Path, force: bool) -> None:
    """`out` can take the subset: apart from `root`, empty unless `force`, writable."""
    a, b = root.resolve(), out.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise SciperfError(f"--out {out} overlaps data.dir={root}; write the subset elsewhere")
    if out.is_dir() and not force and any(out.iterdir()):
        raise SciperfError(f"--out {out} is not empty; pass --force to replace it")
    check_output_dir(out, "--out", aside=True)


def _link_all(ds: Dataset, root: Path, tmp: Path, out: Path, fmt: str,
              chosen: dict[str, list[Path]], workers: int,
              show_progress: bool) -> dict[str, dict[str, Any]]:
    """Every file of the chosen samples, linked or copied to its place under `tmp`."""
    files = [f for picked in chosen.values() for p in picked for f in ds.sample_files(p, fmt)]
    pairs = [(f, f.relative_to(root).as_posix()) for f in dict.fromkeys(files)]
    for src, _ in pairs:
        if not src.is_file():
            raise SciperfError(f"{src}: missing (a file of a chosen sample); `sciperf data "
                               f"verify data.dir={root}` lists what else is")
    bar = Progress(len(pairs), f"carving {out}", unit="files", enabled=show_progress)
    return _link_files(pairs, tmp, out, workers, bar)


def _link_files(pairs: list[tuple[Path, str]], tmp: Path, out: Path, workers: int,
                bar: Progress | None) -> dict[str, dict[str, Any]]:
    """(source, relative name) → the file under `tmp` and its manifest record."""
    for folder in sorted({(tmp / rel).parent for _, rel in pairs}):
        with atomic.failing_as(out / folder.relative_to(tmp)):
            folder.mkdir(parents=True, exist_ok=True)

    def one(pair: tuple[Path, str]) -> tuple[str, dict[str, Any]]:
        src, rel = pair
        dst = tmp / rel
        with atomic.failing_as(out / rel):
            try:
                os.link(src, dst)
            except OSError:  # another file system, or links refused: a copy
                shutil.copy2(src, dst)
        return rel, filemanifest.entry(dst.stat().st_size, filemanifest.sha256_of(dst),
                                       str(src.absolute()))

    done: dict[str, dict[str, Any]] = {}
    for rel, rec in in_threads(one, pairs, workers):
        done[rel] = rec
        if bar is not None:
            bar.update()
    return done


def _pack_all(ds: Dataset, model: Any, root: Path, tmp: Path, out: Path, fmt: str,
              chosen: dict[str, list[Path]], pack: Pack, workers: int,
              show_progress: bool) -> dict[str, dict[str, Any]]:
    """The chosen record samples read through the reader and written by `pack` as new
    containers, PACK_CHUNK records each, in the chosen order."""
    reader = ds.reader(root, fmt, model)
    bar = Progress(sum(map(len, chosen.values())), f"carving {out}", enabled=show_progress)
    done: dict[str, dict[str, Any]] = {}
    for split, picked in chosen.items():
        folder = tmp / split
        with atomic.failing_as(out / split):
            folder.mkdir(parents=True, exist_ok=True)
        for number, first in enumerate(range(0, len(picked), PACK_CHUNK)):
            part = picked[first:first + PACK_CHUNK]
            samples = list(in_threads(reader, part, workers))
            bar.update(len(samples))
            for path in pack(folder, number, fmt, samples):
                rel = path.relative_to(tmp).as_posix()
                done[rel] = filemanifest.entry(path.stat().st_size,
                                               filemanifest.sha256_of(path),
                                               f"{root / split} ({len(part)} records)")
    return done


def in_threads(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> Iterator[Any]:
    """fn over items with `workers` threads, results in order, at most 2 × workers in
    flight (a full-size sample is tens of MB); the first error is raised."""
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="sciperf-subset") as pool:
        window = 2 * max(1, workers)
        pending = [pool.submit(fn, item) for item in items[:window]]
        nxt = len(pending)
        while pending:
            result = pending.pop(0).result()
            if nxt < len(items):
                pending.append(pool.submit(fn, items[nxt]))
                nxt += 1
            yield result
