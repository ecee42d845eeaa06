"""Trained runs and prepared datasets made once per test session, shared by every test
(and every pytest-xdist worker) that asks for the same one.

A test that only reads a run takes :meth:`RunZoo.run`; a test that tampers with it
(corrupts a checkpoint, resumes it, fills its disk) takes :meth:`RunZoo.copy` into its own
tmp_path, so no test sees another's changes. A run is named by its command line: two
tests that ask for the same words share one training; any other word makes another.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from testkit import sciperf


def shared_root(basetemp: Path) -> Path:
    """The folder every worker of this session sees: xdist gives each worker its own
    basetemp (…/pytest-N/popen-gwK) under one session folder."""
    root = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    (root / "shared").mkdir(exist_ok=True)
    return root / "shared"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def made_once(root: Path, name: str, make: Callable[[Path], None]) -> Path:
    """`root/name`, made by `make(folder)` in the first worker that asks, under a lock.
    It is made in place (a run records its own folder) and marked done after;
    a make that fails leaves nothing (the next asker tries again)."""
    folder, done = root / name, root / f"{name}.done"
    with _locked(root / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


@dataclass(frozen=True)
class ZooRun:
    """A finished run: its folder and how its command ended."""

    out: Path
    returncode: int
    stdout: str
    stderr: str


class RunZoo:
    """`sciperf ARGS data.dir=DATA output_dir=…` runs, each made once per session."""

    def __init__(self, root: Path, data: Path) -> None:
        self.root, self.data = root, data

    def run(self, *args: str) -> ZooRun:
        """The run of `args` (a verb and overrides; data.dir and output_dir are the zoo's).
        Read it; never write into it — take :meth:`copy` for that."""
        folder = made_once(self.root, f"run-{_key(args)}", lambda part: self._make(part, args))
        proc = json.loads((folder / "command.json").read_text())
        return ZooRun(folder / "out", proc["returncode"], proc["stdout"], proc["stderr"])

    def copy(self, dest: Path, *args: str) -> ZooRun:
        """A copy of the run of `args` at `dest`, the test's own to change."""
        made = self.run(*args)
        shutil.copytree(made.out, dest, symlinks=True)
        return ZooRun(dest, made.returncode, made.stdout, made.stderr)

    def _make(self, part: Path, args: tuple[str, ...]) -> None:
        part.mkdir(parents=True)
        proc = sciperf(*args, f"data.dir={self.data}", f"output_dir={part / 'out'}")
        if not any((part / "out").glob("result_*.txt")):  # an instance's or the run's log
            raise AssertionError(f"sciperf {' '.join(args)} left no run: {proc.stderr[-3000:]}")
        (part / "command.json").write_text(json.dumps(
            {"args": list(args), "returncode": proc.returncode, "stdout": proc.stdout,
             "stderr": proc.stderr}))


def prepared(root: Path, *args: str) -> Path:
    """The dataset of `sciperf prepare ARGS data.dir=…`, made once per session."""
    def make(folder: Path) -> None:
        proc = sciperf("prepare", *args, f"data.dir={folder}")
        if proc.returncode != 0:
            raise AssertionError(f"sciperf prepare {' '.join(args)}: {proc.stderr[-3000:]}")
    return made_once(root, f"data-{_key(args)}", make)


def _key(args: tuple[str, ...]) -> str:
    return hashlib.sha256("\0".join(args).encode()).hexdigest()[:16]
