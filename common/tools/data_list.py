"""`sciperf data list`: what each workload's real dataset is made of and where it is
published, from the workload's declaration (``Dataset.sources``, its ``sources.py``).

The table is for reading (one block per workload, a line per part, its details indented
below, about 100 columns); ``--json`` prints the same parts as one JSON document
(``{"workloads": {name: {"counts", "parts"}}}``, each part its ``DataPart.record()``) for
scripts. Both are built from :func:`records` and :func:`table`, so they hold the same
parts. A fact the declaration leaves None was never published and reads "not published".
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from sciperf import workloads
from sciperf.data.sources import DataPart, DataSources

WIDTH = 100
DETAIL = " " * 6  # indent of a part's details; a part's own line is indented by 2
UNITS = ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB"))
NONE_DECLARED = "no published sources declared"


def sources_of(names: Iterable[str]) -> dict[str, DataSources]:
    """Each named workload's declaration (all registered workloads when `names` is empty);
    an unknown name is sciperf's one-line error."""
    chosen = list(names) or list(workloads.names())
    return {name: workloads.get(name).dataset.sources for name in chosen}


def human_size(size: int | None) -> str:
    """Bytes in decimal units, three significant digits ("1.7 TB"), or "not published"."""
    if size is None:
        return "not published"
    for scale, unit in UNITS:
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def _samples(samples: Mapping[str, int]) -> str:
    if not samples:
        return "no samples listed"
    return " ".join(f"{split}={n:,}" for split, n in samples.items())


def _wrapped(label: str, text: str) -> list[str]:
    """`label: text` wrapped at WIDTH under the detail indent (URLs are never split)."""
    return textwrap.wrap(f"{label}: {text}", WIDTH, initial_indent=DETAIL,
                         subsequent_indent=DETAIL + "  ", break_long_words=False,
                         break_on_hyphens=False)


def _source_lines(part: DataPart) -> list[str]:
    """HTTPS (the URL, or the count and the first URL) and Globus (endpoint:path)."""
    lines = []
    if part.https:
        first = part.https[0]
        count = len(part.https)
        head = "1 file" if count == 1 else f"{count} files, the first"
        sums = ", ".join(f"{kind} {value}" for kind, value in
                         (("md5", first.md5), ("sha256", first.sha256)) if value)
        lines.append(f"{DETAIL}https: {head}{' (' + sums + ')' if sums else ''}:")
        lines.append(f"{DETAIL}  {first.url}")
    if part.globus is not None:
        g = part.globus
        lines.append(f"{DETAIL}globus: {g.endpoint}:{g.path}")
        where = "data.dir" if g.name == "." else f"data.dir/{g.name}"
        lines.append(f"{DETAIL}  lands in {where}")
    if not lines:
        lines.append(f"{DETAIL}source: not published")
    return lines


def part_lines(part: DataPart) -> list[str]:
    """One part: its line (name, format, size, files, samples) and its details."""
    files = ("files not published" if part.files is None
             else f"{part.files:,} file{'' if part.files == 1 else 's'}")
    lines = [f"  {part.name:<12} {part.fmt:<10} {human_size(part.size_bytes):>13}  "
             f"{files}  {_samples(part.samples)}"]
    lines += _wrapped("what", part.description)
    lines += _source_lines(part)
    lines += _wrapped("closed", part.closed or "not stated")
    lines += _wrapped("mini", part.mini or "not stated")
    lines += _wrapped("reference", part.reference or "none")
    return lines


def table(sources: Mapping[str, DataSources]) -> list[str]:
    """The readable listing: a block per workload (its reference counts, then its parts)."""
    lines: list[str] = []
    for name, declared in sources.items():
        if lines:
            lines.append("")
        if not declared.parts:
            lines.append(f"{name}: {NONE_DECLARED}")
            continue
        counts = _samples(declared.counts) if declared.counts else "not declared"
        lines.append(f"{name}: reference counts {counts}")
        for part in declared.parts:
            lines += part_lines(part)
    return lines


def records(sources: Mapping[str, DataSources]) -> dict[str, Any]:
    """The JSON document: per workload its reference counts and its parts' records."""
    return {"workloads": {name: {"counts": dict(declared.counts),
                                 "parts": [part.record() for part in declared.parts]}
                          for name, declared in sources.items()}}


def run(workloads: list[str], as_json: bool) -> int:
    """Print the named workloads' parts (every workload when none is named)."""
    sources = sources_of(workloads)
    if as_json:
        print(json.dumps(records(sources), indent=1))
    else:
        print("\n".join(table(sources)))
    return 0
