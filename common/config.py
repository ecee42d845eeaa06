"""Hydra composition: schema, config groups, and one-line errors for bad overrides.

The primary config and most groups are YAML under ``configs/``; the `workload` group is
generated from each workload's contract (``sciperf.workloads``) so benchmark numbers are
never retyped in YAML.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, ListConfig, OmegaConf

from sciperf.errors import SciperfError
from sciperf.roles import Role, role
from sciperf.roles import of as role_of
from sciperf.weights import check_init_weights
from sciperf.workloads import DEFAULT, get, names
from sciperf.workloads.base import Workload

# fp32: IEEE single precision in both frameworks, on GPUs too (their TF32 defaults off);
# tf32: fp32 with TF32 tensor-core matmuls and convolutions (NVIDIA GPUs); bf16: mixed
PRECISIONS = ("fp32", "tf32", "bf16")
CHOICES = {  # values the schema's str type cannot restrict
    "precision": ("auto", *PRECISIONS),
    "data.loader": ("native", "dali"),
    "distributed.backend": ("native", "horovod"),
    "system.scheduler": ("none", "slurm"),
    "data.stage_verify": ("size", "checksum"),
    "mllog.ruleset": ("3.0.0", "2.0.0"),
    "framework.malloc": ("reuse", "system"),
}


@dataclass
class DataConfig:
    """Keys every workload understands under `data.`."""

    dir: str = field(default="data/${workload}", metadata=role(
        place=True, bench="output= (the timing data is made under OUTPUT/data)"))
    format: str = field(default="npy", metadata=role(
        bench="bench.cases=input (training rows read the workload's fastest format, the "
              "input rows every format)"))
    source: str = "synthetic"  # synthetic | existing
    train_samples: int = field(default=0, metadata=role(bench="bench.samples="))
    eval_samples: int = field(default=0, metadata=role(
        bench="bench.samples= (validation holds half)"))
    loader: str = "native"
    shuffle: bool = True
    prefetch: int = field(default=4, metadata=role(local=True))
    # reader threads per rank (measured on an H100 node: 2 feed full CosmoFlow at 244
    # samples/s, bf16; 8 were no faster)
    workers: int = field(default=2, metadata=role(local=True))
    # PyTorch on a GPU: the loader's thread stacks each batch straight into page-locked
    # memory (false: the training thread pins each batch before its copy)
    pinned_batches: bool = True
    # node-local copy before training (null: off)
    stage_dir: str | None = field(default="${system.stage_dir}", metadata=role(place=True))
    stage_workers: int = field(default=4, metadata=role(local=True))  # copies per rank
    stage_verify: str = "size"  # size | checksum (CRC-32 of source bytes vs the copy)
    # threads per rank reading samples in `sciperf prepare`
    prepare_workers: int = field(default=4, metadata=role(local=True))


@dataclass
class TrainConfig:
    """Keys every workload understands under `train.`."""

    global_batch_size: int = field(default=64, metadata=role(bench="bench.batch="))
    max_epochs: int = field(default=100, metadata=role(local=True))
    target: float = 0.0
    # steps between progress lines inside an epoch (0: per epoch only)
    log_every: int = field(default=0, metadata=role(local=True))
    # canonical .npz to start from (same file works in every framework)
    init_weights: str = field(default="", metadata=role(reads=True,
                                                        check=check_init_weights))
    # write OUT/weights_rank<r>.npz (canonical) at the end
    save_weights: bool = field(default=False, metadata=role(local=True))
    # replace an earlier run in output_dir (else: refused)
    overwrite: bool = field(default=False, metadata=role(local=True))
    # epochs between checkpoints in OUT/checkpoints (0: none)
    checkpoint_every: int = field(default=0, metadata=role(local=True))
    checkpoint_keep: int = field(default=2, metadata=role(local=True))  # newest kept
    # auto: continue from OUT/checkpoints' newest valid one ("": start anew)
    resume: str = field(default="", metadata=role(local=True))
    # with checkpointing on: seconds a SIGTERM (preemption, time limit) may take to reach a
    # checkpoint before the run is ended without one (0: end at once); below Slurm's KillWait
    term_grace_s: float = field(default=20.0, metadata=role(local=True))


@dataclass
class SystemConfig:
    """Site facts; org/platform feed the MLLOG submission keys (docs/architecture.md, rule 8)."""

    name: str = "local"
    submission_org: str = "sciperf"
    submission_platform: str = "local"
    submission_division: str = "closed"
    submission_status: str = "research"
    nodes: int = 1
    accelerators_per_node: int = 0
    cpus_per_node: int = 0
    scheduler: str = "none"  # none | slurm: `sciperf launch` renders an sbatch script on slurm
    mpi: str = "pmix"  # srun --mpi flavour: pmix | pmi2 | cray_shasta | none
    account: str | None = None  # placeholders the user supplies (system.account=…)
    partition: str | None = None
    qos: str | None = None
    constraint: str | None = None
    scratch_dir: str | None = None  # shared parallel file system (data), bound into containers
    stage_dir: str | None = None  # node-local storage for data staging
    setup: list[str] = field(default_factory=list)  # shell lines the batch script runs first
    peak_flops: float | None = None  # FLOP/s per node: roofline ceiling (`sciperf characterize`)
    peak_io_bw: float | None = None  # bytes/s per node from the data source (roofline ceiling)


@dataclass
class FrameworkConfig:
    """Which backend (entry point in group `sciperf.backends`) and its generic knobs."""

    name: str = "pytorch"
    threads: int = field(default=0, metadata=role(local=True))  # 0: every core allotted
    channels_last: bool = True
    compile: bool = False
    # host allocator: reuse keeps freed memory for the next step (no page faults on fresh
    # mappings every step; sciperf.allocator), system leaves glibc's defaults
    malloc: str = field(default="reuse", metadata=role(local=True))
    # TensorFlow: ops run at once (its intra-op threads share the cores out); 0: chosen from
    # the model's work per layer (sciperf.threads: small layers run side by side)
    inter_op_threads: int = field(default=0, metadata=role(local=True))


@dataclass
class DistributedConfig:
    """How ranks talk: the framework's native stack (DDP / TF) or Horovod."""

    backend: str = "native"  # native | horovod
    # a lost or hung peer ends the job after this long, never a hang
    timeout_s: int = field(default=45, metadata=role(local=True))
    # PyTorch: one rank still joins a process group (NCCL on a GPU, gloo on a CPU) and
    # trains under DDP: the multi-GPU collective path, checked on a one-GPU machine
    single_rank_group: bool = False


@dataclass
class MllogConfig:
    """MLLOG options: the HPC ruleset decides where staging falls (3.0.0: before run_start)."""

    ruleset: str = "3.0.0"


@dataclass
class RootConfig:
    """The whole run: typed keys are checked by OmegaConf, workload sections by the spec."""

    workload: str = DEFAULT  # set by the `workload` group (the contract's name)
    experiment: str = field(default="mini", metadata=role(bench="bench.cases="))
    seed: int = 0
    # fp32 | tf32 | bf16 | auto: measured per machine (sciperf.precision)
    precision: str = field(default="auto", metadata=role(bench="bench.precision="))
    output_dir: str = field(default="results/${workload}-${framework.name}-${experiment}",
                            metadata=role(place=True, bench="output="))
    # nodes requested by `sciperf launch`
    nodes: int = field(default=1, metadata=role(local=True))
    instances: int = 1  # concurrent training instances (throughput mode): ranks split evenly
    # `sciperf launch`: render, do not submit
    dry_run: bool = field(default=False, metadata=role(local=True))
    # wall-clock request of `sciperf launch` (sbatch --time)
    time_limit: str = field(default="01:00:00", metadata=role(local=True))
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    model: dict[str, Any] = field(default_factory=dict)
    opt: dict[str, Any] = field(default_factory=dict)
    framework: FrameworkConfig = field(default_factory=FrameworkConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    mllog: MllogConfig = field(default_factory=MllogConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    launcher: dict[str, Any] = field(default_factory=dict, metadata=role(local=True))
    container: dict[str, Any] = field(default_factory=dict, metadata=role(local=True))


def config_dir() -> Path:
    """Location of the Hydra config groups: $SCIPERF_CONFIG_DIR or the checkout's configs/."""
    env = os.environ.get("SCIPERF_CONFIG_DIR")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "configs"
    if not (path / "config.yaml").is_file():
        raise SciperfError(f"config directory {path} has no config.yaml (set SCIPERF_CONFIG_DIR)")
    return path


def _register() -> None:
    """Put the schema and the spec-generated workload nodes into Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    schema = OmegaConf.structured(RootConfig)
    # `data.` and `train.` hold the keys every workload shares (typed here) and a
    # workload's own (its DataSpec, TrainSpec: checked by `validate`), so those nodes
    # accept new keys
    OmegaConf.set_struct(schema.data, False)
    OmegaConf.set_struct(schema.train, False)
    store.store(name="sciperf_schema", node=schema)
    for name in names():
        store.store(group="workload", name=name, node=get(name).default_config(),
                    package="_global_")


def compose(overrides: list[str]) -> DictConfig:
    """Compose the run config from `key=value` overrides; user errors become SciperfError."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _register()
    parsed = _check_syntax(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = hydra_compose("config", overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except Exception as exc:  # Hydra/OmegaConf raise many types; all are user errors here
        raise SciperfError(_one_line(exc)) from exc
    _check_edits(cfg, overrides)
    _check_booleans(cfg, parsed)
    validate(cfg)
    return cfg


def _check_syntax(overrides: Sequence[str]) -> list[Any]:
    """Each override parsed alone, so a syntax error names the one that failed (Hydra's
    own message, "mismatched input ' (' expecting <EOF>", named none: with ten overrides
    the user could not tell which), and a sweep is refused as such (a comma or range()
    is Hydra's multirun syntax; sciperf runs one configuration)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, parsed_all = OverridesParser.create(), []
    for override in overrides:
        try:
            parsed = parser.parse_overrides([override])[0]
        except Exception as exc:  # OverrideParseException and the grammar's own errors
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SciperfError(
                f"cannot parse the override {override!r} ({reason}): overrides are "
                "key=value; quote a value holding spaces, parentheses, '=' or ',': "
                "key='…'") from exc
        if parsed.is_sweep_override():
            raise SciperfError(
                f"{override!r} is a sweep (Hydra's multirun syntax: a comma, range(), "
                "choice()); sciperf runs one configuration — quote a value holding a "
                "comma: key='a,b'")
        parsed_all.append(parsed)
    return parsed_all


def _check_booleans(cfg: DictConfig, parsed: Sequence[Any]) -> None:
    """A schema boolean set to anything but true/false: OmegaConf turned `2`, `-1`, `yes`
    into true in silence (`train.overwrite=2` replaced a run's records)."""
    for override in parsed:
        if override.is_delete() or _is_group(override.key_or_group):
            continue
        key, value = override.key_or_group, override.value()
        if isinstance(OmegaConf.select(cfg, key, default=None), bool) \
                and not isinstance(value, bool):
            raise SciperfError(f"{key}={override.input_line.split('=', 1)[-1]} must be true "
                               "or false")


_ABSENT = object()  # OmegaConf.select's default: tells a deleted key from a null one
OPEN_SECTIONS = ("launcher", "container")  # keys come from the chosen group option's YAML


def _check_edits(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """`~key` and `+key` get past the schema's struct mode: Hydra deletes a key every run
    needs (a KeyError deep in `validate` or a backend) or adds one no code reads (a typo
    silently ignored). Refuse both here, in one line naming the key."""
    for override in overrides:
        edit = _edit(override)
        if edit is None:
            continue
        op, key = edit
        if op == "~":
            _check_deletion(cfg, key)
        else:
            _check_addition(cfg, key)


def _edit(override: str) -> tuple[str, str] | None:
    """('~' or '+', dotted key) of a deletion or addition (`++` too: it adds when the key
    is absent); None for a plain `key=value`, a config group (`+group=option` picks a
    config, it adds no key) or Hydra's own `hydra.` keys (dropped from the run config)."""
    if not override.startswith(("~", "+")):
        return None
    key = override.lstrip("+~").split("=", 1)[0].split("@", 1)[0].strip()
    if key.split(".", 1)[0] == "hydra" or _is_group(key):
        return None
    return override[0], key


def _is_group(key: str) -> bool:
    """`key` names a config group: a folder of configs/ or the spec-generated `workload`."""
    return "." not in key and (key == "workload" or (config_dir() / key).is_dir())


def _check_deletion(cfg: DictConfig, key: str) -> None:
    """`~key` may drop an optional key (a launcher's, a container's: they have defaults in
    code) but not one the schema declares — unless it is still there (`~system` drops the
    group's YAML, the schema's defaults stay)."""
    section, _, leaf = key.rpartition(".")
    known = _schema_keys(cfg, section)
    if known is None or leaf not in known:
        return
    if OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
        raise SciperfError(f"cannot delete {key}: a required key of the run config (override "
                           "its value instead; `sciperf show` prints all keys)")


def _check_addition(cfg: DictConfig, key: str) -> None:
    """`+key` may only add what the schema (or the chosen launcher/container config)
    declares; the first unknown part of the dotted key is named with the valid keys."""
    parts = key.split(".")
    for depth in range(min(len(parts), 2)):
        section = ".".join(parts[:depth])
        known = _schema_keys(cfg, section)
        if known is None:
            return
        if parts[depth] not in known:
            name = ".".join(parts[:depth + 1])
            raise SciperfError(f"unknown key {name} (`+` adds only keys the schema declares); "
                               f"valid keys: {', '.join(sorted(known))}")


def _schema_keys(cfg: DictConfig, section: str) -> set[str] | None:
    """Keys the schema declares at `section` ('' for the root), or None where it declares
    none (a scalar, or a launcher/container whose config file is not found)."""
    if not section:
        return {f.name for f in fields(RootConfig)}
    if section in OPEN_SECTIONS:
        return _option_keys(cfg, section)
    if section in WORKLOAD_SECTIONS:
        return _section_keys(get(cfg.workload), section)
    cls = get_type_hints(RootConfig).get(section)
    return {f.name for f in fields(cls)} if is_dataclass(cls) else None


# sections the workload's spec types (its dataclass per section), with the schema's
# shared keys where the run core reads some of its own (data.dir, train.target, …)
WORKLOAD_SECTIONS = {"model": "model", "opt": "optimizer", "data": "data", "train": "train"}
SHARED_SECTIONS = {"data": DataConfig, "train": TrainConfig}


def _section_keys(workload: Any, section: str) -> set[str]:
    """Keys of the workload section `section`: one answer for the unknown-key check of
    `validate` and for what `+key` may add."""
    keys = set(getattr(workload, WORKLOAD_SECTIONS[section]).__dataclass_fields__)
    if section in SHARED_SECTIONS:
        keys |= set(SHARED_SECTIONS[section].__dataclass_fields__)
    return keys


def _option_keys(cfg: DictConfig, group: str) -> set[str] | None:
    """The keys configs/<group>/<name>.yaml declares: what that launcher or container reads
    (the schema types these sections as open dicts)."""
    name = OmegaConf.select(cfg, f"{group}.name", default=None)
    path = config_dir() / group / f"{name}.yaml"
    if not isinstance(name, str) or not path.is_file():
        return None
    return {str(k) for k in OmegaConf.load(path)} - {"defaults"}


def _one_line(exc: Exception) -> str:
    """Condense a Hydra/OmegaConf error to one line that still lists the valid choices."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = (lines[0] if lines else type(exc).__name__).replace("In 'config': ", "")
    if "Available options" in text:
        opts = text.split("Available options", 1)[1].split("Config search path")[0]
        choices = [ln.strip() for ln in opts.splitlines()[1:] if ln.strip()]
        return f"{head}; valid choices: {', '.join(choices)}"
    if head.startswith("Could not override"):
        return f"unknown config key: {head} (check the spelling; `sciperf show` prints all keys)"
    if head.startswith("Error parsing override"):
        return f"{head}: overrides are key=value"
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause).strip():
        reason = str(cause).strip().splitlines()[0]
        return f"{head}: {reason}"
    return head


def validate(cfg: DictConfig) -> None:
    """Check what the schema cannot, so a bad value fails here, in one line naming its key,
    before `sciperf train`/`prepare` write anything (docs/architecture.md, rule 10)."""
    for key, choices in CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in choices:
            raise SciperfError(f"{key}={value} is not one of {', '.join(choices)}")
    workload = get(cfg.workload)
    if cfg.data.format not in workload.formats:
        raise SciperfError(
            f"data.format={cfg.data.format} is not one of {', '.join(workload.formats)}"
        )
    _check_sections(cfg, workload)
    if cfg.data.loader == "dali" and workload.dali is None:
        raise SciperfError(f"data.loader=dali: {workload.name} has no DALI pipeline (its "
                           "samples are not fixed-size arrays); use data.loader=native")
    _check_run_keys(cfg)
    _check_dirs(cfg)
    for key in PEAKS:
        check_peak(key, OmegaConf.select(cfg, key))
    check_time_limit(cfg.time_limit)
    check_port("launcher.master_port", OmegaConf.select(cfg, "launcher.master_port"))
    try:  # the workload's own ranges, now rather than after run_start in the backend
        workload.metric.check_target(float(cfg.train.target), workload.name)
        workload.check_config(cfg)
    except ValueError as exc:
        raise SciperfError(str(exc)) from None


def _check_sections(cfg: DictConfig, workload: Any) -> None:
    """`model.*`, `opt.*` and `data.*` keys exist in the workload's dataclasses and their
    values have the declared types: the sections are plain dicts to OmegaConf, so
    `model.dropout=abc` would otherwise reach a framework as a string."""
    for section, attr in WORKLOAD_SECTIONS.items():
        cls = getattr(workload, attr)
        known = _section_keys(workload, section)
        unknown = set(cfg[section]) - known
        if unknown:
            valid = ", ".join(sorted(known))
            raise SciperfError(f"unknown key {section}.{sorted(unknown)[0]}; valid keys: {valid}")
        hints = get_type_hints(cls)
        for key, value in cfg[section].items():
            if key in hints and not _has_type(value, hints[key]):
                raise SciperfError(f"{section}.{key}={_plain(value)} must be "
                                   f"{_type_name(hints[key])}")


def _has_type(value: Any, hint: Any) -> bool:
    """`value` (OmegaConf node content) fits the dataclass annotation `hint`: ints are not
    bools, floats are finite numbers (an int is a float), lists check every element."""
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        return any(_has_type(value, arg) for arg in get_args(hint))
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        return isinstance(value, ListConfig | list) and all(_has_type(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return (isinstance(value, int | float) and not isinstance(value, bool)
                and math.isfinite(value))
    if hint is str:
        return isinstance(value, str)
    return True


def _type_name(hint: Any) -> str:
    """How a message names an annotation: `an int`, `a list of float`, `a finite float`."""
    origin = get_origin(hint)
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        return f"a list of {_type_name(item).split(' ', 1)[-1]}"
    if origin in (Union, UnionType):
        return " or ".join(_type_name(arg) for arg in get_args(hint))
    names = {int: "an int", float: "a finite float", bool: "true or false", str: "a string",
             type(None): "null"}
    return names.get(hint, str(hint))


def _plain(value: Any) -> Any:
    """A node's value as the user wrote it (lists without OmegaConf's wrapper)."""
    if isinstance(value, ListConfig | DictConfig):
        return OmegaConf.to_container(value)
    return value


# A year: every consumer takes it (Python's timedelta stops at 999,999,999 days, torch's
# process-group timeout is int64 milliseconds; 10**14 s crashed a rank's setup in timedelta)
TIMEOUT_MAX_S = 365 * 24 * 3600
SEED_MAX = 2**32 - 1  # numpy's legacy seeding (np.random.seed) accepts 0 ≤ seed < 2**32


def _check_run_keys(cfg: DictConfig) -> None:
    """Run-level numbers of the schema whose type is right but whose value is not.

    The seed reaches numpy (legacy and Generator), torch and TensorFlow: numpy refuses
    negatives and np.random.seed anything ≥ 2**32, torch.manual_seed anything ≥ 2**64, so
    [0, 2**32 − 1] is the range every framework takes as is (no silent `% 2**32`).
    """
    seed = cfg.seed
    if not 0 <= seed <= SEED_MAX:
        raise SciperfError(f"seed={seed} must be in 0..{SEED_MAX} (0 ≤ seed < 2**32, the "
                           "range numpy, torch and TensorFlow all accept)")
    for key in ("data.train_samples", "data.eval_samples"):
        value = OmegaConf.select(cfg, key)
        if value < 0:
            raise SciperfError(f"{key}={value} must be >= 0 (0: every sample of the split)")
    if cfg.instances < 1:
        raise SciperfError(f"instances={cfg.instances} must be at least 1")
    if cfg.train.global_batch_size <= 0 or cfg.train.max_epochs <= 0:
        raise SciperfError("train.global_batch_size and train.max_epochs must be positive")
    if cfg.train.checkpoint_every < 0 or cfg.train.checkpoint_keep < 1:
        raise SciperfError(f"train.checkpoint_every={cfg.train.checkpoint_every} must be >= 0 "
                           f"(0: none) and train.checkpoint_keep={cfg.train.checkpoint_keep} "
                           ">= 1")
    if not 0 <= float(cfg.train.term_grace_s) <= 3600:
        raise SciperfError(f"train.term_grace_s={cfg.train.term_grace_s} must be in [0, 3600] "
                           "seconds (0: SIGTERM ends the run at once, without a checkpoint)")
    if cfg.train.resume not in ("", "auto"):
        raise SciperfError(f"train.resume={cfg.train.resume} is not one of auto, '' (start "
                           "anew)")
    if not 0 < (timeout := cfg.distributed.timeout_s) <= TIMEOUT_MAX_S:
        raise SciperfError(f"distributed.timeout_s={timeout} must be > 0 and <= {TIMEOUT_MAX_S} "
                           "seconds (how long a lost or hung peer may take before the job "
                           "ends; at most a year)")
    for key, (least, most, why) in COUNTS.items():
        if (value := OmegaConf.select(cfg, key)) < least:
            raise SciperfError(f"{key}={value} must be at least {least} ({why})")
        if value > most:
            raise SciperfError(f"{key}={value} must be at most {most} ({why})")


# Counts of the schema whose nonsense values a consumer would otherwise clamp or ignore in
# silence (a loader's max(workers, 1), a node count rendered into an srun line) or meet
# after the records exist (100 million `tf.data` map calls filled the machine's memory;
# 10**20 threads overflowed a C long): key → (least, most, what the key is). The largest
# values are far above any machine's (threads per rank, batches in flight).
COUNT_LIMIT = 1 << 16
COUNTS: dict[str, tuple[int, int, str]] = {
    "data.workers": (1, 1024, "reader threads per rank"),
    "data.prefetch": (1, 1024, "batches read ahead"),
    "data.prepare_workers": (1, 1024, "threads per rank in `sciperf prepare`"),
    "data.stage_workers": (1, 1024, "concurrent copies per rank"),
    "framework.threads": (0, COUNT_LIMIT, "compute threads per rank; 0: chosen for this "
                                          "machine"),
    "framework.inter_op_threads": (0, COUNT_LIMIT, "ops run side by side; 0: chosen for "
                                                   "this machine"),
    "train.log_every": (0, 1 << 40, "steps between progress lines; 0: per epoch only"),
    "nodes": (1, 1 << 20, "nodes `sciperf launch` requests"),
    "system.nodes": (1, 1 << 20, "nodes the system has"),
    "system.accelerators_per_node": (0, 1024, "0: a CPU system"),
    "system.cpus_per_node": (0, COUNT_LIMIT, "0: unknown"),
}


def _check_dirs(cfg: DictConfig) -> None:
    """An empty `output_dir=` / `data.dir=` (an unset shell variable: `output_dir=$OUT`)
    would put records or a dataset into the current directory. Both default to a path, so
    an empty one was given on purpose or by mistake, never needed by a verb."""
    for key in ("output_dir", "data.dir"):
        value = OmegaConf.select(cfg, key)
        if not str(value).strip():
            raise SciperfError(f"{key} is empty ({key}={value!r}): name a directory (an unset "
                               "shell variable?); it would write into the current directory")
    for key in ("system.stage_dir", "system.scratch_dir", "data.stage_dir"):
        value = OmegaConf.select(cfg, key)
        if value is not None and not str(value).strip():  # null turns it off, not ""
            raise SciperfError(f"{key} is empty ({key}={value!r}): name a directory (an unset "
                               "shell variable?) or null for none")


PEAKS = ("system.peak_flops", "system.peak_io_bw")  # per node; `sciperf characterize`


def check_peak(key: str, value: Any) -> float | None:
    """A roofline ceiling (FLOP/s or bytes/s per node): a finite number > 0, or None when
    unset. A negative one printed a negative "% of peak", NaN a bare NaN in
    characterize.json (not JSON). `sciperf characterize` calls it again for the peaks a
    run's summary recorded."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value <= 0):
        raise SciperfError(f"{key}={_plain(value)} must be a finite number > 0 (per node; "
                           "null: no ceiling)")
    return float(value)


# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; 0, UNLIMITED or
# INFINITE: no limit
SLURM_TIME = re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|UNLIMITED|INFINITE",
                        re.IGNORECASE)


def check_time_limit(value: Any, key: str = "time_limit") -> str:
    """`sbatch --time` as Slurm parses it, checked at composition so a typo fails here
    rather than at submission after the script was written; `sciperf launch` calls it
    again for configs built in code."""
    text = str(value)
    if isinstance(value, bool) or not SLURM_TIME.fullmatch(text):
        raise SciperfError(f"{key}={text} is not a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, "
                           "D-HH:MM or D-HH:MM:SS (e.g. 90, 01:00:00, 2-00:00:00; UNLIMITED: none)")
    return text


def time_limit_seconds(text: str) -> int | None:
    """A checked Slurm time in seconds; None for no limit (0, UNLIMITED, INFINITE).
    Slurm's reading: one number is minutes, two are MM:SS, three HH:MM:SS; after `D-` the
    numbers are hours, then minutes, then seconds."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        seconds = int(days) * 86400 + sum(p * u for p, u in zip(parts, (3600, 60, 1),
                                                                 strict=False))
    else:
        units = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]
        seconds = sum(p * u for p, u in zip(parts, units, strict=True))
    return seconds or None


def check_port(key: str, value: Any) -> int | None:
    """A TCP port from the config (1..65535), or None when unset (null: pick a free one).

    Checked at composition so `sciperf launch` and every verb refuse it before anything
    is rendered or written; the launchers call it again for configs built in code.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise SciperfError(f"{key}={_plain(value)} must be a TCP port in 1..65535 "
                           "(null: a free port)")
    return value


def to_container(cfg: DictConfig) -> dict:
    """Plain resolved dict (for JSON summaries and hashing)."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def hashed_config(cfg: DictConfig, ignore: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved config an experiment is identified by: without the keys whose role is
    a place (paths) and the dotted keys of `ignore`."""
    data = to_container(cfg)
    places = [k for k, r in key_roles(workload_of(cfg)).items() if r.place]
    for dotted in [*ignore, *places]:
        *sections, key = dotted.split(".")
        node = data
        for section in sections:
            node = node.get(section, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(key, None)
    return data


def config_hash(cfg: DictConfig, ignore: Sequence[str] = ()) -> str:
    """Identify an experiment: hash of :func:`hashed_config`."""
    blob = json.dumps(hashed_config(cfg, ignore), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def key_roles(workload: Workload | None = None) -> dict[str, Role]:
    """Every dotted key that declares a role (``sciperf.roles``): the shared config's and,
    given a workload, its own dataclasses' (a workload's key may add to a shared one)."""
    found = _roles(RootConfig, "")
    if workload is not None:
        for section, attr in WORKLOAD_SECTIONS.items():
            found |= _roles(getattr(workload, attr), f"{section}.")
    return found


def keys_with(flag: str, workload: Workload | None = None) -> list[str]:
    """The dotted keys whose role sets `flag` (reads, place, local, bench)."""
    return [key for key, r in key_roles(workload).items() if getattr(r, flag)]


def _roles(schema: type, prefix: str) -> dict[str, Role]:
    """Dotted key → role of every field of dataclass `schema` that declares one, nested
    dataclasses walked."""
    out: dict[str, Role] = {}
    hints = get_type_hints(schema)
    for f in fields(schema):
        kind = hints.get(f.name)
        if is_dataclass(kind):
            out |= _roles(kind, f"{prefix}{f.name}.")
        elif (r := role_of(f)) != Role():
            out[f"{prefix}{f.name}"] = r
    return out


def workload_of(cfg: Any) -> Workload | None:
    """The workload a run config names (None: none, or not one of the registry's)."""
    name = OmegaConf.select(cfg, "workload", default=None) if isinstance(cfg, DictConfig) \
        else getattr(cfg, "workload", None)
    return get(name) if name in names() else None


def flat(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys → leaf values."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two nested configs, sorted."""
    fa, fb = flat(a), flat(b)
    return sorted(k for k in set(fa) | set(fb) if repr(fa.get(k)) != repr(fb.get(k)))
