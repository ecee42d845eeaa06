"""Lines on stderr reach the file descriptor in one write each.

Under mpirun and srun every rank's stderr merges into one stream, cut where each write
ends. `print(text)` writes the text and its newline apart on an unbuffered stream, so a
line of another rank can land between them ("…ETA 0.0ssciperf data convert: error: …").
"""

from __future__ import annotations

import io
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
