"""The run config as dotted keys: each key's role, and what identifies an experiment.

Roles are declared on the dataclass fields (``sciperf.roles``) of the shared schema
(``sciperf.config_schema``) and of a workload's spec; :func:`key_roles` collects them by
dotted key. An experiment is identified by its resolved config without the keys whose role
is a place (:func:`config_hash`); :func:`differences` names the keys two configs disagree on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from typing import Any, get_type_hints

from omegaconf import DictConfig, OmegaConf

from sciperf.config_schema import WORKLOAD_SECTIONS, RootConfig
from sciperf.roles import Role
from sciperf.roles import of as role_of
from sciperf.workloads import get, names
from sciperf.workloads.base import Workload


def key_roles(workload: Workload | None = None) -> dict[str, Role]:
    """Every dotted key that declares a role (``sciperf.roles``): the shared config's and,
    given a workload, its own dataclasses' (a workload's key may add to a shared one)."""
    found = _roles(RootConfig, "")
    if workload is not None:
        for section, attr in WORKLOAD_SECTIONS.items():
            found |= _roles(getattr(workload, attr), f"{section}.")
    return found


def keys_with(flag: str, workload: Workload | None = None) -> list[str]:
    """The dotted keys whose role sets `flag` (reads, place, local, bench)."""
    return [key for key, r in key_roles(workload).items() if getattr(r, flag)]


def _roles(schema: type, prefix: str) -> dict[str, Role]:
    """Dotted key → role of every field of dataclass `schema` that declares one, nested
    dataclasses walked."""
    out: dict[str, Role] = {}
    hints = get_type_hints(schema)
    for f in fields(schema):
        kind = hints.get(f.name)
        if is_dataclass(kind):
            out |= _roles(kind, f"{prefix}{f.name}.")
        elif (r := role_of(f)) != Role():
            out[f"{prefix}{f.name}"] = r
    return out


def workload_of(cfg: Any) -> Workload | None:
    """The workload a run config names (None: none, or not one of the registry's)."""
    name = OmegaConf.select(cfg, "workload", default=None) if isinstance(cfg, DictConfig) \
        else getattr(cfg, "workload", None)
    return get(name) if name in names() else None


def to_container(cfg: DictConfig) -> dict:
    """Plain resolved dict (for JSON summaries and hashing)."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def hashed_config(cfg: DictConfig, ignore: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved config an experiment is identified by: without the keys whose role is
    a place (paths) and the dotted keys of `ignore`."""
    data = to_container(cfg)
    places = [k for k, r in key_roles(workload_of(cfg)).items() if r.place]
    for dotted in [*ignore, *places]:
        *sections, key = dotted.split(".")
        node = data
        for section in sections:
            node = node.get(section, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(key, None)
    return data


def config_hash(cfg: DictConfig, ignore: Sequence[str] = ()) -> str:
    """Identify an experiment: hash of :func:`hashed_config`."""
    blob = json.dumps(hashed_config(cfg, ignore), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def flat(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys → leaf values."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two nested configs, sorted."""
    fa, fb = flat(a), flat(b)
    return sorted(k for k in set(fa) | set(fb) if repr(fa.get(k)) != repr(fb.get(k)))
