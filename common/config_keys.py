"""The run config as dotted keys: each key's role, and what identifies an experiment.

Roles are declared on the dataclass fields (``sciperf.roles``) of the shared schema
(``sciperf.config_schema``) and of a workload's spec; :func:`key_roles` collects them by
dotted key. An experiment is identified by its resolved config without the keys whose role
is a place, and with the content of each file a key reads in place of its path
(:func:`config_hash`); :func:`differences` names the keys two configs disagree on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
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
    a place (paths) and the dotted keys of `ignore`; a key that names a file the run reads
    stands for that file's content (:func:`_file_identity`), so the same file found at
    another path — a moved dataset, a container's bind mount — is the same experiment."""
    data = to_container(cfg)
    roles = key_roles(workload_of(cfg))
    for dotted in [*ignore, *(k for k, r in roles.items() if r.place)]:
        node, key = _parent(data, dotted)
        if isinstance(node, dict):
            node.pop(key, None)
    for dotted in (k for k, r in roles.items() if r.reads and not r.place):
        node, key = _parent(data, dotted)
        if isinstance(node, dict) and key in node:
            node[key] = _file_identity(node[key])
    return data


def _parent(data: dict[str, Any], dotted: str) -> tuple[Any, str]:
    """The section of nested `data` that holds `dotted` (None: none) and its last key."""
    *sections, key = dotted.split(".")
    node: Any = data
    for section in sections:
        node = node.get(section) if isinstance(node, dict) else None
    return node, key


def _file_identity(value: Any) -> Any:
    """What a key naming a file the run reads contributes to the experiment's identity: the
    file's content, ``sha256:<hex>``. An unset key, or a path that is not a readable file
    (the run refuses it before it starts), stands as written."""
    if not isinstance(value, str) or not value:
        return value
    try:
        info = os.stat(value)
    except OSError:
        return value
    if not stat.S_ISREG(info.st_mode):
        return value
    digest = _content_sha256(os.path.realpath(value), info.st_size, info.st_mtime_ns,
                             info.st_ino)
    return value if digest is None else f"sha256:{digest}"


@functools.lru_cache(maxsize=16)
def _content_sha256(path: str, size: int, mtime_ns: int, inode: int) -> str | None:
    """SHA-256 of a file (None: unreadable), kept per (path, size, mtime, inode): a run
    hashes its config at every checkpoint, and a starting checkpoint may be gigabytes."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


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
