"""Gather per-rank partial results through a shared directory, with no framework or MPI.

`sciperf prepare` runs before any training framework is up, possibly as N ranks under
srun/mpirun/torchrun, and the dataset directory is the one thing they all share. Each
rank writes its part aside and renames it (sciperf.data.atomic) as
``part-<rank>-of-<world>.npz``, tagged with a digest of the inputs it covered; rank 0
waits for every part whose digest is the one it expects for that rank, so a stale part
left by an earlier, different run is never merged. A rank that dies makes rank 0 fail
after `timeout_s` with the rank named (the launchers stop the whole job sooner).
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sciperf.data import atomic
from sciperf.errors import SciperfError

DIGEST_KEY = "__digest__"


def files_digest(files: Sequence[Path]) -> str:
    """Identity of a list of input files: paths, sizes and modification times."""
    h = hashlib.sha1()
    for path in files:
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def part_path(folder: Path, rank: int, world: int) -> Path:
    return folder / f"part-{rank}-of-{world}.npz"


def write_part(folder: Path, rank: int, world: int, arrays: dict[str, np.ndarray],
               digest: str) -> Path:
    """This rank's part, written aside and renamed: rank 0 never reads half a file, and a
    write the disk refuses is one line naming the part, its temporary gone (one rank
    writes each part, so the temporary's name is this part's alone)."""
    final = part_path(folder, rank, world)
    with atomic.failing_as(folder):
        folder.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(final) as tmp, tmp.open("wb") as fh:
        np.savez(fh, **arrays, **{DIGEST_KEY: np.array(digest)})
    return final


def _read_part(path: Path, digest: str) -> dict[str, np.ndarray] | None:
    """The part's arrays when it exists and covers the expected inputs, else None."""
    try:
        with np.load(path) as part:
            if str(part[DIGEST_KEY]) != digest:
                return None
            return {k: part[k] for k in part.files if k != DIGEST_KEY}
    except (OSError, ValueError, KeyError):
        return None


def gather(folder: Path, world: int, expected: Callable[[int], str], timeout_s: float,
           what: str, poll_s: float = 0.1) -> list[dict[str, np.ndarray]]:
    """Rank 0: every rank's part, in rank order, once each has arrived; then the folder
    is removed. Fails with the missing ranks named after `timeout_s`."""
    parts: dict[int, dict[str, np.ndarray]] = {}
    deadline = time.monotonic() + timeout_s
    while len(parts) < world:
        for rank in range(world):
            if rank not in parts:
                found = _read_part(part_path(folder, rank, world), expected(rank))
                if found is not None:
                    parts[rank] = found
        if len(parts) == world:
            break
        if time.monotonic() > deadline:
            missing = ", ".join(str(r) for r in range(world) if r not in parts)
            raise SciperfError(f"{what}: rank(s) {missing} of {world} delivered no part to "
                               f"{folder} within {timeout_s:.0f} s (did they fail?)")
        time.sleep(poll_s)
    shutil.rmtree(folder, ignore_errors=True)
    return [parts[r] for r in range(world)]
