"""Randomness as the reference draws it: its seeds and its torch CPU streams, with numpy only.

The reference's transforms seed a fresh ``torch.Generator`` per step and call
``randperm``/``rand``/``multinomial``/``randint`` on it; :class:`TorchCompatibleStream`
reproduces those CPU streams with numpy's MT19937 (the same Mersenne Twister, same seeding,
same conversions; compared with torch 2.13 CPU, whose ``multinomial`` of one sample is
``argmax(p / Exp(1))`` on float32). Its seeds are hashes of strings (a chain's id, the
sampler's ``initial_training_sampler_<seed>``), as :func:`seed_from_string` computes them.

This module owns only the draws; which draws a sample makes, and in which order, is the
feature pipeline's (:mod:`.features`, :mod:`.msa`) and the sampler's (:mod:`.sampler`).
"""

from __future__ import annotations

import random

import numpy as np

__all__ = [
    "TRAIN_SAMPLER_SEED_FORMAT",
    "TorchCompatibleStream",
    "eval_seed",
    "seed_from_string",
    "train_sample_seeds",
]

# The strings the reference hashes into seeds (REF train.py, samplers.py).
TRAIN_SAMPLER_SEED_FORMAT = "initial_training_sampler_{seed}"


def seed_from_string(text: str) -> int:
    """The reference's string → uint64 seed: ``random.Random(text).getrandbits(64)``."""
    return random.Random(text).getrandbits(64)


def eval_seed(chain_id: str) -> int:
    """An evaluation sample's seed: the hash of its ``pdb_chain_id`` (REF ValidationSampler)."""
    return seed_from_string(chain_id)


def train_sample_seeds(global_seed: int, count: int) -> np.ndarray:
    """The first ``count`` per-sample seeds of a training run (REF InitialTrainingSampler).

    The sampler seeds a generator with the hash of ``initial_training_sampler_<seed>`` and
    draws ``randint(0, 2**63 - 1)`` once per sample of the global batch sequence; rank ``r``
    of ``w`` takes every ``w``-th (sample ``k`` of the run is entry ``k``).
    """
    stream = TorchCompatibleStream(seed_from_string(TRAIN_SAMPLER_SEED_FORMAT.format(
        seed=global_seed)))
    return stream.randint64(2**63 - 1, count)


class TorchCompatibleStream:
    """The draws of ``torch.Generator().manual_seed(seed)`` on CPU, with numpy only.

    torch's CPU generator is MT19937 initialised from the low 32 bits of the seed by the
    standard recurrence; ``random()`` is one 32-bit output, ``random64()`` two (high word
    first). On top of them (ATen's CPU kernels, checked against torch 2.13): ``rand`` keeps
    24 bits of ``random()``; ``randperm(n)`` is a Fisher–Yates pass swapping ``i`` with
    ``i + random() % (n - i)``; ``randint`` below 2**32 is ``low + random() % range`` and
    above it uses ``random64()``; ``exponential_`` is ``-log1p(-u)`` of a 53-bit ``u`` from
    ``random64()``, rounded to float32.
    """

    def __init__(self, seed: int) -> None:
        key = np.empty(624, np.uint32)
        value = seed & 0xFFFFFFFF
        key[0] = value
        for i in range(1, 624):
            value = (1812433253 * (value ^ (value >> 30)) + i) & 0xFFFFFFFF
            key[i] = value
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": 624}}

    def random(self, count: int) -> np.ndarray:
        """``count`` 32-bit outputs (uint64 array)."""
        return self._bits.random_raw(count).astype(np.uint64)

    def random64(self, count: int) -> np.ndarray:
        """``count`` 64-bit outputs (uint64 array)."""
        words = self.random(2 * count)
        return (words[0::2] << np.uint64(32)) | words[1::2]

    def rand(self, shape: tuple[int, ...]) -> np.ndarray:
        """``torch.rand(shape)``: float32 uniforms in [0, 1), row-major."""
        words = self.random(int(np.prod(shape, dtype=np.int64)))
        return ((words & np.uint64(0xFFFFFF)).astype(np.float64) / 2.0**24).astype(
            np.float32).reshape(shape)

    def randperm(self, n: int) -> np.ndarray:
        """``torch.randperm(n)`` (int64)."""
        perm = list(range(n))
        words = self.random(max(n - 1, 0)).tolist()
        for i, word in enumerate(words):
            j = i + word % (n - i)
            perm[i], perm[j] = perm[j], perm[i]
        return np.array(perm, np.int64)

    def randint(self, low: int, high: int) -> int:
        """One ``torch.randint(low, high)`` draw (``high`` exclusive, range below 2**32)."""
        return low + int(self.random(1)[0]) % (high - low)

    def randint64(self, high: int, count: int) -> np.ndarray:
        """``torch.randint(0, high, [count])`` for a range of at least 2**32 (int64)."""
        return (self.random64(count) % np.uint64(high)).astype(np.int64)

    def exponential_words(self, count: int) -> np.ndarray:
        """The raw 64-bit words of ``torch.empty(count).exponential_()`` (convert them with
        :meth:`exponential_of`, possibly only a subset: the stream advances either way)."""
        return self.random64(count)

    @staticmethod
    def exponential_of(words: np.ndarray) -> np.ndarray:
        """Exp(1) float32 values of raw 64-bit words (see :meth:`exponential_words`)."""
        uniform = (words & np.uint64((1 << 53) - 1)).astype(np.float64) / 2.0**53
        return (-np.log1p(-uniform)).astype(np.float32)
