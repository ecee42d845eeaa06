"""The bench's command line as a checked plan: `key=value` words → :class:`Plan`.

Every option is checked here in one line before any row runs — a bench key that does not
exist, a config key the bench sets for each row itself, sizes that do not divide into
batches, overrides that do not compose, an unusable output folder — so a mistake costs no
minutes of rows. Running the plan is :func:`sciperf.tools.bench.bench`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf.config import compose
from sciperf.config_keys import key_roles
from sciperf.config_schema import PRECISIONS
from sciperf.data.layout import check_output_dir
from sciperf.distributed import cpu_count
from sciperf.errors import SciperfError
from sciperf.tools.bench.input_rows import worker_counts
from sciperf.tools.bench.rows import _cases
from sciperf.workloads import DEFAULT, get
from sciperf.workloads.base import Workload

# the bench's own keys (the rest are config overrides every training row takes)
BENCH_KEYS = ("bench.cases", "bench.precision", "bench.samples", "bench.batch",
              "bench.epochs", "bench.workers", "bench.isolate", "bench.rounds")


def set_by_bench(workload: Workload) -> dict[str, str]:
    """Config keys each row sets itself (their role's ``bench``, sciperf.roles) → the bench
    option that says it: an override of one changed what a row measured while its labels
    kept the bench's values (`bench.precision=bf16 precision=fp32` timed fp32 in a row
    labelled bf16)."""
    return {key: r.bench for key, r in key_roles(workload).items() if r.bench}


@dataclass
class Plan:
    """What one `sciperf bench` times, every value checked before the first row."""

    name: str
    workload: Workload
    frameworks: list[str]
    only: list[str]  # bench.cases (empty: every case)
    precisions: list[str]
    shape: dict[str, int]  # bench.samples / batch / epochs given
    workers: list[int]
    isolate: bool
    out: Path
    extra: list[str]  # the config overrides of every training row
    rounds: int = 1  # bench.rounds: every training row once per round, interleaved
    precision_given: bool = False  # bench.precision named on the command line

    @property
    def experiments(self) -> list[str]:
        """The training cases that run, in the workload's order."""
        return [e for e in _cases(self.workload).train if not self.only or e in self.only]

    @property
    def train_rows(self) -> list[tuple[str, str, str]]:
        """(framework, case, precision) of one round's training rows, in the order timed."""
        return [(fw, experiment, precision) for fw in self.frameworks
                for experiment in self.experiments for precision in self.precisions]

    @property
    def runs(self) -> list[str]:
        """Every case that runs, by name (recorded in the JSON: a bench.cases=input file
        is not mistaken for a whole bench)."""
        cases = _cases(self.workload)
        return [*self.experiments, *(["input"] if not self.only or "input" in self.only else []),
                *([] if self.only else cases.rows)]

    def asked(self) -> dict[str, Any]:
        """The cases and options of this bench, as the JSON records them."""
        return {"cases": self.runs, "frameworks": self.frameworks,
                "precisions": self.precisions,
                **self.shape, "workers": self.workers,
                "isolate": self.isolate, "rounds": self.rounds, "overrides": self.extra}


def plan_bench(overrides: list[str]) -> Plan:
    """The bench's options, each checked in one line before any row runs (a typo, a key
    the bench sets itself, sizes that do not divide or an unusable output folder were
    found after minutes of rows, or not at all)."""
    opts = _options(overrides)
    out = _output(opts)
    name = opts.get("workload", DEFAULT)
    workload = get(name)
    own = set_by_bench(workload)
    for key in opts:
        if key.startswith("bench.") and key not in BENCH_KEYS:
            raise SciperfError(f"{key}={opts[key]}: not a bench option (they are "
                               f"{', '.join(BENCH_KEYS)})")
        if (bare := key.lstrip("+~")) in own:
            raise SciperfError(f"{key}={opts[key]}: the bench sets {bare} for each row "
                               f"itself; use {own[bare]}")
    cases = _cases(workload)
    frameworks = _list(opts, "framework", "pytorch")
    only = _list(opts, "bench.cases", None, [*cases.train, "input"])
    precision_given = "bench.precision" in opts
    precisions = _list(opts, "bench.precision", "fp32,bf16", list(PRECISIONS))
    shape = {key: _positive(value, f"bench.{key}={value}") for key in ("samples", "batch", "epochs")
             if (value := opts.pop(f"bench.{key}", None)) is not None}
    asked = opts.get("bench.workers")  # e.g. bench.workers=1,4,16
    workers = ([_positive(w, f"bench.workers={asked}")
                for w in _list(opts, "bench.workers", None)] if asked is not None
               else worker_counts(cpu_count()))
    # every train row in a process of its own (bench.isolate=false: all in this one)
    isolate = _flag(opts.pop("bench.isolate", "true"), "bench.isolate")
    rounds = opts.pop("bench.rounds", None)
    plan = Plan(name, workload, frameworks, only, precisions, shape, workers, isolate, out,
                [f"{k}={v}" for k, v in opts.items()],
                1 if rounds is None else _positive(rounds, f"bench.rounds={rounds}"),
                precision_given)
    if rounds is not None and not plan.experiments:
        raise SciperfError(f"bench.rounds={rounds}: bench.cases={','.join(plan.only)} times "
                           "no training row, and rounds repeat the training rows")
    _check_sizes(plan)
    _check_overrides(plan)
    check_output_dir(out, "output=")
    return plan


def _options(overrides: list[str]) -> dict[str, str]:
    """key → value of the command line; a word without `=` or a key given twice is one
    line (the last of two values was taken in silence)."""
    if stray := [o for o in overrides if "=" not in o]:  # was dropped: the whole bench ran
        raise SciperfError(f"Error parsing override '{stray[0]}': overrides are key=value")
    opts: dict[str, str] = {}
    for key, value in (o.split("=", 1) for o in overrides):
        if key in opts:
            raise SciperfError(f"{key} is given twice ({key}={opts[key]}, {key}={value})")
        opts[key] = value
    return opts


def _output(opts: dict[str, str]) -> Path:
    """The bench's folder (`output=`, default ./bench); `output_dir=` (the train key) was
    ignored, and an empty `output=` wrote the JSON and data/ into the working folder."""
    if "output_dir" in opts:
        raise SciperfError(f"output_dir={opts['output_dir']}: the bench's folder is "
                           "output= (default bench)")
    out = opts.pop("output", "bench")
    if not out.strip():
        raise SciperfError("output= is empty: name the bench's folder (default bench)")
    return Path(out)


def _list(opts: dict[str, str], key: str, default: str | None,
          choices: list[str] | None = None) -> list[str]:
    """A comma list option popped from `opts`: an empty value or item (`bench.cases=,`
    ran every case) and a repeated item (`bench.workers=1,1` timed one row twice) are one
    line; `choices`, where given, are the only names taken."""
    value = opts.pop(key, default)
    if value is None:
        return []
    items = value.split(",")
    if any(not item.strip() for item in items):
        raise SciperfError(f"{key}={value}: an empty name" + (
            f"; name one or more of {', '.join(choices)}" if choices else ""))
    if dup := next((i for n, i in enumerate(items) if i in items[:n]), None):
        raise SciperfError(f"{key}={value}: {dup} is named twice")
    if choices and (wrong := [i for i in items if i not in choices]):
        raise SciperfError(f"{key}={value}: {wrong[0]} is not one of {', '.join(choices)}")
    return items


def _flag(value: str, name: str) -> bool:
    """`value` as true/false, or one line naming the override (`name`)."""
    if value.lower() not in ("true", "false"):
        raise SciperfError(f"{name}={value}: expected true or false")
    return value.lower() == "true"


def _positive(value: str, name: str) -> int:
    """`value` as a positive int, or one line naming the override (`name`)."""
    if not value.isdigit() or int(value) < 1:
        raise SciperfError(f"{name}: expected a positive integer")
    return int(value)


def _check_sizes(plan: Plan) -> None:
    """Each training row's samples and batch: whole batches of the training samples and
    (where the validation loader takes whole batches) of the validation half, and at
    least one batch (`bench.samples=2 bench.batch=4` wrote a row of zeros; 20 in batches
    of 8 was a child's traceback)."""
    cases, data_plan = _cases(plan.workload), plan.workload.plan
    for experiment in plan.experiments:
        sized = cases.train[experiment]._asdict() | plan.shape
        n, gbs = sized["samples"], sized["batch"]
        what = (f"{_named('samples', n, plan.shape, experiment)}, "
                f"{_named('batch', gbs, plan.shape, experiment)}")
        if gbs > n:
            raise SciperfError(f"{what}: the batch is larger than the samples (a training "
                               "row takes whole batches)")
        if n % gbs:
            raise SciperfError(f"{what}: {n} samples do not divide into batches of {gbs} "
                               "(a training row takes whole batches)")
        eval_batch = data_plan.eval_batch(gbs)
        if data_plan.eval_remainder == "error" and max(n // 2, 1) % eval_batch:
            raise SciperfError(f"{what}: the {max(n // 2, 1)} validation samples (half) do "
                               f"not divide into batches of {eval_batch} ({plan.name} takes "
                               f"whole batches); use a multiple of {2 * eval_batch} samples")


def _named(key: str, value: int, shape: dict[str, int], experiment: str) -> str:
    """`bench.samples=20`, or `the mini case's 64 samples` where the case set it."""
    return f"bench.{key}={value}" if key in shape else f"the {experiment} case's {key}={value}"


def _check_overrides(plan: Plan) -> None:
    """The config overrides, composed once per framework and training case before any
    row: a typo (`train.foo=3`, `no_such_key=1`) was one child's traceback per row, or
    never looked at when no training row ran."""
    cases = _cases(plan.workload)
    for fw in plan.frameworks:
        for experiment in plan.experiments or [next(iter(cases.train))]:
            compose([f"experiment={experiment}", f"framework={fw}",
                     *([] if "workload" in (o.split("=")[0] for o in plan.extra)
                       else [f"workload={plan.name}"]), *plan.extra])
    unused = [o for o in plan.extra if not o.startswith("workload=")]
    if unused and not plan.experiments:
        raise SciperfError(f"{unused[0]}: bench.cases={','.join(plan.only)} times no "
                           "training row, and only training rows take config overrides")
