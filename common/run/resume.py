"""A run that continues another (`train.resume=auto`) and the checkpoints that make it
possible: where the run resumes from, the MLLOG it continues, the driver state it restores,
and the checkpoints it writes (after every train.checkpoint_every-th epoch, or when a stop
was asked for).

The backend saves and loads its own state (model, optimizer, RNG); everything else of a
checkpoint — driver.json, the MLLOG so far, the manifest — is the driver's, written through
`sciperf.checkpoint`, so a new workload checkpoints by construction.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sciperf import checkpoint, jsondata, output
from sciperf.backends import EpochProgress
from sciperf.data import atomic
from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError
from sciperf.run.files import result_file, summary_file
from sciperf.run.state import RunState
from sciperf.run.summary import json_safe

DIED = ("running", "error")  # summary statuses of a run that did not end by itself


def resume_point(cfg: Any, out: Path,
                 info: RankInfo) -> tuple[checkpoint.Found | None, bool]:
    """The checkpoint `train.resume=auto` continues from (None: start anew), checked
    against this run's configuration and rank count; skipped ones named on rank 0. The
    flag: the earlier run died before its first checkpoint, so the new one takes its place
    (a requeued job preempted that early failed on its own records every time)."""
    every = int(cfg.train.checkpoint_every)
    if (every or cfg.train.resume) and info.instances > 1:
        raise SciperfError("train.checkpoint_every / train.resume: not available in "
                           f"throughput mode (instances={info.instances})")
    if every or cfg.train.resume:  # a linked checkpoints/ whose storage is not there
        checkpoint.check_folder(out)
    if cfg.train.resume != "auto":
        return None, False
    earlier = _earlier_status(out / summary_file(info.instance, info.instances))
    if earlier == "success":  # it met the target; a resume would rewrite it as open
        raise SciperfError(f"output_dir={out} holds a run that reached its target: "
                           "train.resume=auto has nothing to continue (a new run needs a new "
                           "directory or train.overwrite=true)")
    found = checkpoint.latest(out)
    if found is None:
        dead = earlier in DIED
        if info.rank == 0 and (dead or not output.run_records(out)):
            what = f"; the earlier run (status {earlier}) ended before it" if dead else ""
            print(f"train.resume=auto: no checkpoint in {checkpoint.folder(out)}{what}; "
                  "starting anew", flush=True)
        return None, dead
    checkpoint.check_matches(found, checkpoint.resume_hash(cfg), info.world,
                             checkpoint.resume_config(cfg))
    if found.epoch >= int(cfg.train.max_epochs):
        raise SciperfError(f"{found.path}: the run already trained {found.epoch} epochs, "
                           f"train.max_epochs={cfg.train.max_epochs}: nothing left to resume "
                           "(raise train.max_epochs to train on)")
    if info.rank == 0:
        for path, why in found.skipped:
            print(f"skipped checkpoint {path}: {why}", flush=True)
        steps = (found.driver.get("epoch_progress") or {}).get("steps")
        inside = f", {steps} steps into epoch {found.epoch + 1}" if steps else ""
        print(f"resuming from {found.path} (after epoch {found.epoch}{inside})", flush=True)
    return found, False


def _earlier_status(summary: Path) -> str | None:
    """The status an earlier run's summary.json says (None: none, or unreadable — the
    output_dir claim then speaks for the records)."""
    try:
        data = jsondata.loads(summary.read_text())
    except (OSError, ValueError):
        return None
    status = data.get("status") if isinstance(data, dict) else None
    return status if isinstance(status, str) else None


def continue_log(found: checkpoint.Found, log: Path) -> None:
    """The MLLOG as it stood at the checkpoint, division open: MLPerf times one
    uninterrupted run, so a resumed run is not a closed result (summary.json says why)."""
    saved = found.path / checkpoint.MLLOG
    lines = saved.read_text().splitlines() if saved.is_file() else []
    out = []
    for line in lines:
        if line.startswith(":::MLLOG ") and '"submission_division"' in line:
            record = json.loads(line[len(":::MLLOG "):])
            record["value"] = "open"
            line = ":::MLLOG " + json.dumps(record)
        out.append(line)
    # a full disk: one line naming the log, which stands as it was, no temporary left
    atomic.write_text(log, "".join(f"{line}\n" for line in out))


def restore_driver(found: checkpoint.Found, state: RunState) -> None:
    """The driver's state of the checkpoint (checked by checkpoint.latest): epochs,
    history, samples and seconds, run_start — set before the backend's state is loaded, so
    a resume that fails there still closes the continued log with its run_stop."""
    d = found.driver
    state.epochs, state.history = int(d["epochs"]), list(d["history"])
    state.train_samples_seen, state.train_seconds = int(d["train_samples_seen"]), \
        float(d["train_seconds"])
    state.metric, state.run_start = d.get("metric"), d.get("run_start")
    if d.get("epoch_progress"):
        state.progress = EpochProgress(**d["epoch_progress"])
    state.resumed = [*d.get("resumed", []), {"from_epoch": found.epoch,
                                             "checkpoint": str(found.path),
                                             "at_unix": time.time()}]


def restore_backend(found: checkpoint.Found, backend: Any) -> None:
    """The backend's state (weights, optimizer, RNG) of the checkpoint."""
    backend.load_state(found.path)


def write_checkpoint(cfg: Any, out: Path, state: RunState, info: RankInfo,
                     progress: EpochProgress | None = None, forced: bool = False) -> None:
    """Rank 0 writes a checkpoint (replicas hold the same weights; every rank's RNG started
    from the same seed): after every train.checkpoint_every-th epoch, or when a stop was
    asked for (SIGUSR1, SIGTERM) — mid-epoch with the epoch's `progress`, or `forced` at
    an epoch's end when the request came during its evaluation."""
    every = int(cfg.train.checkpoint_every)
    due = forced or progress is not None or (every and not state.epochs % every
                                              and not state.success)
    if not due or info.rank != 0:
        return
    start = time.time()
    driver = {"epochs": state.epochs, "history": state.history,
              "train_samples_seen": state.train_samples_seen,
              "train_seconds": state.train_seconds, "metric": state.metric,
              "run_start": state.run_start, "resumed": state.resumed,
              "epoch_progress": asdict(progress) if progress else None,
              "config_hash": checkpoint.resume_hash(cfg), "world": state.world,
              "config": checkpoint.resume_config(cfg),
              "workload": cfg.workload, "framework": cfg.framework.name}
    path = checkpoint.write(out, state.epochs, state.backend, json_safe(driver),
                            out / result_file(info.instance), int(cfg.train.checkpoint_keep),
                            partial=progress.steps if progress else None)
    print(f"checkpoint {path} written in {time.time() - start:.2f}s", flush=True)
