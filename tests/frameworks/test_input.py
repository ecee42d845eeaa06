"""The PyTorch adapter over the common loader: on a CUDA device fixed-size batches are
stacked by the loader's thread straight into page-locked memory (one copy, off the
training thread); elsewhere the plain stack stays."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from sciperf.data.loader import stack  # noqa: E402
from sciperf_pytorch import input as native  # noqa: E402


def _reader(path):
    return np.full((2, 3, 4), int(path), np.int16), np.array([float(path)], np.float32)


@pytest.mark.parametrize(("pin", "collate", "expected"), [
    (False, None, stack), (True, None, native.pinned_stack),
    (True, "own", "own"), (False, "own", "own")])
def test_only_fixed_size_batches_on_a_gpu_are_pinned(pin, collate, expected) -> None:
    own = lambda samples: samples  # noqa: E731 - a workload's own collate (graphs)
    loader = native.make_loader(["1", "2"], _reader, 2, 0, False, 2, workers=3, pin=pin,
                                collate=own if collate == "own" else None)
    assert loader.collate is (own if expected == "own" else expected)
    assert loader.workers == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pinned_batches_reach_the_gpu_unchanged() -> None:
    samples = [_reader(str(i)) for i in range(4)]
    x, y = native.pinned_stack(samples)
    assert x.is_pinned() and x.dtype == torch.int16
    np.testing.assert_array_equal(x.numpy(), np.stack([s[0] for s in samples]))
    xd, yd = native.to_device(x, y, torch.device("cuda"))
    np.testing.assert_array_equal(xd.permute(0, 2, 3, 1).cpu().numpy(),
                                  np.stack([s[0] for s in samples]))
    np.testing.assert_array_equal(yd.cpu().numpy(), y)
