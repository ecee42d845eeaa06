"""`distributed.single_rank_group=true`: one rank joins a real process group and trains
under DDP — the multi-GPU collective path (NCCL on a GPU, gloo here), checkable on a
machine with one GPU. Without it one rank keeps the bare module and no group."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from sciperf.distributed import RankInfo  # noqa: E402
from sciperf_pytorch.collectives import Comm  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("grouped", [False, True])
def test_a_single_rank_joins_a_group_only_when_asked(grouped: bool) -> None:
    info = RankInfo(rank=0, world=1, master_port=_port(), source="test")
    comm = Comm(info, "native", torch.device("cpu"), timeout_s=30, single_rank_group=grouped)
    try:
        net = comm.wrap_model(nn.Linear(3, 2))
        assert dist.is_initialized() is grouped
        assert isinstance(net, nn.parallel.DistributedDataParallel) is grouped
        net(torch.ones(4, 3)).sum().backward()  # DDP's bucketed all-reduce runs
        assert comm.sum([1.5, 2.0]) == [1.5, 2.0]
        stats = [torch.tensor([3.0, 4.0])]
        comm.average(stats)
        assert stats[0].tolist() == [3.0, 4.0]
    finally:
        comm.close()
    assert not dist.is_initialized()


def test_a_rendezvous_port_in_use_is_one_line() -> None:
    """Another job listening on MASTER_PORT: rank 0's store could not bind and every rank
    printed torch's DistNetworkError traceback (EADDRINUSE)."""
    from sciperf.errors import SciperfError
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SciperfError, match=f"^MASTER_PORT={port} on 127.0.0.1 is in use"):
            Comm(RankInfo(rank=0, world=2, master_port=port, source="test"), "native",
                 torch.device("cpu"), timeout_s=5)
