"""`precision=auto`: the precision this machine trains fastest, measured, not assumed.

bf16 autocast runs about 5× fp32 on a Xeon with AMX, 2.4× on an AMD Zen 4 and 0.54× on a
Xeon without AMX (matmuls, torch 2.13, 2 threads): a fixed default is wrong on some
machine. `auto` times the workload's hot op (``Workload.hot_op``: a 3-D convolution for
CosmoFlow, a 2-D one for DeepCAM, a matmul for OC20 and OpenFold), forward and backward,
in fp32 and in bf16 through the framework's own runtime (``probe_ms``), and takes bf16
when it is at least ``MARGIN`` faster. Beside a GPU it is bf16 AMP, without a probe.

The measurement is cached per CPU model and flags, threads, framework version and op in
``$SCIPERF_CACHE_DIR`` (default ``~/.cache/sciperf``) ``/precision.json``, so later runs
and every rank of a job on one kind of node read the same choice. An explicit
``precision=fp32|tf32|bf16`` always wins (tf32: beside an NVIDIA GPU only; bf16: on a GPU or a
CPU with bf16 kernels — ``sciperf.info.bf16_kernels`` — not in 25×-slower emulation).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sciperf import jsondata
from sciperf.data import atomic
from sciperf.distributed import cpu_count
from sciperf.errors import SciperfError
from sciperf.info import machine

MARGIN = 1.1  # bf16 must beat fp32 by 10%: autocast's casts cost accuracy budget too
AUTO = "auto"


@dataclass(frozen=True)
class Choice:
    """The precision a run trains in and why (summary.json's ``precision_choice``)."""

    asked: str
    precision: str
    reason: str
    probe_ms: dict[str, float] | None = None  # op time per precision, when measured
    cached: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_file() -> Path:
    """Where measured probes are kept."""
    root = os.environ.get("SCIPERF_CACHE_DIR") or Path.home() / ".cache" / "sciperf"
    return Path(root) / "precision.json"


def cache_key(machine: dict[str, Any], framework: dict[str, str], op: str,
              threads: int) -> str:
    """One entry per CPU model and bf16 flags, threads, framework version and op."""
    flags = ",".join(f for f in ("amx_bf16", "avx512_bf16") if machine.get(f))
    versions = " ".join(f"{k} {v}" for k, v in sorted(framework.items())
                        if k not in ("framework", "device"))
    return f"{machine.get('cpu', '?')} [{flags or 'no bf16 units'}] x{threads} | {versions} | {op}"


def emulated_bf16(machine: dict[str, Any]) -> str | None:
    """Why bf16 would be emulated on this CPU (``sciperf.info.bf16_kernels``), or None:
    the one reason `precision=bf16` and the bench's bf16 rows are refused or left out."""
    if machine.get("bf16_kernels", True):
        return None
    return (f"this CPU ({machine.get('cpu', 'unknown')}) has no bf16 kernels (no AVX-512, AMX "
            "or AVX-NE-CONVERT): bf16 would be emulated, about 25× slower than fp32")


def require_gpu_for_tf32(precision: str, on_gpu: bool) -> None:
    """TF32 is an NVIDIA tensor-core format: `precision=tf32` off a GPU ends in one line
    (the driver asks before anything is written; each runtime again when used alone)."""
    if precision == "tf32" and not on_gpu:
        raise SciperfError("precision=tf32 needs an NVIDIA GPU (TF32 tensor cores); this run "
                           "is on the CPU: use fp32 or bf16")


def _read(path: Path) -> dict[str, Any]:
    """The cache, or empty when missing or unreadable (it is only a cache: re-measured)."""
    try:
        data = jsondata.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    """Atomically, or not at all (a read-only home or a full disk costs a re-measure next
    time). Each writer's temporary has a name of its own (every node of a job may measure
    and write the shared cache at once), and a failed write removes it."""
    part: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                         suffix=".part") as tmp:
            part = Path(tmp.name)
            json.dump(data, tmp, indent=1)
        part.replace(path)
    except OSError:
        if part is not None:
            with contextlib.suppress(OSError):
                atomic.remove(part)


def _writable(path: Path) -> bool:
    """Whether a file can be made beside the cache file (tried, not guessed from modes:
    root passes every mode check, a read-only mount or a file in the way does not)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            return True
    except OSError:
        return False


def _measured(entry: Any) -> dict[str, float] | None:
    """A cache entry's {fp32, bf16} times, or None when it is not one."""
    if not isinstance(entry, dict):
        return None
    try:
        times = {p: float(entry[p]) for p in ("fp32", "bf16")}
    except (KeyError, TypeError, ValueError):
        return None
    return times if all(t > 0 for t in times.values()) else None


def choose(asked: str, op: str, runtime: Any, framework: dict[str, str],
           machine: dict[str, Any], threads: int, wait_s: float = 0.0) -> Choice:
    """The run's precision: `asked` unless it is ``auto``; then bf16 on a GPU, else the
    faster of the two on this CPU by ``runtime.probe_ms(op, precision)`` (cached).

    `wait_s`: how long to wait for another process to cache the measurement first (a
    node's other ranks wait for its first: one probe on an idle node, one choice)."""
    device = framework.get("device", "cpu")
    require_gpu_for_tf32(asked, device != "cpu")
    if asked == "bf16" and device == "cpu" and (why := emulated_bf16(machine)):
        raise SciperfError(f"precision=bf16: {why} — use precision=fp32 or precision=auto")
    if asked != AUTO:
        return Choice(asked, asked, f"precision={asked} asked")
    if device != "cpu":
        return Choice(asked, "bf16", f"{device}: bf16 AMP on the GPU")
    path, key = cache_file(), cache_key(machine, framework, op, threads)
    times = _measured(_read(path).get(key))
    if not _writable(path):  # nobody can leave an entry there: measure without waiting
        wait_s = 0.0
    deadline = time.monotonic() + wait_s
    while times is None and time.monotonic() < deadline:
        time.sleep(0.1)
        times = _measured(_read(path).get(key))
    cached = times is not None
    if times is None:
        times = {p: round(float(runtime.probe_ms(op, p)), 3) for p in ("fp32", "bf16")}
        _write(path, {**_read(path), key: times})
    ratio = times["fp32"] / times["bf16"]
    precision = "bf16" if ratio >= MARGIN else "fp32"
    reason = (f"{op} forward+backward {times['bf16']:.1f} ms in bf16, {times['fp32']:.1f} ms "
              f"in fp32 on {machine.get('cpu', 'this CPU')} ({ratio:.2f}×; bf16 from "
              f"{MARGIN}×){', cached in ' + str(path) if cached else ''}")
    return Choice(asked, precision, reason, times, cached)


def on_this_machine(asked: str, op: str, runtime: Any, wait_s: float = 0.0) -> Choice:
    """:func:`choose` for this process: its framework's versions and device, this
    machine's CPU, the cores of its allocation. The framework's threads and device are set
    up first by the caller (the probe runs as training will)."""
    return choose(asked, op, runtime, runtime.versions(), machine(), cpu_count(), wait_s)


def concrete(cfg: Any, runtime: Any, op: str) -> Any:
    """`cfg` with ``precision=auto`` replaced by the choice (a no-op otherwise): what a
    backend set up outside ``sciperf train`` (bench, tests) trains in."""
    if cfg.precision != AUTO:
        return cfg
    return OmegaConf.merge(cfg, {"precision": on_this_machine(AUTO, op, runtime).precision})
