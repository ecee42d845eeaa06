"""The run config's schema: the shared sections as dataclasses, and the choices they allow.

The dataclasses type every key all workloads share (`data.`, `train.`, `system.`, …) and
declare each key's role as field metadata (``sciperf.roles``); Hydra composes against them
(``sciperf.config``). A workload's own keys live in its spec's dataclasses; which of them
each section holds is answered here too (:func:`section_keys`), for validation and for `+key`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sciperf.roles import role
from sciperf.weights import check_init_weights
from sciperf.workloads import DEFAULT

# fp32: IEEE single precision in both frameworks, on GPUs too (their TF32 defaults off);
# tf32: fp32 with TF32 tensor-core matmuls and convolutions (NVIDIA GPUs); bf16: mixed
PRECISIONS = ("fp32", "tf32", "bf16")
CHOICES = {  # values the schema's str type cannot restrict
    "precision": ("auto", *PRECISIONS),
    "data.loader": ("native", "dali"),
    "distributed.backend": ("native", "horovod"),
    "system.scheduler": ("none", "slurm"),
    "data.stage_verify": ("size", "checksum"),
    "mllog.ruleset": ("3.0.0", "2.0.0"),
    "framework.malloc": ("reuse", "system"),
}


@dataclass
class DataConfig:
    """Keys every workload understands under `data.`."""

    dir: str = field(default="data/${workload}", metadata=role(
        place=True, bench="output= (the timing data is made under OUTPUT/data)"))
    format: str = field(default="npy", metadata=role(
        bench="bench.cases=input (training rows read the workload's fastest format, the "
              "input rows every format)"))
    source: str = "synthetic"  # synthetic | existing
    train_samples: int = field(default=0, metadata=role(bench="bench.samples="))
    eval_samples: int = field(default=0, metadata=role(
        bench="bench.samples= (validation holds half)"))
    loader: str = "native"
    shuffle: bool = True
    prefetch: int = field(default=4, metadata=role(local=True))
    # reader threads per rank (measured on an H100 node: 2 feed full CosmoFlow at 244
    # samples/s, bf16; 8 were no faster)
    workers: int = field(default=2, metadata=role(local=True))
    # PyTorch on a GPU: the loader's thread stacks each batch straight into page-locked
    # memory (false: the training thread pins each batch before its copy)
    pinned_batches: bool = True
    # node-local copy before training (null: off)
    stage_dir: str | None = field(default="${system.stage_dir}", metadata=role(place=True))
    stage_workers: int = field(default=4, metadata=role(local=True))  # copies per rank
    stage_verify: str = "size"  # size | checksum (CRC-32 of source bytes vs the copy)
    # threads per rank reading samples in `sciperf prepare`
    prepare_workers: int = field(default=4, metadata=role(local=True))


@dataclass
class TrainConfig:
    """Keys every workload understands under `train.`."""

    global_batch_size: int = field(default=64, metadata=role(bench="bench.batch="))
    max_epochs: int = field(default=100, metadata=role(local=True))
    target: float = 0.0
    # steps between progress lines inside an epoch (0: per epoch only)
    log_every: int = field(default=0, metadata=role(local=True))
    # canonical .npz to start from (same file works in every framework)
    init_weights: str = field(default="", metadata=role(reads=True,
                                                        check=check_init_weights))
    # write OUT/weights_rank<r>.npz (canonical) at the end
    save_weights: bool = field(default=False, metadata=role(local=True))
    # replace an earlier run in output_dir (else: refused)
    overwrite: bool = field(default=False, metadata=role(local=True))
    # epochs between checkpoints in OUT/checkpoints (0: none)
    checkpoint_every: int = field(default=0, metadata=role(local=True))
    checkpoint_keep: int = field(default=2, metadata=role(local=True))  # newest kept
    # auto: continue from OUT/checkpoints' newest valid one ("": start anew)
    resume: str = field(default="", metadata=role(local=True))
    # with checkpointing on: seconds a SIGTERM (preemption, time limit) may take to reach a
    # checkpoint before the run is ended without one (0: end at once); below Slurm's KillWait
    term_grace_s: float = field(default=20.0, metadata=role(local=True))


@dataclass
class SystemConfig:
    """Site facts; org/platform feed the MLLOG submission keys (docs/architecture.md, rule 8)."""

    name: str = "local"
    submission_org: str = "sciperf"
    submission_platform: str = "local"
    submission_division: str = "closed"
    submission_status: str = "research"
    nodes: int = 1
    accelerators_per_node: int = 0
    cpus_per_node: int = 0
    scheduler: str = "none"  # none | slurm: `sciperf launch` renders an sbatch script on slurm
    mpi: str = "pmix"  # srun --mpi flavour: pmix | pmi2 | cray_shasta | none
    account: str | None = None  # placeholders the user supplies (system.account=…)
    partition: str | None = None
    qos: str | None = None
    constraint: str | None = None
    scratch_dir: str | None = None  # shared parallel file system (data), bound into containers
    stage_dir: str | None = None  # node-local storage for data staging
    setup: list[str] = field(default_factory=list)  # shell lines the batch script runs first
    peak_flops: float | None = None  # FLOP/s per node: roofline ceiling (`sciperf characterize`)
    peak_io_bw: float | None = None  # bytes/s per node from the data source (roofline ceiling)
    # `sciperf project`: the accelerator (a table name such as H100, or a description's
    # words) and what the table's figures are replaced by, or what it lacks
    accelerator: str | None = None
    mem_bw: float | None = None  # memory (HBM) bytes/s per node
    injection_bw: float | None = None  # node-to-node bytes/s per node
    fs_bw: float | None = None  # shared file system bytes/s, aggregate
    local_bw: float | None = None  # node-local storage read bytes/s per node


@dataclass
class FrameworkConfig:
    """Which backend (entry point in group `sciperf.backends`) and its generic knobs."""

    name: str = "pytorch"
    threads: int = field(default=0, metadata=role(local=True))  # 0: every core allotted
    channels_last: bool = True
    compile: bool = False
    # host allocator: reuse keeps freed memory for the next step (no page faults on fresh
    # mappings every step; sciperf.allocator), system leaves glibc's defaults
    malloc: str = field(default="reuse", metadata=role(local=True))
    # TensorFlow: ops run at once (its intra-op threads share the cores out); 0: chosen from
    # the model's work per layer (sciperf.threads: small layers run side by side)
    inter_op_threads: int = field(default=0, metadata=role(local=True))


@dataclass
class DistributedConfig:
    """How ranks talk: the framework's native stack (DDP / TF) or Horovod."""

    backend: str = "native"  # native | horovod
    # a lost or hung peer ends the job after this long, never a hang
    timeout_s: int = field(default=45, metadata=role(local=True))
    # PyTorch: one rank still joins a process group (NCCL on a GPU, gloo on a CPU) and
    # trains under DDP: the multi-GPU collective path, checked on a one-GPU machine
    single_rank_group: bool = False


@dataclass
class MllogConfig:
    """MLLOG options: the HPC ruleset decides where staging falls (3.0.0: before run_start)."""

    ruleset: str = "3.0.0"


@dataclass
class RootConfig:
    """The whole run: typed keys are checked by OmegaConf, workload sections by the spec."""

    workload: str = DEFAULT  # set by the `workload` group (the contract's name)
    experiment: str = field(default="mini", metadata=role(bench="bench.cases="))
    seed: int = 0
    # fp32 | tf32 | bf16 | auto: measured per machine (sciperf.precision)
    precision: str = field(default="auto", metadata=role(bench="bench.precision="))
    output_dir: str = field(default="results/${workload}-${framework.name}-${experiment}",
                            metadata=role(place=True, bench="output="))
    # nodes requested by `sciperf launch`
    nodes: int = field(default=1, metadata=role(local=True))
    instances: int = 1  # concurrent training instances (throughput mode): ranks split evenly
    # `sciperf launch`: render, do not submit
    dry_run: bool = field(default=False, metadata=role(local=True))
    # wall-clock request of `sciperf launch` (sbatch --time)
    time_limit: str = field(default="01:00:00", metadata=role(local=True))
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    model: dict[str, Any] = field(default_factory=dict)
    opt: dict[str, Any] = field(default_factory=dict)
    framework: FrameworkConfig = field(default_factory=FrameworkConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    mllog: MllogConfig = field(default_factory=MllogConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    launcher: dict[str, Any] = field(default_factory=dict, metadata=role(local=True))
    container: dict[str, Any] = field(default_factory=dict, metadata=role(local=True))


# sections the workload's spec types (its dataclass per section), with the schema's
# shared keys where the run core reads some of its own (data.dir, train.target, …)
WORKLOAD_SECTIONS = {"model": "model", "opt": "optimizer", "data": "data", "train": "train"}
SHARED_SECTIONS = {"data": DataConfig, "train": TrainConfig}


def section_keys(workload: Any, section: str) -> set[str]:
    """Keys of the workload section `section`: one answer for the unknown-key check of
    `validate` and for what `+key` may add."""
    keys = set(getattr(workload, WORKLOAD_SECTIONS[section]).__dataclass_fields__)
    if section in SHARED_SECTIONS:
        keys |= set(SHARED_SECTIONS[section].__dataclass_fields__)
    return keys
