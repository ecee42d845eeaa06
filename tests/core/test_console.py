"""Lines on stderr reach the file descriptor in one write each, so the lines of ranks
that share one stream (mpirun, srun) never cut into each other.

The stream here is what Python makes of a piped stderr: a text wrapper writing through to
an unbuffered raw file, here one that records each write it is handed.
"""

from __future__ import annotations

import io
import sys

import pytest

from sciperf.console import say, whole_lines
from sciperf.progress import Progress


class _Writes(io.RawIOBase):
    """A raw file keeping each write apart, as the pipe under mpirun receives them."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # noqa: ANN001 - io's buffer protocol
        self.writes.append(bytes(b))
        return len(b)


def _piped_stderr() -> tuple[io.TextIOWrapper, _Writes]:
    raw = _Writes()
    return io.TextIOWrapper(raw, encoding="utf-8", write_through=True), raw


def test_print_splits_a_line_and_whole_lines_joins_it() -> None:
    stream, raw = _piped_stderr()
    print("rank 0: 4/4 files", file=stream, flush=True)
    assert raw.writes == [b"rank 0: 4/4 files", b"\n"]  # the gap another rank falls into

    stream, raw = _piped_stderr()
    whole_lines(stream)
    print("rank 0: 4/4 files", file=stream)
    print("error: bad superblock", file=stream)
    assert raw.writes == [b"rank 0: 4/4 files\n", b"error: bad superblock\n"]


def test_say_and_the_progress_line_are_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    stream, raw = _piped_stderr()
    say("sciperf data convert: error: x.h5: bad (rank 1 of 2)", stream=stream)
    assert raw.writes == [b"sciperf data convert: error: x.h5: bad (rank 1 of 2)\n"]

    stream, raw = _piped_stderr()
    monkeypatch.setattr(sys, "stderr", stream)
    bar = Progress(total=2, label="converting", unit="files", every=0.0)
    bar.update(2)
    assert len(raw.writes) == 1 and raw.writes[0].startswith(b"converting: 2/2 files")
    assert raw.writes[0].endswith(b"\n") and raw.writes[0].count(b"\n") == 1
