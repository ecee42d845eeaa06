"""JSON read from files that a user, a crash or a hostile hand may have garbled.

Every reader of sciperf's own JSON files (summaries, manifests, caches, a checkpoint's
records, the image's info) treats malformed JSON as a ValueError and says so in one line.
`json.loads` raises RecursionError instead for arrays or objects nested deeper than the
interpreter's recursion limit (`[[[[…`, a few KB), which escaped those readers as a
traceback: here it is a ValueError like any other malformation.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes, **options: Any) -> Any:
    """`json.loads(text, **options)`; nesting past the recursion limit is a ValueError."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("nested deeper than Python's recursion limit") from None
