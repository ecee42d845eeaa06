"""SyncBN groups (DeepCAM's `model.batchnorm_group_size`) in PyTorch, over real gloo ranks.

A group of G ranks must behave as ONE BatchNorm over the concatenation of its members'
batches: forward outputs, input gradients, weight/bias gradients summed over the group,
running statistics and eval outputs — checked in float64 against plain ``nn.BatchNorm2d``
in one process, for 2 ranks (G=2 and G=1), 4 ranks in two groups, and under bf16
autocast. End to end: the CLI trains mini DeepCAM with G=2 on 2 ranks, replicas stay
identical and the log says batchnorm_group_size 2; a G that does not divide the ranks is
one line naming the key.

The 2-rank runs (the training and the refusal each rank says) and the TensorFlow refusal
(after TensorFlow fixed its thread pools) have processes of their own; PyTorch's refusals,
met in the backend's checks before any step, run `sciperf train`'s main in this process
(testkit.cli), the dataset's prepare too."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sciperf.distributed import RankInfo  # noqa: E402
from sciperf.weights import load_npz  # noqa: E402
from sciperf_pytorch.collectives import Comm  # noqa: E402
from sciperf_pytorch.syncbn import GroupBatchNorm2d, convert_batchnorm  # noqa: E402
from testkit import cli, events, sciperf, summary  # noqa: E402

LOCAL = 2  # samples per rank
STEPS = 2  # training steps before the eval forward (running statistics move twice)


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_net(dtype: torch.dtype) -> nn.Sequential:
    """A few BatchNorms with convs between; non-trivial γ/β so their gradients matter."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.BatchNorm2d(3), nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                        nn.ReLU(), nn.Conv2d(4, 5, 1), nn.BatchNorm2d(5))
    with torch.no_grad():
        for m in net:
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return net.to(dtype)


def global_data(world: int, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per step: the whole job's batch (world·LOCAL samples, offset and scaled so the
    variance is not a trivial 1) and a probe weighting the outputs (the loss Σ y·probe)."""
    gen = torch.Generator().manual_seed(123)
    return [((3.0 + 2.0 * torch.randn(world * LOCAL, 3, 6, 5, generator=gen)).to(dtype),
             torch.randn(world * LOCAL, 5, 6, 5, generator=gen).to(dtype))
            for _ in range(STEPS)]


def run_net(net: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]],
            bf16: bool = False) -> dict[str, torch.Tensor]:
    """STEPS training forwards/backwards, then an eval forward of the first batch; every
    output, input gradient, parameter gradient and BN running statistic, as float64."""
    out: dict[str, torch.Tensor] = {}
    net.train()
    for step, (x, probe) in enumerate(data):
        net.zero_grad()
        x = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = net(x)
        (y.to(probe.dtype) * probe).sum().backward()
        out[f"y{step}"], out[f"dx{step}"] = y.detach().double(), x.grad.double()
        out["out_is_bf16"] = torch.tensor(float(y.dtype == torch.bfloat16))
        out.update({f"grad{step}.{n}": p.grad.double() for n, p in net.named_parameters()})
    out.update({n: b.double().clone() for n, b in net.named_buffers() if "running" in n})
    net.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out["eval"] = net(data[0][0]).double()
    return out


def rank_slice(data, lo: int, hi: int):
    """The samples [lo, hi) of every step."""
    return [(x[lo:hi], p[lo:hi]) for x, p in data]


def worker(rank: int, world: int, port: int, group_size: int, outdir: str) -> None:
    """One rank: join the gloo job, build this rank's group with Comm.subgroup, run the
    float64 case, the bf16-autocast case and (G=1 groups) the per-rank case."""
    torch.set_num_threads(1)
    info = RankInfo(rank=rank, world=world, master_port=port, source="test")
    comm = Comm(info, "native", torch.device("cpu"), timeout_s=120)
    mine = rank_slice(global_data(world, torch.float64), rank * LOCAL, (rank + 1) * LOCAL)
    mine32 = rank_slice(global_data(world, torch.float32), rank * LOCAL, (rank + 1) * LOCAL)
    group = comm.subgroup(group_size)
    result = {"fp64": run_net(convert_batchnorm(make_net(torch.float64), group), mine),
              "bf16": run_net(convert_batchnorm(make_net(torch.float32), group), mine32, True),
              "single": run_net(convert_batchnorm(make_net(torch.float64), comm.subgroup(1)),
                                mine)}
    result["tiny"] = tiny_batch(rank, group, comm.subgroup(1))
    result["offset"] = offset_batch(world, rank, group)
    torch.save(result, Path(outdir) / f"rank{rank}.pt")
    comm.close()


def tiny_batch(rank: int, group, alone) -> dict[str, torch.Tensor]:
    """One value per channel on this rank: a group of 2 has 2 (fine, as nn.BatchNorm2d
    with 2), a group of 1 is refused as nn.BatchNorm2d refuses it."""
    x = torch.arange(3, dtype=torch.float64).view(1, 3, 1, 1) * (rank + 1)
    bn = convert_batchnorm(nn.BatchNorm2d(3).double(), group)
    out = {"y": bn(x).detach(), "running_var": bn.running_var.clone()}
    try:
        convert_batchnorm(nn.BatchNorm2d(3).double(), alone)(x)
    except ValueError as exc:
        out["refused"] = torch.tensor(float("more than 1 value per channel" in str(exc)))
    return out


def offset_data(world: int) -> torch.Tensor:
    """float32 values of mean 10⁴ and standard deviation 1: Σx² − (Σx)²/n in float32
    would lose the variance entirely."""
    gen = torch.Generator().manual_seed(7)
    return 1e4 + torch.randn(world * LOCAL, 3, 6, 5, generator=gen)


def offset_batch(world: int, rank: int, group) -> dict[str, torch.Tensor]:
    """One float32 training forward of this rank's slice of `offset_data`."""
    bn = convert_batchnorm(nn.BatchNorm2d(3), group)
    y = bn(offset_data(world)[rank * LOCAL:(rank + 1) * LOCAL])
    return {"y": y.detach().double(), "running_var": bn.running_var.double()}


def spawn(world: int, group_size: int, outdir: Path) -> list[dict]:
    """Run `worker` on `world` real processes; their results, in rank order."""
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(world, free_port(), group_size, str(outdir)), nprocs=world,
             join=True)
    return [torch.load(outdir / f"rank{r}.pt") for r in range(world)]


def expected_group(ranks: list[dict], case: str) -> dict[str, torch.Tensor]:
    """One process's view of a group: outputs and input gradients concatenated in rank
    order, parameter gradients summed; the running statistics and eval outputs (those
    must already be equal on every member) from the first member, eval concatenated."""
    first = ranks[0][case]
    out = {}
    for key in first:
        parts = [r[case][key] for r in ranks]
        if key.startswith("grad"):
            out[key] = sum(parts)
        elif key.startswith(("y", "dx", "eval")):
            out[key] = torch.cat(parts)
        else:
            for part in parts[1:]:
                torch.testing.assert_close(part, parts[0], rtol=0, atol=0, msg=key)
            out[key] = parts[0]
    return out


def assert_same(got: dict, want: dict, rtol: float, atol: float) -> None:
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=rtol, atol=atol,
                                   msg=lambda m, k=key: f"{k}: {m}")


def reference(world: int, lo: int, hi: int, bf16: bool = False) -> dict[str, torch.Tensor]:
    """Plain nn.BatchNorm2d in one process over the samples of ranks [lo, hi) (float64,
    or float32 under bf16 autocast; the same values either way)."""
    dtype = torch.float32 if bf16 else torch.float64
    data = rank_slice(global_data(world, dtype), lo * LOCAL, hi * LOCAL)
    return run_net(make_net(dtype), data, bf16)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return spawn(2, 2, tmp_path_factory.mktemp("syncbn2"))


def test_group_of_two_is_one_batchnorm_over_the_concatenated_batch(two_ranks):
    got = expected_group(two_ranks, "fp64")
    assert_same(got, reference(2, 0, 2), rtol=1e-10, atol=1e-12)
    # and that is not what each rank's own BatchNorm computes
    local = reference(2, 0, 1)
    assert not torch.allclose(two_ranks[0]["fp64"]["y0"], local["y0"])
    assert not torch.allclose(two_ranks[0]["fp64"]["0.running_var"], local["0.running_var"])


def test_group_of_one_is_per_rank_batchnorm(two_ranks):
    for rank in range(2):
        assert_same(two_ranks[rank]["single"], reference(2, rank, rank + 1), rtol=1e-10,
                    atol=1e-12)


def test_bf16_autocast_group_is_as_accurate_as_one_batchnorm(two_ranks):
    """Under bf16 autocast (bf16 conv outputs into the BatchNorms) the group's results are
    as close to the float64 truth as plain BatchNorm's under the same autocast."""
    got = expected_group(two_ranks, "bf16")
    assert float(got["out_is_bf16"]) == 1.0
    truth, plain = reference(2, 0, 2), reference(2, 0, 2, bf16=True)
    for key, want in truth.items():
        err_group = float((got[key] - want).abs().max())
        err_plain = float((plain[key] - want).abs().max())
        scale = float(want.abs().max())
        assert err_group <= 1.5 * err_plain + 1e-3 * scale + 1e-6, (key, err_group, err_plain)
    assert float((got["y0"] - truth["y0"]).abs().max()) < 0.02 * float(truth["y0"].abs().max())


def test_one_value_per_rank_is_enough_for_a_group(two_ranks):
    bn = nn.BatchNorm2d(3).double()
    x = torch.arange(3, dtype=torch.float64).view(1, 3, 1, 1)
    y = bn(torch.cat([x, 2 * x])).detach()
    for rank in range(2):
        tiny = two_ranks[rank]["tiny"]
        torch.testing.assert_close(tiny["y"], y[rank:rank + 1])
        torch.testing.assert_close(tiny["running_var"], bn.running_var)
        assert float(tiny.get("refused", 0)) == 1.0  # a group of one: one value is too few


def test_float32_statistics_survive_a_large_mean(two_ranks):
    """The group's variance in float32 is as good as float64's on the same values."""
    bn = nn.BatchNorm2d(3).double()
    y = bn(offset_data(2).double()).detach()
    got = torch.cat([two_ranks[r]["offset"]["y"] for r in range(2)])
    torch.testing.assert_close(got, y, rtol=0, atol=2e-3)
    torch.testing.assert_close(two_ranks[0]["offset"]["running_var"], bn.running_var,
                               rtol=1e-5, atol=0)


def test_two_groups_on_four_ranks_keep_their_own_statistics(tmp_path):
    ranks = spawn(4, 2, tmp_path)
    groups = [expected_group(ranks[0:2], "fp64"), expected_group(ranks[2:4], "fp64")]
    for g, got in enumerate(groups):
        assert_same(got, reference(4, 2 * g, 2 * g + 2), rtol=1e-10, atol=1e-12)
    assert not torch.allclose(groups[0]["0.running_mean"], groups[1]["0.running_mean"])


def test_convert_keeps_parameters_buffers_and_names():
    net = make_net(torch.float32)
    before = dict(net.state_dict(keep_vars=True))
    converted = convert_batchnorm(net, group=None)  # no collective before forward
    assert [type(m) for m in converted if isinstance(m, nn.BatchNorm2d)] == [GroupBatchNorm2d] * 3
    after = converted.state_dict(keep_vars=True)
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)  # the same tensors, not copies


def test_deepcam_weights_export_import_through_group_batchnorm():
    from sciperf.workloads.deepcam.spec import ModelSpec
    from sciperf_pytorch.workloads.deepcam.model import DeepCam, export_weights, import_weights

    spec = ModelSpec(height=32, width=48, entry_channels=[4, 8], block_channels=[8, 8, 8],
                     middle_blocks=1, middle_reps=1, exit_channels=[8, 8, 8, 8],
                     aspp_channels=8, low_level_channels=4, decoder_channels=8)
    plain = DeepCam(spec)
    with torch.no_grad():
        plain.bn1.running_var.fill_(2.5)
    converted = convert_batchnorm(DeepCam(spec), group=None)
    assert isinstance(converted.bn1, GroupBatchNorm2d)
    import_weights(converted, export_weights(plain))
    exported = export_weights(converted)
    assert exported.keys() == export_weights(plain).keys()
    assert float(exported["bn1/moving_variance"][0]) == 2.5


# --- end to end through the CLI ------------------------------------------------------

SMALL = ["workload=deepcam", "experiment=mini", "model.height=32", "model.width=48",
         "data.eval_samples=4", "framework.threads=1"]


@pytest.fixture(scope="module")
def data8(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("syncbn-data")
    proc = cli("prepare", *SMALL, "data.train_samples=8", f"data.dir={root}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


def launch(data: Path, out: Path, group_size: int, *extra: str) -> subprocess.CompletedProcess:
    return sciperf("launch", "launcher=local", "launcher.nprocs=2", *SMALL,
                   "data.train_samples=8", "train.global_batch_size=4", "train.max_epochs=1",
                   f"model.batchnorm_group_size={group_size}", f"data.dir={data}",
                   f"output_dir={out}", *extra)


def test_cli_trains_deepcam_with_a_group_of_two(data8, tmp_path):
    """Replicas end identical, the log has the group size, and the group changed the
    training (the same run with per-rank BN ends with other BN statistics)."""
    runs = {}
    for size in (2, 1):
        out = tmp_path / f"g{size}"
        proc = launch(data8, out, size, "train.save_weights=true", "seed=5")
        assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: target not met (aborted)
        w0, w1 = (load_npz(out / f"weights_rank{r}.npz") for r in range(2))
        assert w0.keys() == w1.keys()
        for key in w0:
            assert (w0[key] == w1[key]).all(), key
        assert events(out / "result_0.txt", "batchnorm_group_size")[-1]["value"] == size
        assert summary(out)["epochs"] == 1
        runs[size] = w0
    variances = [k for k in runs[1] if k.endswith("moving_variance")]
    assert variances and any(not np.allclose(runs[1][k], runs[2][k], rtol=1e-4, atol=0)
                             for k in variances)


@pytest.mark.parametrize(("extra", "needle"), [
    ((), "this run has 1"),
    (("distributed.backend=horovod",), "not supported under Horovod"),
])
def test_cli_refuses_groups_a_run_cannot_have(data8, tmp_path, extra, needle):
    """One process cannot form a group of 2 (refused rather than silently per-rank BN,
    which the log would misreport); Horovod runs have no groups."""
    proc = cli("train", *SMALL, "data.train_samples=8", "train.global_batch_size=4",
                   "model.batchnorm_group_size=2", f"data.dir={data8}",
                   f"output_dir={tmp_path}", *extra)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.batchnorm_group_size=2" in lines[0] and needle in lines[0]


def test_cli_refuses_a_group_that_does_not_divide_the_ranks(data8, tmp_path):
    proc = launch(data8, tmp_path / "o", 3)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = {re.sub(r" \(rank \d of 2\)$", "", ln) for ln in proc.stderr.splitlines()
              if "model.batchnorm_group_size=3: BatchNorm statistics" in ln}
    assert len(errors) == 1, proc.stderr[-3000:]  # each rank says it (naming itself)
    assert "this run has 2" in errors.pop() and "Traceback" not in proc.stderr


def test_tensorflow_backend_says_it_lacks_groups_and_pytorch_has_them(data8, tmp_path):
    """A process of its own: the refusal comes after the backend fixed TensorFlow's thread
    pools and started its runtime (threads.apply, select_device), which no test can undo
    in a pytest worker that later runs TensorFlow in process."""
    pytest.importorskip("tensorflow")
    proc = sciperf("train", *SMALL, "framework=tensorflow", "data.train_samples=8",
                   "train.global_batch_size=4", "model.batchnorm_group_size=2",
                   f"data.dir={data8}", f"output_dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "batchnorm_group_size" in ln]
    assert len(lines) == 1 and "TensorFlow backend" in lines[0]
    assert "framework=pytorch" in lines[0] and "Traceback" not in proc.stderr
