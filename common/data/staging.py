"""Data staging: copy this rank's share of a dataset to node-local storage before training.

docs/architecture.md, "Staging": each node copies a disjoint 1/N_nodes of the files
(strided over the sorted list) and the ranks of a node shard those local files by local
rank. The share a rank copies is exactly the share it later reads
(``shard(shard(files, node, nodes), local_rank, local_size)``), so staging needs no
barrier: no rank ever reads a file another rank writes.

Copies are atomic (temporary name + rename), verified (size always; CRC-32 of the bytes
read from the source against a re-read of the copy with ``data.stage_verify=checksum``)
and carry the source's mtime, so a rerun skips files that are already staged and intact
(same size and mtime — rsync's quick check — and, in checksum mode, the same CRC-32).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sciperf.data import atomic
from sciperf.data.sharding import shard
from sciperf.errors import SciperfError
from sciperf.progress import Progress

VERIFY_MODES = ("size", "checksum")
CHUNK = 8 << 20  # 8 MiB: large sequential reads on parallel file systems


@dataclass
class StageReport:
    """What one rank's staging did (summary.json, MLLOG staging_stop metadata)."""

    files: int = 0
    copied: int = 0
    skipped: int = 0
    bytes_copied: int = 0
    bytes_total: int = 0
    seconds: float = 0.0

    @property
    def mb_per_s(self) -> float:
        """Copy bandwidth of this rank (MB/s of bytes actually copied)."""
        return self.bytes_copied / 1e6 / max(self.seconds, 1e-9)

    def as_dict(self) -> dict[str, float | int]:
        return {"files": self.files, "copied": self.copied, "skipped": self.skipped,
                "bytes_copied": self.bytes_copied, "bytes_total": self.bytes_total,
                "seconds": round(self.seconds, 3), "mb_per_s": round(self.mb_per_s, 1)}


def stage_root(stage_dir: str | Path, data_dir: str | Path, benchmark: str,
               instance: int | None = None) -> Path:
    """Where a dataset lands under `stage_dir`: one directory per source dataset.

    Keyed by the source's absolute path, so two datasets never share a staging area and a
    rerun finds its earlier copy; concurrent instances sharing a node get their own area.
    """
    src = Path(data_dir).resolve()
    dst = Path(stage_dir).resolve()
    if dst == src or src in dst.parents or dst in src.parents:
        raise SciperfError(f"data.stage_dir={stage_dir} overlaps data.dir={data_dir}; "
                           "stage to a separate node-local directory")
    key = hashlib.sha1(str(src).encode()).hexdigest()[:10]
    root = dst / f"sciperf-{benchmark}-{key}"
    return root / f"instance-{instance}" if instance is not None else root


def rank_share(files: Sequence[Path], node: int, nodes: int, local_rank: int,
               local_size: int) -> list[Path]:
    """Files a rank stages and reads: the node's strided share, then the local rank's."""
    return shard(shard(files, node, nodes), local_rank, local_size)


def staged_path(path: Path, src_root: Path, dst_root: Path) -> Path:
    """The node-local twin of a dataset file (same path relative to the dataset root)."""
    try:
        rel = Path(path).relative_to(src_root)  # the usual case: listed under data.dir
    except ValueError:
        try:
            rel = Path(path).resolve().relative_to(Path(src_root).resolve())
        except ValueError as exc:
            raise SciperfError(f"{path} is not inside data.dir={src_root}") from exc
    return Path(dst_root) / rel


def crc32_file(path: Path) -> int:
    """CRC-32 of a file's bytes (zlib releases the GIL, so threads overlap)."""
    crc, buf = 0, bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
    return crc


def _intact(src: Path, st: os.stat_result, dst: Path, verify: str) -> bool:
    """A staged copy that a rerun may keep: same size and mtime (and CRC in checksum mode)."""
    try:
        d = dst.stat()
    except FileNotFoundError:
        return False
    if st.st_size != d.st_size or st.st_mtime_ns != d.st_mtime_ns:
        return False
    return verify != "checksum" or crc32_file(src) == crc32_file(dst)


def _copy_with_crc(src: Path, tmp: Path) -> int:
    """Stream src → tmp, returning the CRC-32 of the bytes read from the source."""
    crc, buf = 0, bytearray(CHUNK)
    view = memoryview(buf)
    with open(src, "rb", buffering=0) as fin, open(tmp, "wb") as fout:
        while n := fin.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
            fout.write(view[:n])
    return crc


# what only a write is refused with: the disk (full, quota, file-size limit) or its mount
_REFUSED = frozenset({*atomic.FULL, errno.EROFS})


def copy_file(src: Path, dst: Path, verify: str, st: os.stat_result | None = None) -> int:
    """Copy one file atomically and verify it; returns the bytes copied.

    `dst`'s directory must exist. A failed verification raises naming the file; the final
    name only ever holds a complete, verified copy (a killed job leaves at most a hidden
    temporary file). The copy gets the source's mtime, which the rerun's quick check reads.
    A write the disk refuses (full, quota, file-size limit, read-only) is one line naming
    the copy in :mod:`sciperf.data.atomic`'s words; any other error names both files (the
    kernel's copy does not say which side failed).
    """
    tmp = dst.with_name(f".{dst.name}.staging-{os.getpid()}")
    try:
        st = st or src.stat()
        if verify == "checksum":
            want = _copy_with_crc(src, tmp)
            got = crc32_file(tmp)
            if got != want:
                raise SciperfError(f"staging {src}: checksum mismatch in the copy {dst} "
                                   f"(crc32 {got:08x} != {want:08x})")
        else:
            shutil.copyfile(src, tmp)  # sendfile / copy_file_range: the kernel copies
        copied = tmp.stat().st_size
        if copied != st.st_size:
            raise SciperfError(f"staging {src}: copy {dst} has {copied} bytes, "
                               f"source {st.st_size}")
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, dst)
    except OSError as exc:
        if exc.errno in _REFUSED:
            raise SciperfError(f"{dst}: cannot be written ({atomic.why(exc)})") from None
        raise SciperfError(f"staging {src} → {dst} failed: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return st.st_size


def _make_dirs(targets: Sequence[Path]) -> None:
    """Create every destination directory once, up front (not once per file)."""
    for folder in sorted({t.parent for t in targets}):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SciperfError(f"staging: cannot create {folder}: {exc.strerror or exc}") from exc


def stage_files(files: Sequence[Path], src_root: Path, dst_root: Path, *, workers: int = 4,
                verify: str = "size", progress: bool = True) -> StageReport:
    """Copy `files` (paths under src_root) to the same relative paths under dst_root.

    Runs `workers` copies at once (I/O bound: threads overlap reads and writes), shows a
    progress line, and skips files already staged and intact.
    """
    if verify not in VERIFY_MODES:
        raise SciperfError(f"data.stage_verify={verify} is not one of {', '.join(VERIFY_MODES)}")
    if workers < 1:
        raise SciperfError(f"data.stage_workers={workers} must be at least 1")
    report = StageReport(files=len(files))
    bar = Progress(len(files), "staging", unit="files", enabled=progress)
    start = time.perf_counter()
    targets = [staged_path(f, src_root, dst_root) for f in files]
    _make_dirs(targets)

    def one(pair: tuple[Path, Path]) -> tuple[int, bool]:
        src, dst = pair
        try:
            st = src.stat()
        except FileNotFoundError:
            raise SciperfError(f"staging: source file {src} does not exist") from None
        if _intact(src, st, dst, verify):
            return st.st_size, False
        return copy_file(src, dst, verify, st), True

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sciperf-stage") as pool:
        for size, copied in pool.map(one, zip(files, targets, strict=True)):
            report.bytes_total += size
            if copied:
                report.copied += 1
                report.bytes_copied += size
            else:
                report.skipped += 1
            bar.update()
    report.seconds = time.perf_counter() - start
    return report
