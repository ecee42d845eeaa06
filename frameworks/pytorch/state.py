"""A PyTorch checkpoint's state: written and read back strictly.

``state.pt`` holds the model's and the optimizer's state dicts, the step counters, torch's
RNG and the extra state of the step pieces (``sciperf_pytorch.pieces``). It is read with
``weights_only=True`` (a checkpoint never runs code) and every value is checked before
anything is assigned: torch's ``load_state_dict`` copies whatever tensor it is given (NaN,
a complex one with a warning, an integer one cast) and an optimizer's ``load_state_dict``
takes any param_group values, so a bad file showed only at the first step, as a traceback
or a NaN run. The mirror of ``sciperf_tensorflow.state``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sciperf.errors import SciperfError, first_line

STATE_FILE = "state.pt"  # a checkpoint's backend state (sciperf.checkpoint)

# torch's load_state_dict copies whatever tensor it is given (NaN, a complex one with a
# warning, an integer one cast) and an optimizer's load_state_dict takes any param_group
# values: a bad file shows only at the first step, as a traceback or a NaN run.


def tensor_problem(value: Any, like: torch.Tensor | None = None) -> str | None:
    """Why `value` cannot stand for a tensor like `like` (None: it can): not a tensor,
    not dense (sparse, nested), not real floating where `like` is floating (complex,
    integer), NaN/Inf."""
    if not isinstance(value, torch.Tensor):
        return f"is not a tensor (a {type(value).__name__})"
    if value.layout != torch.strided or value.is_nested:
        return f"is not a dense tensor ({value.layout})"
    floating = like is not None and (like.is_floating_point() or like.is_complex())
    if value.is_complex() or (floating and not value.is_floating_point()):
        return f"is not a real floating tensor ({value.dtype})"
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        return "holds NaN/Inf"
    return None


def check_tensors(key: str, tensors: Any, like: Mapping[str, torch.Tensor],
                  label: str = "parameter") -> None:
    """Every tensor of a state dict that names one of `like`'s: dense, real, finite (names
    and shapes are load_state_dict's to check); the first bad one named."""
    if not isinstance(tensors, Mapping):
        raise SciperfError(f"{key}: holds a {type(tensors).__name__} where a state dict "
                           "belongs")
    for name, value in tensors.items():
        if name in like and (problem := tensor_problem(value, like[name])):
            raise SciperfError(f"{key}: {label} {name} {problem}")


def group_settings(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Each param_group's hyperparameters as the optimizer was built (before a load)."""
    return [{k: v for k, v in group.items() if k != "params"}
            for group in optimizer.param_groups]


def optimizer_names(optimizer: torch.optim.Optimizer, model: nn.Module) -> list[str]:
    """Parameter names in the optimizer's order: a state dict indexes its state by it."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names.get(id(p), "?") for group in optimizer.param_groups
            for p in group["params"]]


def check_optimizer_tensors(key: str, what: str, state: Any, names: list[str]) -> None:
    """An optimizer state dict's per-parameter values before torch loads them (it casts
    them to the parameter's dtype, dropping an imaginary part): dense, real, finite
    tensors or finite numbers."""
    if not isinstance(state, Mapping) or not isinstance(state.get("state"), Mapping):
        raise SciperfError(f"{key}: {what} is not an optimizer state dict")
    for index, slots in state["state"].items():
        name = names[index] if isinstance(index, int) and 0 <= index < len(names) else index
        if not isinstance(slots, Mapping):
            raise SciperfError(f"{key}: {what} state of parameter {name} is not a dict")
        for slot, value in slots.items():
            problem = _number_problem(value) if _is_number(value) else tensor_problem(value)
            if problem:
                raise SciperfError(f"{key}: {what} {slot} of parameter {name} {problem}")


def check_loaded_optimizer(key: str, what: str, optimizer: torch.optim.Optimizer,
                           settings: list[dict[str, Any]], model: nn.Module) -> None:
    """After torch's load (which fills the defaults of keys older files lack): every
    hyperparameter the optimizer was built with is there with a value of its kind, and
    every moment has its parameter's shape (torch checks only the group sizes)."""
    for i, (group, built) in enumerate(zip(optimizer.param_groups, settings, strict=True)):
        for name, want in built.items():
            if name not in group:
                raise SciperfError(f"{key}: {what} param_group {i} lacks {name}")
            if not _same_kind(group[name], want):
                raise SciperfError(f"{key}: {what} param_group {i} {name}="
                                   f"{_short(group[name])} is not {_kind(want)}")
    names = {id(p): name for name, p in model.named_parameters()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            for slot, value in optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != p.shape:
                    raise SciperfError(f"{key}: {what}'s {slot} of parameter "
                                       f"{names.get(id(p), '?')} has shape "
                                       f"{list(value.shape)}, the model's is {list(p.shape)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_problem(value: Any) -> str | None:
    """Why `value` is not a finite real number (a 0-d tensor counts: torch's lr, step)."""
    if isinstance(value, torch.Tensor):
        if value.dim():
            return f"is not a number (a tensor of shape {list(value.shape)})"
        return tensor_problem(value)
    if not _is_number(value):
        return f"is not a number (a {type(value).__name__})"
    return None if np.isfinite(value) else "is not finite"


def _same_kind(value: Any, want: Any) -> bool:
    """A loaded hyperparameter of the kind the optimizer was built with: a flag for a
    flag (None: unset, or a flag), a finite number for a number, a sequence of as many
    of the same kinds for a tuple (betas)."""
    if isinstance(want, bool):
        return isinstance(value, bool)
    if want is None:
        return value is None or isinstance(value, bool)
    if _is_number(want) or isinstance(want, torch.Tensor):
        return _number_problem(value) is None
    if isinstance(want, tuple | list):
        return isinstance(value, tuple | list) and len(value) == len(want) and all(
            _same_kind(v, w) for v, w in zip(value, want, strict=True))
    return isinstance(value, type(want))


def _kind(want: Any) -> str:
    """`want`'s kind in words (the refusal's end)."""
    if isinstance(want, bool) or want is None:
        return "a flag (true/false)"
    if _is_number(want) or isinstance(want, torch.Tensor):
        return "a finite number"
    if isinstance(want, tuple | list):
        return f"a sequence of {len(want)} ({', '.join(_kind(w) for w in want)})"
    return f"a {type(want).__name__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# torch's refusal names the global (``GLOBAL posix.system``) or the pickle opcode it stopped at
_REFUSAL = re.compile(r"GLOBAL ([\w.]+)|Unsupported operand (\d+)")


def load_weights_only(path: str | Path, key: str, map_location: Any = "cpu") -> Any:
    """``torch.load(weights_only=True)`` of `path`, every failure one line led by `key`:
    torch's own message is a paragraph that ends advising to load the file with
    ``weights_only=False`` — the unsafe load this project never makes — so only its reason
    stays (a refused global named: nothing in the file was run)."""
    try:
        with warnings.catch_warnings():  # a plain pickle makes torch warn before refusing
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise SciperfError(f"{key}: no such file") from None
    except Exception as exc:  # noqa: BLE001 (a damaged file raises many types; one meaning)
        found = _REFUSAL.search(str(exc))
        if found and found.group(1):
            raise SciperfError(f"{key}: refused, it names GLOBAL {found.group(1)}, which "
                               "torch's weights_only loader does not allow (nothing in the "
                               "file was run)") from None
        reason = f"unsupported pickle opcode {found.group(2)}" if found else first_line(exc)
        raise SciperfError(f"{key}: not a checkpoint torch loads with weights_only=True "
                           f"({reason})") from None
