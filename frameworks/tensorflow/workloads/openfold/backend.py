"""OpenFold in TensorFlow: the hooks of the one backend template (``sciperf_tensorflow.backend``).

The PyTorch backend's mirror (spec/openfold.md §3–6):

* the batch is the reference's feature dict with a trailing recycling axis; every step
  runs ``n + 1`` passes, ``n`` drawn from the reference dataloader's stream (the same on
  every rank, :func:`sciperf.workloads.openfold.sampler.recycling_iterations`), the first
  ``n`` without gradients. ``n`` and the step's dropout seed (from
  ``forward_<seed>_<rank>_<iteration>``, as the reference seeds its dropout) ride in the
  batch as tensors, so one compiled step serves every recycling count;
* the loss is the reference's (``loss.py``) on the last pass's slice of the batch;
* Adam with torch's eps placement (``optim.AdamFamily``: eps added to √v̂, not to √v as
  Keras does), the global gradient norm clipped to 0.1 after the ranks' average, the LR
  per step, then the EMA of the weights ("SWA", decay 0.9) that validation uses;
* ``train.init_checkpoint``: the reference's resumable ``.pt`` read without torch through
  the allow-list unpickler (``sciperf.data.pickles.load_torch_file``), so the file never
  runs code; weights and Adam moments placed by ``ModelSpec.canonical_names``;
* the metric: each validation chain's global lDDT-Cα of the EMA model's prediction after
  all recycling passes, averaged over chains (one chain per batch).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from sciperf.data import pickles
from sciperf.errors import SciperfError
from sciperf.workloads.openfold import checkpoint, sampler
from sciperf.workloads.openfold.data import feature_sizes
from sciperf.workloads.openfold.rng import seed_from_string
from sciperf.workloads.openfold.schema import (
    FEATURE_SCHEMA,
    N_CLUST,
    N_EXTRA,
    N_RES,
    TRAIN_ONLY_FEATURES,
)
from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_tensorflow import weights as keras_weights
from sciperf_tensorflow.backend import WorkloadBackend
from sciperf_tensorflow.optim import AdamFamily
from sciperf_tensorflow.pieces import ClipGradNorm, StepPiece, WeightEMA
from sciperf_tensorflow.workloads.openfold import loss as of_loss
from sciperf_tensorflow.workloads.openfold.model import AlphaFold

Batch = dict[str, tf.Tensor]
LDDT_EVAL_EPS = 1e-8  # the reference's validation lDDT (one eps inside the root and ratio)
# the step's controls, carried in the batch beside the features
PASSES, SEED = "num_recycling", "dropout_seed"
REFERENCE_STATE = "state.pt"  # the reference's resumable checkpoint in every checkpoint


# ----------------------------------------------------------------------- the checkpoint
def load_reference_checkpoint(path: str | Path, model: keras.Model, spec: ModelSpec,
                              optimizer: AdamFamily | None) -> None:
    """Load a reference-format checkpoint into `model` and `optimizer`: the reference's
    resumable dict (``alphafold_state_dict``, ``optimizer_state_dict``, ``iteration``,
    which initialisation ignores as the reference does) or a bare state dict — read
    without torch and without running anything in the file; every disagreement is one
    line naming the file and the first mismatching parameter, before any variable
    changes."""
    key = f"train.init_checkpoint={path}"
    state = _read(Path(path), key)
    weights = checkpoint.weights_of(key, state)
    table = spec.reference_shapes()
    checkpoint.check_tensors(
        key, list(table.items()),
        [(str(name), tuple(t.shape) if isinstance(t, np.ndarray) else None)
         for name, t in weights.items()],
        lambda name: _array_problem(weights[name]))
    names = spec.canonical_names()
    arrays = {entry: (weights[name].T if transposed else weights[name])
              for name, (entry, transposed) in names.items()}
    moments = None
    if optimizer is not None and weights is not state and \
            checkpoint.OPTIMIZER_KEY in state:
        moments = _adam_moments(key, state[checkpoint.OPTIMIZER_KEY], list(table), table)
    keras_weights.import_weights(model, arrays, source=key)
    if moments is not None and optimizer is not None:
        _assign_moments(moments, names, model, optimizer)


def _read(path: Path, key: str) -> Any:
    """The object the file holds (tensors as numpy arrays); a missing, foreign or hostile
    file is one line led by `key`."""
    if not path.is_file():
        raise SciperfError(f"{key}: no such file")
    try:
        return pickles.load_torch_file(path)
    except SciperfError as exc:
        raise SciperfError(f"{key}: {str(exc).removeprefix(f'{path}: ')}") from None


def _array_problem(value: Any) -> str | None:
    """Why `value` cannot be a weight (None: it can): not a real floating array, or not
    finite (the loss zeroes NaN terms as the reference does, so NaN weights would train
    to a loss of 0 rather than stop the run)."""
    if not isinstance(value, np.ndarray):
        return f"is a {type(value).__name__}, not a tensor"
    if value.dtype.kind != "f":
        return f"has dtype {value.dtype}, not a real floating point"
    if not np.isfinite(value).all():
        return "holds NaN or Inf"
    return None


def _adam_moments(key: str, state: Any, names: list[str], table: Mapping[str, tuple]
                  ) -> dict[str, Any]:
    """The reference's Adam state as {name: (exp_avg, exp_avg_sq)}, the step count and
    the hyperparameters torch's load would take from the file (betas, eps), every value
    checked: moments of their parameter's shape and finite, one step count for all."""
    what = "optimizer_state_dict"
    if not isinstance(state, Mapping) or not isinstance(state.get("state"), Mapping) \
            or not isinstance(state.get("param_groups"), list) or not state["param_groups"]:
        raise SciperfError(f"{key}: its {what} is not a torch optimizer state dict")
    order = [i for group in state["param_groups"] for i in group.get("params", [])]
    if len(order) != len(names):
        raise SciperfError(f"{key}: its {what} holds {len(order)} parameters, the model "
                           f"has {len(names)}")
    moments, steps = {}, set()
    for position, index in enumerate(order):
        slot = state["state"].get(index)
        if slot is None:
            continue
        name = names[position]
        pair = []
        for moment in ("exp_avg", "exp_avg_sq"):
            value = slot.get(moment) if isinstance(slot, Mapping) else None
            shape = tuple(value.shape) if isinstance(value, np.ndarray) else None
            if shape != table[name]:
                got = "is missing" if value is None else f"has shape {list(shape)}" \
                    if shape is not None else f"is a {type(value).__name__}"
                raise SciperfError(f"{key}: {what}: {moment} of parameter {name} {got}, the "
                                   f"parameter's is {list(table[name])}")
            if problem := _array_problem(value):
                raise SciperfError(f"{key}: {what}: {moment} of parameter {name} {problem}")
            pair.append(value)
        steps.add(_number(key, what, f"step of parameter {name}", slot.get("step")))
        moments[name] = tuple(pair)
    if len(steps) > 1:
        raise SciperfError(f"{key}: {what}: parameters have different step counts "
                           f"({sorted(steps)[:3]}…); one Adam step count is kept")
    group = state["param_groups"][0]
    betas = group.get("betas", None)
    hyper = {"eps": _number(key, what, "eps", group.get("eps")) if "eps" in group else None,
             "betas": None}
    if betas is not None:
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise SciperfError(f"{key}: {what}: betas is {betas!r}, not a pair of numbers")
        hyper["betas"] = tuple(_number(key, what, "betas", b) for b in betas)
    return {"moments": moments, "step": steps.pop() if steps else 0.0, **hyper}


def _number(key: str, what: str, name: str, value: Any) -> float:
    """A finite real number (a 0-d array counts: torch's step is a tensor)."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not np.isfinite(value):
        raise SciperfError(f"{key}: {what}: {name} is {value!r}, not a finite number")
    return float(value)


def _assign_moments(loaded: dict[str, Any], names: Mapping[str, tuple[str, bool]],
                    model: keras.Model, optimizer: AdamFamily) -> None:
    """The checked Adam state into the optimizer's slots (moments transposed as their
    weights), its step count and the file's betas and eps, as torch's load does."""
    position = {id(v): i for i, v in enumerate(optimizer.variables)}
    mapped = keras_weights.mapped(model)
    for name, (m, v) in loaded["moments"].items():
        entry, transposed = names[name]
        i = position[id(mapped[entry][0])]
        optimizer.m[i].assign(m.T if transposed else m)
        optimizer.v[i].assign(v.T if transposed else v)
    optimizer.t.assign(loaded["step"])
    if loaded["betas"] is not None:
        optimizer.beta1, optimizer.beta2 = loaded["betas"]
    if loaded["eps"] is not None:
        optimizer.eps = loaded["eps"]


def reference_state(model: keras.Model, spec: ModelSpec, optimizer: AdamFamily,
                    iteration: int) -> dict[str, Any]:
    """The reference's resumable checkpoint of `model` and `optimizer` (numpy arrays in
    torch's layouts and names): what a sciperf PyTorch checkpoint's state.pt holds, so a
    TensorFlow run's checkpoint (the mini's pre-trained start among them) loads into
    either framework and into the reference."""
    mapped = keras_weights.mapped(model)
    position = {id(v): i for i, v in enumerate(optimizer.variables)}
    weights: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()
    moments: dict[int, dict[str, np.ndarray]] = {}
    step = float(optimizer.t.numpy())
    for index, (name, (entry, transposed)) in enumerate(spec.canonical_names().items()):
        var = mapped[entry][0]
        weights[name] = _torch_layout(var.numpy(), transposed, np.float32)
        if step > 0:  # torch keeps no state for a parameter before its first step
            i = position[id(var)]
            moments[index] = {"step": np.array(step, np.float32),
                              "exp_avg": _torch_layout(optimizer.m[i].numpy(), transposed),
                              "exp_avg_sq": _torch_layout(optimizer.v[i].numpy(), transposed)}
    group = {"lr": float(optimizer.lr.numpy()), "betas": (optimizer.beta1, optimizer.beta2),
             "eps": optimizer.eps, "weight_decay": optimizer.wd, "amsgrad": False,
             "maximize": False, "foreach": None, "capturable": False,
             "differentiable": False, "fused": None, "params": list(range(len(weights)))}
    return {checkpoint.MODEL_KEY: weights,
            checkpoint.OPTIMIZER_KEY: {"state": moments, "param_groups": [group]},
            "iteration": int(iteration)}


def _torch_layout(array: np.ndarray, transposed: bool,
                  dtype: type | None = None) -> np.ndarray:
    """A canonical array in torch's layout (a kernel back to (out, in)), C-ordered."""
    out = array.T if transposed else array
    return np.ascontiguousarray(out if dtype is None else out.astype(dtype))


# ----------------------------------------------------------------------- the backend
def _last(batch: Batch, n: tf.Tensor) -> Batch:
    """The features at recycling index `n` (what the loss and metric see)."""
    return {k: tf.gather(v, n, axis=-1) for k, v in batch.items()
            if k in FEATURE_SCHEMA or k in TRAIN_ONLY_FEATURES}


class OpenFoldBackend(WorkloadBackend):
    """OpenFold's hooks: AlphaFold2, Adam with clipping, the EMA, the reference's loss."""

    def build_model(self, model_spec: ModelSpec) -> keras.Model:
        """AlphaFold2 of `model_spec` (per-block recomputation as configured)."""
        return AlphaFold(model_spec, checkpointing=bool(self.cfg.train.checkpointing))

    def build_optimizer(self, variables: list) -> AdamFamily:
        """torch's Adam written out (no weight decay, no amsgrad); LR set every step."""
        o = self.cfg.opt
        return AdamFamily(variables, "Adam", float(o.lr), (float(o.beta_1), float(o.beta_2)),
                          float(o.eps), float(o.weight_decay))

    def load_initial(self) -> None:
        """train.init_checkpoint: the reference's checkpoint (weights, Adam's state)."""
        if self.cfg.train.init_checkpoint:
            load_reference_checkpoint(self.cfg.train.init_checkpoint, self.model,
                                      self.model_spec, self.optimizer)

    def step_pieces(self) -> Sequence[StepPiece]:
        """The reference clips the averaged gradients' global norm to opt.clip_norm (0:
        none), then updates the EMA of the weights ("SWA") that validation uses."""
        self.ema = WeightEMA(float(self.cfg.opt.swa_decay))
        bound = float(self.cfg.opt.clip_norm)
        return [*([ClipGradNorm(bound)] if bound > 0 else []), self.ema]

    def save_state(self, folder: Path) -> None:
        """The template's ``state.npz`` (what a TensorFlow resume reads), and beside it
        the reference's resumable ``state.pt`` (``pickles.dump_torch_file``: written
        without torch), as the PyTorch backend's state.pt is one."""
        super().save_state(folder)
        pickles.dump_torch_file(folder / REFERENCE_STATE, reference_state(
            self.model, self.model_spec, self.optimizer, self.opt_step))

    def setup(self, ctx: Any) -> None:
        """The recycling counts of every step, then the template's setup."""
        steps = int(ctx.cfg.train.max_epochs) * ctx.workload.plan.steps_per_epoch(ctx.cfg)
        self.recycling = sampler.recycling_iterations(
            int(ctx.cfg.seed), max(steps, 1),
            int(ctx.workload.model_spec(ctx.cfg).num_recycling_iters))
        super().setup(ctx)

    def input_signature(self) -> list:
        """Open batch, residue, MSA and recycling sizes (validation chains differ in
        length): one trace serves every batch; the step's controls beside them."""
        sizes = feature_sizes(self.model_spec)
        fixed = {N_RES: None, N_CLUST: None, N_EXTRA: None}
        x = {}
        for name, (shape, dtype) in (*FEATURE_SCHEMA.items(), *TRAIN_ONLY_FEATURES.items()):
            dims = [None, *(fixed.get(d, sizes.templates if isinstance(d, str) else d)
                            for d in shape), None]
            x[name] = tf.TensorSpec(dims, tf.as_dtype(dtype), name=name)
        x[PASSES] = tf.TensorSpec([], tf.int32, name=PASSES)
        x[SEED] = tf.TensorSpec([2], tf.int64, name=SEED)
        return [x, x]

    def batches(self, loader: Any, epoch: int) -> Iterator[tuple[Batch, Any]]:
        """Feature dicts with this step's recycling count and dropout seed (validation:
        every pass, no dropout); read as each step starts, so the step counter is the
        one of the step the batch feeds."""
        training = loader is self.train_loader
        for x, _ in super().batches(loader, epoch):
            x = dict(x)
            passes = int(x["aatype"].shape[-1])
            if training:
                step = self.opt_step
                n = int(self.recycling[min(step, len(self.recycling) - 1)])
                seed = seed_from_string(f"forward_{self.cfg.seed}_{self.ctx.rank}_{step + 1}")
            else:
                n, seed = passes - 1, 0
                for name, (shape, dtype) in TRAIN_ONLY_FEATURES.items():
                    x.setdefault(name, tf.zeros([int(x["aatype"].shape[0]), *shape, passes],
                                                tf.as_dtype(dtype)))
            x[PASSES] = tf.constant(n, tf.int32)
            x[SEED] = tf.constant([seed % 2**31, 0], tf.int64)
            yield x, x  # inputs and supervision live together, as in the PyTorch backend

    # The hooks below are plain TensorFlow (the model's loops are tf.while_loop): autograph
    # is told not to convert them, which would re-parse the network and the loss at every
    # trace for nothing.
    @tf.autograph.experimental.do_not_convert
    def forward(self, x: Batch, training: bool) -> dict[str, Any]:
        """Training: this step's recycling count and dropout seed; evaluation: the EMA
        model, every recycling pass."""
        model = self.model if training else self.ema.model
        return model(x, num_recycling=x[PASSES], seed=x[SEED], training=training)

    def batch_size(self, x: Batch) -> int:
        """Chains in the batch."""
        return int(x["aatype"].shape[0])

    @tf.autograph.experimental.do_not_convert
    def loss_fn(self, out: dict[str, Any], y: Batch) -> tf.Tensor:
        """The reference's loss on the last pass (fp32)."""
        total, _ = of_loss.loss(_float(out), _last(y, y[PASSES]))
        return total

    @tf.autograph.experimental.do_not_convert
    def metric_sums(self, out: dict[str, Any], y: Batch) -> tuple[tf.Tensor, tf.Tensor]:
        """(Σ per-chain global lDDT-Cα, chains) of the EMA model's final structure."""
        last = _last(y, y[PASSES])
        scores = of_loss.lddt_ca(tf.cast(out["final_atom_positions"], tf.float32),
                                 last["all_atom_positions"], last["all_atom_mask"],
                                 eps=LDDT_EVAL_EPS, per_residue=False)
        return tf.reduce_sum(tf.cast(scores, tf.float64)), \
            tf.cast(tf.size(scores), tf.float64)


def _float(tree: Any) -> Any:
    """Outputs in fp32 for the loss (a mixed bf16 policy leaves some in bf16)."""
    if isinstance(tree, Mapping):
        return {k: _float(v) for k, v in tree.items()}
    if isinstance(tree, tf.Tensor) and tree.dtype.is_floating and tree.dtype != tf.float64:
        return tf.cast(tree, tf.float32)
    return tree
