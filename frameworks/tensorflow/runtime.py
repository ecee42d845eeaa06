"""Where the single-device model meets the machine: device, threads, precision, seeds.

Models stay single-device and precision-agnostic (docs/architecture.md, rule 6); this module applies
the bf16 mixed-precision policy (oneDNN on CPUs, AMP on GPUs) and determinism. TensorFlow
fixes its thread pools and visible devices when it first runs an op, so the backend calls
:func:`setup_threads` and :func:`select_device` before anything else.
"""

from __future__ import annotations

import functools
import os
import time

import keras
import tensorflow as tf

from sciperf.distributed import cpu_count
from sciperf.precision import require_gpu_for_tf32
from sciperf_tensorflow import gradients

POLICIES = {"fp32": "float32", "tf32": "float32", "bf16": "mixed_bfloat16"}


INTER_OP_POOL = True  # ops may run side by side (sciperf.threads chooses how many)


def setup_threads(threads: int, inter_op: int = 1) -> int:
    """`threads` intra-op threads (0: every core of the allocation) and `inter_op` ops at
    once (sciperf.threads.apply chooses both from the model).

    One op at a time suits large layers: letting two big ops run at once (e.g. the input-
    and weight-gradient convolutions of a layer) oversubscribes the cores — measured 5.4 →
    3.7 s per full-size fp32 CosmoFlow step (batch 4) on a 2-core CPU; small layers run
    side by side. Returns the intra-op count in effect; when TensorFlow has already started
    (e.g. a second backend in one process) its existing pools are kept.
    """
    n = threads if threads > 0 else cpu_count()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(max(inter_op, 1))
    except RuntimeError:  # runtime already initialised: pools are fixed for this process
        return tf.config.threading.get_intra_op_parallelism_threads() or n
    return n


@functools.cache  # fixed when TensorFlow loads; asked at every dilated layer's trace
def onednn() -> bool:
    """Whether TensorFlow runs its oneDNN CPU kernels in this process (TF_ENABLE_ONEDNN_OPTS,
    or TensorFlow's default for this CPU); without them some gradients (a dilated
    Conv2DBackpropFilter) have no CPU kernel and models take another way round."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # a TensorFlow without the probe: trust the switch
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") not in ("0", "false", "False")
    return bool(_pywrap_util_port.IsMklEnabled())


def select_device(local_rank: int = 0) -> str:
    """One GPU per local rank when GPUs are present, else the CPU; returns the device name."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "/CPU:0"
    gpu = gpus[local_rank % len(gpus)]
    try:
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:  # already initialised with its own visible set
        pass
    return "/GPU:0"


def seed_everything(seed: int) -> None:
    """One seed controls Python, numpy, TensorFlow and Keras (init, dropout)."""
    keras.utils.set_random_seed(seed % 2**32)


def set_precision(precision: str, device: str = "/CPU:0") -> None:
    """bf16 mixed precision (fp32 variables, bf16 compute) or plain fp32, for models built next.

    `fp32` (and bf16's float32 remainder) is IEEE arithmetic: TensorFlow's default TF32
    tensor-core math for float32 on NVIDIA GPUs is off, as in PyTorch's fp32
    (``sciperf_pytorch.runtime.set_precision``); `tf32` turns it on, on a GPU only. The
    model casts its output to float32 before the final tanh, so the loss is fp32; bias
    gradients are summed wider than bf16 (``sciperf_tensorflow.gradients``).
    """
    if precision not in POLICIES:
        raise ValueError(f"precision={precision} is not one of {', '.join(POLICIES)}")
    require_gpu_for_tf32(precision, "GPU" in device.upper())
    gradients.install()
    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
    keras.mixed_precision.set_global_policy(POLICIES[precision])


def versions() -> dict[str, str]:
    """Framework and accelerator versions for the run summary."""
    gpus = tf.config.list_physical_devices("GPU")
    info = {"framework": "tensorflow", "tensorflow": tf.__version__, "keras": keras.__version__,
            "device": "cpu"}
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        info["device"] = details.get("device_name", gpus[0].name)
    build = tf.sysconfig.get_build_info()
    if build.get("is_cuda_build") and build.get("cuda_version"):
        info["cuda"] = str(build["cuda_version"])
    return info


def probe_ms(op: str, precision: str, reps: int = 5) -> float:
    """Best-of-`reps` milliseconds of one forward + backward of `op` (``conv3d``,
    ``conv2d``, ``matmul``) on the CPU in `precision` (bf16: inputs and kernel cast, as
    Keras' mixed_bfloat16 does), channels-last: the measurement behind ``precision=auto``."""
    dtype = tf.bfloat16 if precision == "bf16" else tf.float32
    shapes = {"conv3d": ((2, 24, 24, 24, 32), (3, 3, 3, 32, 32)),
              "conv2d": ((2, 64, 96, 64), (3, 3, 64, 64)),
              "matmul": ((512, 1024), (1024, 1024))}
    if op not in shapes:
        raise ValueError(f"no probe for op {op!r} (conv3d, conv2d, matmul)")
    ops = {"conv3d": lambda a, k: tf.nn.conv3d(a, k, [1] * 5, "SAME"),
           "conv2d": lambda a, k: tf.nn.conv2d(a, k, 1, "SAME"), "matmul": tf.matmul}
    x_shape, w_shape = shapes[op]
    with tf.device("/CPU:0"):
        x, w = tf.random.normal(x_shape, seed=0), tf.random.normal(w_shape, seed=1)

        @tf.function
        def step(x: tf.Tensor, w: tf.Tensor) -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                tape.watch([x, w])
                y = ops[op](tf.cast(x, dtype), tf.cast(w, dtype))
                loss = tf.reduce_sum(tf.cast(y, tf.float32))
            return tape.gradient(loss, [x, w])

        best = float("inf")
        for i in range(reps + 2):  # the first call traces, the second warms oneDNN
            start = time.perf_counter()
            _ = [g.numpy() for g in step(x, w)]
            if i >= 2:
                best = min(best, time.perf_counter() - start)
    return best * 1e3


def device_memory_peak_mb(device: str) -> float | None:
    """Peak memory TensorFlow's allocator took on a GPU since the last reading (MiB: each
    bench row its own peak); None on a CPU, where the process's resident peak says it."""
    if "GPU" not in device.upper():
        return None
    peak = tf.config.experimental.get_memory_info(device.strip("/"))["peak"] / 2**20
    tf.config.experimental.reset_memory_stats(device.strip("/"))
    return peak


def matmul_flops(device: str, precision: str, n: int = 2048, reps: int = 10) -> float:
    """Best-of-`reps` FLOP/s of n×n matmuls in fp32 or bf16 on `device`: as many
    independent products at once as the inter-op pool runs ops (sciperf.threads), so a
    layout of small ops side by side, one core each, still measures every core's peak."""
    dtype = tf.bfloat16 if precision == "bf16" else tf.float32
    streams = max(tf.config.threading.get_inter_op_parallelism_threads(), 1)
    with tf.device(device):
        pairs = [(tf.cast(tf.random.normal((n, n)), dtype),
                  tf.cast(tf.random.normal((n, n)), dtype)) for _ in range(streams)]
        matmuls = tf.function(lambda ps: [tf.linalg.matmul(a, b) for a, b in ps])
        [c.numpy() for c in matmuls(pairs)]  # trace and warm up
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            [c.numpy() for c in matmuls(pairs)]  # .numpy() waits for the device
            best = min(best, time.perf_counter() - start)
    return streams * 2.0 * n**3 / best
