"""The alignment shards ``open_protein_set/processed/pdb_alignments/{0..9}.db`` and their
``super.index`` (REF ``scripts/preprocess_open_protein_set.py``, ``data/alignments.py``).

A chain directory's shard is ``sha256(chain dir name)[:8]`` little-endian mod 10; its files
(sorted by ``a3m/…``, ``hhr/…`` path) follow each other with no separator; ``super.index``
maps every chain of a duplicate line to the same ``{"db": "<n>.db", "files": [[basename,
offset, size], …]}``, shard by shard, chains in name order within a shard. A missing or
truncated shard, an offset beyond a file or a chain absent from ``super.index`` is a
:class:`LayoutError` naming the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from sciperf import jsondata
from sciperf.data import atomic
from sciperf.workloads.openfold.layout.paths import (
    ALIGNMENTS_DIR,
    SUPER_INDEX,
    LayoutError,
    write_atomic,
)

NUM_SHARDS = 10
# The files of one OpenProteinSet chain directory (the names the feature pipeline asks for).
A3M_FILES = ("uniref90_hits.a3m", "bfd_uniclust_hits.a3m", "mgnify_hits.a3m")  # merge order
HHR_FILE = "pdb70_hits.hhr"


def shard_of(chain_dir: str, shards: int = NUM_SHARDS) -> int:
    """The shard of an OpenProteinSet chain directory: the first 8 bytes of its name's
    SHA-256 as a little-endian integer, mod `shards` (REF helpers.hash_string_into_number)."""
    digest = hashlib.sha256(chain_dir.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % shards


class AlignmentWriter:
    """Writes ``{0..9}.db`` and ``super.index`` as the reference's packer does.

    Add chain directories in name order (the reference walks a sorted directory), each with
    its files as (path inside the directory, bytes); they are sorted by that path, appended
    to the directory's shard, and every chain of its duplicate group gets the same entry.
    :meth:`close` writes ``super.index`` (shard by shard, in the order chains were added).

    Each shard grows as a hidden temporary beside it, renamed into place by :meth:`close`:
    a write the disk refuses is one line naming the shard (:mod:`sciperf.data.atomic`), and
    every temporary goes with it, so no reader finds a shard cut short.
    """

    def __init__(self, root: str | Path, shards: int = NUM_SHARDS) -> None:
        self.folder = Path(root) / ALIGNMENTS_DIR
        with atomic.failing_as(self.folder):
            self.folder.mkdir(parents=True, exist_ok=True)
        self.shards = shards
        self._tmp = [atomic.temporary(self._shard(n)) for n in range(shards)]
        self._files: list[BinaryIO] = []  # one per shard once open, closed by close()
        try:
            for n, tmp in enumerate(self._tmp):
                with atomic.failing_as(self._shard(n)):
                    self._files.append(open(tmp, "wb"))  # noqa: SIM115
        except BaseException:
            self._discard()
            raise
        self._offsets = [0] * shards
        self._index: list[dict[str, dict]] = [{} for _ in range(shards)]
        self._seen: set[str] = set()

    def _shard(self, n: int) -> Path:
        """Where shard `n` ends up (``<n>.db``)."""
        return self.folder / f"{n}.db"

    def add(self, chain_dir: str, files: Iterable[tuple[str, bytes]],
            duplicates: Sequence[str] = ()) -> None:
        """One chain directory; `duplicates` is its line of ``duplicate_pdb_chains.txt``
        (the chains sharing its alignments, itself included; default: itself only)."""
        shard = shard_of(chain_dir, self.shards)
        entry: dict[str, Any] = {"db": f"{shard}.db", "files": []}
        for relpath, data in sorted(files, key=lambda item: item[0]):
            with atomic.failing_as(self._shard(shard)):
                self._files[shard].write(data)
            entry["files"].append([Path(relpath).name, self._offsets[shard], len(data)])
            self._offsets[shard] += len(data)
        for name in duplicates or (chain_dir,):
            if name in self._seen:
                raise ValueError(f"chain {name} given alignments twice")
            self._seen.add(name)
            self._index[shard][name] = entry

    def close(self) -> Path:
        """Finish the shards and write ``super.index`` (atomically, last)."""
        try:
            for n, (tmp, f) in enumerate(zip(self._tmp, self._files, strict=True)):
                with atomic.failing_as(self._shard(n)):
                    f.close()
                    tmp.replace(self._shard(n))
        except BaseException:
            self._discard()
            raise
        index = {name: entry for shard in self._index for name, entry in shard.items()}
        path = self.folder / SUPER_INDEX.name
        write_atomic(path, json.dumps(index).encode("utf-8"))
        return path

    def _discard(self) -> None:
        """Every shard's file closed and its temporary removed (after a failure: what a
        close or a removal says is not the error to tell)."""
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()
        for tmp in self._tmp:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)

    def __enter__(self) -> AlignmentWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._discard()


def pack_open_protein_set(pdb_dir: str | Path, duplicates_file: str | Path,
                          root: str | Path) -> Path:
    """OpenProteinSet's ``pdb/<chain>/{a3m,hhr}/*`` and ``duplicate_pdb_chains.txt`` → the
    processed shards under `root` (REF preprocess_open_protein_set.py, one process)."""
    groups: dict[str, list[str]] = {}
    try:
        for line in Path(duplicates_file).read_text().strip().split("\n"):
            for name in line.split():
                groups[name] = line.split()
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{duplicates_file}: cannot read the duplicate chains ({exc})") \
            from None
    with AlignmentWriter(root) as writer:
        for chain_dir in sorted(p for p in Path(pdb_dir).iterdir() if p.is_dir()):
            if chain_dir.name not in groups:
                raise LayoutError(f"{duplicates_file}: has no line for chain {chain_dir.name}")
            files = [(str(p.relative_to(chain_dir)), p.read_bytes())
                     for p in chain_dir.glob("*/*") if p.is_file()]
            writer.add(chain_dir.name, files, groups[chain_dir.name])
    return Path(root) / SUPER_INDEX


class AlignmentIndex:
    """``super.index``, loaded once: which shard, offsets and sizes hold a chain's files."""

    def __init__(self, root: str | Path) -> None:
        self.folder = Path(root) / ALIGNMENTS_DIR
        self.path = self.folder / SUPER_INDEX.name
        try:
            self._index = jsondata.loads(self.path.read_bytes())
        except OSError as exc:
            raise LayoutError(f"{self.path}: cannot read the alignment index "
                              f"({exc.strerror})") from None
        except ValueError as exc:
            raise LayoutError(f"{self.path}: not valid JSON ({exc})") from None
        if not isinstance(self._index, dict):
            raise LayoutError(f"{self.path}: not a JSON object of chains")

    def __contains__(self, pdb_chain_id: object) -> bool:
        return pdb_chain_id in self._index

    def __len__(self) -> int:
        return len(self._index)

    def files(self, pdb_chain_id: str) -> tuple[str, list[tuple[str, int, int]]]:
        """(shard file name, [(basename, offset, size), …]) of a chain, checked."""
        entry = self._index.get(pdb_chain_id)
        if entry is None:
            raise LayoutError(f"{self.path}: no alignments for chain {pdb_chain_id}")
        try:
            db, files = entry["db"], [(str(n), int(o), int(s)) for n, o, s in entry["files"]]
        except (KeyError, TypeError, ValueError):
            raise LayoutError(f"{self.path}: entry of {pdb_chain_id} is not "
                              '{"db": name, "files": [[basename, offset, size], ...]}') from None
        if not isinstance(db, str) or Path(db).name != db or not db:
            raise LayoutError(f"{self.path}: entry of {pdb_chain_id} names shard {db!r}")
        return db, files

    def read(self, pdb_chain_id: str) -> dict[str, str]:
        """{basename: text} of the chain's a3m/hhr files (seek, read, UTF-8)."""
        db, files = self.files(pdb_chain_id)
        shard = self.folder / db
        out: dict[str, str] = {}
        try:
            with open(shard, "rb") as f:
                end = os.fstat(f.fileno()).st_size
                for name, offset, size in files:
                    if offset < 0 or size < 0 or offset + size > end:
                        raise LayoutError(f"{shard}: truncated: {pdb_chain_id}'s {name} needs "
                                          f"bytes {offset}..{offset + size}, the file has {end}")
                    f.seek(offset)
                    out[name] = f.read(size).decode("utf-8")
        except OSError as exc:
            raise LayoutError(f"{shard}: cannot read alignments of {pdb_chain_id} "
                              f"({exc.strerror})") from None
        except UnicodeDecodeError:
            raise LayoutError(f"{shard}: {pdb_chain_id}'s {name} is not UTF-8 text") from None
        return out


def alignments(root: str | Path, pdb_chain_id: str) -> dict[str, str]:
    """{basename: text} of one chain's alignment files (loads ``super.index``: for many
    chains keep an :class:`AlignmentIndex`)."""
    return AlignmentIndex(root).read(pdb_chain_id)
