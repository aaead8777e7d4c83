"""Launcher environments (literal dicts), Slurm host lists, and the test-hook syntax."""

from __future__ import annotations

import pytest

from ibdiag.errors import UsageError
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import detect_launch, expand_nodelist, parse_tasks_per_node


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node01", ["node01"]),
        ("node[01-03,07],gpu-a[1-2]", ["node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"]),
        ("node[9-11]", ["node9", "node10", "node11"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("a,b[001-002],c", ["a", "b001", "b002", "c"]),
        ("dgx-h100-[0098-0100]", ["dgx-h100-0098", "dgx-h100-0099", "dgx-h100-0100"]),
    ],
)
def test_nodelist_expansion(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["node[01-03", "node]01[", "node[03-01]", "node[a-b]", ""])
def test_bad_nodelists_are_usage_errors(text):
    with pytest.raises(UsageError):
        expand_nodelist(text)


def test_tasks_per_node():
    assert parse_tasks_per_node("8(x2),4") == [8, 8, 4]
    assert parse_tasks_per_node("2") == [2]
    with pytest.raises(UsageError):
        parse_tasks_per_node("2(x)")


def test_no_launcher_is_none():
    assert detect_launch({"HOME": "/root", "PATH": "/bin"}) is None


def test_torchrun():
    env = {
        "RANK": "9",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "8",
        "MASTER_ADDR": "head",
        "MASTER_PORT": "29501",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "2",
    }
    le = detect_launch(env)
    assert (le.launcher, le.rank, le.world_size, le.local_rank, le.local_world_size) == (
        "torchrun",
        9,
        16,
        1,
        8,
    )
    assert (le.master_addr, le.master_port, le.agent_store, le.restart) == ("head", 29501, True, 2)


def test_torchrun_master_port_zero_says_why():
    with pytest.raises(UsageError) as e:
        detect_launch(
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}
        )
    assert "--standalone" in e.value.hint


def test_rank_outside_world_is_refused():
    with pytest.raises(UsageError):
        detect_launch({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h"})
    with pytest.raises(UsageError):
        detect_launch({"RANK": "x", "WORLD_SIZE": "4", "MASTER_ADDR": "h"})


def test_slurm_step_with_master_from_the_step_nodelist():
    env = {
        "SLURM_PROCID": "11",
        "SLURM_NTASKS": "16",
        "SLURM_LOCALID": "3",
        "SLURM_NODEID": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "123456",
        "SLURM_JOB_NODELIST": "gpu[001-004]",
        "SLURM_STEP_NODELIST": "gpu[003-004]",
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    }
    le = detect_launch(env)
    assert (le.launcher, le.rank, le.world_size, le.local_rank, le.local_world_size) == (
        "slurm",
        11,
        16,
        3,
        8,
    )
    assert le.master_addr == "gpu003"  # the step's first node, not the allocation's
    assert le.master_port == 20000 + 123456 % 20000
    assert le.agent_store is False


def test_slurm_job_nodelist_and_master_overrides():
    env = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_STEPID": "3",
        "SLURM_JOB_NODELIST": "node[01-03,07],gpu-a[1-2]",
    }
    assert detect_launch(env).master_addr == "node01"
    env.update(MASTER_ADDR="10.0.0.5", MASTER_PORT="31000")
    le = detect_launch(env)
    assert (le.master_addr, le.master_port) == ("10.0.0.5", 31000)


def test_a_slurm_batch_script_is_not_a_rank():
    # sbatch's script has SLURM_PROCID=0 and SLURM_NTASKS=N but no step: waiting for N ranks would hang
    assert (
        detect_launch({"SLURM_PROCID": "0", "SLURM_NTASKS": "64", "SLURM_JOB_NODELIST": "n[1-8]"})
        is None
    )
    assert (
        detect_launch(
            {
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "64",
                "SLURM_STEP_ID": "batch",
                "SLURM_JOB_NODELIST": "n1",
            }
        )
        is None
    )


def test_open_mpi_on_one_node_needs_no_master():
    env = {
        "OMPI_COMM_WORLD_RANK": "2",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    }
    le = detect_launch(env)
    assert (le.launcher, le.rank, le.world_size, le.local_rank, le.master_addr, le.master_port) == (
        "openmpi",
        2,
        4,
        2,
        "127.0.0.1",
        29500,
    )


def test_open_mpi_across_nodes_needs_master_addr():
    env = {
        "OMPI_COMM_WORLD_RANK": "9",
        "OMPI_COMM_WORLD_SIZE": "16",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
    }
    with pytest.raises(UsageError) as e:
        detect_launch(env)
    assert "MASTER_ADDR" in e.value.hint
    env["MASTER_ADDR"] = "node01"
    assert detect_launch(env).master_addr == "node01"


def test_mpirun_inside_a_slurm_allocation_is_an_mpi_job():
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": "n1",
    }
    le = detect_launch(env)
    assert (le.launcher, le.rank, le.world_size) == ("openmpi", 3, 4)


def test_pmi_with_slurm_nodelist():
    env = {
        "PMI_RANK": "5",
        "PMI_SIZE": "8",
        "MPI_LOCALRANKID": "1",
        "MPI_LOCALNRANKS": "4",
        "SLURM_JOB_NODELIST": "cn[10-11]",
        "SLURM_JOB_ID": "77",
    }
    le = detect_launch(env)
    assert (le.launcher, le.rank, le.world_size, le.local_rank, le.local_world_size) == (
        "pmi",
        5,
        8,
        1,
        4,
    )
    assert (le.master_addr, le.master_port) == ("cn10", 20077)


def test_torchrun_wins_over_an_outer_srun():
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "h",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": "h",
    }
    assert detect_launch(env).launcher == "torchrun"


def test_hooks_parse_and_refuse_nonsense():
    h = TestHooks.from_env(
        {"IBDIAG_TEST_HOOK": "slow:rank=2,seconds=0.02; hang:rank=1,step=3;mark:dir=/tmp/x"}
    )
    assert h.slow == {2: 0.02} and h.hang == {1: 3} and h.mark_dir == "/tmp/x" and h.active
    assert not TestHooks.from_env({}).active
    for bad in ("slow:rank=2", "fly:rank=1", "slow:rank=a,seconds=1", "slow:rank"):
        with pytest.raises(UsageError):
            TestHooks.from_env({"IBDIAG_TEST_HOOK": bad})
