"""The record of what `sciperf prepare` generated in a data directory.

`<dir>/sciperf_dataset.json` maps each format to the request that wrote it. The entry is
written last (atomically), so a dataset is complete only when it exists and equals the
request; before regenerating, the entry and the format's old samples are removed, so a run
with another seed, size or count leaves no stale files that would sort among the new ones.
Shared by every workload's synthetic generator.

An entry describes a dataset by what decides its bytes (the request's seed, sizes, counts…),
never by where it lies: a complete set copied elsewhere, or bound read-only at another path
(``apptainer exec --bind DATA:/data:ro``), is the same set — ready, not rewritten. A
request's ``root`` says where to write; it is not recorded, and the absolute ``root`` that
manifests written before held is ignored when they are read (they stay valid).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sciperf import jsondata
from sciperf.data import atomic
from sciperf.data.layout import SampleLayout, sample_files
from sciperf.errors import SciperfError
from sciperf.progress import Progress

MANIFEST = "sciperf_dataset.json"
LOCATION = "root"  # a request's key saying where the set is written, not what it holds


def content(request: Any) -> Any:
    """What a manifest records of `request`: the request without where the set lies."""
    if not isinstance(request, dict):
        return request
    return {k: v for k, v in request.items() if k != LOCATION}


def _read(root: Path) -> dict[str, Any]:
    try:
        data = jsondata.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {fmt: content(request) for fmt, request in data.items()}


def _write(root: Path, data: dict[str, Any]) -> None:
    """The manifest, written aside and renamed: a reader finds the old one or the new one,
    and a write the disk refuses is one line naming it, no temporary left."""
    atomic.write_text(root / MANIFEST, json.dumps(data, indent=2))


def entry(root: str | Path, fmt: str) -> Any:
    """The request the generator recorded for `fmt` in `root`, without a location (None:
    none)."""
    return _read(Path(root)).get(fmt)


def complete(root: str | Path, fmt: str, request: dict[str, Any],
             layout: SampleLayout | None = None, counts: dict[str, int] | None = None) -> bool:
    """True when `root` holds a finished dataset of `fmt` made with exactly `request` —
    and, given the layout and the split counts, still holds that many samples of it (a
    deleted split or file was "dataset ready", then a refusal in train pointing back at
    prepare)."""
    root = Path(root)
    if _read(root).get(fmt) != content(request):
        return False
    if layout is None or counts is None:
        return True
    for split, count in counts.items():
        folder = layout.split_dir(root, split)
        names = [p for p in folder.iterdir() if p.name.endswith(layout.suffix[fmt])
                 and not p.name.startswith(".")] if folder.is_dir() else []
        if len(names) != count or not all(f.is_file() for p in names
                                           for f in sample_files(p, fmt)):
            return False
    return True


def record(root: str | Path, fmt: str, request: dict[str, Any]) -> None:
    """Mark the dataset of `fmt` complete (the generator's last step)."""
    data = _read(Path(root))
    data[fmt] = content(request)
    _write(Path(root), data)


def claim(root: Path, present: Sequence[Path]) -> None:
    """Before a generator deletes anything in `root`: files of the format there without
    the manifest are someone's dataset (the reference's files, a download), which a
    synthetic prepare deleted and replaced in silence — refused; otherwise the manifest is
    written first (empty when new), the generator's mark, so that an interrupted first
    generation is still the generator's to replace."""
    if not (root / MANIFEST).is_file():
        if present:
            raise SciperfError(f"{present[0]}: a dataset sciperf's generator did not write "
                               f"(no {MANIFEST} in {root}); refusing to replace it — train on "
                               "it with data.source=existing, or choose another data.dir")
        with atomic.folder_for(root):  # a mark that cannot be written leaves no new folder
            _write(root, {})


def _samples(root: Path, fmt: str, layout: SampleLayout) -> list[Path]:
    """The sample files of `fmt` in every split (data and labels), hidden temporaries too."""
    found = []
    for split in layout.splits:
        folder = root / split
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.name.endswith(layout.suffix[fmt]):
                    found += sample_files(path, fmt)
    return found


def forget(root: str | Path, fmt: str, layout: SampleLayout | None,
           present: Sequence[Path] = ()) -> None:
    """Drop the entry of `fmt` and delete that format's samples (data and labels); with no
    layout (container formats delete their own `present` files) only the entry. Refused
    where the generator has not written before (:func:`claim`)."""
    root = Path(root)
    samples = _samples(root, fmt, layout) if layout is not None else []
    claim(root, [*samples, *present])
    data = _read(root)
    data.pop(fmt, None)
    _write(root, data)
    for file in samples:
        file.unlink(missing_ok=True)


def rewrite(root: str | Path, fmt: str, layout: SampleLayout, counts: dict[str, int],
            what: str, show_progress: bool = True) -> Iterator[tuple[Path, str, int]]:
    """Start a generation: check the counts, forget the old set of `fmt`, then yield
    (split folder, split, index) for every sample to write, with a progress bar. The
    caller writes each sample and, last, :func:`record`s the request."""
    if any(n <= 0 for n in counts.values()):
        raise SciperfError("data.train_samples and data.eval_samples must be positive")
    root = Path(root)
    forget(root, fmt, layout)
    bar = Progress(sum(counts.values()), f"generating {fmt} {what}", enabled=show_progress)
    for split, count in counts.items():
        folder = layout.split_dir(root, split)
        with atomic.failing_as(folder):
            folder.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            yield folder, split, i
            bar.update()
