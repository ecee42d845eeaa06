"""Validation of a composed run config: what the schema's types cannot say.

Each check fails in one line naming its key (docs/architecture.md, rule 10) before any
verb writes: choices, the workload's sections against its dataclasses, ranges and counts,
directories, roofline peaks, Slurm time limits, ports. `sciperf launch` and `sciperf
characterize` call the public checks again for values that never passed composition.
"""

from __future__ import annotations

import math
import re
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, ListConfig, OmegaConf

from sciperf.config_schema import CHOICES, WORKLOAD_SECTIONS, section_keys
from sciperf.errors import SciperfError
from sciperf.workloads import get


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
        known = section_keys(workload, section)
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
    for key in LOGGED_TEXT:
        if (size := len(str(OmegaConf.select(cfg, key)).encode())) > LOGGED_TEXT_MAX:
            raise SciperfError(f"{key} is {size} bytes; at most {LOGGED_TEXT_MAX} (an MLLOG "
                               "value: every record line stays short enough for the checker)")
    for key, (least, most, why) in COUNTS.items():
        if (value := OmegaConf.select(cfg, key)) < least:
            raise SciperfError(f"{key}={value} must be at least {least} ({why})")
        if value > most:
            raise SciperfError(f"{key}={value} must be at most {most} ({why})")


# Texts of the config that become MLLOG values: each record line is bounded (the checker's
# parser is quadratic in a line's length, sciperf.results.logs.MAX_RECORD_BYTES), and a
# value past this is refused before the run, not in the log `check` reads after it.
LOGGED_TEXT = ("system.submission_org", "system.submission_platform",
               "system.submission_division", "system.submission_status")
LOGGED_TEXT_MAX = 1 << 10

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
