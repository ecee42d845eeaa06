"""CosmoFlow: every benchmark-defining number, once (docs/architecture.md, rule 1).

Facts from the MLPerf HPC v3.0 rules and the reference implementation (mlcommons/hpc,
cosmoflow; the closed_cosmoflow.yaml compliance rules):
a 3-D CNN regresses 4 cosmological parameters from a 128³×4 dark-matter density cube.
Framework code reads these dataclasses; configs are generated from them, never retyped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sciperf.schedules import epoch_warmup_step_lr, scaled_peak_lr
from sciperf.weights import expected_arrays

NAME = "cosmoflow"
METRIC_KEY = "eval_error"  # MLLOG key of the quality metric
METRIC_NAME = "validation MAE"
HIGHER_IS_BETTER = False
TARGET = 0.124  # validation MAE <= 0.124 ends a run
RUNS_FOR_SCORE = 10

TRAIN_SAMPLES = 524_288
EVAL_SAMPLES = 65_536
SAMPLE_SHAPE = (128, 128, 128, 4)  # channels-last, int16 particle counts
SAMPLE_DTYPE = "int16"
TARGET_SIZE = 4  # regression targets, each in [-1, 1]
SPLITS = ("train", "validation")
DATA_FORMATS = ("tfrecord", "npy")  # reference format, fast format

# Epochs to converge by global batch size (reference convergence points, RCP).
RCP_EPOCHS = {32: 7.9, 64: 18.3, 512: 22.8, 1024: 40.0}

FULL_PARAMETER_COUNT = 8_907_556

# The reference trains Keras momentum SGD (closed_cosmoflow.yaml: opt_name sgd), and so do
# both backends (KerasSGD): the one value `opt.name` accepts and the one MLLOG reports.
OPTIMIZER = "sgd"
SCALINGS = ("linear", "sqrt", "none")  # peak LR from the global batch size (schedules.py)


@dataclass
class ModelSpec:
    """Architecture knobs; defaults are the reference model (8,907,556 parameters).

    The same dataclass builds the small `mini` variant, so both frameworks construct
    their models from one description and layer names stay canonical.
    """

    input_size: int = 128
    in_channels: int = 4
    conv_filters: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512])
    kernel_size: int = 3
    dense_sizes: list[int] = field(default_factory=lambda: [128, 64])
    dropout: float = 0.5
    leaky_slope: float = 0.3
    output_size: int = TARGET_SIZE
    output_scale: float = 1.2  # tanh output × 1.2

    def flat_size(self) -> int:
        """Size of the channels-last flatten after the last 2× max-pool."""
        side = self.input_size // 2 ** len(self.conv_filters)
        if side < 1 or self.input_size % 2 ** len(self.conv_filters):
            raise ValueError(
                f"model.input_size={self.input_size} is not divisible by "
                f"2**{len(self.conv_filters)} (one max-pool per conv layer)"
            )
        return side**3 * self.conv_filters[-1]

    def layer_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical layer names → kernel shapes (Keras layout), the .npz weight names."""
        shapes: dict[str, tuple[int, ...]] = {}
        k, cin = self.kernel_size, self.in_channels
        for i, cout in enumerate(self.conv_filters):
            shapes[f"conv{i}"] = (k, k, k, cin, cout)
            cin = cout
        fin = self.flat_size()
        for i, fout in enumerate([*self.dense_sizes, self.output_size]):
            shapes[f"dense{i}"] = (fin, fout)
            fin = fout
        return shapes

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every canonical ``.npz`` entry (``"<layer>/kernel|bias"``) and its shape."""
        return expected_arrays(self.layer_shapes())

    def parameter_count(self) -> int:
        """Weights + biases, computed from the architecture (must equal the frameworks')."""
        total = 0
        for shape in self.layer_shapes().values():
            n = 1
            for s in shape:
                n *= s
            total += n + shape[-1]
        return total


@dataclass
class OptimizerSpec:
    """Keras-semantics momentum SGD with per-epoch warmup and step decay.

    velocity = momentum·velocity + lr·grad; w -= velocity (lr inside the velocity).
    `weight_decay` is the Keras L2 factor λ on kernels: loss += λ·Σw², gradient 2λw.
    """

    name: str = OPTIMIZER  # the only value: both backends train KerasSGD
    momentum: float = 0.9
    base_lr: float = 0.001
    base_batch_size: int = 64
    scaling: str = "linear"  # linear | sqrt | none
    warmup_epochs: int = 4
    decay_boundaries: list[int] = field(default_factory=lambda: [32, 64])
    decay_factors: list[float] = field(default_factory=lambda: [0.25, 0.125])
    weight_decay: float = 0.0


@dataclass
class TrainSpec:
    """Run-level defaults of the reference (baseline GBS 64)."""

    global_batch_size: int = 64
    max_epochs: int = 128
    target: float = TARGET


@dataclass
class DataSpec:
    """Dataset defaults: the full reference dataset in its reference format."""

    format: str = "tfrecord"
    train_samples: int = TRAIN_SAMPLES
    eval_samples: int = EVAL_SAMPLES


def peak_lr(cfg: Any) -> float:
    """Peak LR of a run config after batch-size scaling."""
    o = cfg.opt
    return scaled_peak_lr(o.base_lr, cfg.train.global_batch_size, o.base_batch_size, o.scaling)


def steps_per_epoch(cfg: Any) -> int:
    """Optimizer steps in one epoch of the configured training set."""
    n = int(cfg.data.train_samples) or TRAIN_SAMPLES
    return max(n // int(cfg.train.global_batch_size), 1)


def lr_for_step(cfg: Any, step: int, steps_per_epoch: int) -> float:
    """LR of 0-indexed optimizer `step`: the reference's per-epoch schedule (linear warmup,
    absolute step decay) at the epoch the step falls in — constant inside an epoch."""
    o = cfg.opt
    return epoch_warmup_step_lr(step // max(steps_per_epoch, 1), o.base_lr, peak_lr(cfg),
                                o.warmup_epochs, list(o.decay_boundaries),
                                list(o.decay_factors))


def check_config(cfg: Any) -> None:
    """Values the schema cannot restrict, each a ValueError naming its key and the range,
    raised when the config is composed (before anything is written)."""
    check_model(ModelSpec(**dict(cfg.model)))
    check_optimizer(cfg.opt)


def check_model(m: ModelSpec) -> None:
    """Sizes a 3-D CNN can be built from; the labels fix the output at 4 targets."""
    positive = {"input_size": m.input_size, "in_channels": m.in_channels,
                "kernel_size": m.kernel_size}
    for key, value in positive.items():
        if value < 1:
            raise ValueError(f"model.{key}={value} must be >= 1")
    _positive_list("model.conv_filters", m.conv_filters, allow_empty=False)
    _positive_list("model.dense_sizes", m.dense_sizes, allow_empty=True)
    if m.output_size != TARGET_SIZE:
        raise ValueError(f"model.output_size={m.output_size} must be {TARGET_SIZE} "
                         f"(the labels hold {TARGET_SIZE} regression targets)")
    if not 0 <= m.dropout < 1:
        raise ValueError(f"model.dropout={m.dropout} must be in [0, 1)")
    if m.output_scale <= 0:
        raise ValueError(f"model.output_scale={m.output_scale} must be > 0")
    m.flat_size()  # input_size divisible by 2**len(conv_filters)


def _positive_list(key: str, values: Any, allow_empty: bool) -> None:
    """Layer widths: every entry >= 1 (and at least one where the model needs a layer)."""
    if not allow_empty and len(values) == 0:
        raise ValueError(f"{key}=[] needs at least one width (each >= 1)")
    if any(int(v) < 1 for v in values):
        raise ValueError(f"{key}={list(values)}: every width must be >= 1")


def check_optimizer(o: Any) -> None:
    """Keras SGD's ranges and the schedule's (a zero base LR would also divide by zero in
    the logged warmup factor)."""
    if o.name != OPTIMIZER:
        raise ValueError(f"opt.name={o.name}: the only value is {OPTIMIZER} (CosmoFlow trains "
                         "the reference's Keras momentum SGD in both frameworks)")
    if o.scaling not in SCALINGS:
        raise ValueError(f"opt.scaling={o.scaling} is not one of {', '.join(SCALINGS)}")
    if not 0 <= o.momentum < 1:
        raise ValueError(f"opt.momentum={o.momentum} must be in [0, 1)")
    if o.base_lr <= 0:
        raise ValueError(f"opt.base_lr={o.base_lr} must be > 0")
    if o.base_batch_size < 1:
        raise ValueError(f"opt.base_batch_size={o.base_batch_size} must be >= 1")
    for key, value in {"warmup_epochs": o.warmup_epochs, "weight_decay": o.weight_decay}.items():
        if value < 0:
            raise ValueError(f"opt.{key}={value} must be >= 0")
    _check_decay(list(o.decay_boundaries), list(o.decay_factors))


def _check_decay(boundaries: list[int], factors: list[float]) -> None:
    """Step decay: one absolute factor in (0, 1] per boundary epoch >= 0."""
    if len(boundaries) != len(factors):
        raise ValueError(f"opt.decay_boundaries={boundaries} and opt.decay_factors={factors} "
                         "must have the same length")
    if any(b < 0 for b in boundaries):
        raise ValueError(f"opt.decay_boundaries={boundaries}: every epoch must be >= 0")
    if any(not 0 < f <= 1 for f in factors):
        raise ValueError(f"opt.decay_factors={factors}: every factor must be in (0, 1]")


def mllog_hyperparameters(cfg: Any, train_samples: int, eval_samples: int) -> dict[str, Any]:
    """closed_cosmoflow.yaml keys with the reference's meaning of each value.

    As in the published logs, opt_base_learning_rate is the scaled peak LR and the
    warmup factor is peak / base.
    """
    peak = peak_lr(cfg)
    return {
        "global_batch_size": int(cfg.train.global_batch_size),
        "train_samples": int(train_samples),
        "eval_samples": int(eval_samples),
        "opt_name": OPTIMIZER,  # what both backends train (check_optimizer refuses others)
        "opt_base_learning_rate": peak,
        "opt_learning_rate_warmup_epochs": int(cfg.opt.warmup_epochs),
        "opt_learning_rate_warmup_factor": peak / cfg.opt.base_lr,
        "opt_learning_rate_decay_boundary_epochs": [int(b) for b in cfg.opt.decay_boundaries],
        "opt_learning_rate_decay_factor": [float(f) for f in cfg.opt.decay_factors],
        "dropout": float(cfg.model.dropout),
        "opt_weight_decay": float(cfg.opt.weight_decay),
    }
