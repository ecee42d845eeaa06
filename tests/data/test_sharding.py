"""Which files each rank reads, and the divisibility rules checked before a run starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sciperf.data.sharding import check_divisibility, local_batch_size, shard
from sciperf.errors import SciperfError

FILES = [Path(f"univ_{i:04d}.tfrecord") for i in range(37)]  # deliberately not a multiple


@pytest.mark.parametrize("world", range(1, 9))
def test_shards_are_disjoint_complete_strided_balanced(world: int) -> None:
    shards = [shard(FILES, rank, world) for rank in range(world)]
    flat = [p for s in shards for p in s]
    assert len(flat) == len(FILES)                 # complete, nothing twice …
    assert set(flat) == set(FILES)
    for a in range(world):                         # … and pairwise disjoint
        for b in range(a + 1, world):
            assert not set(shards[a]) & set(shards[b])
    for rank, part in enumerate(shards):           # strided, order kept
        assert part == [FILES[i] for i in range(rank, len(FILES), world)]
    sizes = [len(s) for s in shards]               # balanced to within one file
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


def test_strided_not_contiguous() -> None:
    """Every rank sees files from the whole sorted list (as tf.data.Dataset.shard)."""
    part = shard(FILES, 1, 4)
    assert part[:3] == [FILES[1], FILES[5], FILES[9]]
    assert part[-1] == FILES[33]


def test_single_rank_gets_everything_as_a_list() -> None:
    out = shard(tuple(FILES), 0, 1)
    assert out == FILES
    assert isinstance(out, list)


def test_more_ranks_than_files() -> None:
    few = FILES[:3]
    assert [shard(few, r, 5) for r in range(5)] == [[few[0]], [few[1]], [few[2]], [], []]


@pytest.mark.parametrize(("rank", "world"), [(-1, 4), (4, 4), (5, 4), (0, 0), (0, -2)])
def test_invalid_rank_or_world(rank: int, world: int) -> None:
    with pytest.raises(SciperfError, match=f"{rank} of {world}"):
        shard(FILES, rank, world)


@pytest.mark.parametrize(("n", "world", "local"), [(64, 4, 16), (512, 8, 4), (16, 1, 16)])
def test_divisibility_ok(n: int, world: int, local: int) -> None:
    check_divisibility(n, world, local, "data.train_samples")


@pytest.mark.parametrize(("n", "world", "local"), [(100, 4, 16), (0, 1, 4), (-8, 2, 2),
                                                   (63, 1, 16)])
def test_divisibility_error_explains_the_rule(n: int, world: int, local: int) -> None:
    with pytest.raises(SciperfError) as info:
        check_divisibility(n, world, local, "data.train_samples")
    message = str(info.value)
    assert f"data.train_samples={n}" in message
    assert f"{world} × {local} = {world * local}" in message
    assert "\n" not in message


def test_divisibility_names_the_given_key() -> None:
    with pytest.raises(SciperfError, match="data.eval_samples=10"):
        check_divisibility(10, 2, 4, "data.eval_samples")


@pytest.mark.parametrize(("gbs", "world", "local"), [(64, 1, 64), (64, 4, 16), (512, 8, 64),
                                                      (8, 8, 1)])
def test_local_batch_size(gbs: int, world: int, local: int) -> None:
    assert local_batch_size(gbs, world) == local


@pytest.mark.parametrize(("gbs", "world"), [(64, 3), (10, 4), (4, 8)])
def test_local_batch_size_error(gbs: int, world: int) -> None:
    with pytest.raises(SciperfError) as info:
        local_batch_size(gbs, world)
    message = str(info.value)
    assert f"train.global_batch_size={gbs}" in message
    assert f"{world} ranks" in message
