"""framework.malloc=reuse: freed memory is kept for the next step (sciperf.allocator).

The behaviour is the kernel's page-fault count: a 256 MiB buffer allocated, touched and
freed, then allocated and touched again faults every page in anew under glibc's defaults
(a fresh mapping each time: 640 faults of 4 KiB and 2 MiB pages measured) and none once
`reuse` is set — also when each buffer is a new thread's, as a loader's threads, started
afresh every epoch, allocate their samples and batches.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sciperf import allocator

PROGRAM = """
import json, resource, sys, threading
import numpy as np
from sciperf import allocator
mode = allocator.configure(sys.argv[1])
def touch():
    np.ones(2**25).sum()  # 256 MiB: malloc, touched, freed
def run(fn):
    if sys.argv[2] == "threads":  # each buffer in a thread of its own
        thread = threading.Thread(target=fn)
        thread.start()
        thread.join()
    else:
        fn()
run(touch)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
run(touch)
print(json.dumps({"mode": mode,
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""
# the buffer's pages: fewest when it is faulted in as 2 MiB huge pages (numpy advises them)
HUGE_PAGES = 2**28 // 2**21


def _second_allocation(mode: str, where: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode, where], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return json.loads(out)


@pytest.mark.skipif(allocator._libc() is None, reason="no glibc mallopt here")
@pytest.mark.parametrize("where", ["main", "threads"])
def test_reuse_keeps_freed_memory_and_system_maps_it_anew(where: str) -> None:
    """`threads`: a thread's own arena would map a block beyond its 64 MiB heaps afresh
    and unmap it on free; with one arena the threads share the kept heap."""
    system, reuse = _second_allocation("system", where), _second_allocation("reuse", where)
    assert system["mode"] == "system" and reuse["mode"] == "reuse"
    assert system["faults"] >= HUGE_PAGES, system  # every page faulted in again
    assert reuse["faults"] < HUGE_PAGES // 8, reuse  # the kept heap: no fresh pages


def test_a_mode_is_one_of_reuse_or_system() -> None:
    with pytest.raises(ValueError, match="reuse, system"):
        allocator.configure("tcmalloc")


def test_run_sets_the_allocator_before_prepare_can_start_threads(monkeypatch) -> None:
    """`sciperf run` prepares data (threads that allocate) before it trains: the mode is
    set first, since glibc fixes its arena limit when a second thread first allocates."""
    import sciperf.tools.prepare
    from sciperf import cli
    from sciperf.errors import SciperfError

    calls: list[str] = []
    monkeypatch.setattr(allocator, "configure", lambda mode: calls.append(f"malloc={mode}"))

    def prepare(cfg, force=False):
        calls.append("prepare")
        raise SciperfError("stop before training")

    monkeypatch.setattr(sciperf.tools.prepare, "prepare", prepare)
    assert cli.main(["run", "framework=pytorch", "experiment=mini"]) != 0
    assert calls == ["malloc=reuse", "prepare"]
