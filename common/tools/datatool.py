"""`sciperf data ACTION …`: the road from nothing to a verified, converted dataset.

The actions: ``list`` (what each workload reads and where it is published), ``download``
(HTTPS with resume, or the Globus command), ``verify`` (counts, checksums, a read through
the real readers), ``convert`` (the reference format → npy, over MPI ranks) and ``subset``
(a deterministic smaller set carved from a full one). Each lives in its own module
(``sciperf.tools.data_<action>``); this one splits the command line: the action, the words
only `data` reads (``part=``, ``mirror=``, a split's count for ``subset``) and the Hydra
overrides that compose the config (``workload=``, ``data.dir=``, ``seed=``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError

ACTIONS = ("list", "download", "verify", "convert", "subset")
# words of an action that are not config keys: action → names (a split's name: subset)
LOCAL_WORDS = {"download": ("part", "mirror")}


def _split(action: str, words: list[str], splits: tuple[str, ...]) -> tuple[dict[str, list[str]],
                                                                          list[str]]:
    """(the action's own words by name, the Hydra overrides)."""
    names = set(LOCAL_WORDS.get(action, ())) | (set(splits) if action == "subset" else set())
    own: dict[str, list[str]] = {}
    overrides = []
    for word in words:
        key, eq, value = word.partition("=")
        if eq and key in names:
            own.setdefault(key, []).append(value)
        else:
            overrides.append(word)
    return own, overrides


def _workload_named(overrides: list[str]) -> list[str]:
    """The workloads `list` was given (workload=a or workload=a,b)."""
    named = [w.split("=", 1)[1] for w in overrides if w.startswith("workload=")]
    return [n for w in named for n in w.split(",") if n]


def _count(split: str, text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise SciperfError(f"{split}={text}: a sample count must be a whole number") from None
    if n < 1:
        raise SciperfError(f"{split}={text}: a subset needs at least one sample per split")
    return n


def _compose(overrides: list[str]) -> Any:
    from sciperf.config import compose
    cfg = compose(overrides)
    if not str(cfg.data.dir).strip():
        raise SciperfError("data.dir= is empty: name the dataset's folder")
    return cfg


def _one(own: dict[str, list[str]], name: str) -> str | None:
    values = own.get(name, [])
    if len(values) > 1:
        raise SciperfError(f"{name}= given {len(values)} times; give it once")
    return values[0] if values else None


def run(args: argparse.Namespace) -> int:
    """Dispatch `sciperf data ACTION words…` to the action's module."""
    words = list(args.overrides)
    if not words or words[0] not in ACTIONS:
        given = f"`{words[0]}` is not" if words else "no action given: need"
        raise SciperfError(f"{given} one of {', '.join(ACTIONS)} (`sciperf data -h`)")
    action, words = words[0], words[1:]
    from sciperf.workloads import DEFAULT, get, names
    if action == "list":
        from sciperf.tools import data_list
        for name in _workload_named(words):
            if name not in names():
                raise SciperfError(f"workload={name} is not one of {', '.join(names())}")
        return data_list.run(_workload_named(words), bool(args.json))
    workload = (_workload_named(words) or [DEFAULT])[-1]
    splits = tuple(get(workload).dataset.splits) if workload in names() else ()
    own, overrides = _split(action, words, splits)
    cfg = _compose(overrides)
    actions: dict[str, Callable[[], int]] = {
        "download": lambda: _download(cfg, own, args),
        "verify": lambda: _verify(cfg, args),
        "convert": lambda: _convert(cfg, args),
        "subset": lambda: _subset(cfg, own, args),
    }
    return actions[action]()


def _download(cfg: Any, own: dict[str, list[str]], args: argparse.Namespace) -> int:
    from sciperf.tools import data_download
    parts = [p for value in own.get("part", []) for p in value.split(",") if p]
    connections = int(args.connections) if args.connections is not None else 4
    if connections < 1:
        raise SciperfError(f"--connections {connections}: need at least 1")
    return data_download.run(cfg, parts, connections, _one(own, "mirror"), bool(args.force))


def _verify(cfg: Any, args: argparse.Namespace) -> int:
    from sciperf.tools import data_verify
    return data_verify.run(cfg, bool(args.full), bool(args.json))


def _convert(cfg: Any, args: argparse.Namespace) -> int:
    from sciperf.tools import data_convert
    return data_convert.run(cfg, bool(args.force))


def _subset(cfg: Any, own: dict[str, list[str]], args: argparse.Namespace) -> int:
    from sciperf.tools import data_subset
    if not args.out:
        raise SciperfError("subset needs --out DIR: the folder the smaller set is written to")
    counts = {split: _count(split, _one(own, split) or "") for split in own}
    if not counts:
        raise SciperfError("subset needs a count per split, e.g. train=512 validation=64")
    return data_subset.run(cfg, Path(args.out), counts, bool(args.force))
