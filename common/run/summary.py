"""What a run leaves for readers: summary.json (written by rank 0, atomically, strict JSON),
and the one line an ended run prints about its records — which were written, which a
refused write left out, and the single line, naming the file, that a failed write ends
with.

summary.json's readers (`sciperf.results.summary`) divide by its numbers; a NaN there is
written as null. Every write here fails with a SciperfError naming the file, so the
closing records of an abort can try each record on its own and report what they lost.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sciperf import __version__
from sciperf.config_keys import config_hash, to_container
from sciperf.data import atomic
from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError
from sciperf.info import git_hash
from sciperf.run.files import result_file, summary_file
from sciperf.run.state import RunState
from sciperf.workloads.base import Workload


def write_summary(out: Path, cfg: Any, workload: Workload, backend: Any, state: RunState,
                  status: str,
                  t0: float, run_start: float | None, info: RankInfo) -> dict[str, Any]:
    """summary.json: the machine-readable outcome (written by rank 0, atomically)."""
    end = time.time()
    summary = {
        "status": status,
        "benchmark": workload.name,
        "framework": cfg.framework.name,
        "experiment": cfg.experiment,
        "precision": cfg.precision,
        "precision_choice": state.precision.as_dict() if state.precision else None,
        "malloc": state.malloc,
        "threads": layout.as_dict() if (layout := getattr(backend, "threads", None)) else None,
        # a resumed run is not one uninterrupted timed run: never a closed result
        "division": "open" if state.resumed else cfg.system.submission_division,
        "resumed": state.resumed,
        "epochs": state.epochs,
        "time_to_train_s": (end - run_start) if run_start else None,
        "run_start_unix": run_start,
        "run_stop_unix": end if run_start else None,
        "init_s": (run_start or end) - t0,
        "samples_per_s": state.train_samples_seen / state.train_seconds
        if state.train_seconds else None,
        "metric_name": workload.metric.key,
        "metric_label": workload.metric.name,  # the human name, e.g. "validation MAE"
        "final_metric": state.metric,
        "target": float(cfg.train.target),
        "target_reached": state.success,
        "parameter_count": backend.parameter_count() if backend and state.epochs else None,
        "global_batch_size": int(cfg.train.global_batch_size),
        "world_size": state.world,
        "rank": info.rank,
        "instance": info.instance,
        "instances": info.instances,
        "result_file": result_file(info.instance),
        "staging": state.staging.as_dict() if state.staging else None,
        "seed": int(cfg.seed),
        "config_hash": config_hash(cfg),
        "history": state.history,
        "versions": {"sciperf": __version__, "git": git_hash(),
                     "python": platform.python_version(),
                     **(backend.info() if backend else {}), "image": state.image},
        "host": platform.node(),
        "config": to_container(cfg),
    }
    if info.rank == 0:
        name = summary_file(info.instance, info.instances)
        text = json.dumps(json_safe(summary), indent=2, default=str, allow_nan=False)
        atomic.write_text(out / name, text)  # a full disk: one line, no temporary left
    return summary


def json_safe(value: Any) -> Any:
    """`value` with every NaN/Inf float as None: JSON has no NaN, and a bare `NaN` in
    summary.json breaks every strict reader (jq, JavaScript, other languages)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def records_line(out: Path, info: RankInfo, run_start: float | None) -> str:
    """'run_stop aborted and summary.json written to OUT' on the writing rank, else why not."""
    if info.rank != 0:
        return f"rank {info.rank} writes no MLLOG record; its instance's rank 0 does"
    summary = summary_file(info.instance, info.instances)
    if run_start is None:
        return f"{summary} written to {out} (stopped before run_start)"
    return f"run_stop aborted and {summary} written to {out}"


@contextlib.contextmanager
def kept_in(unwritten: list[str]) -> Iterator[None]:
    """One closing record of an aborted run: a write it cannot make is kept in
    `unwritten` (the run already failed: the other records are still tried)."""
    try:
        yield
    except SciperfError as exc:
        unwritten.append(str(exc))


def closing_line(line: str, unwritten: list[str]) -> str:
    """What the closing records left, for the CLI's last line: the records line, or which
    writes failed (a summary.json that could not be written still says "running")."""
    if not unwritten:
        return line
    return "closing records not written: " + "; ".join(dict.fromkeys(unwritten))


# a write the disk refused (full, quota, file size limit, read-only)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def write_failure(exc: BaseException, out: Path, unwritten: list[str]) -> SciperfError | None:
    """The one line a failed write ends a run with (None: `exc` is no failed write).

    The MLLOG, summary.json, checkpoints and weights say it themselves (a SciperfError naming
    the file); another write raises the OS's error, named here in sciperf.data.atomic's
    words. Closing records the disk refused too are added: the line is all the user sees of
    them.
    """
    if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
        message = f"{exc.filename}: cannot be written ({atomic.why(exc)})" if exc.filename \
            else f"a write failed: {exc.strerror or exc} (is output_dir={out} full?)"
    elif type(exc) is SciperfError and unwritten:
        message = str(exc)
    else:
        return None
    left = [u for u in dict.fromkeys(unwritten) if u != message]
    return SciperfError(f"{message}; closing records not written: {'; '.join(left)}"
                        if left else message)
