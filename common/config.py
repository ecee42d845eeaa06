"""Hydra composition of the run config: config groups, the ConfigStore, bad overrides.

The primary config and most groups are YAML under ``configs/``; the `workload` group is
generated from each workload's contract (``sciperf.workloads``) so benchmark numbers are
never retyped in YAML. :func:`compose` is the entry: it registers the schema, checks each
override (syntax, sweeps, `~key`/`+key`, booleans), composes, condenses Hydra's errors to
one line and validates the result. The rest of the config lives beside this module:

* ``config_schema`` — the shared sections' dataclasses and their choices
* ``config_checks`` — validation of a composed config, one line per bad key
* ``config_keys``   — roles of dotted keys, the experiment hash, flat configs and differences

The names tests import from here are re-exported (``__all__``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from omegaconf import DictConfig, OmegaConf

from sciperf.config_checks import COUNTS, validate
from sciperf.config_keys import config_hash, hashed_config, key_roles, keys_with, to_container
from sciperf.config_schema import PRECISIONS, WORKLOAD_SECTIONS, RootConfig, section_keys
from sciperf.errors import SciperfError
from sciperf.workloads import get, names

__all__ = ["COUNTS", "PRECISIONS", "compose", "config_dir", "config_hash", "hashed_config",
           "key_roles", "keys_with", "to_container"]


def config_dir() -> Path:
    """Location of the Hydra config groups: $SCIPERF_CONFIG_DIR or the checkout's configs/."""
    env = os.environ.get("SCIPERF_CONFIG_DIR")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "configs"
    if not (path / "config.yaml").is_file():
        raise SciperfError(f"config directory {path} has no config.yaml (set SCIPERF_CONFIG_DIR)")
    return path


def _register() -> None:
    """Put the schema and the spec-generated workload nodes into Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    schema = OmegaConf.structured(RootConfig)
    # `data.` and `train.` hold the keys every workload shares (typed here) and a
    # workload's own (its DataSpec, TrainSpec: checked by `validate`), so those nodes
    # accept new keys
    OmegaConf.set_struct(schema.data, False)
    OmegaConf.set_struct(schema.train, False)
    store.store(name="sciperf_schema", node=schema)
    for name in names():
        store.store(group="workload", name=name, node=get(name).default_config(),
                    package="_global_")


def compose(overrides: list[str]) -> DictConfig:
    """Compose the run config from `key=value` overrides; user errors become SciperfError."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _register()
    parsed = _check_syntax(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = hydra_compose("config", overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except Exception as exc:  # Hydra/OmegaConf raise many types; all are user errors here
        raise SciperfError(_one_line(exc)) from exc
    _check_edits(cfg, overrides)
    _check_booleans(cfg, parsed)
    validate(cfg)
    return cfg


def _check_syntax(overrides: Sequence[str]) -> list[Any]:
    """Each override parsed alone, so a syntax error names the one that failed (Hydra's
    own message, "mismatched input ' (' expecting <EOF>", named none: with ten overrides
    the user could not tell which), and a sweep is refused as such (a comma or range()
    is Hydra's multirun syntax; sciperf runs one configuration)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, parsed_all = OverridesParser.create(), []
    for override in overrides:
        try:
            parsed = parser.parse_overrides([override])[0]
        except Exception as exc:  # OverrideParseException and the grammar's own errors
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SciperfError(
                f"cannot parse the override {override!r} ({reason}): overrides are "
                "key=value; quote a value holding spaces, parentheses, '=' or ',': "
                "key='…'") from exc
        if parsed.is_sweep_override():
            raise SciperfError(
                f"{override!r} is a sweep (Hydra's multirun syntax: a comma, range(), "
                "choice()); sciperf runs one configuration — quote a value holding a "
                "comma: key='a,b'")
        parsed_all.append(parsed)
    return parsed_all


def _check_booleans(cfg: DictConfig, parsed: Sequence[Any]) -> None:
    """A schema boolean set to anything but true/false: OmegaConf turned `2`, `-1`, `yes`
    into true in silence (`train.overwrite=2` replaced a run's records)."""
    for override in parsed:
        if override.is_delete() or _is_group(override.key_or_group):
            continue
        key, value = override.key_or_group, override.value()
        if isinstance(OmegaConf.select(cfg, key, default=None), bool) \
                and not isinstance(value, bool):
            raise SciperfError(f"{key}={override.input_line.split('=', 1)[-1]} must be true "
                               "or false")


_ABSENT = object()  # OmegaConf.select's default: tells a deleted key from a null one
OPEN_SECTIONS = ("launcher", "container")  # keys come from the chosen group option's YAML


def _check_edits(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """`~key` and `+key` get past the schema's struct mode: Hydra deletes a key every run
    needs (a KeyError deep in `validate` or a backend) or adds one no code reads (a typo
    silently ignored). Refuse both here, in one line naming the key."""
    for override in overrides:
        edit = _edit(override)
        if edit is None:
            continue
        op, key = edit
        if op == "~":
            _check_deletion(cfg, key)
        else:
            _check_addition(cfg, key)


def _edit(override: str) -> tuple[str, str] | None:
    """('~' or '+', dotted key) of a deletion or addition (`++` too: it adds when the key
    is absent); None for a plain `key=value`, a config group (`+group=option` picks a
    config, it adds no key) or Hydra's own `hydra.` keys (dropped from the run config)."""
    if not override.startswith(("~", "+")):
        return None
    key = override.lstrip("+~").split("=", 1)[0].split("@", 1)[0].strip()
    if key.split(".", 1)[0] == "hydra" or _is_group(key):
        return None
    return override[0], key


def _is_group(key: str) -> bool:
    """`key` names a config group: a folder of configs/ or the spec-generated `workload`."""
    return "." not in key and (key == "workload" or (config_dir() / key).is_dir())


def _check_deletion(cfg: DictConfig, key: str) -> None:
    """`~key` may drop an optional key (a launcher's, a container's: they have defaults in
    code) but not one the schema declares — unless it is still there (`~system` drops the
    group's YAML, the schema's defaults stay)."""
    section, _, leaf = key.rpartition(".")
    known = _schema_keys(cfg, section)
    if known is None or leaf not in known:
        return
    if OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
        raise SciperfError(f"cannot delete {key}: a required key of the run config (override "
                           "its value instead; `sciperf show` prints all keys)")


def _check_addition(cfg: DictConfig, key: str) -> None:
    """`+key` may only add what the schema (or the chosen launcher/container config)
    declares; the first unknown part of the dotted key is named with the valid keys."""
    parts = key.split(".")
    for depth in range(min(len(parts), 2)):
        section = ".".join(parts[:depth])
        known = _schema_keys(cfg, section)
        if known is None:
            return
        if parts[depth] not in known:
            name = ".".join(parts[:depth + 1])
            raise SciperfError(f"unknown key {name} (`+` adds only keys the schema declares); "
                               f"valid keys: {', '.join(sorted(known))}")


def _schema_keys(cfg: DictConfig, section: str) -> set[str] | None:
    """Keys the schema declares at `section` ('' for the root), or None where it declares
    none (a scalar, or a launcher/container whose config file is not found)."""
    if not section:
        return {f.name for f in fields(RootConfig)}
    if section in OPEN_SECTIONS:
        return _option_keys(cfg, section)
    if section in WORKLOAD_SECTIONS:
        return section_keys(get(cfg.workload), section)
    cls = get_type_hints(RootConfig).get(section)
    return {f.name for f in fields(cls)} if is_dataclass(cls) else None



def _option_keys(cfg: DictConfig, group: str) -> set[str] | None:
    """The keys configs/<group>/<name>.yaml declares: what that launcher or container reads
    (the schema types these sections as open dicts)."""
    name = OmegaConf.select(cfg, f"{group}.name", default=None)
    path = config_dir() / group / f"{name}.yaml"
    if not isinstance(name, str) or not path.is_file():
        return None
    return {str(k) for k in OmegaConf.load(path)} - {"defaults"}


def _one_line(exc: Exception) -> str:
    """Condense a Hydra/OmegaConf error to one line that still lists the valid choices."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = (lines[0] if lines else type(exc).__name__).replace("In 'config': ", "")
    if "Available options" in text:
        opts = text.split("Available options", 1)[1].split("Config search path")[0]
        choices = [ln.strip() for ln in opts.splitlines()[1:] if ln.strip()]
        return f"{head}; valid choices: {', '.join(choices)}"
    if head.startswith("Could not override"):
        return f"unknown config key: {head} (check the spelling; `sciperf show` prints all keys)"
    if head.startswith("Error parsing override"):
        return f"{head}: overrides are key=value"
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause).strip():
        reason = str(cause).strip().splitlines()[0]
        return f"{head}: {reason}"
    return head
