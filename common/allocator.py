"""Host memory allocator: keep freed memory for the next training step (glibc malloc).

Why: glibc serves every allocation above its mmap threshold (≤ 32 MiB) with a fresh
``mmap`` and returns it with ``munmap`` on free. A CPU training step allocates and frees
activations of hundreds of MB (full CosmoFlow: 1 GiB for the first block's output alone,
batch 4), so each step the kernel zero-fills every page again on first touch — page
faults inside the convolutions. Measured on a 2-vCPU AMD EPYC (Zen 5), torch 2.13, fp32,
full CosmoFlow, batch 4, side by side: 2.85 s a step with glibc's defaults, 1.84 s with
the heap kept (`reuse`); the first convolution alone 301 → 124 ms, what TensorFlow's
oneDNN takes for the same kernel. The cost is a resident size that stays at the step's
high-water mark (4.9 vs 3.2 GB there) instead of returning between steps.

`reuse` (``framework.malloc``, the default) sets, for the running process:

* ``M_MMAP_MAX = 0``: large blocks come from the heap, not fresh mappings;
* ``M_TRIM_THRESHOLD = -1``: freed heap memory is never handed back to the kernel;
* ``M_ARENA_MAX = 1``: every thread allocates from that one heap. Otherwise each thread
  gets an arena of 64 MiB heaps, a block larger than a heap is mapped anyway, and a heap
  left empty is unmapped: the loader's threads, started afresh each epoch, faulted their
  samples and batches in again (full CosmoFlow, batch 4: 1,100–2,200 faults of 2 MiB
  pages in each epoch's first step, which took 1.86–2.11 s against 1.81–1.89 s for the
  others; with one arena none, and the first step 1.85–1.89 s). The allocations that
  share the arena's lock are few and large (tensors, samples, batches).

All are ``mallopt`` calls, so nothing is preloaded and no process is re-executed. `system`
leaves glibc as it is. A C library other than glibc (musl) has no ``mallopt``: `reuse`
says so and changes nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

MODES = ("reuse", "system")
M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_MAX = -4
M_ARENA_MAX = -8


@cache
def _libc() -> ctypes.CDLL | None:
    """glibc, or None where the C library has no mallopt."""
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name or "libc.so.6")
        lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.mallopt.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return lib


_applied: list[str] = []


def configure(mode: str) -> str:
    """Apply `mode` (one of MODES) to this process; returns what is in force, for the run's
    summary. Idempotent: `reuse` stays once set (mallopt has no undo that would give back
    memory already kept), so a later `system` in the same process says so."""
    if mode not in MODES:
        raise ValueError(f"framework.malloc={mode} is not one of {', '.join(MODES)}")
    if mode == "system":
        return "reuse (set earlier in this process)" if _applied else "system"
    if _applied:
        return _applied[0]
    lib = _libc()
    if lib is None:
        return "system (no glibc mallopt here)"
    ok = all(lib.mallopt(option, value) == 1 for option, value in
             ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1), (M_ARENA_MAX, 1)))
    _applied.append("reuse" if ok else "system (mallopt refused)")
    return _applied[0]
