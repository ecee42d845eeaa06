"""Every number of tinyreg: y = x·w + b + noise for x ∈ R^inputs, one dense layer learns it;
the metric is the validation MAE (lower is better)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sciperf.roles import role

NAME = "tinyreg"
METRIC_KEY = "eval_error"  # MLPerf HPC's key of a lower-is-better metric
METRIC_NAME = "validation MAE"
TARGET = 0.05  # the noise's MAE is 0.008: a fitted layer gets well under it
INPUTS = 8
NOISE = 0.01
TRAIN_SAMPLES, EVAL_SAMPLES = 256, 64
RUNS_FOR_SCORE = 5
LAYER = "dense"  # the one weight layer's canonical name


@dataclass
class ModelSpec:
    """One dense layer: `inputs` weights and a bias."""

    inputs: int = INPUTS

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every canonical ``.npz`` entry and its shape (Keras layout: kernel (in, out))."""
        return {f"{LAYER}/kernel": (self.inputs, 1), f"{LAYER}/bias": (1,)}

    def parameter_count(self) -> int:
        return self.inputs + 1


@dataclass
class OptimizerSpec:
    """Plain SGD (Keras semantics: momentum 0 is the textbook step)."""

    lr: float = 0.1
    momentum: float = 0.0


@dataclass
class TrainSpec:
    global_batch_size: int = 16
    max_epochs: int = 30
    target: float = TARGET
    # a starting layer (a .npy of inputs + 1 numbers: weights, then the bias); the
    # backends' load_initial reads it. A file the run reads: generic code checks and binds
    # it from this declaration alone
    start_from: str = field(default="", metadata=role(reads=True))
    clip_norm: float = 1.0  # the global gradient-norm bound of every step (0: none)
    ema_decay: float = 0.5  # validation evaluates the EMA of the weights


@dataclass
class DataSpec:
    train_samples: int = TRAIN_SAMPLES
    eval_samples: int = EVAL_SAMPLES
    format: str = "npy"


def steps_per_epoch(cfg: Any) -> int:
    """Optimizer steps of an epoch of the configured set."""
    return max(int(cfg.data.train_samples) // int(cfg.train.global_batch_size), 1)


def lr_for_step(cfg: Any, step: int, steps_per_epoch: int) -> float:
    """A constant LR."""
    return float(cfg.opt.lr)


def check_config(cfg: Any) -> None:
    """Values the schema cannot restrict (ValueError naming the key)."""
    if not 0 < float(cfg.opt.lr) < math.inf:
        raise ValueError(f"opt.lr={cfg.opt.lr} must be a finite number > 0")
    if not 0 <= float(cfg.train.ema_decay) < 1:
        raise ValueError(f"train.ema_decay={cfg.train.ema_decay} must lie in [0, 1)")


def mllog_hyperparameters(cfg: Any, train_samples: int, eval_samples: int) -> dict[str, Any]:
    return {"global_batch_size": int(cfg.train.global_batch_size),
            "train_samples": int(train_samples), "eval_samples": int(eval_samples),
            "opt_name": "sgd", "opt_base_learning_rate": float(cfg.opt.lr)}


def check_run(cfg: Any) -> None:
    """tinyreg is no MLPerf HPC benchmark: its runs are open division."""
    if cfg.system.submission_division != "open":
        raise ValueError(f"system.submission_division={cfg.system.submission_division}: "
                         f"{NAME} is not an MLPerf HPC benchmark; its runs are open "
                         "(system.submission_division=open)")
