"""Where the single-device model meets the machine: device, threads, precision, seeds.

Models stay single-device and precision-agnostic (docs/architecture.md, rule 6); this module applies
bf16 autocast (AMX on this CPU, AMP on GPUs), channels-last memory and determinism.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from sciperf.distributed import cpu_count
from sciperf.precision import require_gpu_for_tf32

INTER_OP_POOL = False  # eager ops run one after another: every core goes to each op


def setup_threads(threads: int, inter_op: int = 1) -> int:
    """Intra-op threads: the configured count, else every core of the allocation
    (`inter_op` is TensorFlow's; PyTorch's eager ops run one after another)."""
    n = threads if threads > 0 else cpu_count()
    torch.set_num_threads(n)
    return n


def select_device(local_rank: int = 0) -> torch.device:
    """One GPU per local rank when CUDA is present, else the CPU."""
    if torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    """One seed controls Python, numpy and torch (init, dropout) on every device."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_precision(device: torch.device, precision: str) -> None:
    """What fp32 arithmetic means on a GPU: IEEE for ``fp32`` and ``bf16`` (the ops autocast
    leaves in float32), TF32 tensor cores for ``tf32``, matmuls and convolutions alike.

    PyTorch's own defaults differ by op (TF32 convolutions, IEEE matmuls) and TensorFlow's
    from both (TF32 for all), so `fp32` set explicitly is one arithmetic in both
    frameworks. TF32 is an NVIDIA GPU format: refused on any other device.
    """
    if precision not in ("fp32", "tf32", "bf16"):  # `auto` is resolved before a model runs
        raise ValueError(f"precision={precision} is not one of fp32, tf32, bf16")
    require_gpu_for_tf32(precision, device.type == "cuda")
    # the flags older code reads too (mixing them with the per-op fp32_precision API makes
    # torch refuse to read either)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 mixed precision (fp32 master weights, fp32 loss) or a no-op for fp32 and tf32
    (set once by :func:`set_precision`)."""
    if precision not in ("fp32", "tf32", "bf16"):  # `auto` is resolved before a model runs
        raise ValueError(f"precision={precision} is not one of fp32, tf32, bf16")
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def versions() -> dict[str, str]:
    """Framework and accelerator versions for the run summary."""
    info = {"framework": "pytorch", "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    if torch.version.cuda:
        info["cuda"] = torch.version.cuda
    return info


def probe_ms(op: str, precision: str, reps: int = 5) -> float:
    """Best-of-`reps` milliseconds of one forward + backward of `op` (``conv3d``,
    ``conv2d``, ``matmul``) on the CPU in `precision`, channels-last as the models run:
    the measurement behind ``precision=auto`` (sciperf.precision)."""
    torch.manual_seed(0)
    device = torch.device("cpu")
    layer: nn.Module
    if op == "conv3d":
        layer = nn.Conv3d(32, 32, 3, padding=1).to(memory_format=torch.channels_last_3d)
        x = torch.randn(2, 32, 24, 24, 24).to(memory_format=torch.channels_last_3d)
    elif op == "conv2d":
        layer = nn.Conv2d(64, 64, 3, padding=1).to(memory_format=torch.channels_last)
        x = torch.randn(2, 64, 64, 96).to(memory_format=torch.channels_last)
    elif op == "matmul":
        layer, x = nn.Linear(1024, 1024), torch.randn(512, 1024)
    else:
        raise ValueError(f"no probe for op {op!r} (conv3d, conv2d, matmul)")
    x.requires_grad_(True)
    best = float("inf")
    for i in range(reps + 2):  # two warm-ups: oneDNN picks and caches its kernels
        start = time.perf_counter()
        with autocast(device, precision):
            y = layer(x)
        y.float().sum().backward()
        if i >= 2:
            best = min(best, time.perf_counter() - start)
    return best * 1e3


def device_memory_peak_mb(device: torch.device) -> float | None:
    """Peak memory the caching allocator handed out on a GPU since the last reading (MiB:
    each bench row its own peak); None on a CPU, where the process's resident peak says it."""
    if device.type != "cuda":
        return None
    peak = torch.cuda.max_memory_allocated(device) / 2**20
    torch.cuda.reset_peak_memory_stats(device)
    return peak


def matmul_flops(device: torch.device, precision: str, n: int = 0, reps: int = 10) -> float:
    """The machine's measured GEMM ceiling: best-of-`reps` FLOP/s of an n×n product in fp32
    or bf16 on `device` (n: 2048 on a CPU, 8192 on a GPU, which 2048 leaves at half its
    peak). On a CPU the better of two GEMM libraries: ``a @ b`` (MKL for fp32) and the same
    product as a 1×1 convolution (oneDNN, what the convolutions run on) — MKL takes its
    AVX2 path on AMD CPUs: 218 vs 489 GFLOP/s fp32 on a 2-vCPU Zen 5."""
    n = n or (8192 if device.type == "cuda" else 2048)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    products = [lambda: a @ b]
    if device.type == "cpu":  # (1, n, n, 1) channels-last · (n, n, 1, 1): the same GEMM
        x = a.t().reshape(1, n, n, 1).contiguous(memory_format=torch.channels_last)
        w = b.t().reshape(n, n, 1, 1).contiguous(memory_format=torch.channels_last)
        products.append(lambda: torch.nn.functional.conv2d(x, w))
    return max(2.0 * n**3 / _best_seconds(product, device, reps) for product in products)


def _best_seconds(fn: Any, device: torch.device, reps: int) -> float:
    """The shortest of `reps` timed calls of `fn` (after one untimed: kernel choice)."""
    fn()
    best = float("inf")
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best
