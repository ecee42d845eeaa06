"""Typed reads of `launcher.*` / `container.*` options: the schema does not type these
sections (each launcher and container has its own keys), so a wrong type reached the
renderer — `launcher.nprocs=abc` a ValueError traceback, `launcher.extra_args=--x` one
word per character, `launcher.requeue=maybe` a requeue script. Each read here is one line
naming the key, or the value as the renderer needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sciperf.errors import SciperfError


def count(options: Mapping[str, Any], key: str, section: str, least: int = 1) -> int | None:
    """A whole number ≥ `least` (None when unset): 2.7 ranks or "abc" are refused, not
    rounded or crashed on."""
    value = options.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SciperfError(f"{section}.{key}={value} must be a whole number (at least {least})")
    if value < least:
        raise SciperfError(f"{section}.{key}={value} must be at least {least}")
    return value


def words(options: Mapping[str, Any], key: str, section: str) -> list[str]:
    """A list of words (numbers and strings; [] when unset). A bare string is refused with
    the list spelling: iterating it made one word per character."""
    value = options.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple) or any(isinstance(w, dict | list | tuple)
                                                  for w in value):
        raise SciperfError(f"{section}.{key}={value} must be a list of words, e.g. "
                           f"{section}.{key}=[{value if isinstance(value, str) else '…'}]")
    return [str(w) for w in value]


def switch(options: Mapping[str, Any], key: str, section: str, auto: bool = False,
           default: bool = False) -> bool | None:
    """true or false (None for `auto` where `auto` is allowed, or when unset and the
    default is None): `maybe` is refused, not taken as true."""
    value = options.get(key)
    if value is None:
        return None if auto else default
    if auto and value == "auto":
        return None
    if not isinstance(value, bool):
        allowed = "true, false or auto" if auto else "true or false"
        raise SciperfError(f"{section}.{key}={value} must be {allowed}")
    return value
