"""A run's output directory: usable, and never silently mixed with an earlier run.

`check`, `score` and `package` read every ``result_*.txt`` / ``summary*.json`` of a run
directory, so a run must not write beside the records of another: a stale
``result_1.txt`` of an earlier 2-instance run would be scored as a throughput job that
never ran, and a run that fails at once would replace an earlier good ``summary.json``.
An ``output_dir`` holding run records is refused unless ``train.overwrite=true``, which
deletes those records first, or the run resumes from a checkpoint there
(``train.resume=auto``), which continues them. Other files there (a rendered job script,
``slurm-*.out``) are the job's, not a run's, and stay.

A record that cannot be deleted ends the claim in one line: kept in silence it would mix
two runs (an earlier run's checkpoint outliving the overwrite, a later resume continuing it).
``checkpoints/`` may be a link the user made to other storage (a scratch filesystem): the
link stays, the checkpoints in it go, and nothing else its target holds is touched.
"""

from __future__ import annotations

import re
from pathlib import Path

from sciperf import checkpoint
from sciperf.data import atomic
from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError

# what a run writes (the records check/score/package read, and the weights it saves); its
# checkpoints folder is one when it holds checkpoints (:func:`sciperf.checkpoint.entries`)
RUN_RECORDS = ("result_*.txt", "summary.json", "summary_*.json", "weights_*.npz",
               ".summary*.json.tmp")


def run_records(out: Path) -> list[Path]:
    """The run records in `out`, sorted (none when it does not exist). An empty
    ``checkpoints/`` (a link made for the first run) is none."""
    if not out.is_dir():
        return []
    found = {p for pattern in RUN_RECORDS for p in out.glob(pattern)}
    if checkpoint.entries(out):
        found.add(checkpoint.folder(out))
    return sorted(found)


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
    # the checkpoints first: a refusal then leaves the earlier run's logs beside what is
    # left of them, never its checkpoints without the records that say what they are
    for path in sorted(found, key=lambda p: p != checkpoint.folder(out)):
        try:
            _remove(path, out)
        except OSError as exc:  # (rmtree names a file inside by its name alone)
            inner = f": {exc.filename}" if exc.filename and Path(exc.filename) != path else ""
            raise SciperfError(f"output_dir={out}: train.overwrite=true cannot remove {path} "
                               f"({exc.strerror or exc}{inner}): delete the earlier run by "
                               "hand, or use a new directory") from None
    return out


def _remove(path: Path, out: Path) -> None:
    """One earlier run record, gone. A linked checkpoints folder keeps its link and loses
    its checkpoints (shutil.rmtree refuses a link)."""
    if path == checkpoint.folder(out) and path.is_symlink():
        for entry in checkpoint.entries(out):
            atomic.remove(entry)
        return
    atomic.remove(path)
