"""The console's streams: lines on stderr reach the file descriptor in one write each;
stdout is let go when its reader left.

Under mpirun and srun every rank's stderr merges into one stream, cut where each write
ends. `print(text)` writes the text and its newline apart on an unbuffered stream, so a
line of another rank can land between them ("…ETA 0.0ssciperf data convert: error: …").
"""

from __future__ import annotations

import io
import os
import sys
from typing import TextIO


def say(text: str, end: str = "\n", stream: TextIO | None = None) -> None:
    """`text` and `end` in one write, flushed (a rank's line is never split by another's)."""
    out = sys.stderr if stream is None else stream
    out.write(text + end)
    out.flush()


def whole_lines(stream: TextIO | None = None) -> None:
    """Make every `print` to `stream` (stderr by default) one write per line: line
    buffering holds a line until its newline. Streams other than a text wrapper of a
    file (pytest's capture, a StringIO) are left as they are."""
    out = sys.stderr if stream is None else stream
    if isinstance(out, io.TextIOWrapper):
        out.reconfigure(line_buffering=True, write_through=False)


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush into the closed pipe does
    not print a second BrokenPipeError (`sciperf score … | head`: the reader left)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
