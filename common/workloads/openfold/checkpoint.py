"""The reference's resumable checkpoint, checked the same way by both frameworks.

A reference checkpoint is ``{"alphafold_state_dict", "optimizer_state_dict",
"iteration"}`` or a bare state dict. Its tensors are matched to the model by *name and
position*: the Adam state indexes its moments by parameter position, so the same names in
another order would load weights right and moments wrong. :func:`check_tensors` compares
a file's (name, shape) list with the model's (``ModelSpec.reference_shapes()``, the
reference's order) and names the first disagreement; the framework says what is wrong
with a tensor's values (not a tensor, complex, NaN…) through `problem`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sciperf.errors import SciperfError

Shape = tuple[int, ...]
MODEL_KEY, OPTIMIZER_KEY = "alphafold_state_dict", "optimizer_state_dict"


def weights_of(key: str, state: Any) -> Mapping[str, Any]:
    """The state dict a loaded checkpoint holds (the resumable dict's or the bare one)."""
    if not isinstance(state, Mapping):
        raise SciperfError(f"{key}: holds a {type(state).__name__}, not a state dict")
    weights = state.get(MODEL_KEY, state)
    if not isinstance(weights, Mapping):
        raise SciperfError(f"{key}: {MODEL_KEY} is a {type(weights).__name__}, not a "
                           "state dict")
    return weights


def check_tensors(key: str, ours: Sequence[tuple[str, Shape]],
                  theirs: Sequence[tuple[str, Shape | None]],
                  problem: Callable[[str], str | None]) -> None:
    """Names, order and shapes of the file's tensors (`theirs`; shape None: not a tensor)
    against the model's (`ours`), then `problem(name)` of each; the first mismatch as one
    line led by `key`."""
    our_names, their_names = {n for n, _ in ours}, {n for n, _ in theirs}
    for i, ((mine, shape), (found, their_shape)) in enumerate(zip(ours, theirs, strict=False)):
        if mine != found:
            raise SciperfError(f"{key}: {name_mismatch(i, mine, found, our_names, their_names)}")
        if their_shape != shape:
            what = "is not a tensor" if their_shape is None else \
                f"has shape {list(their_shape)}"
            raise SciperfError(f"{key}: parameter {mine} {what}, the model's is {list(shape)}")
        if why := problem(mine):
            raise SciperfError(f"{key}: parameter {mine} {why}")
    counts = f"{len(theirs)} tensors, the model has {len(ours)}"
    if len(theirs) > len(ours):
        raise SciperfError(f"{key}: unexpected tensor {theirs[len(ours)][0]} ({counts})")
    if len(theirs) < len(ours):
        raise SciperfError(f"{key}: lacks parameter {ours[len(theirs)][0]} ({counts})")


def name_mismatch(i: int, mine: str, found: str, our_names: set[str],
                  their_names: set[str]) -> str:
    """What differs at index `i`: a parameter missing, a tensor too many, one renamed, or
    the same names in another order."""
    if mine not in their_names and found in our_names:
        return f"lacks parameter {mine} (index {i} holds {found})"
    if found not in our_names and mine in their_names:
        return f"unexpected tensor {found} at index {i} (the model's is {mine})"
    if mine not in their_names:
        return f"parameter {i} is {found}, the model's is {mine}"
    return (f"parameter {i} is {found}, the model's is {mine}: the same names in another "
            "order (the optimizer state is indexed by position)")
