"""`precision` means one arithmetic in both frameworks: fp32 is IEEE float32 on a GPU too
(PyTorch's TF32 convolutions and TensorFlow's TF32 everything are its defaults, turned
off), tf32 turns TF32 tensor cores on for matmuls and convolutions alike, only beside a GPU.
The flags are process-global and settable without a GPU, so they are checked here."""

from __future__ import annotations

import pytest

from sciperf.errors import SciperfError


@pytest.fixture
def torch_runtime():
    torch = pytest.importorskip("torch")
    from sciperf_pytorch import runtime

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield torch, runtime
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture
def tf_runtime():
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from sciperf_tensorflow import runtime

    saved = (tf.config.experimental.tensor_float_32_execution_enabled(),
             keras.mixed_precision.global_policy().name)
    yield tf, runtime
    tf.config.experimental.enable_tensor_float_32_execution(saved[0])
    keras.mixed_precision.set_global_policy(saved[1])


def _torch_tf32(torch) -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_pytorch_fp32_math_is_ieee_for_matmuls_and_convolutions(torch_runtime, precision):
    torch, runtime = torch_runtime
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    runtime.set_precision(torch.device("cuda"), precision)  # flags only: no GPU needed
    assert _torch_tf32(torch) == (False, False)


def test_pytorch_tf32_uses_tensor_cores_for_both_and_only_on_a_gpu(torch_runtime):
    torch, runtime = torch_runtime
    runtime.set_precision(torch.device("cuda"), "tf32")
    assert _torch_tf32(torch) == (True, True)
    with pytest.raises(SciperfError, match="precision=tf32 needs an NVIDIA GPU.*on the CPU"):
        runtime.set_precision(torch.device("cpu"), "tf32")
    with pytest.raises(ValueError, match="precision=fp16"):
        runtime.set_precision(torch.device("cpu"), "fp16")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_tensorflow_fp32_math_is_ieee(tf_runtime, precision):
    tf, runtime = tf_runtime
    tf.config.experimental.enable_tensor_float_32_execution(True)  # TensorFlow's default
    runtime.set_precision(precision, "/GPU:0")
    assert tf.config.experimental.tensor_float_32_execution_enabled() is False


def test_tensorflow_tf32_is_float32_variables_with_tf32_math_only_on_a_gpu(tf_runtime):
    tf, runtime = tf_runtime
    runtime.set_precision("tf32", "/GPU:0")
    assert tf.config.experimental.tensor_float_32_execution_enabled() is True
    import keras

    assert keras.mixed_precision.global_policy().name == "float32"
    with pytest.raises(SciperfError, match="precision=tf32 needs an NVIDIA GPU.*on the CPU"):
        runtime.set_precision("tf32", "/CPU:0")
