"""A TensorFlow checkpoint's state: written and read back strictly.

``state.npz`` holds every variable of the model, the optimizer and the step pieces
(``sciperf_tensorflow.pieces``) by group and creation index, and the two step counters —
no pickles. Reading checks every value before the first is assigned: each variable present
with its shape, a number of its variable's kind (finite where floating), two counters; a
tampered file is one line, never a traceback from the zip reader, the unpacking or
``assign`` (nor a model half restored). The mirror of ``sciperf_pytorch.state``.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from sciperf.errors import SciperfError, first_line

STATE_FILE = "state.npz"  # a checkpoint's backend state (sciperf.checkpoint)


def save(path: Path, groups: Mapping[str, Sequence[tf.Variable]],
         counters: tuple[int, int]) -> None:
    """Every variable of `groups` as ``<group>/<index>`` plus the (micro, optimizer) step
    counters, in one ``.npz``."""
    arrays = {f"{group}/{i:05d}": np.asarray(v.numpy())
              for group, found in groups.items() for i, v in enumerate(found)}
    arrays["counters"] = np.array(counters, np.int64)
    np.savez(path, **arrays)


def load(path: Path, groups: Mapping[str, Sequence[tf.Variable]]) -> tuple[int, int]:
    """Assign `path`'s values to the variables of `groups` once every one is checked;
    returns the step counters."""
    stored = _read(path)
    names = {f"{g}/{i:05d}" for g, found in groups.items() for i in range(len(found))}
    if set(stored) != names | {"counters"}:
        raise SciperfError(f"{path}: not a checkpoint of this model ({len(stored) - 1} "
                           f"variables stored, {len(names)} here)")
    counters = stored["counters"]
    if counters.shape != (2,) or counters.dtype.kind not in "iu" or (counters < 0).any():
        raise SciperfError(f"{path}: unreadable checkpoint (counters is {counters.dtype} "
                           f"of shape {counters.shape}, not 2 step counts)")
    pairs = []
    for group, found in groups.items():
        for i, var in enumerate(found):
            value = stored[f"{group}/{i:05d}"]
            if tuple(value.shape) != tuple(var.shape):
                raise SciperfError(f"{path}: {group} variable {i} has shape "
                                   f"{value.shape}, this model's {tuple(var.shape)}")
            if problem := value_problem(value, var):
                raise SciperfError(f"{path}: unreadable checkpoint ({group} variable {i} "
                                   f"{problem})")
            pairs.append((f"{group} variable {i}", var, value))
    for name, var, value in pairs:
        try:
            var.assign(value)
        except (ValueError, TypeError, tf.errors.OpError) as exc:
            raise SciperfError(f"{path}: unreadable checkpoint ({name}: "
                               f"{first_line(exc)})") from None
    micro, opt = (int(v) for v in counters)
    return micro, opt


def _read(path: Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` (pickles refused), or one line naming the file."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy array
            raise ValueError("not an .npz archive")
        with loaded as saved:
            return {k: saved[k] for k in saved.files}
    except (OSError, ValueError, EOFError, MemoryError, NotImplementedError,
            zipfile.BadZipFile, zlib.error) as exc:
        raise SciperfError(f"{path}: unreadable checkpoint ({first_line(exc)})") from None


def value_problem(value: np.ndarray, var: tf.Variable) -> str | None:
    """Why a stored array cannot be `var`'s value (None: it can): a dtype of another kind
    (text, complex, objects; a float where an integer belongs), NaN/Inf in a float."""
    dtype = tf.as_dtype(var.dtype)
    kinds = "f" if dtype.is_floating else "b" if dtype.is_bool else "iu"
    if value.dtype.kind not in kinds:
        return f"has dtype {value.dtype}, this model's is {dtype.name}"
    if dtype.is_floating and not np.isfinite(value).all():
        return "holds NaN/Inf"
    return None
