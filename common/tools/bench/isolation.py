"""A training row in a spawned process of its own, and the end of that process.

Spawned, not forked, so no framework state is inherited: the row's peak memory, allocator
and thread pools are its own. The parent decides when the row stops — SIGTERM or Ctrl-C
to the bench stops the child, and a child whose parent is gone ends rather than time on —
and a row that dies is named in one line. The row itself is :func:`.training.train_case`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError
from sciperf.tools.bench.training import train_case


def isolated_train_case(framework: str, experiment: str, precision: str, root: Path,
                        extra: list[str], shape: dict[str, int] | None = None
                        ) -> dict[str, Any]:
    """:func:`train_case` in a process of its own (spawned, not forked: no framework state
    is inherited): the row's peak memory, allocator and thread pools are its own —
    TensorFlow fixes its pools at its first op, so the mini's layout (small layers side by
    side, sciperf.threads) and the full model's could not both be timed in one process. A
    row that dies (the OOM killer on a full model) is named in one line; the rows done
    stay in the JSON."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_row, name=f"bench {framework} {experiment} {precision}",
                        args=(send, framework, experiment, precision, str(root), extra, shape,
                              os.getpid()))
    try:  # Ctrl-C from here on stops the child: between its start and the wait a
        # KeyboardInterrupt left it running, and the exit joined the whole row
        child.start()
        send.close()
        try:
            reply = json.loads(recv.recv_bytes())
        except EOFError:  # died without a word: a signal
            reply = None
        child.join()
    except BaseException:
        # SIGTERM (Terminated) or Ctrl-C while the row runs: the parent decides, the row
        # stops now (multiprocessing would join a live child at exit: the whole row ran on)
        stop_child(child)
        raise
    what = f"bench row {framework} {experiment} {precision}"
    if reply is None:
        raise SciperfError(f"{what}: its process ended with {_ended(child.exitcode)}")
    if "error" in reply:
        raise SciperfError(f"{what}: {reply['error']}")
    return reply["row"]


def stop_child(child: Any, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`: a row stuck in a kernel still ends."""
    if child.is_alive():
        child.terminate()
        child.join(grace_s)
    if child.is_alive():
        child.kill()
        child.join()


def _child_row(send: Any, framework: str, experiment: str, precision: str, root: str,
               extra: list[str], shape: dict[str, int] | None, parent: int = 0) -> None:
    """The spawned process of :func:`isolated_train_case`: one row, sent back as JSON.

    Ctrl-C reaches the whole process group: the child ignores it and the parent stops it
    (one line, not the child's KeyboardInterrupt traceback beside the parent's). A parent
    gone (killed) leaves nobody to read the row: the child ends rather than time on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent:
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    try:
        row = {"row": train_case(framework, experiment, precision, Path(root), extra, shape)}
    except SciperfError as exc:
        row = {"error": str(exc)}
    try:
        send.send_bytes(json.dumps(row).encode())
        send.close()
    except (BrokenPipeError, ConnectionResetError):  # the parent left: nobody to tell
        return


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """Ends this process once `parent` is no longer its parent (it died; the orphan was
    re-parented)."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


def _ended(code: int | None) -> str:
    """A child's exit code in words (a negative one is the signal that ended it)."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        return name + (" (out of memory? the OOM killer sends it)" if -code == 9 else "")
    return f"exit code {code}"
