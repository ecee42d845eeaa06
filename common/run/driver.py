"""The framework-neutral run driver: MLLOG phases, schedule, stop-at-target, summary.

Both framework backends plug into this one loop, so event order, epoch numbering and
the success rule are identical across frameworks by construction. This module holds the
order of things — what is refused before anything is written, the claim of output_dir,
the header, staging, setup, run_start, the epochs, the closing records — and leaves each
step's detail to the module that owns it (`files`, `checks`, `resume`, `signals`,
`summary`, `progress`).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sciperf import allocator, heartbeat, output
from sciperf.backends import EpochResult, RunContext, load_backend
from sciperf.data.layout import check_output_dir
from sciperf.data.plan import RankFiles
from sciperf.data.staging import stage_root
from sciperf.distributed import (
    RankInfo,
    discover,
    end_stopped_siblings,
    ignore_terminations,
    split_instances,
    terms_ignored,
)
from sciperf.errors import PeerLostError, SciperfError
from sciperf.info import git_hash, image_info
from sciperf.results.mllog import MLLogger
from sciperf.run import signals
from sciperf.run.checks import check_memory, check_same_config, choose_precision
from sciperf.run.files import (
    check_init_files,
    check_reader,
    resolve_files,
    resolve_target,
    result_file,
    stage,
    weights_file,
)
from sciperf.run.progress import check_finite, epoch_line, step_lines
from sciperf.run.resume import (
    continue_log,
    restore_backend,
    restore_driver,
    resume_point,
    write_checkpoint,
)
from sciperf.run.state import RunState
from sciperf.run.summary import closing_line, kept_in, records_line, write_failure, write_summary
from sciperf.weights import save_npz
from sciperf.workloads import get
from sciperf.workloads.base import Workload


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
    choice = choose_precision(cfg, workload, backend, info)
    cfg = OmegaConf.merge(cfg, {"precision": choice.precision})
    if not int(cfg.system.accelerators_per_node):  # CPU: the OOM killer leaves no trace
        check_memory(cfg, workload, info)
    # the dataset's listing and the batch rules, before any record: a missing or short
    # dataset is a refusal, not a run that stopped (docs/architecture.md, rule 10)
    plan = resolve_files(cfg, info, workload)
    check_reader(cfg, workload)  # what every sample shares (a statistics file, an index)
    cfg = resolve_target(cfg, workload)  # the data may set it (a synthetic set's floor)
    if cfg.data.stage_dir:  # a stage_dir that is a file, read-only or inside data.dir was
        # refused only after the run's records were written
        stage_root(cfg.data.stage_dir, cfg.data.dir, cfg.workload)  # overlap: no probe
        check_output_dir(Path(cfg.data.stage_dir), "data.stage_dir=")
    out = Path(cfg.output_dir)
    found, replace = resume_point(cfg, out, info)
    overwrite = bool(cfg.train.overwrite) or replace
    try:  # before the claim, which an overwrite makes delete the earlier run's records
        check_init_files(cfg, workload)
    except SciperfError:
        if out.is_dir() and not overwrite and found is None:  # an earlier run there: its
            output.claim(out, False, rank == 0, info.instance,  # refusal (it deletes
                         info.instances)  # nothing) is said first
        raise
    output.claim(out, overwrite, rank == 0, info.instance, info.instances,
                 resuming=found is not None)
    log_path = out / result_file(info.instance)
    if found is not None and rank == 0:  # the resumed run continues the log it left
        continue_log(found, log_path)
    mll = MLLogger(log_path, enabled=rank == 0, mode="w" if found is None else "a",
                   instance=info.instance if info.instances > 1 else None)
    t0 = time.time()
    git_hash()  # resolved now (cached), not on the abort path where time is short
    state = RunState(world=world, image=image, precision=choice, backend=backend,
                     malloc=malloc)
    state.resume_from, state.t0 = found, t0
    if found is not None:  # before anything can fail: an abort's records then continue the
        restore_driver(found, state)  # resumed log (run_stop, history), not a blank run
    unwritten: list[str] = []  # closing records a failed write left out ("cannot write …")
    stopped: list[bool] = []  # run_stop is in the log: an abort after it adds none

    def closing_records() -> None:  # the aborted run's last records (either thread)
        with terms_ignored():  # each record tried on its own: a full disk may refuse some
            if state.run_start is not None and not stopped:
                with kept_in(unwritten):
                    mll.run_stop(False, workload.epoch_num(cfg, state.epochs))
            with kept_in(unwritten):
                write_summary(out, cfg, workload, state.backend, state, "error", t0,
                              state.run_start, info)
            with kept_in(unwritten):
                mll.close()
            if (hb := heartbeat.current()) is not None:
                hb.written()

    closer = signals.Closer(closing_records, lambda: closing_line(
        records_line(out, info, state.run_start), unwritten))
    try:
        if found is None:  # a header that cannot be written ends the run as any failure
            mll.init_start()
            mll.submission(workload.name, cfg.system, nodes=info.nodes)
        with signals.signal_watcher(closer, signals.term_grace(cfg)), \
                signals.stop_on_request(bool(cfg.train.checkpoint_every),
                                        signals.term_grace(cfg) > 0):
            _run(cfg, info, workload, mll, state, out, plan)
        # the last records can fail too (a disk that filled during the run): the same path
        mll.run_stop(state.success, workload.epoch_num(cfg, state.epochs))
        stopped.append(True)
        mll.close()
        state.backend.close()
        status = "success" if state.success else "checkpointed" if state.checkpointed \
            else "aborted"
        return write_summary(out, cfg, workload, state.backend, state, status, t0,
                             state.run_start, info)
    except BaseException as exc:
        closer()
        lost = state.backend.peer_lost(exc) if state.backend is not None else None
        if lost:  # one line, not the collective's traceback
            ignore_terminations()  # before a sibling's end brings the launcher's SIGTERM
            end_stopped_siblings()
            raise PeerLostError(f"{lost}; {closer.line()}") from None
        if (failed := write_failure(exc, out, unwritten)) is not None:
            raise failed from exc  # one line naming the file, and what was not written
        # what this rank left behind, for the CLI's last line (a peer's death must not
        # claim a record that only rank 0 writes)
        exc.sciperf_records = closer.line()  # type: ignore[attr-defined]
        # a job's SIGTERM reaches every rank (scancel, or a launcher tearing down after a
        # peer failed): the writing rank's line says it once, not once per rank
        exc.sciperf_quiet = info.rank != 0  # type: ignore[attr-defined]
        raise


def instance_config(cfg: Any, info: RankInfo) -> Any:
    """Throughput mode: each instance trains with its own seed (seed + instance)."""
    if info.instances == 1:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg.seed = int(cfg.seed) + info.instance
    return cfg


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
        restore_backend(found, backend)
    elif not staged_in_run:  # hpc 3.0: staging and setup precede run_start
        mll.end("init_stop")
    backend.barrier()
    if not staged_in_run and found is None:
        state.run_start = time.time()
        mll.start("run_start")
    # a record that survives what nothing can catch (the OOM killer's SIGKILL): until the
    # end overwrites it, summary.json says the run was running
    write_summary(out, cfg, workload, backend, state, "running", state.t0, state.run_start,
                  info)
    with signals.hang_sentinel(cfg, info, out):
        _loop(cfg, workload, backend, mll, state, info)
        backend.barrier()
    if cfg.train.save_weights:
        save_npz(out / weights_file(info), backend.export_weights())


def _loop(cfg: Any, workload: Workload, backend: Any, mll: MLLogger, state: RunState,
          info: RankInfo) -> None:
    """Epochs until the target is met or train.max_epochs is spent (from the checkpoint's
    epoch when resumed), checkpoints as asked."""
    rank = info.rank
    max_epochs = int(cfg.train.max_epochs)
    loop_start, first = time.time(), state.epochs
    progress, state.progress = state.progress, None  # a resumed epoch's trained part
    stop = signals.STOP.is_set if int(cfg.train.checkpoint_every) else None
    for epoch in range(state.epochs, max_epochs):
        num = epoch + 1  # MLLOG epoch_num is 1-based, as in the reference logs
        tag = {"epoch_num": workload.epoch_num(cfg, num)}  # (OpenFold: samples)
        lr = workload.lr_for_epoch(cfg, epoch)
        if progress is None:  # a resumed epoch's epoch_start is in the log already
            mll.start("epoch_start", metadata=tag)
        heartbeat.phase("train")
        lines = step_lines(cfg, backend, num, max_epochs, progress) if rank == 0 else None
        result: EpochResult = backend.train_epoch(epoch, lr, on_step=lines, resume=progress,
                                                  stop=stop)
        progress = None
        if result.stopped is not None:  # SIGUSR1: checkpoint here, end the run
            write_checkpoint(cfg, Path(cfg.output_dir), state, info, result.stopped)
            state.checkpointed = True
            return
        check_finite(result.loss, "training loss", num, workload)
        mll.end("epoch_stop", metadata=tag)
        mll.start("eval_start", metadata=tag)
        t_eval = time.time()
        heartbeat.phase("eval")
        metric = float(backend.evaluate())
        eval_s = time.time() - t_eval
        check_finite(metric, workload.metric.key, num, workload)
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
            epoch_line(cfg, workload, state, result, eval_s, max_epochs, loop_start, first)
        if state.success:
            return
        if stop is not None and backend.stop_agreed(stop, 0, 1):  # asked during evaluation
            write_checkpoint(cfg, Path(cfg.output_dir), state, info, forced=True)
            state.checkpointed = True
            return
        write_checkpoint(cfg, Path(cfg.output_dir), state, info)
