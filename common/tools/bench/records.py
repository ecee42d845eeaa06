"""What the bench writes and sums up: `<workload>.json` and the partial file the rows land
in until the bench completes (each written aside and renamed, never half a file), and the
round statistics of `bench.rounds=` (medians, spread, per-round ratios).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from sciperf.data import atomic
from sciperf.tools.bench.rows import significant


class Outputs:
    """`<workload>.json` and the partial file the rows land in until the bench
    completes."""

    def __init__(self, out: Path, workload: str) -> None:
        self.path = out / f"{workload}.json"
        self.partial = out / f"{workload}.json.partial"

    def clear_partial(self) -> None:
        """A partial file of an earlier bench is not this bench's rows."""
        self.partial.unlink(missing_ok=True)

    def save(self, result: dict[str, Any]) -> None:
        """The rows so far, in the partial file (a later row killed, OOM, keeps them)."""
        _write_json(self.partial, result)

    def finish(self, result: dict[str, Any]) -> None:
        """The complete bench replaces `<workload>.json`; the partial file goes."""
        _write_json(self.path, result)
        self.partial.unlink(missing_ok=True)
        print(f"wrote {self.path}")

    def left(self) -> str:
        """What an unfinished bench left, in words."""
        kept = f"{self.path} is as it was" if self.path.exists() else f"no {self.path}"
        if self.partial.exists():
            return f"the rows done are in {self.partial}; {kept}"
        return f"no row finished; {kept}"


def _write_json(path: Path, result: dict[str, Any]) -> None:
    """`result` written aside and renamed: a reader never sees half a file, and a write
    the disk refuses is one line naming `path`, with no temporary (nor a folder made for
    it) left behind."""
    with atomic.folder_for(path.parent):
        atomic.write_text(path, json.dumps(result, indent=2))


def round_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each training row's rate over the rounds: the median, the spread (fastest over
    slowest round) and its ratio to the round's first row of the same case, round by
    round and their median.

    Why pairs: a shared VM's speed drifts by a quarter from one minute to the next (a
    whole model step 3.6–5.1 s with nothing else running), as much as the differences
    between frameworks and precisions a user compares; rows timed back to back in one
    round see the same machine, so their ratio holds where the rates themselves do
    not."""
    rate = {(row["round"], _key(row)): float(row["samples_per_s"]) for row in rows}
    rounds = sorted({n for n, _ in rate})
    keys = [key for n, key in rate if n == rounds[0]]
    lines = []
    for key in keys:
        base_key = next(k for k in keys if k[1] == key[1])
        rates = [rate[n, key] for n in rounds]
        bases = [rate[n, base_key] for n in rounds]
        if min(rates + bases) <= 0:  # (a row that timed nothing has no ratio)
            continue
        ratios = [r / b for r, b in zip(rates, bases, strict=True)]
        lines.append({"framework": key[0], "model": key[1], "precision": key[2],
                      "samples_per_s": rates,
                      "median_samples_per_s": significant(statistics.median(rates)),
                      "spread": round(max(rates) / min(rates), 3),
                      "vs": " ".join(base_key), "ratio": [round(r, 4) for r in ratios],
                      "median_ratio": round(statistics.median(ratios), 4)})
    return lines


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["framework"], row["model"], row["precision"]


def _round(n: int, rounds: int) -> str:
    """`, round 2/5` on a row's line when the bench runs rounds."""
    return f", round {n}/{rounds}" if rounds > 1 else ""
