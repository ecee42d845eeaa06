"""Rank discovery against each launcher's real variable set, and its error cases."""

from __future__ import annotations

import pytest

from sciperf.distributed import (
    RankInfo,
    discover,
    expand_nodelist,
    first_host,
    slurm_tasks_on_node,
    split_instances,
)
from sciperf.errors import SciperfError

TORCHRUN = {"TORCHELASTIC_RUN_ID": "none", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "MASTER_ADDR": "node7",
            "MASTER_PORT": "29400"}
SLURM = {"SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_PROCID": "6",
         "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NODEID": "1",
         "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "nid[001-002]"}
OPENMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
PMI = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
HOROVOD = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1",
           "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "0"}


def test_single_process_without_launcher():
    info = discover({})
    assert (info.rank, info.world, info.local_rank, info.source) == (0, 1, 0, "single")


def test_torchrun():
    info = discover(TORCHRUN)
    assert (info.rank, info.world, info.local_rank, info.local_size, info.node) == (5, 8, 1, 4, 1)
    assert (info.master_addr, info.master_port, info.source) == ("node7", 29400, "torchrun")


def test_slurm_step():
    info = discover(SLURM)
    assert (info.rank, info.world, info.local_rank, info.local_size, info.node) == (6, 8, 2, 4, 1)
    assert info.master_addr == "nid001"
    assert info.master_port == 29500 + 456  # derived from the job id
    assert info.nodes == 2 and info.source == "slurm"


def test_slurm_batch_script_is_one_process():
    batch = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"}
    batch["SLURM_PROCID"] = "0"
    assert discover(batch).world == 1


def test_openmpi():
    info = discover(OPENMPI)
    assert (info.rank, info.world, info.local_rank, info.local_size, info.node) == (3, 4, 1, 2, 1)
    assert info.source == "openmpi"


def test_pmi():
    info = discover(PMI)
    assert (info.rank, info.world, info.local_rank, info.local_size, info.node) == (2, 4, 0, 2, 1)


def test_horovodrun():
    info = discover(HOROVOD)
    assert (info.rank, info.world, info.local_rank, info.source) == (1, 2, 1, "horovodrun")


def test_innermost_launcher_wins():
    assert discover({**SLURM, **OPENMPI}).source == "openmpi"  # sbatch → mpirun
    assert discover({**SLURM, **TORCHRUN}).source == "torchrun"  # srun → torchrun
    # master address from the allocation when torchrun leaves it out
    tr = {k: v for k, v in TORCHRUN.items() if k != "MASTER_ADDR"}
    assert discover({**SLURM, **tr}).master_addr == "nid001"


@pytest.mark.parametrize("env, needle", [
    ({**TORCHRUN, "RANK": "8"}, "rank 8 outside world size 8"),
    ({**OPENMPI, "OMPI_COMM_WORLD_LOCAL_RANK": "2"}, "local rank 2 outside local size 2"),
    ({**PMI, "PMI_SIZE": "x"}, "PMI_SIZE='x' is not an integer"),
    ({"TORCHELASTIC_RUN_ID": "1", "RANK": "0"}, "lacks WORLD_SIZE"),
    ({**SLURM, "SLURM_TASKS_PER_NODE": "four"}, "SLURM_TASKS_PER_NODE"),
])
def test_inconsistent_environments_are_clear_errors(env, needle):
    with pytest.raises(SciperfError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        discover(env)


@pytest.mark.parametrize("nodelist, host", [
    ("nid[001-004,007]", "nid001"), ("node12", "node12"), ("gpu[7,9]", "gpu7"),
    ("a[01-02],b[1-3]", "a01"), ("login1,login2", "login1"),
])
def test_first_host(nodelist, host):
    assert first_host(nodelist) == host


def test_slurm_tasks_per_node():
    assert [slurm_tasks_on_node("4(x2),3", n) for n in range(3)] == [4, 4, 3]


def test_expand_nodelist():
    assert expand_nodelist("nid[001-003,007],login1") == ["nid001", "nid002", "nid003",
                                                          "nid007", "login1"]
    assert expand_nodelist("a1,b[8-10]") == ["a1", "b8", "b9", "b10"]
    with pytest.raises(SciperfError, match="SLURM_JOB_NODELIST"):
        expand_nodelist("nid[x-y]")


def test_one_instance_is_the_job_itself():
    info = discover(SLURM)
    assert split_instances(info, 1) is info


def test_instances_inside_a_node_get_their_own_group_and_port():
    # 8 ranks on one node, 4 instances of 2: rank 5 is rank 1 of instance 2
    job = RankInfo(5, 8, 5, 8, 0, "host0", 29500)
    sub = split_instances(job, 4, {})
    assert (sub.instance, sub.instances, sub.rank, sub.world) == (2, 4, 1, 2)
    assert (sub.local_rank, sub.local_size, sub.nodes, sub.node) == (1, 2, 1, 0)
    assert (sub.master_addr, sub.master_port) == ("127.0.0.1", 29500 + 1 + 2)
    assert (sub.job_rank, sub.device) == (5, 5)  # keeps its GPU: the node's local rank 5


def test_instances_spanning_nodes_find_their_leader_in_the_nodelist():
    # 4 nodes × 2 ranks, 2 instances of 2 nodes each: rank 6 sits on node 3 (instance 1)
    env = {**SLURM, "SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0",
           "SLURM_NODEID": "3", "SLURM_TASKS_PER_NODE": "2(x4)",
           "SLURM_JOB_NODELIST": "gpu[10-13]"}
    sub = split_instances(discover(env), 2, env)
    assert (sub.instance, sub.rank, sub.world, sub.node, sub.nodes) == (1, 2, 4, 1, 2)
    assert sub.master_addr == "gpu12"  # instance 1 starts on the job's third node


@pytest.mark.parametrize(("job", "instances", "needle"), [
    (RankInfo(0, 6, 0, 6), 4, "does not divide the 6 ranks"),
    (RankInfo(0, 12, 0, 4), 2, "not whole nodes"),  # 6 ranks per instance on 4-rank nodes
    (RankInfo(0, 12, 0, 4), 4, "do not tile the 4 ranks per node"),  # 3 per instance
])
def test_impossible_instance_splits_are_clear_errors(job, instances, needle):
    with pytest.raises(SciperfError, match=needle):
        split_instances(job, instances, {})


def test_multi_node_instances_without_slurm_cannot_guess_the_leader():
    job = RankInfo(6, 8, 0, 2, 3, "host0")  # 4 nodes of 2 ranks, not under Slurm
    with pytest.raises(SciperfError, match="need SLURM_JOB_NODELIST"):
        split_instances(job, 2, {})
