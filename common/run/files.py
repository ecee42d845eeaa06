"""The files of a run: the names it writes (result_<i>.txt, summary.json, the weights), the
dataset files each rank reads (listed, checked and sharded by the workload's plan, staged
node-locally if asked), and the files named by ``reads`` keys (starting weights, a
reference checkpoint).

Everything here is checked or named before the output directory is claimed: a missing or
short dataset, a file every sample needs (the reader's) and an unreadable starting file are
refusals, never a run that stopped after its records were written (docs/architecture.md,
rule 10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sciperf.config_keys import key_roles
from sciperf.data.plan import RankFiles
from sciperf.data.sharding import local_batch_size
from sciperf.data.staging import StageReport, stage_files, stage_root, staged_path
from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError
from sciperf.results.mllog import MLLogger
from sciperf.results.summary import SUMMARY_FILE
from sciperf.results.tree import result_name
from sciperf.workloads.base import Workload


def result_file(instance: int = 0) -> str:
    """MLLOG file of an instance: result_<i>.txt, as in the submission tree."""
    return result_name(instance)


def weights_file(info: RankInfo) -> str:
    """Canonical weights of a rank (train.save_weights): per instance in throughput mode."""
    prefix = f"weights_instance{info.instance}_" if info.instances > 1 else "weights_"
    return f"{prefix}rank{info.rank}.npz"


def summary_file(instance: int = 0, instances: int = 1) -> str:
    """summary.json, or summary_<i>.json per instance in throughput mode."""
    return SUMMARY_FILE if instances == 1 else f"summary_{instance}.json"


def require_dataset(cfg: Any) -> None:
    """Fail early, with the directory named, when the data is not there."""
    if not Path(cfg.data.dir).is_dir():
        raise SciperfError(f"data.dir={cfg.data.dir} does not exist (run `sciperf prepare`)")


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


def check_reader(cfg: Any, workload: Workload) -> None:
    """The workload's sample reader built now, as each backend builds it
    (``Dataset.reader``): building it opens and checks what every sample shares — a
    normalisation table, an index — so a missing or bad one is refused before output_dir
    is claimed, and the corrected run may reuse the folder (docs/architecture.md, rule 10)."""
    workload.dataset.reader(cfg.data.dir, cfg.data.format, workload.model_spec(cfg))


def resolve_target(cfg: Any, workload: Workload) -> Any:
    """`cfg` with ``train.target`` the one the run stops at (``Workload.run_target``: the
    configured value, or one the workload derives from its data), checked against the
    metric's values — before output_dir is claimed, so the records, the summary and the
    stop rule all read the same number."""
    try:
        target = float(workload.run_target(cfg))
        if target == float(cfg.train.target):
            # the configured value, checked when the config was composed (a pre-training
            # sets one no metric reaches, on purpose, to run every cycle)
            return cfg
        workload.metric.check_target(target, workload.name)
    except ValueError as exc:
        raise SciperfError(str(exc)) from None
    return OmegaConf.merge(cfg, {"train": {"target": target}})


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


def check_init_files(cfg: Any, workload: Workload) -> None:
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
