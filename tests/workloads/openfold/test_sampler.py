"""OpenFold sampler: the reference's training draws, recycling stream and validation order.

Evidence, strongest first: the draws equal torch 2.13's CPU ``multinomial``/``randint``
(skipped without torch) for uniform, skewed, tiny and 600k-entry weights; and the pairs,
recycling counts and validation orders equal values recorded from the reference's own
classes (mlcommons/hpc @2c627d45 ``openfold/samplers.py`` ``InitialTrainingSampler``,
``ValidationSampler``, ``openfold/dataloaders.py`` ``_random_num_recycling_iters_generator``
— checked through ``TrainBatchProperties`` for the first 200 steps — run in /tmp with torch
2.13 CPU; its dataset replaced by a stub giving float64 weights of 1,000 chains, lengths
``30 + 37i mod 900`` and cluster sizes ``1 + 13i mod 7``, through the reference's weight
formula). Beyond that: prefix stability, rank striding, determinism, speed, errors.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import sampler
from sciperf.workloads.openfold.features import (
    TorchCompatibleStream,
    eval_seed,
    seed_from_string,
)
from sciperf.workloads.openfold.layout import sampler_weight

RUN_SEED = 1234567890  # the reference launch's --seed


def reference_weights() -> np.ndarray:
    """The weights the reference sampler was run on (see the module docstring)."""
    return np.array([sampler_weight(30 + (i * 37) % 900, 1 + (i * 13) % 7)
                     for i in range(1000)], np.float64)


def realistic_weights(count: int = 600_000) -> np.ndarray:
    """A training set's worth of weights: lengths 20..2000 (log-normal), cluster sizes
    heavy-tailed; the weight formula vectorised."""
    rng = np.random.default_rng(11)
    lengths = np.clip(rng.lognormal(5.5, 0.7, count).astype(np.int64), 20, 2000)
    clusters = rng.zipf(1.8, count).clip(1, 5000)
    return np.clip(lengths, 256, 512) / 512 * (1 / np.sqrt(clusters))


def digest(pairs: list) -> str:
    """The reference recorder's hash of a list of pairs (JSON of a list of lists)."""
    return hashlib.sha256(json.dumps([list(p) for p in pairs]).encode()).hexdigest()


# (seed, world, local batch, num_train_iters, rank) -> (first three pairs, sha256 of all)
REFERENCE_TRAIN = {
    (1234567890, 1, 3, 10, 0): (
        [(525, 563164252705356793), (643, 2861053800243243862), (298, 8397367310059212200)],
        "1382344b3d509d994e943b19fef109035f733e2f0777495eef57dacdd4bc67c6"),
    (1234567890, 4, 2, 10, 0): (
        [(525, 563164252705356793), (712, 7626487837231518551), (649, 6761230758823933060)],
        "42c8a767e810a4398e0240f910d7e91bf56d026e240764674d00e27feefb7ac3"),
    (1234567890, 4, 2, 10, 3): (
        [(45, 7737588340711341061), (462, 9200523998661057370), (907, 9186492141530749141)],
        "bbfa939192848694fb1284fd1b7b7235345e8b736b7e5ae37bb4ff8caf0f6163"),
    (1234567890, 8, 1, 20, 7): (
        [(462, 9200523998661057370), (853, 1070538442496882974), (308, 8847823626130110667)],
        "b590ee4341ef468d1960843f0898a6a547303aaa7f807ae9c3fa6d15d68ce47f"),
    (7, 4, 2, 10, 3): (
        [(61, 2270341665960563937), (391, 3534333382685746066), (258, 8162817476243371351)],
        "69f398f606f91d9d3069d77481bdac247e0f5abafa8ef030cf872c0288d2385d"),
    (7, 8, 1, 20, 4): (
        [(732, 4140897360806487209), (914, 6574464571722268296), (187, 5108743084067001162)],
        "590416660171d84d9c70cd69f2ea2f3573d182a494178b095c6890e0f130e471"),
}
# seed -> (first 24 recycling counts, sha256 of the first 4,000), num_recycling_iters 3
REFERENCE_RECYCLING = {
    1234567890: ([1, 3, 2, 0, 2, 0, 3, 1, 0, 3, 1, 2, 2, 1, 3, 0, 3, 1, 0, 2, 2, 0, 1, 3],
                 "5e61f298e00916dc46816cba430bf061288ae9f2e590e638777722a7005864eb"),
    7: ([0, 1, 3, 2, 2, 0, 3, 1, 2, 3, 1, 0, 2, 1, 0, 3, 0, 2, 3, 1, 2, 0, 1, 3],
        "ab68c96b21ad2acc8f0a9b18e4e9205dc3fe1ed81863c770e6649f08ef0d8480"),
}
REFERENCE_RECYCLING_ONE = {1234567890: [1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1],
                           7: [0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0]}
VALIDATION_IDS = [f"{i}ab{i % 10}_{chr(65 + i % 3)}" for i in range(7)]
# world -> per-rank indices of the reference's ValidationSampler on VALIDATION_IDS
REFERENCE_VALIDATION = {
    1: [[0, 1, 2, 3, 4, 5, 6]],
    3: [[0, 3, 6], [1, 4, 0], [2, 5, 1]],
    4: [[0, 4], [1, 5], [2, 6], [3, 0]],
    8: [[0], [1], [2], [3], [4], [5], [6], [0]],
    16: [[0], [1], [2], [3], [4], [5], [6], [0], [1], [2], [3], [4], [5], [6], [0], [1]],
}
REFERENCE_VALIDATION_SEEDS = [1892410738109121450, 6815651171159885404, 4860960323339258219,
                              18206160860270075610, 3177685080850735800,
                              17891640667460683181, 15613215948375123981]


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def torch_draws(torch, weights: np.ndarray, global_seed: int, count: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The reference sampler's two torch calls, before striding."""
    seed = seed_from_string(f"initial_training_sampler_{global_seed}")
    index_gen, seed_gen = torch.Generator(), torch.Generator()
    index_gen.manual_seed(seed)
    seed_gen.manual_seed(seed)
    indices = torch.multinomial(torch.from_numpy(weights), count, replacement=True,
                                generator=index_gen)
    seeds = torch.randint(0, 2**63 - 1, [count], generator=seed_gen)
    return indices.numpy(), seeds.numpy()


@functools.cache
def weight_cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "uniform": np.ones(10),
        "skewed": rng.random(1000) ** 12,
        "tiny": np.array([1e-300, 1.0, 0.0, 5e-324, 0.0, 1e-300]),
        "one": np.array([0.25]),
        "zeros_around": np.array([0.0, 0.0, 3.0, 0.0, 1e-9, 0.0]),
        "float32": (rng.random(5000) ** 4).astype(np.float32),
        "reference": reference_weights(),
        "realistic_600k": realistic_weights(),
    }


@pytest.mark.parametrize("name", list(weight_cases()))
def test_draws_equal_torch(torch, name: str) -> None:
    """Indices and seeds equal torch's for many weights, seeds and counts (from 2: one
    sample is torch's argmax fast path, see test_prefix_stability)."""
    weights = weight_cases()[name]
    for global_seed in (RUN_SEED, 0, 2**40 + 17):
        for count in (2, 3, 129, 10_000):
            mine = sampler.training_draws(weights, global_seed, count)
            theirs = torch_draws(torch, weights, global_seed, count)
            np.testing.assert_array_equal(mine[0], theirs[0], err_msg=f"{name} {count}")
            np.testing.assert_array_equal(mine[1], theirs[1])
            assert mine[0].dtype == mine[1].dtype == np.int64


def test_draws_on_category_boundaries_equal_torch(torch) -> None:
    """Weights that put a category boundary within a few ulps of the uniform each draw
    uses (known in advance from the stream): the normalisation's rounding and the search's
    tie rule (left-most cumulative >= u) decide, and agree with torch's."""
    words = TorchCompatibleStream(seed_from_string(f"initial_training_sampler_{RUN_SEED}")
                                  ).random64(40)
    uniforms = (words & np.uint64(2**53 - 1)).astype(np.float64) / 2.0**53
    for k in range(0, 40, 3):
        for offset in range(-4, 5):
            x = uniforms[k]
            for _ in range(abs(offset)):
                x = np.nextafter(x, np.sign(offset) * np.inf)
            for weights in (np.array([x, 1 - x, 0.0]), np.array([x / 3, x / 3, x / 3, 1 - x]),
                            np.array([x * 7, (1 - x) * 7])):
                mine = sampler.training_draws(weights, RUN_SEED, k + 2)[0]
                theirs = torch_draws(torch, weights, RUN_SEED, k + 2)[0]
                np.testing.assert_array_equal(mine, theirs, err_msg=f"{k} {offset} {weights}")


def test_prefix_stability(torch) -> None:
    """Our draws are prefix-stable for every count; torch's for counts >= 2, and its single
    draw is a different one (the fast path), which the reference never uses."""
    weights = reference_weights()
    full = sampler.training_draws(weights, RUN_SEED, 500)
    for k in (1, 2, 17, 499):
        part = sampler.training_draws(weights, RUN_SEED, k)
        np.testing.assert_array_equal(part[0], full[0][:k])
        np.testing.assert_array_equal(part[1], full[1][:k])
    torch_full = torch_draws(torch, weights, RUN_SEED, 500)[0]
    for k in (2, 17, 499):
        np.testing.assert_array_equal(torch_draws(torch, weights, RUN_SEED, k)[0],
                                      torch_full[:k])
    assert torch_draws(torch, weights, RUN_SEED, 1)[0][0] != full[0][0]
    assert sampler.training_draws(weights, RUN_SEED, 0)[0].shape == (0,)


@pytest.mark.parametrize("case", list(REFERENCE_TRAIN))
def test_rank_epochs_equal_reference_sampler(case: tuple[int, ...]) -> None:
    """A rank's cycles, concatenated, are the reference sampler's pairs for that rank."""
    global_seed, world, local_batch, iters, rank = case
    steps = 5 if iters == 10 else 4  # cycles of 5 or 4 steps: 2 or 5 cycles
    pairs = [pair for epoch in range(iters // steps)
             for pair in sampler.rank_epoch_draws(reference_weights(), global_seed, epoch,
                                                  rank, world, local_batch, steps)]
    first, sha = REFERENCE_TRAIN[case]
    assert pairs[:3] == first
    assert len(pairs) == iters * local_batch
    assert digest(pairs) == sha


def test_cycle_slice_then_stride_equals_stride_then_slice() -> None:
    """Rank striding: slicing the global stream by cycle then striding by rank equals the
    reference's striding of the whole stream, cut into the rank's cycles; every global
    draw of a cycle goes to exactly one rank."""
    weights = reference_weights()
    world, local_batch, steps, epochs = 3, 2, 4, 3
    cycle = world * local_batch * steps
    indices, seeds = sampler.training_draws(weights, 99, epochs * cycle)
    stream = list(zip(indices.tolist(), seeds.tolist(), strict=True))
    for rank in range(world):
        share = stream[rank::world]
        for epoch in range(epochs):
            mine = sampler.rank_epoch_draws(weights, 99, epoch, rank, world, local_batch, steps)
            assert mine == share[epoch * steps * local_batch:(epoch + 1) * steps * local_batch]
    epoch_1 = [sampler.rank_epoch_draws(weights, 99, 1, r, world, local_batch, steps)
               for r in range(world)]
    assert sorted(p for shard in epoch_1 for p in shard) == sorted(stream[cycle:2 * cycle])


def test_determinism() -> None:
    """Same arguments, same draws; another seed or epoch, other draws."""
    weights = realistic_weights(20_000)
    one = sampler.rank_epoch_draws(weights, RUN_SEED, 2, 1, 4, 2, 40)
    assert one == sampler.rank_epoch_draws(weights.copy(), RUN_SEED, 2, 1, 4, 2, 40)
    assert one != sampler.rank_epoch_draws(weights, RUN_SEED + 1, 2, 1, 4, 2, 40)
    assert one != sampler.rank_epoch_draws(weights, RUN_SEED, 3, 1, 4, 2, 40)
    assert len(one) == 80 and all(0 <= i < 20_000 and 0 <= s < 2**63 - 1 for i, s in one)


def test_draw_frequencies_follow_weights() -> None:
    """Without torch too: a chain is drawn in proportion to its weight; zero-weight chains
    never."""
    weights = np.array([0.0, 1.0, 2.0, 0.0, 5.0, 2.0])
    indices, _ = sampler.training_draws(weights, RUN_SEED, 20_000)
    counts = np.bincount(indices, minlength=6) / 20_000
    np.testing.assert_allclose(counts, weights / weights.sum(), atol=0.01)
    assert counts[0] == counts[3] == 0


def test_speed() -> None:
    """600k weights × 10k draws in well under a second (the best of three)."""
    weights = realistic_weights()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        sampler.training_draws(weights, RUN_SEED, 10_000)
        best = min(best, time.perf_counter() - start)
    assert best < 0.5, f"{best:.3f} s"


@pytest.mark.parametrize("seed", list(REFERENCE_RECYCLING))
def test_recycling_equals_reference(seed: int) -> None:
    """The reference dataloader's recycling counts, 4,000 steps; shuffled blocks."""
    first, sha = REFERENCE_RECYCLING[seed]
    values = sampler.recycling_iterations(seed, 4000)
    assert values.dtype == np.int64 and values[:24].tolist() == first
    assert hashlib.sha256(json.dumps(values.tolist()).encode()).hexdigest() == sha
    assert (np.sort(values.reshape(-1, 4), axis=1) == np.arange(4)).all()
    np.testing.assert_array_equal(sampler.recycling_iterations(seed, 37), values[:37])
    assert sampler.recycling_iterations(seed, 12, num_recycling_iters=1).tolist() == \
        REFERENCE_RECYCLING_ONE[seed]
    assert sampler.recycling_iterations(seed, 5, num_recycling_iters=0).tolist() == [0] * 5


@pytest.mark.parametrize("world", list(REFERENCE_VALIDATION))
def test_validation_order_equals_reference(world: int) -> None:
    """The reference's per-rank indices (padding by repetition) and seeds."""
    for rank, indices in enumerate(REFERENCE_VALIDATION[world]):
        pairs = sampler.validation_order(VALIDATION_IDS, rank, world)
        assert [i for i, _ in pairs] == indices
        assert [s for _, s in pairs] == [REFERENCE_VALIDATION_SEEDS[i] for i in indices]
    assert [eval_seed(c) for c in VALIDATION_IDS] == REFERENCE_VALIDATION_SEEDS


@pytest.mark.parametrize(("count", "world"), [(7, 3), (180, 128), (180, 7), (5, 16), (4, 4)])
def test_validation_gathering_sees_each_chain_once(count: int, world: int) -> None:
    """The reference's gathering reads chain v at position v // world of rank v % world:
    that is chain v in the padded order, so its mean equals the mean over unpadded strided
    shards, each chain once."""
    ids = [f"c{i}" for i in range(count)]
    orders = [sampler.validation_order(ids, rank, world) for rank in range(world)]
    assert len({len(order) for order in orders}) == 1
    assert all(orders[v % world][v // world][0] == v for v in range(count))
    lddt = np.random.default_rng(count).random(count).astype(np.float32)
    per_rank = [[float(lddt[i]) for i, _ in order] for order in orders]  # padded repeats too
    gathered = [per_rank[v % world][v // world] for v in range(count)]
    assert gathered == lddt.tolist()  # every chain once, its own value, repeats dropped
    shards = [list(range(count))[rank::world] for rank in range(world)]
    assert sorted(i for shard in shards for i in shard) == list(range(count))
    assert sorted(float(lddt[i]) for shard in shards for i in shard) == sorted(gathered)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: sampler.training_draws(np.array([1.0, -1.0]), 1, 2),
     "sampler weight 1 is -1.0, weights must be finite and >= 0"),
    (lambda: sampler.training_draws(np.array([1.0, np.nan]), 1, 2), "sampler weight 1 is nan"),
    (lambda: sampler.training_draws(np.zeros(3), 1, 2), "sampler weights sum to 0"),
    (lambda: sampler.training_draws(np.ones((2, 2)), 1, 2),
     "sampler weights must be one vector of 1 to 16777216 entries, got shape (2, 2)"),
    (lambda: sampler.training_draws(np.ones(3, np.int64), 1, 2),
     "sampler weights must be float64 or float32, got int64"),
    (lambda: sampler.training_draws(np.ones(3), 1, -1), "sampler draws must satisfy"),
    (lambda: sampler.rank_epoch_draws(np.ones(3), 1, 0, 4, 4, 1, 1),
     "sampler rank must be in [0, 4), got 4"),
    (lambda: sampler.rank_epoch_draws(np.ones(3), 1, -1, 0, 4, 1, 1),
     "sampler epoch must be >= 0, got -1"),
    (lambda: sampler.recycling_iterations(1, -2), "recycling iterations count must be >= 0"),
    (lambda: sampler.validation_order([], 0, 1), "validation set is empty"),
    (lambda: sampler.validation_order(["a"], 1, 1), "validation rank must be in [0, 1)"),
])
def test_errors_are_one_line(call, message: str) -> None:
    with pytest.raises(SciperfError) as err:
        call()
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
