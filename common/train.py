"""The framework-neutral run driver: MLLOG phases, schedule, stop-at-target, summary.

Both framework backends plug into this one loop, so event order, epoch numbering and
the success rule are identical across frameworks by construction.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import hashlib
import json
import math
import os
import platform
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sciperf import __version__, allocator, checkpoint, heartbeat, memory, output, threads
from sciperf import precision as precision_choice
from sciperf.backends import EpochProgress, EpochResult, RunContext, load_backend
from sciperf.config import config_hash, key_roles, to_container
from sciperf.data.layout import check_output_dir
from sciperf.data.plan import RankFiles
from sciperf.data.sharding import local_batch_size
from sciperf.data.staging import StageReport, stage_files, stage_root, staged_path
from sciperf.distributed import (
    RankInfo,
    discover,
    end_stopped_siblings,
    split_instances,
    terms_ignored,
)
from sciperf.errors import PeerLostError, SciperfError
from sciperf.info import git_hash, image_info
from sciperf.progress import fmt_duration
from sciperf.results.mllog import MLLogger
from sciperf.weights import save_npz
from sciperf.workloads import get
from sciperf.workloads.base import Workload

RESULT_FILE = "result_0.txt"
SUMMARY_FILE = "summary.json"


def result_file(instance: int = 0) -> str:
    """MLLOG file of an instance: result_<i>.txt, as in the submission tree."""
    return f"result_{instance}.txt"


def weights_file(info: RankInfo) -> str:
    """Canonical weights of a rank (train.save_weights): per instance in throughput mode."""
    prefix = f"weights_instance{info.instance}_" if info.instances > 1 else "weights_"
    return f"{prefix}rank{info.rank}.npz"


def summary_file(instance: int = 0, instances: int = 1) -> str:
    """summary.json, or summary_<i>.json per instance in throughput mode."""
    return SUMMARY_FILE if instances == 1 else f"summary_{instance}.json"


@dataclass
class RunState:
    """What the loop accumulates; becomes summary.json."""

    world: int = 1
    epochs: int = 0
    train_samples_seen: int = 0
    train_seconds: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)
    metric: float | None = None
    success: bool = False
    staging: StageReport | None = None
    image: dict[str, Any] | None = None  # the container image's version record, if any
    backend: Any = None  # set once loaded (the closing records of an abort use it)
    run_start: float | None = None  # wall time of run_start, once logged
    resume_from: checkpoint.Found | None = None  # the checkpoint this run continues
    progress: EpochProgress | None = None  # the resumed epoch's part trained before
    checkpointed: bool = False  # stopped mid-epoch on request, checkpoint written
    t0: float = 0.0  # wall time the run began (init_start)
    resumed: list[dict[str, Any]] = field(default_factory=list)  # every resume so far
    precision: precision_choice.Choice | None = None  # what precision=… resolved to, and why
    malloc: str = ""  # the host allocator's mode in force (sciperf.allocator)


def resolve_files(cfg: Any, info: RankInfo, workload: Workload) -> RankFiles:
    """This rank's train/eval files and local batch, after the workload's plan checked the
    counts (``Workload.plan``: which files a rank reads, staged or not)."""
    local_batch = local_batch_size(cfg.train.global_batch_size, info.world)
    listing = workload.dataset.list_samples
    train = listing(cfg.data.dir, "train", cfg.data.format, cfg.data.train_samples)
    evals = listing(cfg.data.dir, "validation", cfg.data.format, cfg.data.eval_samples)
    workload.plan.check(len(train), len(evals), info.world, local_batch)
    mine_train, mine_eval = workload.plan.rank_files(train, evals, info,
                                                     staged=bool(cfg.data.stage_dir))
    return RankFiles(mine_train, mine_eval, local_batch, len(train), len(evals))


def stage(cfg: Any, info: RankInfo, files: list[list[Path]], mll: MLLogger,
          workload: Workload) -> tuple[list[list[Path]], StageReport | None]:
    """Copy this rank's files to `data.stage_dir` (MLLOG staging_start/stop around it)
    and return their node-local paths; unchanged lists when staging is off."""
    if not cfg.data.stage_dir:
        return files, None
    sample_files = workload.dataset.sample_files
    src = Path(cfg.data.dir)
    root = stage_root(cfg.data.stage_dir, src, cfg.workload,
                      info.instance if info.instances > 1 else None)
    # records of one container (OC20) name the same file: each file is copied once
    train, evals = (list(dict.fromkeys(f for p in group for f in sample_files(p, cfg.data.format)))
                    for group in files)
    sources = workload.plan.stage_sources(train, evals, info)
    mll.start("staging_start")
    report = stage_files(sources, src, root, workers=int(cfg.data.stage_workers),
                         verify=cfg.data.stage_verify, progress=info.rank == 0)
    mll.end("staging_stop", metadata={"staging_duration": report.seconds,
                                      "staged_files": report.files,
                                      "staged_bytes": report.bytes_total})
    if info.rank == 0:
        print(f"staged {report.files} files ({report.bytes_total / 1e6:.1f} MB, "
              f"{report.copied} copied, {report.skipped} already intact) to {root} in "
              f"{report.seconds:.1f}s, {report.mb_per_s:.0f} MB/s (rank 0's share)", flush=True)
    return [[staged_path(p, src, root) for p in group] for group in files], report


def train(cfg: Any, info: RankInfo | None = None) -> dict[str, Any]:
    """Run one training instance to its target (or max_epochs); returns the summary.

    Every rank runs this; only rank 0 writes the MLLOG file and summary.json.
    """
    info = split_instances(info or discover(), int(cfg.instances))
    cfg = instance_config(cfg, info)
    rank, world = info.rank, info.world
    image = image_info()  # a bad $SCIPERF_IMAGE_INFO fails here, before anything is written
    workload = get(cfg.workload)
    try:  # rules a finished log would fail: refused before it starts
        workload.check_run(cfg)
    except ValueError as exc:
        raise SciperfError(str(exc)) from None
    # before the framework loads: glibc fixes its arena limit when a second thread first
    # allocates, and the first big tensor should already come from the kept heap
    malloc = allocator.configure(str(cfg.framework.malloc))
    backend = load_backend(cfg.framework.name, cfg.workload)
    choice = _precision(cfg, workload, backend, info)
    cfg = OmegaConf.merge(cfg, {"precision": choice.precision})
    if not int(cfg.system.accelerators_per_node):  # CPU: the OOM killer leaves no trace
        _check_memory(cfg, workload, info)
    # the dataset's listing and the batch rules, before any record: a missing or short
    # dataset is a refusal, not a run that stopped (docs/architecture.md, rule 10)
    plan = resolve_files(cfg, info, workload)
    if cfg.data.stage_dir:  # a stage_dir that is a file, read-only or inside data.dir was
        # refused only after the run's records were written
        stage_root(cfg.data.stage_dir, cfg.data.dir, cfg.workload)  # overlap: no probe
        check_output_dir(Path(cfg.data.stage_dir), "data.stage_dir=")
    out = Path(cfg.output_dir)
    found, replace = _resume_point(cfg, out, info)
    overwrite = bool(cfg.train.overwrite) or replace
    try:  # before the claim, which an overwrite makes delete the earlier run's records
        _check_init_files(cfg, workload)
    except SciperfError:
        if out.is_dir() and not overwrite and found is None:  # an earlier run there: its
            output.claim(out, False, rank == 0, info.instance,  # refusal (it deletes
                         info.instances)  # nothing) is said first
        raise
    output.claim(out, overwrite, rank == 0, info.instance, info.instances,
                 resuming=found is not None)
    log_path = out / result_file(info.instance)
    if found is not None and rank == 0:  # the resumed run continues the log it left
        _continue_log(found, log_path)
    mll = MLLogger(log_path, enabled=rank == 0, mode="w" if found is None else "a",
                   instance=info.instance if info.instances > 1 else None)
    t0 = time.time()
    git_hash()  # resolved now (cached), not on the abort path where time is short
    state = RunState(world=world, image=image, precision=choice, backend=backend,
                     malloc=malloc)
    state.resume_from, state.t0 = found, t0
    if found is not None:  # before anything can fail: an abort's records then continue the
        _restore_driver(found, state)  # resumed log (run_stop, history), not a blank run
    unwritten: list[str] = []  # closing records a failed write left out ("cannot write …")
    stopped: list[bool] = []  # run_stop is in the log: an abort after it adds none

    def closing_records() -> None:  # the aborted run's last records (either thread)
        with terms_ignored():  # each record tried on its own: a full disk may refuse some
            if state.run_start is not None and not stopped:
                with _kept_in(unwritten):
                    mll.run_stop(False, workload.epoch_num(cfg, state.epochs))
            with _kept_in(unwritten):
                _write_summary(out, cfg, workload, state.backend, state, "error", t0,
                               state.run_start, info)
            with _kept_in(unwritten):
                mll.close()
            if (hb := heartbeat.current()) is not None:
                hb.written()

    closer = _Closer(closing_records, lambda: _closing_line(
        _records_line(out, info, state.run_start), unwritten))
    try:
        if found is None:  # a header that cannot be written ends the run as any failure
            mll.init_start()
            mll.submission(workload.name, cfg.system, nodes=info.nodes)
        with _signal_watcher(closer, _term_grace(cfg)), \
                _stop_on_request(bool(cfg.train.checkpoint_every), _term_grace(cfg) > 0):
            _run(cfg, info, workload, mll, state, out, plan)
        # the last records can fail too (a disk that filled during the run): the same path
        mll.run_stop(state.success, workload.epoch_num(cfg, state.epochs))
        stopped.append(True)
        mll.close()
        state.backend.close()
        status = "success" if state.success else "checkpointed" if state.checkpointed \
            else "aborted"
        return _write_summary(out, cfg, workload, state.backend, state, status, t0,
                              state.run_start, info)
    except BaseException as exc:
        closer()
        lost = state.backend.peer_lost(exc) if state.backend is not None else None
        if lost:  # one line, not the collective's traceback
            end_stopped_siblings()
            raise PeerLostError(f"{lost}; {closer.line()}") from None
        if (failed := _write_failure(exc, out, unwritten)) is not None:
            raise failed from exc  # one line naming the file, and what was not written
        # what this rank left behind, for the CLI's last line (a peer's death must not
        # claim a record that only rank 0 writes)
        exc.sciperf_records = closer.line()  # type: ignore[attr-defined]
        # a job's SIGTERM reaches every rank (scancel, or a launcher tearing down after a
        # peer failed): the writing rank's line says it once, not once per rank
        exc.sciperf_quiet = info.rank != 0  # type: ignore[attr-defined]
        raise


def _run(cfg: Any, info: RankInfo, workload: Workload, mll: MLLogger, state: RunState,
         out: Path, plan: RankFiles) -> None:
    """Header, staging, setup, run_start, the epochs (state.backend/run_start set as they
    come, so the closing records of an abort say how far the run got)."""
    backend = state.backend
    found = state.resume_from
    if found is None:
        mll.hyperparameters(workload.mllog_hyperparameters(cfg, plan.train_samples,
                                                       plan.eval_samples))
        mll.event("seed", int(cfg.seed))
    staged_in_run = bool(cfg.data.stage_dir) and cfg.mllog.ruleset == "2.0.0"
    if staged_in_run and found is None:  # hpc <= 2.0: staging is part of the timed run
        mll.end("init_stop")
        state.run_start = time.time()
        mll.start("run_start")
    (train_files, eval_files), state.staging = stage(cfg, info, [plan.train, plan.evals],
                                                     mll, workload)
    backend.setup(RunContext(cfg, workload, train_files, eval_files, plan.local_batch, info))
    if info.world > 1:
        check_same_config(cfg, backend)
    if found is not None:
        _resume(found, backend)
    elif not staged_in_run:  # hpc 3.0: staging and setup precede run_start
        mll.end("init_stop")
    backend.barrier()
    if not staged_in_run and found is None:
        state.run_start = time.time()
        mll.start("run_start")
    # a record that survives what nothing can catch (the OOM killer's SIGKILL): until the
    # end overwrites it, summary.json says the run was running
    _write_summary(out, cfg, workload, backend, state, "running", state.t0, state.run_start,
                   info)
    with _hang_sentinel(cfg, info, out):
        _loop(cfg, workload, backend, mll, state, info)
        backend.barrier()
    if cfg.train.save_weights:
        save_npz(out / weights_file(info), backend.export_weights())


def key_digests(cfg: Any) -> dict[str, tuple[int, int]]:
    """Each key of what a run trains (the config a resume must share: no paths, threads,
    workers, timeouts) → two 16-bit halves of its value's hash."""
    from sciperf.config import flat
    digests = {}
    for key, value in sorted(flat(checkpoint.resume_config(cfg)).items()):
        h = int.from_bytes(hashlib.sha256(json.dumps(value, default=str).encode()).digest()[:4],
                           "big")
        digests[key] = (h >> 16, h & 0xFFFF)
    return digests


def check_same_config(cfg: Any, backend: Any) -> None:
    """Every rank of a run must train the same configuration. Ranks started by hand (or by
    a script passing them different overrides) trained apart in silence: rank 1 with
    opt.base_lr=0.5, rank 0 with 0.004 — diverged replicas, rank 0's MLLOG saying 0.004.

    One all-reduce of, per key, its count and the sums of each hash half and its square:
    the values agree on every rank exactly when each half's variance over the ranks is 0
    (sums of 16-bit squares stay exact in float64 up to 2**21 ranks)."""
    digests = key_digests(cfg)
    mine = [1.0]
    for hi, lo in digests.values():
        mine += [float(hi), float(hi) ** 2, float(lo), float(lo) ** 2]
    total = backend.all_sum(mine)
    world, differ = total[0], []  # (Σx²·n = (Σx)², exact in integers)
    if len(total) != len(mine):
        raise SciperfError("ranks disagree on the configuration's keys: start every rank "
                           "with the same overrides")
    for i, key in enumerate(digests):
        for s, sq in ((total[1 + 4 * i], total[2 + 4 * i]), (total[3 + 4 * i], total[4 + 4 * i])):
            if int(sq) * int(world) != int(s) ** 2:  # only when every rank's x is one
                differ.append(key)
                break
    if differ:
        from sciperf.config import flat
        values = flat(checkpoint.resume_config(cfg))
        shown = ", ".join(f"{k}={values[k]}" for k in differ[:5])
        raise SciperfError(f"ranks disagree on the configuration (this rank: {shown}"
                           f"{' …' if len(differ) > 5 else ''}; another rank has other "
                           "values): start every rank with the same overrides")


def _hang_sentinel(cfg: Any, info: RankInfo, out: Path) -> contextlib.AbstractContextManager:
    """Horovod cannot time out a stopped peer (its coordinator waits inside MPI): on rank 0
    of a multi-rank Horovod run, a sentinel process ends a run whose steps stopped ending
    (sciperf.heartbeat); other backends' collectives time out by themselves."""
    if info.rank != 0 or info.world < 2 or cfg.distributed.backend != "horovod":
        return contextlib.nullcontext()
    return heartbeat.sentinel(float(cfg.distributed.timeout_s), out / result_file(info.instance),
                              out / summary_file(info.instance, info.instances),
                              info.instance if info.instances > 1 else None)


def _precision(cfg: Any, workload: Workload, backend: Any,
               info: RankInfo) -> precision_choice.Choice:
    """The precision this run trains in (``precision=auto``: measured by a node's first
    rank, read by the others from the cache, sciperf.precision), named with its reason on
    rank 0 when it was chosen rather than asked."""
    runtime = getattr(backend, "runtime", None)
    if runtime is None or not hasattr(runtime, "probe_ms"):
        if cfg.precision == precision_choice.AUTO:
            raise SciperfError(f"precision=auto: framework={cfg.framework.name} cannot measure "
                               "its precisions; name one (precision=fp32|tf32|bf16)")
        return precision_choice.Choice(cfg.precision, cfg.precision,
                                       f"precision={cfg.precision} asked")
    if cfg.precision == precision_choice.AUTO:  # the probe runs as training will: the
        # framework's threads and device first (TensorFlow fixes both at its first op)
        threads.apply(cfg, runtime, local_batch_size(cfg.train.global_batch_size, info.world))
        runtime.select_device(info.device)
    choice = precision_choice.on_this_machine(str(cfg.precision), workload.cost.hot_op, runtime,
                                              wait_s=0.0 if info.local_rank == 0 else 60.0)
    if info.rank == 0 and choice.asked == precision_choice.AUTO:
        print(f"precision=auto: {choice.precision} ({choice.reason})", flush=True)
    return choice


def _check_memory(cfg: Any, workload: Workload, info: RankInfo) -> None:
    """Refuse a local batch whose lower-bound memory exceeds this rank's share of the
    node (sciperf.memory), counted on the data's own graphs where the data sets the cost."""
    model, cost = workload.model_spec(cfg), workload.cost
    if cost.on_data is not None:
        samples = workload.dataset.list_samples(cfg.data.dir, "train", cfg.data.format, 0)
        layers = cost.on_data(model, Path(cfg.data.dir), str(cfg.data.format),
                              samples[:64]).layers
    else:
        layers = cost.layers(model)
    memory.check(layers, str(cfg.precision),
                 local_batch_size(cfg.train.global_batch_size, info.world), info.local_size,
                 f"workload={workload.name} experiment={cfg.experiment}")


def _resume_point(cfg: Any, out: Path,
                  info: RankInfo) -> tuple[checkpoint.Found | None, bool]:
    """The checkpoint `train.resume=auto` continues from (None: start anew), checked
    against this run's configuration and rank count; skipped ones named on rank 0. The
    flag: the earlier run died before its first checkpoint, so the new one takes its place
    (a requeued job preempted that early failed on its own records every time)."""
    every = int(cfg.train.checkpoint_every)
    if (every or cfg.train.resume) and info.instances > 1:
        raise SciperfError("train.checkpoint_every / train.resume: not available in "
                           f"throughput mode (instances={info.instances})")
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


DIED = ("running", "error")  # summary statuses of a run that did not end by itself


def _earlier_status(summary: Path) -> str | None:
    """The status an earlier run's summary.json says (None: none, or unreadable — the
    output_dir claim then speaks for the records)."""
    try:
        data = json.loads(summary.read_text())
    except (OSError, ValueError):
        return None
    status = data.get("status") if isinstance(data, dict) else None
    return status if isinstance(status, str) else None


def _continue_log(found: checkpoint.Found, log: Path) -> None:
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
    tmp = log.with_name(f".{log.name}.tmp")
    try:
        tmp.write_text("".join(f"{line}\n" for line in out))
        os.replace(tmp, log)
    except OSError as exc:  # a full disk: the old log stands, no temporary left
        tmp.unlink(missing_ok=True)
        raise SciperfError(f"cannot write {log}: {exc.strerror or exc}") from exc


def _restore_driver(found: checkpoint.Found, state: RunState) -> None:
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


def _resume(found: checkpoint.Found, backend: Any) -> None:
    """The backend's state (weights, optimizer, RNG) of the checkpoint."""
    backend.load_state(found.path)


def _checkpoint(cfg: Any, out: Path, state: RunState, info: RankInfo,
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


class _Closer:
    """An aborted run's closing records, written once by whichever thread comes first: the
    main thread's exception path, or the signal watcher while the main thread is stuck."""

    def __init__(self, write: Callable[[], None], line: Callable[[], str]):
        self._write, self.line = write, line
        self._lock = threading.Lock()
        self.done = False

    def __call__(self) -> bool:
        """Write them unless written; True when this call wrote them."""
        with self._lock:
            if self.done:
                return False
            self.done = True
            self._write()
            return True


WATCHED = (signal.SIGTERM, signal.SIGHUP)
# set by SIGUSR1 (Slurm's `--signal=B:USR1@<seconds>` before the time limit) and, within
# train.term_grace_s, by SIGTERM: with checkpointing on, the run stops at the next
# optimizer step (or after the running evaluation), checkpoints and exits 75
STOP = threading.Event()
# mpirun follows its SIGTERM with SIGKILL one second later: no time for a checkpoint there
NO_TERM_GRACE_ENV = ("OMPI_COMM_WORLD_SIZE",)


def _term_grace(cfg: Any) -> float:
    """Seconds a SIGTERM may take to reach a checkpoint: train.term_grace_s when this run
    checkpoints and its launcher leaves that time (not under mpirun), else 0 (end at once,
    records first)."""
    if not int(cfg.train.checkpoint_every) or any(k in os.environ for k in NO_TERM_GRACE_ENV):
        return 0.0
    return float(cfg.train.term_grace_s)


@contextlib.contextmanager
def _stop_on_request(enabled: bool, on_term: bool) -> Iterator[None]:
    """SIGUSR1 — and SIGTERM when `on_term` — ask for a checkpoint and an early, resumable
    end (main thread only). A second SIGTERM ends the run at once (the CLI's handler)."""
    STOP.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not enabled:  # SIGUSR1's default action ended the run with no records at all
        previous = signal.signal(signal.SIGUSR1, _usr1_ignored)
        try:
            yield
        finally:
            signal.signal(signal.SIGUSR1, previous)
        return
    previous = signal.signal(signal.SIGUSR1, lambda *_: STOP.set())
    term = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        if STOP.is_set() and callable(term):  # asked twice: no more waiting
            term(signum, frame)
        STOP.set()

    if on_term:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)
        if on_term:
            signal.signal(signal.SIGTERM, term)


def _usr1_ignored(_signum: int, _frame: Any) -> None:
    print("SIGUSR1 ignored: this run writes no checkpoints (train.checkpoint_every=0), so it "
          "cannot stop to be resumed; SIGTERM ends it", file=sys.stderr, flush=True)


GRACE_S = 3.0  # after the watcher wrote the records: time for the main thread to exit itself
_STOP = b"\0"


@contextlib.contextmanager
def _signal_watcher(closer: _Closer, term_grace_s: float = 0.0) -> Iterator[None]:
    """SIGTERM/SIGHUP while the main thread waits inside a collective: Horovod's wait is
    C++, where Python's handler cannot run, and mpirun follows its SIGTERM with SIGKILL one
    second later — the run ended with no run_stop. Python's C-level handler still writes
    the signal number to the wakeup fd at once; this thread reads it, writes the closing
    records, and ends the process if the main thread has not within GRACE_S. With
    `term_grace_s` (a checkpointing run), a SIGTERM first gives the main thread that long
    to reach its checkpoint and end the run itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(read_fd, closer, term_grace_s), daemon=True,
                               name="sciperf-signal-watcher")
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        with contextlib.suppress(OSError):
            os.write(write_fd, _STOP)
        watcher.join(timeout=GRACE_S + 1)
        os.close(write_fd)
        if not watcher.is_alive():
            os.close(read_fd)


def _ended_within(read_fd: int, seconds: float) -> bool:
    """Whether the main thread leaves the watched block (it writes _STOP) within `seconds`."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready and (not (got := os.read(read_fd, 64)) or _STOP in got):
            return True
    return False


def _watch(read_fd: int, closer: _Closer, term_grace_s: float = 0.0) -> None:
    """The watcher thread's loop (see :func:`_signal_watcher`)."""
    while True:
        got = os.read(read_fd, 64)
        if not got or _STOP in got:
            return
        hb = heartbeat.current()
        if hb is not None and heartbeat.SIGNAL.value in got:  # the hang sentinel fired
            gap = hb.silent_for()
            if closer():
                print(heartbeat.hang_line(gap, hb.limit_s, closer.line()), file=sys.stderr,
                      flush=True)
                os._exit(1)
            return
        sig = next((s for s in WATCHED if s.value in got), None)
        if sig is None:  # SIGINT and others: the main thread's handlers deal with them
            continue
        if sig == signal.SIGTERM and term_grace_s > 0 and _ended_within(read_fd, term_grace_s):
            return  # the main thread checkpointed and ended the run itself
        if not closer():
            return  # the main thread is already closing
        if _ended_within(read_fd, GRACE_S):
            return  # the main thread got out and ends the run itself (its own last line)
        print(f"sciperf: {sig.name} while blocked in a collective ({closer.line()})",
              file=sys.stderr, flush=True)
        os._exit(128 + sig.value)


def _records_line(out: Path, info: RankInfo, run_start: float | None) -> str:
    """'run_stop aborted and summary.json written to OUT' on the writing rank, else why not."""
    if info.rank != 0:
        return f"rank {info.rank} writes no MLLOG record; its instance's rank 0 does"
    summary = summary_file(info.instance, info.instances)
    if run_start is None:
        return f"{summary} written to {out} (stopped before run_start)"
    return f"run_stop aborted and {summary} written to {out}"


def instance_config(cfg: Any, info: RankInfo) -> Any:
    """Throughput mode: each instance trains with its own seed (seed + instance)."""
    if info.instances == 1:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg.seed = int(cfg.seed) + info.instance
    return cfg


def _loop(cfg: Any, workload: Workload, backend: Any, mll: MLLogger, state: RunState,
          info: RankInfo) -> None:
    """Epochs until the target is met or train.max_epochs is spent (from the checkpoint's
    epoch when resumed), checkpoints as asked."""
    rank = info.rank
    max_epochs = int(cfg.train.max_epochs)
    loop_start, first = time.time(), state.epochs
    progress, state.progress = state.progress, None  # a resumed epoch's trained part
    stop = STOP.is_set if int(cfg.train.checkpoint_every) else None
    for epoch in range(state.epochs, max_epochs):
        num = epoch + 1  # MLLOG epoch_num is 1-based, as in the reference logs
        tag = {"epoch_num": workload.epoch_num(cfg, num)}  # (OpenFold: samples)
        lr = workload.lr_for_epoch(cfg, epoch)
        if progress is None:  # a resumed epoch's epoch_start is in the log already
            mll.start("epoch_start", metadata=tag)
        heartbeat.phase("train")
        lines = _step_lines(cfg, backend, num, max_epochs, progress) if rank == 0 else None
        result: EpochResult = backend.train_epoch(epoch, lr, on_step=lines, resume=progress,
                                                  stop=stop)
        progress = None
        if result.stopped is not None:  # SIGUSR1: checkpoint here, end the run
            _checkpoint(cfg, Path(cfg.output_dir), state, info, result.stopped)
            state.checkpointed = True
            return
        _finite(result.loss, "training loss", num, workload)
        mll.end("epoch_stop", metadata=tag)
        mll.start("eval_start", metadata=tag)
        t_eval = time.time()
        heartbeat.phase("eval")
        metric = float(backend.evaluate())
        eval_s = time.time() - t_eval
        _finite(metric, workload.metric.key, num, workload)
        mll.end("eval_stop", metadata=tag)
        mll.event(workload.metric.key, metric, metadata=tag)
        state.epochs, state.metric = num, metric
        heartbeat.epochs(tag["epoch_num"])  # what the sentinel's run_stop says
        state.train_samples_seen += result.samples * state.world
        state.train_seconds += result.seconds
        state.history.append({"epoch": num, "lr": lr, "loss": result.loss, "metric": metric,
                              "train_s": result.seconds, "eval_s": eval_s,
                              "wall_s": time.time() - loop_start})
        state.success = workload.reached(metric, cfg.train.target)
        if rank == 0:
            _epoch_line(cfg, workload, state, result, eval_s, max_epochs, loop_start, first)
        if state.success:
            return
        if stop is not None and backend.stop_agreed(stop, 0, 1):  # asked during evaluation
            _checkpoint(cfg, Path(cfg.output_dir), state, info, forced=True)
            state.checkpointed = True
            return
        _checkpoint(cfg, Path(cfg.output_dir), state, info)


class StepLines:
    """Progress inside an epoch, a line every `train.log_every` steps (rank 0): a full-size
    epoch runs for hours (CosmoFlow's 524,288 samples, OpenFold's minutes a step), and a
    line per epoch would show nothing for that long. The loss is rank 0's, averaged over
    the steps since the last line; the rate counts every rank's samples."""

    def __init__(self, every: int, epoch: int, max_epochs: int, total: int | None,
                 done_steps: int, world: int) -> None:
        self.every, self.epoch, self.max_epochs, self.total = every, epoch, max_epochs, total
        self.steps, self.world = done_steps, world
        self.t0, self.taken, self.samples = time.perf_counter(), 0, 0
        self.loss_sum, self.window = 0.0, 0

    def __call__(self, samples: int, loss: float) -> None:
        self.steps, self.taken = self.steps + 1, self.taken + 1
        self.samples, self.loss_sum = self.samples + samples, self.loss_sum + loss
        self.window += 1
        if self.steps % self.every:
            return
        elapsed = time.perf_counter() - self.t0
        rate = self.samples * self.world / max(elapsed, 1e-9)
        where = f"step {self.steps}" + (f"/{self.total}" if self.total else "")
        eta = ""
        if self.total:
            left = elapsed / self.taken * max(self.total - self.steps, 0)
            eta = f", epoch ETA {fmt_duration(left)}"
        print(f"epoch {self.epoch:3d}/{self.max_epochs} {where} loss "
              f"{self.loss_sum / self.window:.4f} | {rate:.1f} samples/s{eta}", flush=True)
        self.loss_sum, self.window = 0.0, 0


def _step_lines(cfg: Any, backend: Any, epoch: int, max_epochs: int,
                progress: EpochProgress | None) -> StepLines | None:
    """The epoch's step lines when `train.log_every` asks for them (None: per epoch only)."""
    every = int(cfg.train.log_every)
    if not every:
        return None
    loader = getattr(backend, "train_loader", None)
    try:
        total = len(loader) if loader is not None else None
    except TypeError:  # a loader without a length: lines without the epoch's ETA
        total = None
    world = int(getattr(getattr(backend, "ctx", None), "world", 1) or 1)
    return StepLines(every, epoch, max_epochs, total, progress.steps if progress else 0, world)


def _finite(value: float, what: str, epoch: int, workload: Workload) -> None:
    """Stop at the first NaN/Inf loss or metric: epochs of `loss nan` teach nothing, and
    the MLLOG and summary.json would carry a value JSON cannot hold."""
    if not math.isfinite(float(value)):
        raise SciperfError(
            f"{what} is {value} in epoch {epoch}: training diverged or the data holds "
            f"NaN/Inf (`sciperf prepare workload={workload.name} data.source=existing` "
            "checks the files); stopped")


def _epoch_line(cfg: Any, workload: Workload, state: RunState, result: EpochResult,
                eval_s: float,
                max_epochs: int, loop_start: float, first: int = 0) -> None:
    """One progress line per epoch: loss, metric vs target, throughput, ETA to max_epochs."""
    elapsed = time.time() - loop_start
    eta = elapsed / max(state.epochs - first, 1) * (max_epochs - state.epochs)
    rate = result.samples * state.world / max(result.seconds, 1e-9)
    mark = " <= target" if state.success else ""
    print(f"epoch {state.epochs:3d}/{max_epochs} loss {result.loss:.4f} "
          f"{workload.metric.key} {state.metric:.4f} (target {cfg.train.target}){mark} "
          f"| {rate:.1f} samples/s train, eval {eval_s:.1f}s "
          f"| elapsed {fmt_duration(elapsed)}, ETA ≤ {fmt_duration(eta)}", flush=True)


def _write_summary(out: Path, cfg: Any, workload: Workload, backend: Any, state: RunState,
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
        tmp = out / f".{name}.tmp"
        text = json.dumps(json_safe(summary), indent=2, default=str, allow_nan=False)
        try:
            tmp.write_text(text)
            os.replace(tmp, out / name)
        except OSError as exc:  # a full disk: no temporary left, one line naming the file
            tmp.unlink(missing_ok=True)
            raise SciperfError(f"cannot write {out / name}: {exc.strerror or exc}") from exc
    return summary


@contextlib.contextmanager
def _kept_in(unwritten: list[str]) -> Iterator[None]:
    """One closing record of an aborted run: a write it cannot make is kept in
    `unwritten` (the run already failed: the other records are still tried)."""
    try:
        yield
    except SciperfError as exc:
        unwritten.append(str(exc))


def _closing_line(line: str, unwritten: list[str]) -> str:
    """What the closing records left, for the CLI's last line: the records line, or which
    writes failed (a summary.json that could not be written still says "running")."""
    if not unwritten:
        return line
    return "closing records not written: " + "; ".join(dict.fromkeys(unwritten))


# a write the disk refused (full, quota, file size limit, read-only)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def _write_failure(exc: BaseException, out: Path, unwritten: list[str]) -> SciperfError | None:
    """The one line a failed write ends a run with (None: `exc` is no failed write).

    The MLLOG, summary.json and checkpoints say it themselves (SciperfError "cannot write
    FILE: why"); another write (the weights of train.save_weights) raises the OS's error,
    named here. Closing records the disk refused too are added: the line is all the user
    sees of them.
    """
    if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
        message = f"cannot write {exc.filename}: {exc.strerror}" if exc.filename else \
            f"a write failed: {exc.strerror or exc} (is output_dir={out} full?)"
    elif type(exc) is SciperfError and unwritten:
        message = str(exc)
    else:
        return None
    left = [u for u in dict.fromkeys(unwritten) if u != message]
    return SciperfError(f"{message}; closing records not written: {'; '.join(left)}"
                        if left else message)


def _check_init_files(cfg: Any, workload: Workload) -> None:
    """Every file the run reads (the keys whose role is ``reads``: starting weights, a
    reference checkpoint), refused before the output is claimed when missing or
    unreadable — the backend's setup found it only after result_0.txt and summary.json
    were written (and an overwrite had deleted the earlier run). A key's own check reads
    deeper (the canonical .npz whole, against the model)."""
    for key, role in key_roles(workload).items():
        value = OmegaConf.select(cfg, key, default=None)
        if not role.reads or not value:
            continue
        path = Path(str(value))
        try:
            if not path.is_file():
                if path.exists():
                    raise SciperfError(f"{key}={value}: is not a regular file")
                hint = role.hint.format(workload=workload.name,
                                        experiment=OmegaConf.select(cfg, "experiment",
                                                                    default="mini"))
                raise SciperfError(f"{key}={value}: no such file{hint}")
            with path.open("rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise SciperfError(f"{key}={value}: cannot be read ({exc.strerror or exc})"
                               ) from None
        if role.check is not None:
            try:
                role.check(path, cfg, workload)
            except SciperfError as exc:
                raise SciperfError(f"{key}={value}: {exc}") from None


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


def require_dataset(cfg: Any) -> None:
    """Fail early, with the directory named, when the data is not there."""
    if not Path(cfg.data.dir).is_dir():
        raise SciperfError(f"data.dir={cfg.data.dir} does not exist (run `sciperf prepare`)")
