"""What a run settles before it trains, refused in one line rather than found out later: the
precision it trains in (``precision=auto`` measured once per node), whether the local batch
fits this rank's share of a CPU node's memory (the OOM killer leaves no trace), and whether
every rank of a job trains the same configuration (ranks started apart diverge in silence).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sciperf import checkpoint, memory, threads
from sciperf import precision as precision_choice
from sciperf.config_keys import flat
from sciperf.data.sharding import local_batch_size
from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError
from sciperf.workloads.base import Workload


def choose_precision(cfg: Any, workload: Workload, backend: Any,
                     info: RankInfo) -> precision_choice.Choice:
    """The precision this run trains in (``precision=auto``: measured by a node's first
    rank, read by the others from the cache, sciperf.precision), named with its reason on
    rank 0 when it was chosen rather than asked."""
    runtime = getattr(backend, "runtime", None)
    if runtime is None or not hasattr(runtime, "probe_ms"):
        if cfg.precision == precision_choice.AUTO:
            raise SciperfError(f"precision=auto: framework={cfg.framework.name} cannot measure "
                               "its precisions; name one (precision=fp32|tf32|bf16)")
        return precision_choice.Choice(cfg.precision, cfg.precision,
                                       f"precision={cfg.precision} asked")
    if cfg.precision == precision_choice.AUTO:  # the probe runs as training will: the
        # framework's threads and device first (TensorFlow fixes both at its first op)
        threads.apply(cfg, runtime, local_batch_size(cfg.train.global_batch_size, info.world))
        runtime.select_device(info.device)
    choice = precision_choice.on_this_machine(str(cfg.precision), workload.cost.hot_op, runtime,
                                              wait_s=0.0 if info.local_rank == 0 else 60.0)
    if info.rank == 0 and choice.asked == precision_choice.AUTO:
        print(f"precision=auto: {choice.precision} ({choice.reason})", flush=True)
    return choice


def check_memory(cfg: Any, workload: Workload, info: RankInfo) -> None:
    """Refuse a local batch whose lower-bound memory exceeds this rank's share of the
    node (sciperf.memory), counted on the data's own graphs where the data sets the cost."""
    model, cost = workload.model_spec(cfg), workload.cost
    if cost.on_data is not None:
        samples = workload.dataset.list_samples(cfg.data.dir, "train", cfg.data.format, 0)
        layers = cost.on_data(model, Path(cfg.data.dir), str(cfg.data.format),
                              samples[:64]).layers
    else:
        layers = cost.layers(model)
    memory.check(layers, str(cfg.precision),
                 local_batch_size(cfg.train.global_batch_size, info.world), info.local_size,
                 f"workload={workload.name} experiment={cfg.experiment}")


def key_digests(cfg: Any) -> dict[str, tuple[int, int]]:
    """Each key of what a run trains (the config a resume must share: no paths, threads,
    workers, timeouts) → two 16-bit halves of its value's hash."""
    digests = {}
    for key, value in sorted(flat(checkpoint.resume_config(cfg)).items()):
        h = int.from_bytes(hashlib.sha256(json.dumps(value, default=str).encode()).digest()[:4],
                           "big")
        digests[key] = (h >> 16, h & 0xFFFF)
    return digests


def check_same_config(cfg: Any, backend: Any) -> None:
    """Every rank of a run must train the same configuration. Ranks started by hand (or by
    a script passing them different overrides) trained apart in silence: rank 1 with
    opt.base_lr=0.5, rank 0 with 0.004 — diverged replicas, rank 0's MLLOG saying 0.004.

    One all-reduce of, per key, its count and the sums of each hash half and its square:
    the values agree on every rank exactly when each half's variance over the ranks is 0
    (sums of 16-bit squares stay exact in float64 up to 2**21 ranks)."""
    digests = key_digests(cfg)
    mine = [1.0]
    for hi, lo in digests.values():
        mine += [float(hi), float(hi) ** 2, float(lo), float(lo) ** 2]
    total = backend.all_sum(mine)
    world, differ = total[0], []  # (Σx²·n = (Σx)², exact in integers)
    if len(total) != len(mine):
        raise SciperfError("ranks disagree on the configuration's keys: start every rank "
                           "with the same overrides")
    for i, key in enumerate(digests):
        for s, sq in ((total[1 + 4 * i], total[2 + 4 * i]), (total[3 + 4 * i], total[4 + 4 * i])):
            if int(sq) * int(world) != int(s) ** 2:  # only when every rank's x is one
                differ.append(key)
                break
    if differ:
        values = flat(checkpoint.resume_config(cfg))
        shown = ", ".join(f"{k}={values[k]}" for k in differ[:5])
        raise SciperfError(f"ranks disagree on the configuration (this rank: {shown}"
                           f"{' …' if len(differ) > 5 else ''}; another rank has other "
                           "values): start every rank with the same overrides")
