"""Rendezvous ports on this host: chosen and held by `sciperf launch` for the job's lifetime.

Rank 0 (or torchrun's agent) binds the job's `MASTER_PORT` seconds after `sciperf launch`
chose it, once torch is imported. A check that the port is free followed by that later bind
is not atomic: two launches started together both found the default port free and both
gave it to their ranks, and one job's rank 1 could join the other job's store. So a port is
*claimed*, and the claim is held until the job has ended:

* a lock only one process on the host can hold: an abstract Unix socket named after the
  port (Linux; the kernel frees the name when the holder exits, `kill -9` included, and it
  is shared exactly as TCP ports are, per network namespace). Every `sciperf launch` takes
  it before it uses a port, so no two launches ever hand out the same one;
* a TCP socket bound to the port with SO_REUSEADDR and never listening: the rendezvous
  store (which binds with SO_REUSEADDR too, as torch's TCPStore and libuv do) still binds
  and listens there, while other programs' binds without SO_REUSEADDR fail and the
  kernel never gives the port to an outgoing connection or to another `bind(port 0)`.

What stays outside this: a program that is not `sciperf launch` listening on the port
after the claim (its rank 0 then ends in one line: "MASTER_PORT=… is in use").
"""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
from collections.abc import Iterator

from sciperf.errors import SciperfError

HOST = "127.0.0.1"
LOCK_NAME = "sciperf-rendezvous-port-{port}"  # in Linux's abstract socket namespace
ATTEMPTS = 64


def _lock(port: int) -> socket.socket | None | bool:
    """The host-wide lock of `port`: its socket, False when another process holds it,
    None where there are no abstract sockets (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lock.bind("\0" + LOCK_NAME.format(port=port))
    except OSError as exc:
        lock.close()
        if exc.errno == errno.EADDRINUSE:
            return False
        return None  # abstract names refused here: the bound socket below is the claim
    return lock


def _hold(port: int) -> socket.socket | None:
    """A socket bound to `port` (SO_REUSEADDR, not listening), or None when something
    listens there or holds it without SO_REUSEADDR."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError:
        sock.close()
        return None
    return sock


def claim(port: int) -> list[socket.socket] | None:
    """Lock and hold `port` (the sockets to close when the job has ended), or None when
    another launch or a listening program has it."""
    lock = _lock(port)
    if lock is False:
        return None
    held = _hold(port)
    if held is None:
        if isinstance(lock, socket.socket):
            lock.close()
        return None
    return [held] if lock is None else [lock, held]  # type: ignore[list-item]


def _ephemeral() -> int:
    """A port the kernel picks (one no socket is bound to at this moment)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def reserved_port(preferred: int | None = None, span: int = 1) -> Iterator[int]:
    """A base port P with P … P+span-1 claimed for this job until the block ends: the
    `preferred` one when no other launch or listener has it, else one the kernel picks.
    (`span` > 1: throughput mode, whose instance i rendezvouses at P+1+i.)"""
    candidates = [preferred] if preferred else []
    for _ in range(ATTEMPTS):
        base = candidates.pop() if candidates else _ephemeral()
        if base + span - 1 > 65535:
            continue
        held: list[socket.socket] = []
        for port in range(base, base + span):
            got = claim(port)
            if got is None:
                break
            held += got
        else:
            try:
                yield base
            finally:
                for sock in held:
                    sock.close()
            return
        for sock in held:
            sock.close()
    raise SciperfError(f"found no free port for the ranks' rendezvous on this host in "
                       f"{ATTEMPTS} tries (set MASTER_PORT=… or launcher.master_port=…)")
