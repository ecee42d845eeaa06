"""What the report knows about the machine of a group: a submission's
`systems/<system>.json`, or the system section of our own run's summary.json.

The report compares systems by what a node holds (accelerators, host memory, local
storage), so each fact is read where the description states it and is None where it does
not; the caller turns a None into one note naming the file and the field, never a zero.
Byte sizes are written by hand in the descriptions ("2 TB", "512 GB DDR4", "32GiB",
"2x 1.92TB NVMe SSD + 30TB U.2 NVMe SSD", "980Gb"): a sum of `[N x] <number> <unit>`
terms, decimal units for B and Gb-style spellings, binary ones for KiB… PiB.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf.results.score import Group
from sciperf.results.tree import DESCRIPTION, SYSTEMS, system_json, tree_place

UNITS = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_SIZE = re.compile(r"(?:(\d+)\s*[x×]\s*)?(\d+(?:\.\d+)?)\s*([kmgtp])(i?)b\b", re.I)
FIELDS = {"accelerator": "accelerator_model_name", "accelerators_per_node":
          "accelerators_per_node", "host_memory": "host_memory_capacity",
          "local_storage": "host_storage_capacity"}


@dataclass(frozen=True)
class SystemFacts:
    """A node of the group's system. `missing`: the fields the source does not state."""

    source: str  # the file the facts come from (or why there is none)
    accelerator: str | None = None
    accelerators_per_node: int | None = None
    host_memory_bytes: float | None = None
    local_storage_bytes: float | None = None
    host_processor: str | None = None
    framework: str | None = None
    peak_flops_per_node: float | None = None  # our runs: system.peak_flops
    missing: tuple[str, ...] = ()
    job_nodes: int | None = None  # a description's number_of_nodes: the whole job's
    kind: str = f"{SYSTEMS}/<system>{DESCRIPTION}"  # what the source is, as notes name it
    problem: str | None = None  # why the source gave no facts at all


def parse_bytes(text: Any) -> float | None:
    """Bytes of a hand-written size ("2x 1.92TB NVMe SSD + 30TB U.2"), None when none is
    written: each `+`-separated part counts its first size, times its `N x`."""
    if not isinstance(text, str):
        return None
    total, found = 0.0, False
    for part in text.split("+"):
        match = _SIZE.search(part)
        if match:
            count, number, prefix, binary = match.groups()
            scale = 1024 ** ("kmgtp".index(prefix.lower()) + 1) if binary \
                else UNITS[prefix.lower()]
            total += int(count or 1) * float(number) * scale
            found = True
    return total if found else None


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return None if text.upper() in ("", "N/A", "NA", "NONE", "-") else text


def from_description(path: Path) -> SystemFacts:
    """The facts of a `systems/<system>.json` (a missing or unreadable file: no facts)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return SystemFacts(str(path), missing=tuple(FIELDS.values()), problem="is missing")
    except (OSError, ValueError, RecursionError) as exc:
        return SystemFacts(str(path), missing=tuple(FIELDS.values()),
                           problem=f"is unreadable ({type(exc).__name__})")
    if not isinstance(data, dict):
        return SystemFacts(str(path), missing=tuple(FIELDS.values()),
                           problem="is not a JSON object")
    facts = {"accelerator": _text(data.get(FIELDS["accelerator"])),
             "accelerators_per_node": _int(data.get(FIELDS["accelerators_per_node"])),
             "host_memory": parse_bytes(data.get(FIELDS["host_memory"])),
             "local_storage": parse_bytes(data.get(FIELDS["local_storage"]))}
    apn = facts["accelerators_per_node"]
    missing = tuple(FIELDS[k] for k, v in facts.items()
                    if v is None and not (k == "accelerator" and apn == 0))
    return SystemFacts(str(path), facts["accelerator"], apn, facts["host_memory"],
                       facts["local_storage"], _text(data.get("host_processor_model_name")),
                       _text(data.get("framework")), missing=missing,
                       job_nodes=_int(data.get("number_of_nodes")))


def from_summary(summary: dict[str, Any] | None, path: Path) -> SystemFacts:
    """Our own run: the system config its summary.json recorded (no memory or storage
    fields exist there; a peak per node does where the user gave system.peak_flops)."""
    system = ((summary or {}).get("config") or {}).get("system") or {}
    apn = _int(system.get("accelerators_per_node"))
    peak = system.get("peak_flops")
    return SystemFacts(str(path), None, apn, None, None, None,
                       (summary or {}).get("framework"),
                       float(peak) if isinstance(peak, int | float) and peak > 0 else None,
                       missing=("host memory", "local storage"),
                       kind="summary.json's system config")


def describe(group: Group) -> SystemFacts:
    """The facts of the system a group ran on."""
    first = group.runs[0]
    place = tree_place(first.path)
    if place is not None:
        return from_description(system_json(place.org_dir, place.system))
    return from_summary(first.summary, first.path.parent)


def series_key(group: Group, facts: SystemFacts) -> tuple[Any, ...]:
    """Groups of one machine at several scales share this key: a submission names each
    scale as its own system, so the key is what the descriptions say of the node (org,
    accelerator and count, host processor, framework), not the name."""
    if tree_place(group.runs[0].path) is None:
        return ("ours", group.series)
    return (group.org, facts.accelerator, facts.accelerators_per_node, facts.host_processor,
            facts.framework)


def series_label(group: Group) -> str:
    """The group's system name with its scale written as `*` (dgxa100_n64 → dgxa100_n*)."""
    if tree_place(group.runs[0].path) is None:
        return group.series
    log = group.runs[0].log
    nodes, ranks = log.value("number_of_nodes"), log.ranks
    label = group.system
    for number in {str(n) for n in (nodes, ranks) if isinstance(n, int)}:
        label = re.sub(rf"(?<![0-9.]){number}(?![0-9])", "*", label)
    return label
