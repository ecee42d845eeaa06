"""Checkpoints of a run at epoch boundaries, and resuming from the newest valid one.

Layout (docs/architecture.md, "Checkpoints"): ``OUT/checkpoints/epoch_NNNN/`` holds

* the backend's framework-native state (``Backend.save_state``): PyTorch ``state.pt`` —
  model and optimizer state dicts, step counters, torch's RNG — read back with
  ``torch.load(weights_only=True)``, which unpickles tensors and containers only;
  TensorFlow ``state.npz`` — every model variable (Keras' dropout seed state included)
  and optimizer variable in creation order, step counters, read with
  ``allow_pickle=False``;
* ``driver.json`` — the driver's state: epochs done, per-epoch history, samples and
  seconds trained, the last metric, run_start's wall time, the config hash;
* ``result.txt`` — the MLLOG lines written up to this epoch (a resumed run continues them);
* ``MANIFEST.json`` — size and SHA-256 of each file above, written last.

``epoch_NNNN_step_SSSSSS`` is taken inside epoch NNNN+1 when the run was asked to stop
(SIGUSR1, Slurm's ``--signal``): every rank agrees on the step (an all-reduce of the
request), ``driver.json``'s ``epoch_progress`` holds the steps, samples, loss sum and
seconds of the unfinished epoch, and the resumed epoch skips the batches already trained.

A checkpoint is written aside (``.epoch_NNNN.tmp``) and renamed into place, so a folder
named ``epoch_NNNN`` is complete; the newest ``train.checkpoint_keep`` stay. ``checkpoints/``
may be a link to other storage (a scratch filesystem): it is followed, never replaced, and a
link to nowhere is refused before a run that checkpoints or resumes writes anything (on a
node without the mount a resume would start anew). Resuming
(``train.resume=auto``) takes the newest folder whose files match its manifest; a corrupt
or truncated one is named in one line and the one before it is used. The data order of an
epoch is a function of (seed, epoch), so an epoch boundary needs no loader state.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf import jsondata
from sciperf.data import atomic
from sciperf.errors import SciperfError

FOLDER = "checkpoints"
MANIFEST = "MANIFEST.json"
DRIVER = "driver.json"
MLLOG = "result.txt"
FORMAT = 1


def folder(out: Path) -> Path:
    """Where a run's checkpoints live."""
    return out / FOLDER


def entries(out: Path) -> list[Path]:
    """What checkpointing wrote in `out`'s checkpoints folder (through a link too): the
    checkpoints and any a dead write left aside. Nothing else there is a run's."""
    root = folder(out)
    if not root.is_dir():
        return []
    return sorted({*root.glob("epoch_*"), *root.glob(".epoch_*.tmp")})


def check_folder(out: Path) -> None:
    """The checkpoints folder of `out` is a folder, if it is there: a link whose target is
    missing (scratch not mounted on this node) or a file is one line, not a resume that
    starts anew or a run whose first checkpoint fails."""
    root = folder(out)
    if root.is_dir() or not (root.exists() or root.is_symlink()):
        return
    what = f"a link to {os.readlink(root)}, which is not a folder" if root.is_symlink() \
        else "not a folder"
    raise SciperfError(f"{root} is {what}: mount or make its target, or remove it")


def _name(epoch: int, partial: int | None = None) -> str:
    """epoch_NNNN after a whole epoch; epoch_NNNN_step_SSSSSS inside the next one (sorts
    between the two boundaries)."""
    return f"epoch_{epoch:04d}" + (f"_step_{partial:06d}" if partial is not None else "")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write(out: Path, epoch: int, backend: Any, driver: dict[str, Any], mllog: Path | None,
          keep: int, partial: int | None = None) -> Path:
    """Checkpoint after `epoch` epochs: the backend's state, the driver's, the MLLOG so far,
    then the manifest; renamed into place; older ones beyond `keep` removed."""
    root = folder(out)
    name = _name(epoch, partial)
    final, tmp = root / name, root / f".{name}.tmp"
    failure = None
    try:
        atomic.remove(tmp)  # a dead write's: one that cannot go is this write's failure
        tmp.mkdir(parents=True)
        backend.save_state(tmp)
        (tmp / DRIVER).write_text(json.dumps({"format": FORMAT, **driver}, indent=2,
                                             allow_nan=False))
        if mllog is not None and mllog.is_file():
            shutil.copyfile(mllog, tmp / MLLOG)
        files = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
                 for p in sorted(tmp.iterdir())}
        (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "epoch": epoch,
                                                "files": files}, indent=2))
        atomic.remove(final)  # (an equal one: the same epoch written again)
        os.replace(tmp, final)
    except (OSError, RuntimeError) as exc:  # a full disk: one line, no partial folder
        failure = f"{final}: cannot be written ({_write_reason(exc, root)})"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failure is not None:  # raised outside the handler, so the writer's error is not
        # chained to it: that error's frames kept torch's half-written file open, and the
        # space it held from the run's closing records (summary.json)
        raise SciperfError(failure)
    _prune(root, keep)
    return final


FULL_BYTES = 4 << 20  # free space below which a failed write is put down to a full disk


def _write_reason(exc: OSError | RuntimeError, where: Path) -> str:
    """Why a checkpoint could not be written, in sciperf.data.atomic's words. The OS says it
    for Python's writes; torch's zip writer says only "unexpected pos 76416 vs 76368" or
    "iostream error", so a full disk is named when the disk is full, and the writer's words
    kept otherwise."""
    if isinstance(exc, OSError):
        return atomic.why(exc)
    try:
        full = shutil.disk_usage(where).free < FULL_BYTES
    except OSError:
        full = False
    text = re.sub(r"^\[enforce fail at [^\]]*\]\s*\.?\s*", "", str(exc).strip())
    words = text.splitlines()[0] if text else type(exc).__name__
    if full:
        return f"No space left on device ({words}); is the disk full?"
    return f"the framework's writer failed ({words}); is the disk full or a file size limit hit?"


def _prune(root: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints. One that cannot go is said, not skipped in
    silence (the disk fills with them); the run goes on, as the newest is whole."""
    for old in sorted(root.glob("epoch_*"))[:-keep] if keep > 0 else []:
        try:
            atomic.remove(old)
        except OSError as exc:
            print(f"checkpoint {old} not removed (train.checkpoint_keep={keep}): "
                  f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}",
                  flush=True)


def problem(path: Path) -> str | None:
    """Why checkpoint folder `path` is unusable (None: every file matches its manifest)."""
    try:
        manifest = jsondata.loads((path / MANIFEST).read_text())
        files = manifest["files"]
        if manifest.get("format") != FORMAT or not isinstance(files, dict):
            return f"format {manifest.get('format')!r} is not {FORMAT}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"no readable {MANIFEST} ({type(exc).__name__})"
    for name, want in files.items():
        p = path / name
        if not p.is_file():
            return f"{name} is missing"
        if p.stat().st_size != want.get("bytes"):
            return f"{name} holds {p.stat().st_size} bytes, the manifest says {want.get('bytes')}"
        if _sha256(p) != want.get("sha256"):
            return f"{name} does not match its SHA-256"
    return None


@dataclass(frozen=True)
class Found:
    """The checkpoint a run resumes from, and those skipped on the way (path, why)."""

    path: Path
    epoch: int
    driver: dict[str, Any]
    skipped: tuple[tuple[Path, str], ...]


def latest(out: Path) -> Found | None:
    """The newest valid checkpoint of `out`, or None; invalid ones are skipped and listed."""
    skipped: list[tuple[Path, str]] = []
    for path in sorted(folder(out).glob("epoch_*"), reverse=True):
        why = problem(path)
        if why is None:
            try:
                driver = jsondata.loads((path / DRIVER).read_text())
            except ValueError as exc:
                why = f"{DRIVER} is unusable ({type(exc).__name__})"
            else:
                why = driver_problem(driver)
                if why is None:
                    return Found(path, int(driver["epochs"]), driver, tuple(skipped))
        skipped.append((path, why))
    if skipped:
        lines = "; ".join(f"{p}: {why}" for p, why in skipped)
        raise SciperfError(f"train.resume=auto: no valid checkpoint ({lines})")
    return None


# what the driver's fields must be (a hand-edited or foreign driver.json whose manifest
# matches was a KeyError traceback in the middle of the resume)
DRIVER_FIELDS: dict[str, tuple[type, ...]] = {
    "format": (int,), "epochs": (int,), "history": (list,), "train_samples_seen": (int,),
    "train_seconds": (int, float), "config_hash": (str,), "world": (int,),
    "run_start": (int, float, type(None)), "resumed": (list,),
    "epoch_progress": (dict, type(None)),
}


def driver_problem(driver: Any) -> str | None:
    """Why a driver.json cannot be resumed from (None: it can)."""
    if not isinstance(driver, dict):
        return f"{DRIVER} is not an object"
    if driver.get("format") != FORMAT:
        return f"{DRIVER} format {driver.get('format')!r} is not {FORMAT}"
    for key, kinds in DRIVER_FIELDS.items():
        value = driver.get(key)
        if key not in driver or isinstance(value, bool) or not isinstance(value, kinds):
            return f"{DRIVER} has no usable {key!r}"
    if driver["epochs"] < 0 or driver["world"] < 1:
        return f"{DRIVER} holds epochs={driver['epochs']}, world={driver['world']}"
    progress = driver["epoch_progress"]
    if progress is not None and (set(progress) != set(PROGRESS_FIELDS) or not all(
            isinstance(progress[k], int | float) and not isinstance(progress[k], bool)
            for k in PROGRESS_FIELDS)):
        return f"{DRIVER} has no usable 'epoch_progress'"
    return None


# sciperf.backends.EpochProgress's fields (a test keeps the two equal)
PROGRESS_FIELDS = ("steps", "samples", "loss_sum", "seconds")


def not_training(cfg: Any) -> list[str]:
    """The keys that say where and how a run is kept, run or reported, not what it trains
    (their role is ``local``, sciperf.roles): a resume may change them (more epochs, other
    threads or loader workers, a longer grace), and ranks may differ in them."""
    from sciperf.config_keys import keys_with, workload_of
    return keys_with("local", workload_of(cfg))


def resume_config(cfg: Any) -> dict[str, Any]:
    """The config a checkpoint must share with the run resuming it: the experiment's
    (config_hash's), without the keys of :func:`not_training`."""
    from sciperf.config_keys import hashed_config
    return hashed_config(cfg, ignore=not_training(cfg))


def resume_hash(cfg: Any) -> str:
    """The hash of :func:`resume_config`."""
    from sciperf.config_keys import config_hash
    return config_hash(cfg, ignore=not_training(cfg))


def check_matches(found: Found, config_hash: str, world: int,
                  config: dict[str, Any] | None = None) -> None:
    """A checkpoint continues only the run it was taken from: same config (bar the keys
    that do not change the training: output, resume, checkpointing) and rank count. The
    keys that differ are named when the checkpoint keeps its config (it was hashes only)."""
    if found.driver.get("config_hash") != config_hash:
        saved = found.driver.get("config")
        if isinstance(saved, dict) and config is not None:
            from sciperf.config_keys import differences
            keys = differences(saved, config)
            shown = ", ".join(f"{k}={_short(_at(saved, k))} (now {_short(_at(config, k))})"
                              for k in keys[:4]) + (", …" if len(keys) > 4 else "")
            what = f"it had {shown}" if keys else "another configuration"
        else:
            what = (f"config hash {found.driver.get('config_hash')}, this run "
                    f"{config_hash}")
        raise SciperfError(f"{found.path}: taken with another configuration ({what}); resume "
                           "with the original overrides")
    if int(found.driver.get("world", world)) != world:
        raise SciperfError(f"{found.path}: taken with {found.driver.get('world')} ranks, "
                           f"this run has {world}")


def _at(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _short(value: Any) -> str:
    text = "(unset)" if value is None else str(value)
    return text if len(text) <= 40 else text[:37] + "..."
