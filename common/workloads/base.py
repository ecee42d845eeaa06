"""The workload contract: everything generic code may know about a workload.

The driver (``sciperf.run.driver``), ``prepare``, ``bench``, ``characterize``, ``score`` and the
config composition read a workload only through a :class:`Workload` — never a module
attribute found by ``getattr``, never an ``if name == …``. Each workload folder
(``sciperf/workloads/<name>/``) builds one instance, ``WORKLOAD``, from its own spec module,
where every benchmark-defining number is written once (docs/architecture.md, "The
workload contract").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from sciperf.data.loader import CollateFn, stack
from sciperf.data.plan import DataPlan
from sciperf.data.sources import DataSources

if TYPE_CHECKING:
    from sciperf.data.conversion import Conversion

HOT_OPS = ("conv3d", "conv2d", "matmul")  # what the frameworks' precision probes time


class SampleReader(Protocol):
    """Reads one sample file into numpy arrays, with the shapes and dtypes a loader
    allocates (``tf.numpy_function`` outputs, DALI checks). Picklable, no open handles."""

    x_shape: tuple[int, ...]
    x_dtype: np.dtype
    y_shape: tuple[int, ...]
    y_dtype: np.dtype

    def __call__(self, path: Path) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(frozen=True)
class Dataset:
    """How a workload's samples are found, read and made.

    ``list_samples(root, split, fmt, n)``: sorted sample paths (the first n if n > 0);
    ``sample_files(path, fmt)``: every file of one sample (staging copies them);
    ``reader(root, fmt, model)``: the :class:`SampleReader` for a dataset directory and a
    model spec (the input size it needs) — the driver builds it before output_dir is
    claimed (``sciperf.run.files.check_reader``), so building it opens and checks every
    file all samples share (DeepCAM's stats.h5, an index): a missing one is then a refusal
    with no records, never a run that fails in its backend's setup;
    ``prepare``: ``data.source`` → ``fn(cfg, force)``;
    ``payload_bytes(model)``: one sample uncompressed (characterize, without files);
    ``collate``: samples → one batch (variable-size samples: graphs, feature dicts);
    ``sources``: the real datasets, where they are published and what they hold (`sciperf
    data list/download/verify`);
    ``conversion``: the reference format → sciperf's npy, one job per file, that `sciperf
    data convert` spreads over MPI ranks (None: nothing to convert);
    ``pack(folder, number, fmt, samples)``: where samples are records inside a container
    other samples share (OC20's LMDB), writes samples as the reader returned them as
    container `number` of a split folder and returns its files — how `sciperf data subset`
    carves a smaller set (None: samples are whole files, linked or copied).
    """

    formats: tuple[str, ...]  # the first is the reference format
    splits: tuple[str, ...]
    list_samples: Callable[..., list[Path]]
    sample_files: Callable[[Path, str], list[Path]]
    reader: Callable[[str | Path, str, Any], SampleReader]
    prepare: Mapping[str, Callable[[Any, bool], None]]
    payload_bytes: Callable[[Any], int]
    collate: CollateFn = stack
    sources: DataSources = DataSources()
    pack: Callable[[Path, int, str, Sequence[Any]], list[Path]] | None = None
    conversion: Conversion | None = None


@dataclass(frozen=True)
class Metric:
    """The quality metric: its MLLOG key, a human name, the target and its direction."""

    key: str
    name: str
    target: float
    higher_is_better: bool
    span: tuple[float, float] = (0.0, float("inf"))  # every value the metric can take

    def check_target(self, target: float, workload: str) -> None:
        """A `train.target` the metric can take, or ValueError in one line: `82` for an
        IoU of 0.82 (a percent for a fraction) ran every epoch of a job and failed at
        the end, and a negative MAE could never be met either."""
        low, high = self.span
        if not low <= target <= high:
            raise ValueError(f"train.target={target:g}: {workload}'s {self.name} lies in "
                             f"[{low:g}, {high:g}], so no run could "
                             f"{'reach' if (target > high) == self.higher_is_better else 'miss'}"
                             " it")

    def reached(self, value: float, target: float | None = None) -> bool:
        """Whether `value` meets `target` (the spec's target by default)."""
        goal = self.target if target is None else target
        return value >= goal if self.higher_is_better else value <= goal


class TrainCase(NamedTuple):
    """One training row of ``sciperf bench``: samples, global batch, timed epochs, and
    whether an untimed warm-up epoch comes first (its one-time costs — allocations,
    kernel selection — left out; where one step takes minutes, OpenFold full, a warm-up
    would double the row's time for a few percent)."""

    samples: int
    batch: int
    epochs: int
    warm_up: bool = True


BENCH_ROWS = ("staging", "scaling")  # rows a workload may add beyond training and input


@dataclass(frozen=True)
class BenchCases:
    """What ``sciperf bench`` times for a workload.

    ``train``: experiment → its :class:`TrainCase` (the rows read the workload's fastest
    format, the last of ``Dataset.formats``, and start from the model's own
    initialisation: a row's speed does not depend on the weights);
    ``input``: (model overrides of one input size, samples) pairs for the loader rows;
    ``dataset(root, model, fmt, n)``: a small synthetic set for timing (re-used when
    complete); ``size(model)``: the input size as the JSON rows report it; ``rows``: more
    rows from :data:`BENCH_ROWS` (staging against ``cp -r``, 1 vs 2 ranks through the
    real launcher).
    """

    train: Mapping[str, TrainCase]
    input: tuple[tuple[Mapping[str, Any], int], ...]
    dataset: Callable[[Path, Any, str, int], Path]
    size: Callable[[Any], Any]
    rows: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if unknown := set(self.rows) - set(BENCH_ROWS):
            raise ValueError(f"bench rows {sorted(unknown)} are not among {BENCH_ROWS}")


@dataclass(frozen=True)
class DaliFormat:
    """How DALI reads a workload's fast npy format and transforms it in the pipeline.

    ``suffix``/``label_path``: the npy files; ``x_dtype``/``ndim``: the data arrays;
    ``label_dtype``/``label_shape(sample_shape)``: the labels; ``transform(root)``: the
    in-pipeline transform (an object with ``apply(x)``), from the dataset root.
    """

    suffix: str
    label_path: Callable[[Path], Path]
    x_dtype: type
    ndim: int
    label_dtype: type
    label_shape: Callable[[tuple[int, ...]], tuple[int, ...]]
    not_npy: str  # the one-line error for other formats
    transform: Callable[[str | Path | None, tuple[int, ...]], Any]  # (root, sample shape)


@dataclass(frozen=True)
class Layer:
    """One weight layer as characterize counts it: multiply-adds per sample (0 for norms
    and affines), trainable parameters, and the elements of its output per sample (what
    training keeps for the backward pass: the memory check's lower bound)."""

    name: str
    kind: str
    macs: int
    params: int
    outputs: int = 0


@dataclass(frozen=True)
class DataCost:
    """Counted layers on a dataset's own samples, a line saying where their sizes come
    from, and the mean per-sample sizes that vary (``{"atoms": 73.2, …}``: bench's
    per-unit rates beside samples/s)."""

    layers: list[Layer]
    source: str
    units: Mapping[str, float]


@dataclass(frozen=True)
class Cost:
    """What a workload's training step computes, as characterize, bench, the memory check,
    the thread layout and ``precision=auto`` count it.

    ``layers(model)``: the counted layers of a typical sample of the spec;
    ``hot_op``: the op most training time goes to (``conv3d``, ``conv2d``, ``matmul``) —
    what precision=auto times in fp32 and bf16 on a CPU (sciperf.precision);
    ``passes``: (training, evaluation) FLOPs per sample as multiples of the forward, for
    models whose output is itself a derivative (OC20's forces) or that recycle
    (OpenFold); None: forward + backward and the forward (characterize's convention);
    ``on_data(model, folder, fmt, samples)``: the :class:`DataCost` where the data sets
    the cost (OC20's graphs); None: every sample costs the typical one;
    ``efficiency``: accelerator kind → the share of the roofline a step reaches, the one
    factor `sciperf project` calibrates per (workload, accelerator kind).
    """

    layers: Callable[[Any], list[Layer]]
    hot_op: str = "matmul"
    passes: tuple[float, float] | None = None
    on_data: Callable[[Any, Path, str, list[Path]], DataCost] | None = None
    efficiency: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.hot_op not in HOT_OPS:
            raise ValueError(f"hot_op={self.hot_op} is not one of {', '.join(HOT_OPS)}")


def _no_check(cfg: Any) -> None:
    """Nothing to check."""


def _configured_target(cfg: Any) -> float:
    """The run's ``train.target``."""
    return float(cfg.train.target)


@dataclass(frozen=True)
class Workload:
    """One MLPerf-HPC workload, as generic code sees it.

    Config dataclasses generate the Hydra node (``default_config``) and check the user's
    ``model.*`` / ``opt.*`` keys. The LR is a per-optimizer-step function; the driver's
    per-epoch record is derived from it (:meth:`lr_for_epoch`). ``per_step_lr`` says
    whether it moves inside an epoch (backends then set it at every step; otherwise the
    driver's epoch LR holds for the epoch).
    """

    name: str
    metric: Metric
    model: type  # ModelSpec dataclass: architecture knobs, parameter_count()
    optimizer: type  # OptimizerSpec
    train: type  # TrainSpec
    data: type  # DataSpec
    dataset: Dataset
    # which samples each rank trains and evaluates, epoch by epoch; steps per epoch and
    # MLLOG's epoch unit (sciperf.data.plan: StrictPlan, UnevenPlan, SampledPlan)
    plan: DataPlan
    lr_for_step: Callable[[Any, int, int], float]  # (cfg, step, steps per epoch) → LR
    per_step_lr: bool
    mllog_hyperparameters: Callable[[Any, int, int], dict[str, Any]]
    train_samples: int  # the reference dataset (closed division)
    eval_samples: int
    runs_for_score: int
    rcp_epochs: Mapping[int, float]  # epochs to converge by global batch size (RCP means)
    full_parameter_count: int
    cost: Cost  # what a training step computes (characterize, bench, memory, precision)
    check_config: Callable[[Any], None] = _no_check  # model/opt values the schema can't restrict
    check_run: Callable[[Any], None] = _no_check  # closed-division rules on the user's choices
    bench: BenchCases | None = None  # what `sciperf bench` times (None: no cases)
    dali: DaliFormat | None = None  # DALI's npy reading and transform (None: no DALI path)
    # the target a run stops at, from its config: train.target, or what the workload
    # derives from its data (GPT-2: a synthetic set's recorded entropy rate + a margin);
    # the driver resolves it before output_dir is claimed (ValueError: one line)
    run_target: Callable[[Any], float] = _configured_target

    def epoch_num(self, cfg: Any, epoch: int) -> int:
        """MLLOG's ``epoch_num`` of 1-based `epoch` (the plan's unit, the reference's)."""
        return self.plan.epoch_num(cfg, epoch)

    @property
    def formats(self) -> tuple[str, ...]:
        """On-disk formats, the reference's first."""
        return self.dataset.formats

    def default_config(self) -> dict[str, Any]:
        """The ``workload=<name>`` Hydra node, generated from the dataclasses."""
        return {"workload": self.name, "model": asdict(self.model()),
                "opt": asdict(self.optimizer()), "train": asdict(self.train()),
                "data": asdict(self.data())}

    def model_spec(self, cfg: Any) -> Any:
        """The ModelSpec of a run config (``cfg.model``)."""
        return self.model(**dict(cfg.model))

    def reached(self, metric: float, target: float) -> bool:
        """Quality target test in the metric's direction."""
        return self.metric.reached(metric, target)

    def lr_for_epoch(self, cfg: Any, epoch: int, steps_per_epoch: int | None = None) -> float:
        """LR at the first optimizer step of 0-indexed `epoch` (the driver's record)."""
        steps = steps_per_epoch or self.plan.steps_per_epoch(cfg)
        return self.lr_for_step(cfg, epoch * steps, steps)
