"""DeepCAM: every benchmark-defining number, once (docs/architecture.md, rule 1).

Facts from the MLPerf HPC v3.0 rules, the reference implementation (mlcommons/hpc,
deepcam) and the hpc 3.0.0 compliance rules (closed_deepcam.yaml): DeepLabv3+ on a modified
aligned Xception (output stride 16) segments 768×1152×16 climate fields into
background / tropical cyclone / atmospheric river, quality = validation IoU ≥ 0.82.

The architecture is described here as a flat table of named layers (:meth:`ModelSpec.layers`)
plus the block structure (:meth:`ModelSpec.blocks`); both frameworks build their layers from
that table, so layer names, shapes and the parameter count exist once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NAME = "deepcam"
METRIC_KEY = "eval_accuracy"  # MLLOG key of the quality metric (validation IoU)
METRIC_NAME = "validation IoU"
HIGHER_IS_BETTER = True
TARGET = 0.82  # mean validation IoU >= 0.82 ends a run
RUNS_FOR_SCORE = 5

TRAIN_SAMPLES = 121_266  # fixed by the rules (closed_deepcam.yaml checks them)
EVAL_SAMPLES = 15_158
SAMPLE_SHAPE = (768, 1152, 16)  # H, W, C float32 per sample (climate/data)
NUM_CLASSES = 3  # 0 background, 1 tropical cyclone, 2 atmospheric river
CLASS_NAMES = ("background", "tropical_cyclone", "atmospheric_river")
SPLITS = ("train", "validation")
DATA_FORMATS = ("hdf5", "npy")  # reference format, fast format
OUTPUT_STRIDE = 16

# Class frequencies of the reference training set and the loss weights w_c = f_c^-0.125.
CLASS_FREQUENCIES = (0.986267818390377, 0.0004578708870701058, 0.01327431072255291)
LOSS_POWER = -0.125
CLASS_WEIGHTS = tuple(f**LOSS_POWER for f in CLASS_FREQUENCIES)  # ≈ 1.0017, 2.6146, 1.7164

# The 16 CAM5 channels of climate/data, in file order.
CHANNELS = ("TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL", "T200", "T500",
            "PRECT", "TS", "TREFHT", "Z1000", "Z200", "ZBOT")

OPTIMIZERS = ("Adam", "AdamW", "LAMB")
SCHEDULERS = ("multistep", "cosine_annealing")
ADAM_EPS = 1e-6  # constant in the reference; closed_deepcam.yaml checks it
LAMB_MAX_GRAD_NORM = 1.0  # LAMB: global gradient-norm clip (closed_deepcam_lamb.yaml)

# Epochs to converge by global batch size (reference convergence points, RCP).
RCP_EPOCHS = {128: 7.0, 512: 11.2, 2048: 22.9}

FULL_PARAMETER_COUNT = 56_454_720  # trainable parameters, 16 inputs, 3 classes, OS 16


@dataclass(frozen=True)
class LayerSpec:
    """One weight layer. kind: conv | depthwise | deconv | norm | affine.

    Kernel layouts are Keras' (the canonical .npz layout, sciperf.weights): conv
    (k, k, in, out), depthwise (k, k, channels, 1), deconv (k, k, out, in).
    """

    name: str
    kind: str
    cin: int
    cout: int
    kernel: int = 1
    stride: int = 1
    dilation: int = 1
    bias: bool = False
    init: str = "he_normal"  # he_normal (reference's kaiming_normal_) | torch_default

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical entries ``"<name>/<param>"`` → shape of this layer."""
        k, n = self.kernel, self.name
        if self.kind == "norm":
            return {f"{n}/{p}": (self.cout,)
                    for p in ("gamma", "beta", "moving_mean", "moving_variance")}
        if self.kind == "affine":
            return {f"{n}/gamma": (self.cout,), f"{n}/beta": (self.cout,)}
        if self.kind == "depthwise":
            return {f"{n}/kernel": (k, k, self.cin, 1)}
        if self.kind == "deconv":
            return {f"{n}/kernel": (k, k, self.cout, self.cin)}
        shapes = {f"{n}/kernel": (k, k, self.cin, self.cout)}
        if self.bias:
            shapes[f"{n}/bias"] = (self.cout,)
        return shapes

    def parameter_count(self) -> int:
        """Trainable parameters (BN moving statistics are buffers, not parameters)."""
        shapes = self.weight_shapes()
        return sum(math.prod(s) for name, s in shapes.items() if "/moving_" not in name)

    def fan_in(self) -> int:
        """PyTorch's fan-in of the kernel (depthwise: k²; deconv: out·k², torch's dim 1)."""
        k2 = self.kernel * self.kernel
        return {"depthwise": k2, "deconv": self.cout * k2}.get(self.kind, self.cin * k2)

    def init_scale(self) -> float:
        """he_normal: the std √(2/fan_in) of kaiming_normal_; torch_default: the bound
        1/√fan_in of PyTorch's default U(−b, b) init (weights and bias)."""
        if self.init == "he_normal":
            return math.sqrt(2.0 / self.fan_in())
        return 1.0 / math.sqrt(self.fan_in())


@dataclass(frozen=True)
class SepConvSpec:
    """A 'same'-padded separable conv: depthwise k3 (stride, dilation) → pointwise 1×1."""

    name: str
    cin: int
    cout: int
    stride: int = 1
    dilation: int = 1
    norm: str | None = None  # BN layer after it, if any
    relu: bool = False  # ReLU after the BN (the reference drops the block's last one)


@dataclass(frozen=True)
class BlockSpec:
    """An Xception block: separable convs, optional 1×1 strided skip + BN, residual add."""

    name: str
    cin: int
    cout: int
    convs: tuple[SepConvSpec, ...]
    skip: bool  # 1×1 conv (stride) + BN on the shortcut when shape changes
    stride: int
    end_with_relu: bool


@dataclass
class ModelSpec:
    """Architecture knobs; defaults are the reference model (56,454,720 parameters).

    The same dataclass builds the small `mini` variant (narrow widths, a short middle
    flow, a small input crop), so both frameworks construct their models from one
    description. The input must divide by the output stride 16.
    """

    height: int = SAMPLE_SHAPE[0]
    width: int = SAMPLE_SHAPE[1]
    in_channels: int = SAMPLE_SHAPE[2]
    num_classes: int = NUM_CLASSES
    entry_channels: list[int] = field(default_factory=lambda: [32, 64])
    block_channels: list[int] = field(default_factory=lambda: [128, 256, 728])
    middle_blocks: int = 16
    middle_reps: int = 3
    exit_channels: list[int] = field(default_factory=lambda: [1024, 1536, 1536, 2048])
    aspp_channels: int = 256
    aspp_rates: list[int] = field(default_factory=lambda: [6, 12, 18])
    low_level_channels: int = 48
    decoder_channels: int = 256
    batchnorm_group_size: int = 1  # SyncBN group (1: per-rank BN, the reference default)

    def check(self) -> None:
        """Shapes and sizes the architecture needs; a clear error names the key and range."""
        for key in ("height", "width"):
            if getattr(self, key) % OUTPUT_STRIDE or getattr(self, key) <= 0:
                raise ValueError(f"model.{key}={getattr(self, key)} must be a positive "
                                 f"multiple of the output stride {OUTPUT_STRIDE}")
        if self.num_classes != NUM_CLASSES:
            raise ValueError(f"model.num_classes={self.num_classes} must be {NUM_CLASSES} (the "
                             "labels' classes and the loss weights are fixed)")
        lengths = {"entry_channels": 2, "block_channels": 3, "exit_channels": 4,
                   "aspp_rates": 3}
        for key, n in lengths.items():
            values = list(getattr(self, key))
            if len(values) != n or any(v < 1 for v in values):
                raise ValueError(f"model.{key}={values} needs {n} values, each >= 1")
        counts = {"in_channels": 1, "middle_blocks": 0, "middle_reps": 1, "aspp_channels": 1,
                  "low_level_channels": 1, "decoder_channels": 1, "batchnorm_group_size": 1}
        for key, low in counts.items():
            if getattr(self, key) < low:
                raise ValueError(f"model.{key}={getattr(self, key)} must be >= {low}")

    @property
    def feature_size(self) -> tuple[int, int]:
        """Spatial size of the encoder output (input / 16): the ASPP pooling tile."""
        return self.height // OUTPUT_STRIDE, self.width // OUTPUT_STRIDE

    def blocks(self) -> list[BlockSpec]:
        """Entry (3, strided), middle (`middle_blocks`) and exit (1) Xception blocks."""
        out, cin = [], self.entry_channels[1]
        for i, cout in enumerate(self.block_channels, start=1):  # entry flow, all stride 2
            out.append(_block(f"block{i}", cin, cout, reps=2, stride=2, grow_first=True,
                              end_with_relu=i > 1, is_last=False))
            cin = cout
        mid = self.block_channels[2]
        for i in range(4, 4 + self.middle_blocks):  # middle flow
            out.append(_block(f"block{i}", mid, mid, reps=self.middle_reps, stride=1,
                              grow_first=True, end_with_relu=True, is_last=False))
        out.append(_block(f"block{4 + self.middle_blocks}", mid, self.exit_channels[0],
                          reps=2, stride=1, grow_first=False, end_with_relu=False,
                          is_last=True))
        return out

    def exit_convs(self) -> list[SepConvSpec]:
        """conv3..conv5: separable convs at dilation 2, each + BN + ReLU."""
        c = self.exit_channels
        return [SepConvSpec(f"conv{i + 3}", c[i], c[i + 1], dilation=2, norm=f"bn{i + 3}",
                            relu=True) for i in range(3)]

    def layers(self) -> list[LayerSpec]:
        """Every weight layer in forward order, with its canonical name."""
        e0, e1 = self.entry_channels
        out = [LayerSpec("conv1", "conv", self.in_channels, e0, 3, stride=2),
               LayerSpec("bn1", "norm", e0, e0),
               LayerSpec("conv2", "conv", e0, e1, 3),
               LayerSpec("bn2", "norm", e1, e1)]
        for block in self.blocks():
            if block.skip:
                out += [LayerSpec(f"{block.name}_skip", "conv", block.cin, block.cout, 1,
                                  stride=block.stride),
                        LayerSpec(f"{block.name}_skipbn", "norm", block.cout, block.cout)]
            for sep in block.convs:
                out += _sep_layers(sep)
        for sep in self.exit_convs():
            out += _sep_layers(sep)
        out += self._head_layers()
        return out

    def _head_layers(self) -> list[LayerSpec]:
        """ASPP, low-level projection and the deconvolution decoder."""
        a, d, low = self.aspp_channels, self.decoder_channels, self.low_level_channels
        top = self.exit_channels[-1]
        out = [LayerSpec("aspp1", "conv", top, a, 1), LayerSpec("aspp1_bn", "norm", a, a)]
        for i, rate in enumerate(self.aspp_rates, start=2):
            out += [LayerSpec(f"aspp{i}", "conv", top, a, 3, dilation=rate),
                    LayerSpec(f"aspp{i}_bn", "norm", a, a)]
        default = "torch_default"  # layers the reference leaves at PyTorch's default init
        out += [LayerSpec("gpool_conv", "conv", top, a, 1, init=default),
                LayerSpec("gpool_affine", "affine", a, a),
                LayerSpec("aspp_conv", "conv", 5 * a, a, 1, init=default),
                LayerSpec("aspp_bn", "norm", a, a),
                LayerSpec("low_conv", "conv", self.block_channels[0], low, 1, init=default),
                LayerSpec("low_bn", "norm", low, low),
                LayerSpec("deconv1a", "deconv", a, d, 3, stride=2, init=default),
                LayerSpec("deconv1a_bn", "norm", d, d),
                LayerSpec("deconv1b", "deconv", d, d, 3, stride=2, init=default),
                LayerSpec("deconv1b_bn", "norm", d, d),
                LayerSpec("dec_conv1", "conv", d + low, d, 3, init=default),
                LayerSpec("dec_bn1", "norm", d, d),
                LayerSpec("dec_conv2", "conv", d, d, 3, init=default),
                LayerSpec("dec_bn2", "norm", d, d),
                LayerSpec("dec_conv3", "conv", d, d, 1, bias=True, init=default),
                LayerSpec("deconv2", "deconv", d, d, 3, stride=2, init=default),
                LayerSpec("deconv2_bn", "norm", d, d),
                LayerSpec("last_deconv", "deconv", d, self.num_classes, 3, stride=2,
                          init=default)]
        return out

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every canonical ``.npz`` entry and its shape (BN moving statistics included)."""
        shapes: dict[str, tuple[int, ...]] = {}
        for layer in self.layers():
            shapes.update(layer.weight_shapes())
        return shapes

    def parameter_count(self) -> int:
        """Trainable parameters, computed from the architecture (must equal the frameworks')."""
        return sum(layer.parameter_count() for layer in self.layers())


def _sep_layers(sep: SepConvSpec) -> list[LayerSpec]:
    """depthwise + pointwise (+ BN) layers of a separable conv; none has a bias."""
    out = [LayerSpec(f"{sep.name}_depthwise", "depthwise", sep.cin, sep.cin, 3,
                     stride=sep.stride, dilation=sep.dilation),
           LayerSpec(f"{sep.name}_pointwise", "conv", sep.cin, sep.cout, 1)]
    if sep.norm:
        out.append(LayerSpec(sep.norm, "norm", sep.cout, sep.cout))
    return out


def _block(name: str, cin: int, cout: int, reps: int, stride: int, grow_first: bool,
           end_with_relu: bool, is_last: bool) -> BlockSpec:
    """The reference Block: `reps` sep-conv+BN(+ReLU), the last ReLU dropped, then a
    stride-2 sep-conv (strided blocks) or a stride-1 one (`is_last`), neither with BN."""
    widths = [(cin, cout)] + [(cout, cout)] * (reps - 1) if grow_first else \
        [(cin, cin)] * (reps - 1) + [(cin, cout)]
    convs = [SepConvSpec(f"{name}_sep{j}", a, b, norm=f"{name}_bn{j}", relu=j < reps)
             for j, (a, b) in enumerate(widths, start=1)]
    if stride != 1:
        convs.append(SepConvSpec(f"{name}_sep{reps + 1}", cout, cout, stride=stride))
    elif is_last:
        convs.append(SepConvSpec(f"{name}_sep{reps + 1}", cout, cout))
    return BlockSpec(name, cin, cout, tuple(convs), skip=cin != cout or stride != 1,
                     stride=stride, end_with_relu=end_with_relu)


@dataclass
class OptimizerSpec:
    """Adam / AdamW / LAMB (eps 1e-6) with a per-optimizer-step LR schedule.

    Reference run: LAMB, lr 0.0055, warmup 400 steps, multistep milestone 800 (counted
    after the warmup) × 0.1, weight decay 0.01, betas (0.9, 0.999). LAMB is apex's
    FusedLAMB: bias correction, grad averaging, global grad-norm clip at 1, decoupled
    weight decay, trust ratio ‖w‖/‖u‖ where weight decay is on.
    """

    name: str = "LAMB"  # Adam | AdamW | LAMB
    lr: float = 0.0055
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.01
    scheduler: str = "multistep"  # multistep | cosine_annealing
    lr_warmup_steps: int = 400
    lr_warmup_factor: float = 1.0
    milestones: list[int] = field(default_factory=lambda: [800])
    decay_rate: float = 0.1
    t_max: int = 9000  # cosine_annealing: steps of the half period after the warmup
    eta_min: float = 0.0
    gradient_accumulation_frequency: int = 1  # micro-batches per optimizer step


@dataclass
class TrainSpec:
    """Run-level defaults of the reference run (GBS 2048)."""

    global_batch_size: int = 2048
    max_epochs: int = 64
    target: float = TARGET


@dataclass
class DataSpec:
    """Dataset defaults: the full reference dataset in its reference format."""

    format: str = "hdf5"
    train_samples: int = TRAIN_SAMPLES
    eval_samples: int = EVAL_SAMPLES


def lr_for_step(o: Any, step: int) -> float:
    """LR of 0-indexed optimizer step `step` (the reference's warmup schedulers).

    Warmup (W = lr_warmup_steps > 0, step ≤ W): lr·step/W for factor 1 (so step 0 runs
    at 0, as the reference), else lr·((factor − 1)·step/W + 1). After it the peak
    lr·factor decays: multistep × decay_rate for each milestone m with m + W + 1 ≤ step;
    cosine eta_min + (peak − eta_min)(1 + cos(π·(step − W)/t_max))/2. Without warmup the
    plain torch MultiStepLR (m ≤ step) and CosineAnnealingLR rules apply.
    """
    lr, warm, factor = float(o.lr), int(o.lr_warmup_steps), float(o.lr_warmup_factor)
    if o.scheduler not in SCHEDULERS:
        raise ValueError(f"opt.scheduler={o.scheduler} is not one of {', '.join(SCHEDULERS)}")
    if warm > 0 and step <= warm:
        if factor == 1.0:
            return lr * step / warm
        return lr * ((factor - 1.0) * step / warm + 1.0)
    peak = lr * factor if warm > 0 else lr
    if o.scheduler == "multistep":
        offset = warm + 1 if warm > 0 else 0
        passed = sum(1 for m in o.milestones if int(m) + offset <= step)
        return peak * float(o.decay_rate) ** passed
    eff = step - warm if warm > 0 else step
    eta = float(o.eta_min)
    return eta + (peak - eta) * (1.0 + math.cos(math.pi * eff / int(o.t_max))) / 2.0


def steps_per_epoch(cfg: Any) -> int:
    """Optimizer steps in one epoch of the configured training set."""
    n = int(cfg.data.train_samples) or TRAIN_SAMPLES
    micro = n // int(cfg.train.global_batch_size)
    return max(micro // int(cfg.opt.gradient_accumulation_frequency), 1)


def lr_at_step(cfg: Any, step: int, steps_per_epoch: int = 0) -> float:
    """The contract's per-step LR: :func:`lr_for_step` of the run's optimizer section
    (the schedule counts optimizer steps, not epochs)."""
    return lr_for_step(cfg.opt, step)


def check_optimizer(o: Any) -> None:
    """Choices and ranges the config schema cannot restrict; one clear line naming the key.

    The ranges are the reference's: Adam-family betas in [0, 1), a warmup multiplier >= 1
    (its GradualWarmupScheduler refuses less), decay rates that decay.
    """
    if o.name not in OPTIMIZERS:
        raise ValueError(f"opt.name={o.name} is not one of {', '.join(OPTIMIZERS)}")
    if o.scheduler not in SCHEDULERS:
        raise ValueError(f"opt.scheduler={o.scheduler} is not one of {', '.join(SCHEDULERS)}")
    if int(o.gradient_accumulation_frequency) < 1:
        raise ValueError(f"opt.gradient_accumulation_frequency="
                         f"{o.gradient_accumulation_frequency} must be at least 1")
    if o.lr <= 0:
        raise ValueError(f"opt.lr={o.lr} must be > 0")
    betas = [float(b) for b in o.betas]
    if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
        raise ValueError(f"opt.betas={betas} needs 2 values, each in [0, 1)")
    _check_schedule(o)


def _check_schedule(o: Any) -> None:
    """The LR schedule's knobs (lr_for_step divides by t_max and lr_warmup_steps)."""
    at_least = {"weight_decay": 0, "lr_warmup_steps": 0, "lr_warmup_factor": 1, "t_max": 1,
                "eta_min": 0}
    for key, low in at_least.items():
        if getattr(o, key) < low:
            raise ValueError(f"opt.{key}={getattr(o, key)} must be >= {low}")
    if not 0 < o.decay_rate <= 1:
        raise ValueError(f"opt.decay_rate={o.decay_rate} must be in (0, 1]")
    if any(int(m) < 0 for m in o.milestones):
        raise ValueError(f"opt.milestones={list(o.milestones)}: every step must be >= 0")


def check_config(cfg: Any) -> None:
    """Model shapes and optimizer choices the schema cannot restrict (ValueError naming
    the key), checked when the config is composed, before anything is written."""
    ModelSpec(**dict(cfg.model)).check()
    check_optimizer(cfg.opt)


def check_run(cfg: Any) -> None:
    """Closed-division rules of closed_deepcam.yaml that depend on the user's choices, so a
    long run is not found non-compliant only when its log is checked."""
    if cfg.system.submission_division != "closed":
        return
    if int(cfg.seed) <= 0:
        raise ValueError(f"seed={cfg.seed}: closed DeepCAM requires seed > 0 "
                         "(closed_deepcam.yaml); pass seed=N, or run in division open")


def mllog_hyperparameters(cfg: Any, train_samples: int, eval_samples: int) -> dict[str, Any]:
    """closed_deepcam.yaml keys (+ the LAMB and scheduler sub-rules), reference names.

    `seed` is logged by the driver for every workload, so it is not repeated here.
    """
    o = cfg.opt
    out: dict[str, Any] = {
        "global_batch_size": int(cfg.train.global_batch_size),
        "train_samples": int(train_samples),
        "eval_samples": int(eval_samples),
        "batchnorm_group_size": int(cfg.model.batchnorm_group_size),
        "gradient_accumulation_frequency": int(o.gradient_accumulation_frequency),
        "opt_name": o.name,
        "opt_lr": float(o.lr),
        "opt_betas": [float(b) for b in o.betas],
        "opt_eps": ADAM_EPS,
        "opt_weight_decay": float(o.weight_decay),
    }
    if o.name == "LAMB":
        out.update(opt_bias_correction=True, opt_grad_averaging=True,
                   opt_max_grad_norm=LAMB_MAX_GRAD_NORM)
    out.update(scheduler_type=o.scheduler,
               scheduler_lr_warmup_steps=int(o.lr_warmup_steps),
               scheduler_lr_warmup_factor=float(o.lr_warmup_factor))
    if o.scheduler == "multistep":
        out.update(scheduler_milestones=[int(m) for m in o.milestones],
                   scheduler_decay_rate=float(o.decay_rate))
    else:
        out.update(scheduler_t_max=int(o.t_max), scheduler_eta_min=float(o.eta_min))
    return out


# --- numpy references of the loss and the metric (the frameworks are tested against these) ---
def weighted_cross_entropy(logits: np.ndarray, labels: np.ndarray,
                           weights: tuple[float, ...] = CLASS_WEIGHTS) -> float:
    """mean over pixels of w[y]·(−log softmax(logits)[y]); logits (N, H, W, C), labels
    (N, H, W). A plain mean, not divided by the weight sum (the reference's reduction)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    y = np.asarray(labels, np.int64)
    picked = np.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
    return float(np.mean(-np.asarray(weights, np.float64)[y] * picked))


def sample_iou(pred: np.ndarray, labels: np.ndarray, num_classes: int = NUM_CLASSES
               ) -> np.ndarray:
    """Per-sample IoU: mean over classes of TP/(TP+FP+FN), a class absent from both the
    prediction and the label counting 1. pred, labels: (N, H, W) class ids → (N,)."""
    p = np.asarray(pred).reshape(len(pred), -1)
    y = np.asarray(labels).reshape(len(labels), -1)
    out = np.zeros(len(p))
    for c in range(num_classes):
        tp = np.sum((p == c) & (y == c), axis=1)
        union = np.sum((p == c) | (y == c), axis=1)
        out += np.where(union > 0, tp / np.maximum(union, 1), 1.0)
    return out / num_classes
