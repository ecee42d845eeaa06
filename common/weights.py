"""The framework-neutral weight file and the ONE generic weight mapper.

docs/architecture.md, rule 3.

A weight file is an ``.npz`` whose entries are named ``"<layer>/<param>"`` with the
canonical layer names of the spec (``conv0``…, ``dense0``…, from
``ModelSpec.layer_shapes()``) and ``param`` ∈ {``kernel``, ``bias``} — plus ``gamma``,
``beta``, ``moving_mean``, ``moving_variance`` for normalisation/affine layers (layer norms:
``gamma``, ``beta``) and ``embeddings`` for embedding tables (entries × dim, no
transpose; attention projections are dense layers) and ``frequencies`` for a trainable
basis (kind ``basis``: a vector, no transpose). Layer names may nest with ``/``
(``int_blocks/0/dense_rbf1``); frameworks whose names cannot hold ``/`` (Keras 3) write
it ``__`` and :func:`canonical_name` maps it back. Kernels are
stored in the Keras layout: conv ``(k…, in, out)``, dense ``(in, out)``, depthwise
``(k…, channels, 1)``, transposed conv (deconv) ``(k…, out, in)``.

Frameworks convert with :func:`to_canonical` / :func:`from_canonical`, which decide the
transpose from the layer *kind* (``conv`` or ``dense``) and the framework's *layout*
(``keras`` or ``torch``) only — never from a per-model rename table. numpy only: this
module imports no ML framework (rule 2).
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import atomic
from sciperf.errors import SciperfError

KINDS = ("conv", "dense", "depthwise", "deconv", "norm", "affine", "embedding", "layernorm",
         "basis")
LAYOUTS = ("keras", "torch")
PARAMS = ("kernel", "bias", "gamma", "beta", "moving_mean", "moving_variance", "embeddings",
          "frequencies")
NEST = "__"  # a framework layer name's spelling of the canonical "/" (Keras 3 forbids "/")
# layers whose torch weight/bias are a scale γ and shift β
SCALE_KINDS = ("norm", "affine", "layernorm")
# Framework parameter name → canonical parameter name, per layout.
PARAM_NAMES = {
    "keras": {p: p for p in PARAMS},
    "torch": {"weight": "kernel", "bias": "bias"},
}
TORCH_SCALE_NAMES = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
                     "running_var": "moving_variance"}


def canonical_name(layer: str, param: str, layout: str, kind: str = "conv") -> str:
    """``"<layer>/<param>"`` for a framework parameter name (torch ``weight`` → kernel, or
    → gamma for a norm/affine layer; torch ``running_var`` → moving_variance)."""
    names = PARAM_NAMES[_check(layout, LAYOUTS, "layout")]
    if layout == "torch" and kind in SCALE_KINDS:
        names = TORCH_SCALE_NAMES
    elif layout == "torch" and kind == "embedding":
        names = {"weight": "embeddings"}  # (entries, dim) in both layouts: no transpose
    elif layout == "torch" and kind == "basis":
        names = {"frequencies": "frequencies"}
    if param not in names:
        raise SciperfError(f"{layer}.{param}: not a {layout} parameter name "
                           f"(expected one of {', '.join(names)})")
    return f"{layer.replace(NEST, '/')}/{names[param]}"


def split_name(name: str) -> tuple[str, str]:
    """``"conv0/kernel"`` → ``("conv0", "kernel")``; anything else is an error naming it."""
    layer, sep, param = name.rpartition("/")
    if not sep or not layer or param not in PARAMS:
        raise SciperfError(f"weight name '{name}' is not '<layer>/kernel' or '<layer>/bias'")
    return layer, param


def _check(value: str, valid: tuple[str, ...], what: str) -> str:
    if value not in valid:
        raise SciperfError(f"unknown {what} '{value}'; valid: {', '.join(valid)}")
    return value


def _torch_to_keras_axes(ndim: int, kind: str) -> tuple[int, ...]:
    """Axis order taking a torch kernel to the Keras layout.

    conv: (out, in, k1…kn) → (k1…kn, in, out), any spatial rank; dense: (out, in) → (in, out);
    deconv: torch (in, out, k…) → Keras (k…, out, in), the same axis order as conv;
    depthwise: torch (channels, 1, k…) → Keras (k…, channels, 1).
    """
    if kind == "dense" and ndim == 2:
        return (1, 0)
    if kind in ("conv", "deconv") and ndim >= 3:
        return (*range(2, ndim), 1, 0)
    if kind == "depthwise" and ndim >= 3:
        return (*range(2, ndim), 0, 1)
    raise SciperfError(f"a {kind} kernel cannot have {ndim} dimensions")


def _torch_axes(name: str, ndim: int, kind: str, layout: str) -> tuple[int, ...] | None:
    """The torch → Keras axis order of entry `name`, or None when it maps unchanged (not a
    kernel, or already the Keras layout)."""
    _check(kind, KINDS, "layer kind")
    _check(layout, LAYOUTS, "layout")
    _, param = split_name(name)
    if param != "kernel" or layout == "keras":
        return None
    return _torch_to_keras_axes(ndim, kind)


def to_canonical(name: str, array: np.ndarray, kind: str, layout: str = "torch") -> np.ndarray:
    """A framework array (already named canonically, e.g. ``conv0/kernel``) in canonical layout."""
    arr = np.asarray(array)
    axes = _torch_axes(name, arr.ndim, kind, layout)
    return np.ascontiguousarray(arr if axes is None else arr.transpose(axes))


def from_canonical(name: str, array: np.ndarray, kind: str, layout: str = "torch") -> np.ndarray:
    """Inverse of :func:`to_canonical`: a canonical array in the framework's own layout."""
    arr = np.asarray(array)
    axes = _torch_axes(name, arr.ndim, kind, layout)
    return np.ascontiguousarray(arr if axes is None else arr.transpose(np.argsort(axes)))


def canonical_shape(name: str, shape: tuple[int, ...], kind: str,
                    layout: str = "torch") -> tuple[int, ...]:
    """Shape a framework array of `shape` has once mapped by :func:`to_canonical`."""
    shape = tuple(int(s) for s in shape)
    axes = _torch_axes(name, len(shape), kind, layout)
    return shape if axes is None else tuple(shape[i] for i in axes)


def expected_arrays(layer_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """``ModelSpec.layer_shapes()`` (layer → kernel shape) → every canonical entry and shape."""
    out: dict[str, tuple[int, ...]] = {}
    for layer, shape in layer_shapes.items():
        out[f"{layer}/kernel"] = tuple(int(s) for s in shape)
        out[f"{layer}/bias"] = (int(shape[-1]),)
    return out


def check_arrays(arrays: Mapping[str, np.ndarray], layer_shapes: Mapping[str, tuple[int, ...]],
                 source: str) -> None:
    """Raise one error naming every missing, extra and mis-shaped entry of `source`."""
    check_entries(arrays, expected_arrays(layer_shapes), source)


def check_entries(arrays: Mapping[str, np.ndarray], want: Mapping[str, tuple[int, ...]],
                  source: str) -> None:
    """:func:`check_arrays` against full entry shapes (``"<layer>/<param>"`` → shape), for
    models whose layers are not all kernel + bias (a ModelSpec's ``weight_shapes()``)."""
    problems = []
    missing = sorted(set(want) - set(arrays))
    extra = sorted(set(arrays) - set(want))
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected {', '.join(extra)}")
    for name in sorted(set(want) & set(arrays)):
        have = tuple(np.shape(arrays[name]))
        if have != want[name]:
            problems.append(f"{name} has shape {have}, expected {want[name]}")
    if problems:
        raise SciperfError(f"{source}: weights do not fit the model: {'; '.join(problems)}")


def save_npz(path: str | Path, arrays: Mapping[str, np.ndarray]) -> Path:
    """Write canonical weights atomically (temp file + rename: nothing half-written); a
    write the disk refuses is one line naming `path` (:mod:`sciperf.data.atomic`)."""
    path = Path(path)
    if path.suffix != ".npz":
        raise SciperfError(f"{path}: weight files end in .npz")
    clean: dict[str, np.ndarray] = {}
    for name, array in arrays.items():
        split_name(name)
        arr = np.asarray(array)
        if arr.dtype.kind != "f":
            raise SciperfError(f"{path}: {name} has dtype {arr.dtype}, expected floating point")
        clean[name] = arr
    # numpy's write error names no file: the line names it; a folder made for it goes again
    with atomic.folder_for(path.parent), atomic.replacing(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **clean)
    return path


def _npz_reason(exc: BaseException) -> str:
    """numpy's reason, except its advice to load pickled data unsafely (`allow_pickle=`):
    a weight file holds numeric arrays, and sciperf never unpickles one."""
    if "allow_pickle" in str(exc):
        return "it is not an .npz of numeric arrays (it holds pickled Python objects, " \
               "which sciperf never loads)"
    return str(exc)


def load_npz(path: str | Path,
             expected_shapes: Mapping[str, tuple[int, ...]] | None = None,
             expected_entries: Mapping[str, tuple[int, ...]] | None = None,
             ) -> dict[str, np.ndarray]:
    """Read a weight file; with `expected_shapes` (``ModelSpec.layer_shapes()``) or
    `expected_entries` (entry → shape) check it fits."""
    path = Path(path)
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with data:
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError as exc:
        raise SciperfError(f"weight file {path} does not exist") from exc
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise SciperfError(f"cannot read weight file {path}: {_npz_reason(exc)}") from exc
    for name in arrays:
        try:
            split_name(name)
        except SciperfError as exc:
            raise SciperfError(f"{path}: {exc}") from None
    if expected_shapes is not None:
        check_arrays(arrays, expected_shapes, str(path))
    if expected_entries is not None:
        check_entries(arrays, expected_entries, str(path))
    return arrays


def check_init_weights(path: Path, cfg: Any, workload: Any) -> None:
    """``train.init_weights``: the canonical .npz read whole and checked against the run's
    model, as the backend will read it (a truncated or corrupt file, or one of another
    model, is refused before the run's records are written)."""
    load_npz(path, expected_entries=workload.model_spec(cfg).weight_shapes())
