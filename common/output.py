"""A run's output directory: usable, and never silently mixed with an earlier run.

`check`, `score` and `package` read every ``result_*.txt`` / ``summary*.json`` of a run
directory, so a run must not write beside the records of another: a stale
``result_1.txt`` of an earlier 2-instance run would be scored as a throughput job that
never ran, and a run that fails at once would replace an earlier good ``summary.json``.
An ``output_dir`` holding run records is refused unless ``train.overwrite=true``, which
deletes those records first, or the run resumes from a checkpoint there
(``train.resume=auto``), which continues them. Other files there (a rendered job script,
``slurm-*.out``) are the job's, not a run's, and stay.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError

# what a run writes (the records check/score/package read, and the weights it saves)
RUN_RECORDS = ("result_*.txt", "summary.json", "summary_*.json", "weights_*.npz",
               ".summary*.json.tmp", "checkpoints")


def run_records(out: Path) -> list[Path]:
    """The run records in `out`, sorted (none when it does not exist)."""
    if not out.is_dir():
        return []
    return sorted({p for pattern in RUN_RECORDS for p in out.glob(pattern)})


def usable(out: Path, key: str = "output_dir") -> Path:
    """`out` exists (created if needed) and takes new files; one line naming it if not (a
    file in the way, a path below a file, /proc, a read-only place): the same probe as
    every other output folder (:func:`sciperf.data.layout.check_output_dir`)."""
    check_output_dir(out, f"{key}=")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SciperfError(f"{key}={out} cannot be created: {exc.strerror or exc}") from None
    return out


_NUMBERED = re.compile(r"(?:result_|summary_|weights_instance)(\d+)[._]")


def owner(path: Path, instances: int) -> int:
    """The instance whose rank 0 answers for a record: its own numbered files; instance 0
    for everything else (single-run names in a throughput run, numbers beyond the run's
    instances — stale records of an earlier, larger run)."""
    if instances == 1:
        return 0
    m = _NUMBERED.match(path.name)
    number = int(m.group(1)) if m else -1
    return number if 0 <= number < instances else 0


def claim(out: Path, overwrite: bool, writer: bool, instance: int = 0,
          instances: int = 1, resuming: bool = False) -> Path:
    """Make `out` ready for a new run. Every rank checks the path; the writing rank of each
    instance (its rank 0) refuses the earlier run records it answers for (:func:`owner`),
    or deletes them when `overwrite`. Other ranks do not look: a writer may already have
    started, and instances of a throughput run write side by side."""
    usable(out)
    if not writer or resuming:  # resuming continues the records that are there
        return out
    found = [p for p in run_records(out) if owner(p, instances) == instance]
    if found and not overwrite:
        names = ", ".join(p.name for p in found[:4]) + (", …" if len(found) > 4 else "")
        raise SciperfError(f"output_dir={out} already holds a run ({names}): use a new "
                           "directory, or train.overwrite=true to replace it")
    for path in found:
        if path.is_dir():  # checkpoints/: a later resume must not continue the old run
            shutil.rmtree(path, ignore_errors=True)
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return out
