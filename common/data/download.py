"""Files over HTTP(S) into a data directory: resumed, split over connections, retried,
checked; archives are unpacked by :mod:`sciperf.data.unpack`. Knows nothing of
workloads: `sciperf data download` (``sciperf.tools.data_download``) says what to fetch and
where.

A file ``dest`` is written as ``dest.part`` and takes its name only once it is complete,
its size is the server's and the published one, and its published checksums match — so
a file under its final name is always a whole, checked file, and a ``.part`` is never
one. A fetch split over several connections writes each byte range at its offset and
keeps ``dest.part.json``, the ranges and how much of each is on disk (saved before the
first byte is written, and only ever behind the bytes written), so a killed download
resumes every range where it stopped; without that file a ``.part`` is a prefix of the
file, written in order, and resumes from its length. A server that does not honour
``Range`` gets one stream from the first byte.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sciperf.data import atomic
from sciperf.data.byte_progress import ByteProgress
from sciperf.data.http_range import (
    TransientError,
    UnsatisfiableError,
    content_range,
    open_range,
)
from sciperf.data.part_file import Range, discard, mismatch, part_of, read_state, state_of
from sciperf.data.unpack import BadArchiveError
from sciperf.errors import SciperfError, first_line

BLOCK = 1 << 20  # bytes read from a socket (and hashed) at a time
MIN_RANGE = 1 << 20  # a file is split only into ranges at least this long
TIMEOUT_S = 60.0  # a socket that stays silent this long counts as a dropped connection
STATE_EVERY_S = 1.0  # how often a split fetch saves its ranges' progress


def mirrored(url: str, mirror: str | None) -> str:
    """`url` on a site's mirror, laid out as `wget -x` writes it: ``<mirror>/<host><path>``
    (https://host/a/b.tar → <mirror>/host/a/b.tar); `url` itself without a mirror."""
    if not mirror:
        return url
    parsed = urllib.parse.urlsplit(url)
    host = parsed.netloc.rpartition("@")[2]
    tail = parsed.path + (f"?{parsed.query}" if parsed.query else "")
    return f"{mirror.rstrip('/')}/{host}{tail}"


class _NoRangesError(Exception):
    """The server answered a range request with the whole file (status 200)."""


class _StoppedError(Exception):
    """Another connection of the same fetch failed; this one stops."""


def fetch(url: str, dest: Path, *, size: int | None = None, md5: str | None = None,
          sha256: str | None = None, connections: int = 4, retries: int = 5,
          backoff_s: float = 1.0, progress: bool = True, replace: bool = False,
          check: Callable[[Path, str], None] | None = None,
          timeout_s: float = TIMEOUT_S) -> str:
    """Download `url` to `dest` and return its SHA-256.

    `size`, `md5`, `sha256`: the published facts the file must match (None: not
    published). A ``.part`` left by an earlier try resumes. `connections` > 1 splits a
    file of known length into byte ranges fetched side by side. A dropped connection, a
    timeout or a 5xx is retried `retries` times per range, waiting `backoff_s`, then twice
    as long each time (a try that received bytes starts the count again). `check` runs
    on the complete, verified ``.part`` (its path and SHA-256) before it takes its name —
    unpacking an archive: when it raises BadArchiveError the ``.part`` is removed, any
    other error keeps it (complete: the next try fetches nothing more). An existing `dest` is
    refused unless `replace`. Failures are one line (SciperfError) naming the URL or the
    file; a ``.part`` that can resume is kept, one that is complete but wrong is removed.
    """
    if dest.exists() and not replace:
        raise SciperfError(f"{dest} exists; not replaced")
    with atomic.failing_as(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
    job = _Fetch(url, dest, size, connections, retries, backoff_s, timeout_s,
                 need_md5=md5 is not None)
    bar = ByteProgress(size, dest.name, enabled=progress)
    job.progress = bar
    part = part_of(dest)
    try:
        job.run()
    except BaseException:
        job.close()
        if part.is_file() and part.stat().st_size == 0 and not state_of(dest).exists():
            part.unlink()  # nothing to resume
        raise
    finally:
        job.close()
        bar.finish()
    digests = job.digests()
    problem = mismatch(part, job.total, size, md5, sha256, digests)
    if problem:
        discard(dest)
        raise SciperfError(f"{url}: {problem}; {part.name} is removed, run again to fetch "
                           "it anew")
    if check is not None:
        try:
            check(part, digests["sha256"])
        except BadArchiveError:
            discard(dest)
            raise
    with atomic.failing_as(dest):
        os.replace(part, dest)
    with contextlib.suppress(FileNotFoundError):
        state_of(dest).unlink()
    return digests["sha256"]


class _Fetch:
    """One file's download: its ranges, the open ``.part``, the connections' threads."""

    def __init__(self, url: str, dest: Path, size: int | None, connections: int,
                 retries: int, backoff_s: float, timeout_s: float, need_md5: bool):
        self.url, self.dest, self.part = url, dest, part_of(dest)
        self.total = size  # the file's length once known (published or announced)
        self.connections, self.retries = max(1, connections), max(0, retries)
        self.backoff_s, self.timeout_s, self.need_md5 = backoff_s, timeout_s, need_md5
        self.progress: ByteProgress | None = None
        self.ranges: list[Range] = []
        self.split = False  # several ranges, their progress kept in dest.part.json
        self.hashes: dict[str, Any] | None = None  # running digests of an in-order stream
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.saving = threading.Lock()  # one writer of dest.part.json at a time
        self.saved_at = 0.0
        self.fd = -1

    # -- the plan -----------------------------------------------------------------------

    def run(self) -> None:
        ranges = read_state(self.dest, self.total)  # before the .part is created
        stale = ranges is None and state_of(self.dest).exists()
        with atomic.failing_as(self.dest):
            self.fd = os.open(self.part, os.O_RDWR | os.O_CREAT, 0o644)
            if stale:  # ranges that do not describe this .part: its bytes are not a prefix
                os.ftruncate(self.fd, 0)
                state_of(self.dest).unlink()
        if ranges is not None:
            self.ranges, self.split = ranges, True
            self.total = ranges[-1].end
        else:
            self._plan_from_prefix()
        self._count(sum(r.done for r in self.ranges), restart=True)
        if self.split:
            try:
                self._run_split()
                return
            except _NoRangesError:
                self._to_one_stream()
        self._run_one()

    def _plan_from_prefix(self) -> None:
        """Ranges for a ``.part`` that is a prefix of the file (or empty): one in-order
        stream, or — with connections to spare and a length the server confirms — the
        rest split into ranges."""
        have = os.fstat(self.fd).st_size
        if self.total is not None and have > self.total:
            self._truncate()
            have = 0
        remaining = None if self.total is None else self.total - have
        if self.connections > 1 and (remaining is None or remaining >= 2 * MIN_RANGE):
            total = self._retrying(None, self._probe)
            if total is not None:
                self._learn_total(total)
                if have > total:
                    self._truncate()
                    have = 0
                n = min(self.connections, (total - have) // MIN_RANGE)
                if n >= 2:
                    self._split_from(have, n)
                    return
        self.ranges, self.split = [Range(0, self.total, have)], False

    def _split_from(self, have: int, n: int) -> None:
        assert self.total is not None
        step = -(-(self.total - have) // n)
        self.ranges = [Range(0, have, have)] if have else []
        self.ranges += [Range(s, min(s + step, self.total))
                        for s in range(have, self.total, step)]
        self.split = True
        self._save_state(now=True)  # before the first byte lands out of order

    def _to_one_stream(self) -> None:
        """The server ignores ranges: one stream from the first byte."""
        with contextlib.suppress(FileNotFoundError):
            state_of(self.dest).unlink()
        self._truncate()
        self.split, self.ranges = False, [Range(0, self.total, 0)]
        self.stop.clear()
        self._count(0, restart=True)

    # -- connections --------------------------------------------------------------------

    def _run_one(self) -> None:
        """One in-order stream (digests computed as the bytes arrive)."""
        rng = self.ranges[0]
        self.hashes = self._new_hashes()
        if rng.done:
            self._hash_prefix(rng.done)
        self._retrying(rng, functools.partial(self._stream, rng))

    def _run_split(self) -> None:
        """The unfinished ranges over up to `connections` threads; the first failure stops
        the others and is raised once they have saved their progress."""
        todo = [r for r in self.ranges if not r.complete]
        queue = list(reversed(todo))
        failures: list[BaseException] = []

        def worker() -> None:
            while not self.stop.is_set():
                with self.lock:
                    if not queue:
                        return
                    rng = queue.pop()
                try:
                    self._retrying(rng, functools.partial(self._stream, rng))
                except _StoppedError:
                    return
                except BaseException as exc:  # handed to the main thread
                    failures.append(exc)
                    self.stop.set()
                    return

        threads = [threading.Thread(target=worker, name=f"fetch-{i}", daemon=True)
                   for i in range(min(self.connections, len(todo)))]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except BaseException:  # Ctrl-C: the connections stop, their progress is saved
            self.stop.set()
            for thread in threads:
                thread.join()
            raise
        finally:
            self._save_state(now=True)
        if failures:
            raise failures[0]

    def _retrying(self, rng: Range | None, attempt: Callable[[], Any]) -> Any:
        """`attempt()` until it succeeds: transient failures are retried with exponential
        backoff, the count starting again after a try that moved `rng` forward."""
        tries = 0
        while True:
            before = None if rng is None else rng.pos
            try:
                return attempt()
            except TransientError as exc:
                if rng is not None and rng.pos != before:
                    tries = 0
                tries += 1
                if tries > self.retries:
                    kept = (f"; {self.part.name} is kept: run again to resume"
                            if self.part.exists() and os.path.getsize(self.part) else "")
                    raise SciperfError(f"{self.url}: {exc} (gave up after {self.retries} "
                                       f"retries){kept}") from None
                if self.stop.wait(self.backoff_s * 2 ** (tries - 1)):
                    raise _StoppedError from None

    def _probe(self) -> int | None:
        """The file's length when the server serves byte ranges (a one-byte range request
        answered 206), else None."""
        with self._open(0, 1) as resp:
            if resp.status != 206:
                return None
            first, _, total = content_range(resp, self.url)
            return total if first == 0 else None

    def _stream(self, rng: Range) -> None:
        """Fetch what `rng` lacks in one request; a short answer is a TransientError."""
        if rng.complete:
            return
        try:  # one stream asks for the rest of the file, a split one for its range
            resp = self._open(rng.pos, rng.end if self.split else None)
        except UnsatisfiableError as exc:
            self._past_the_end(rng, exc.total)
            return
        with resp:
            if resp.status == 206:
                first, last, total = content_range(resp, self.url)
                if first != rng.pos:
                    raise SciperfError(f"{self.url}: asked for bytes from {rng.pos}, the "
                                       f"server sent them from {first}")
                self._learn_total(total)
                length = last + 1 - first
            elif self.split or rng.start != 0:
                raise _NoRangesError
            else:  # the whole file: a resumed .part starts again from zero
                if rng.done:
                    self._truncate()
                    rng.done = 0
                    self.hashes = self._new_hashes()
                    self._count(0, restart=True)
                announced = resp.headers.get("Content-Length")
                length = int(announced) if announced and announced.isdigit() else None
                self._learn_total(length)
            if rng.end is None and self.total is not None:
                rng.end = self.total
            self._copy(resp, rng, length)

    def _copy(self, resp: http.client.HTTPResponse, rng: Range, length: int | None) -> None:
        """The answer's body into the ``.part`` at `rng`'s position: `length` bytes (the
        answer's; None: up to the end of the stream), at most what `rng` lacks."""
        view = memoryview(bytearray(BLOCK))
        limits = [n for n in (length, None if rng.end is None else rng.end - rng.pos)
                  if n is not None]
        want = min(limits) if limits else None
        got = 0
        while want is None or got < want:
            if self.stop.is_set():
                raise _StoppedError
            room = BLOCK if want is None else min(BLOCK, want - got)
            try:
                n = resp.readinto(view[:room])
            except (OSError, http.client.HTTPException) as exc:
                raise TransientError(f"connection lost after {rng.pos} bytes "
                                      f"({first_line(exc)})") from None
            if not n:
                break
            self._write(view[:n], rng.pos)
            if self.hashes is not None:
                for digest in self.hashes.values():
                    digest.update(view[:n])
            got += n
            with self.lock:
                rng.done += n
            self._count(n)
            if self.split:
                self._save_state()
        if rng.end is None and (want is None or got == want):  # the end of the file
            rng.end = rng.pos
            self.total = rng.end if self.total is None else self.total
        if (want is not None and got < want) or not rng.complete:
            raise TransientError(f"connection lost after {rng.pos} of "
                                  f"{self.total if self.total is not None else '?'} bytes")

    def _past_the_end(self, rng: Range, total: int | None) -> None:
        """416: a resumed stream asked from past the end — complete when the ``.part`` is
        exactly the file's length, else it starts again from zero."""
        if not self.split and total is not None and rng.pos == total:
            rng.end = self.total = total
            return
        if self.split:
            raise SciperfError(f"{self.url}: the server refuses the range from byte "
                               f"{rng.pos} (HTTP 416); is the file shorter than published?")
        self._truncate()
        rng.done = 0
        self.hashes = self._new_hashes()
        self._count(0, restart=True)
        self._stream(rng)  # from byte 0: no range asked, no 416

    def _learn_total(self, total: int | None) -> None:
        if total is None:
            return
        if self.total is not None and total != self.total:
            raise SciperfError(f"{self.url}: the server offers {total} bytes, "
                               f"{self.total} are published for {self.dest.name}")
        self.total = total
        if self.progress is not None and not self.progress.total:
            self.progress.total = total

    def _open(self, start: int, end: int | None) -> http.client.HTTPResponse:
        return open_range(self.url, start, end, self.timeout_s, self.dest)

    # -- the file -----------------------------------------------------------------------

    def _write(self, data: memoryview, offset: int) -> None:
        with atomic.failing_as(self.dest):
            while data:
                written = os.pwrite(self.fd, data, offset)
                data, offset = data[written:], offset + written

    def _truncate(self) -> None:
        with atomic.failing_as(self.dest):
            os.ftruncate(self.fd, 0)

    def _count(self, n: int, restart: bool = False) -> None:
        if self.progress is None:
            return
        if restart:
            self.progress.restart(n)
        else:
            self.progress.update(n)

    def _save_state(self, now: bool = False) -> None:
        """The ranges' progress (behind what is written: `done` grows after the write)."""
        if not self.split or (not now and time.monotonic() - self.saved_at < STATE_EVERY_S):
            return
        with self.saving:
            with self.lock:
                self.saved_at = time.monotonic()
                record = {"size": self.total,
                          "ranges": [[r.start, r.end, r.done] for r in self.ranges]}
            atomic.write_text(state_of(self.dest), json.dumps(record))

    def _new_hashes(self) -> dict[str, Any]:
        return {"sha256": hashlib.sha256()} | ({"md5": hashlib.md5()} if self.need_md5
                                                else {})

    def _hash_prefix(self, length: int) -> None:
        """The digests of the first `length` bytes already in the ``.part``."""
        assert self.hashes is not None
        with self.part.open("rb") as fh:
            while length > 0 and (block := fh.read(min(BLOCK, length))):
                for digest in self.hashes.values():
                    digest.update(block)
                length -= len(block)

    def digests(self) -> dict[str, str]:
        """Hex digests of the complete ``.part``: from the stream, or read back (a split
        fetch writes out of order)."""
        if self.hashes is None or self.split:
            self.hashes = self._new_hashes()
            self._hash_prefix(self.part.stat().st_size)
        return {name: d.hexdigest() for name, d in self.hashes.items()}

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
