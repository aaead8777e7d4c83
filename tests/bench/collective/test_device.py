"""The NCCL branch's rules without a GPU: rank-to-GPU binding per launcher, the GPU claim in a real
TCPStore, the torch-version gate, the gloo interface, the queue window, and what rank 0 receives.

The GPUs here are :class:`CpuStandInDevice`'s -- a named test fake that maps CUDA to the CPU; it proves
the control flow only, never that NCCL or a GPU works.
"""

from __future__ import annotations

import pickle
import socket
from types import SimpleNamespace

import pytest

from ibdiag.bench.collective.device import (
    CpuStandInDevice,
    StandInEvent,
    check_torch_for_nccl,
    choose_gpu,
    claim_gpu,
    torch_version_tuple,
)
from ibdiag.bench.collective.liveness import diagnose_wait, heartbeat_period
from ibdiag.bench.collective.netif import control_interface, match_nccl_ifname
from ibdiag.bench.collective.supervise import blame
from ibdiag.bench.collective.timing import (
    MAX_GATHERED_CALL_TIMES,
    QUEUE_SHARE,
    calls_kept,
    kept_indices,
    queue_depth,
    timed_queued,
)
from ibdiag.errors import CannotRunError, NotSupportedError, UsageError
from ibdiag.runtime.launch import detect_launch

SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_ID": "0",
    "SLURM_NTASKS": "16",
    "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
}


def _bound(env: dict[str, str], gpus: int = 8) -> tuple[int, str]:
    """(index among the visible GPUs, the physical stand-in GPU) a rank in ``env`` binds to."""
    launch = detect_launch(env)
    assert launch is not None
    dev = CpuStandInDevice(gpus=gpus, env=env)
    index = choose_gpu(launch, dev.visible(), env)
    return index, dev.gpu_id(index)


# --- binding, per launcher ------------------------------------------------------------------------


def test_torchrun_binds_local_rank():
    env = {
        "RANK": "11",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "3",
        "LOCAL_WORLD_SIZE": "8",
        "MASTER_ADDR": "gpu01",
    }
    assert _bound(env) == (3, "stand-in-gpu-3")


def test_srun_gpus_per_task_binds_the_one_visible_gpu():
    # srun --gpus-per-task=1 without device cgroups: task with SLURM_LOCALID=5 sees only physical GPU 5
    env = {**SLURM, "SLURM_PROCID": "13", "SLURM_LOCALID": "5", "CUDA_VISIBLE_DEVICES": "5"}
    assert _bound(env) == (0, "stand-in-gpu-5")


def test_srun_with_cgroup_constrained_gpus_binds_the_one_visible_gpu():
    # ConstrainDevices=yes: every task sees its own GPU as device 0 while SLURM_LOCALID runs 0..7
    env = {**SLURM, "SLURM_PROCID": "15", "SLURM_LOCALID": "7", "CUDA_VISIBLE_DEVICES": "0"}
    assert _bound(env, gpus=1) == (0, "stand-in-gpu-0")


def test_srun_without_per_task_gpus_binds_local_rank():
    env = {
        **SLURM,
        "SLURM_PROCID": "13",
        "SLURM_LOCALID": "5",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    }
    assert _bound(env) == (5, "stand-in-gpu-5")


def test_open_mpi_binds_its_local_rank_and_names_it_when_oversubscribed():
    env = {
        "OMPI_COMM_WORLD_RANK": "6",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "6",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
    }
    assert _bound(env) == (6, "stand-in-gpu-6")
    with pytest.raises(CannotRunError) as e:
        _bound({**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert (
        "OMPI_COMM_WORLD_LOCAL_RANK=6" in e.value.message
        and "CUDA_VISIBLE_DEVICES='0,1,2,3'" in e.value.message
        and "4 GPUs" in e.value.message
    )


def test_pmi_binds_mpi_localrankid_or_slurm_localid():
    env = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "4"}
    assert _bound(env) == (3, "stand-in-gpu-3")
    env = {"PMI_RANK": "9", "PMI_SIZE": "16", "SLURM_LOCALID": "1", "MASTER_ADDR": "gpu01"}
    assert _bound(env) == (1, "stand-in-gpu-1")
    with pytest.raises(CannotRunError) as e:
        _bound(env, gpus=0)
    assert "no CUDA GPU is visible" in e.value.message


def test_torchrun_oversubscription_names_the_variables():
    env = {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "5",
        "LOCAL_WORLD_SIZE": "8",
        "MASTER_ADDR": "h",
    }
    with pytest.raises(CannotRunError) as e:
        _bound(env, gpus=4)
    assert (
        "LOCAL_RANK=5" in e.value.message
        and "CUDA_VISIBLE_DEVICES unset" in e.value.message
        and "sees 4 GPUs" in e.value.message
    )
    assert "--nproc-per-node 4" in (e.value.hint or "")


def test_cuda_visible_devices_stops_at_an_invalid_entry_like_cuda():
    assert CpuStandInDevice(gpus=4, env={"CUDA_VISIBLE_DEVICES": "2,9,1"}).visible() == 1


@pytest.fixture()
def store():
    pytest.importorskip("torch")
    from ibdiag.runtime.torchdist import serve_store

    s, _ = serve_store("127.0.0.1", 0, timeout_s=10)
    yield s
    del s


def test_two_ranks_on_one_gpu_are_refused_naming_the_first(store):
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    a = detect_launch(
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", **env}
    )
    b = detect_launch(
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", **env}
    )
    claim_gpu(store, "ibdiag/0/", a, "node1", "stand-in-gpu-0", 0, env)
    claim_gpu(store, "ibdiag/0/", a, "node1", "stand-in-gpu-0", 0, env)  # the same rank again: fine
    claim_gpu(
        store, "ibdiag/0/", b, "node2", "stand-in-gpu-0", 0, env
    )  # another host's GPU 0: fine
    with pytest.raises(CannotRunError) as e:
        claim_gpu(store, "ibdiag/0/", b, "node1", "stand-in-gpu-0", 0, env)
    assert (
        "already rank 0's" in e.value.message
        and "LOCAL_RANK=1" in e.value.message
        and "CUDA_VISIBLE_DEVICES='0'" in e.value.message
    )


# --- torch version, interface ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [("2.13.0+cpu", (2, 13)), ("2.1.2", (2, 1)), ("2.2.0a0+git", (2, 2)), ("junk", (0, 0))],
)
def test_torch_version_tuple(text, want):
    assert torch_version_tuple(text) == want


def test_torch_older_than_2_2_is_refused_for_nccl():
    check_torch_for_nccl("2.2.0")
    with pytest.raises(NotSupportedError) as e:
        check_torch_for_nccl("2.1.2+cu121")
    assert (
        int(e.value.exit_status) == 3
        and "too old" in e.value.message
        and "2.1.2" in e.value.message
    )


def _addr(ip: str) -> SimpleNamespace:
    return SimpleNamespace(family=socket.AF_INET, address=ip)


IFS = {
    "lo": [_addr("127.0.0.1")],
    "eth0": [_addr("10.0.0.5")],
    "ib0": [_addr("192.168.1.5")],
    "docker0": [_addr("172.17.0.1")],
}


def test_gloo_socket_ifname_is_checked_and_reported():
    assert (
        control_interface({"GLOO_SOCKET_IFNAME": "ib0"}, spans_hosts=True, if_addrs=IFS).describe()
        == "ib0 (GLOO_SOCKET_IFNAME)"
    )
    with pytest.raises(UsageError) as e:
        control_interface({"GLOO_SOCKET_IFNAME": "ib7"}, spans_hosts=True, if_addrs=IFS)
    assert "no interface ib7" in e.value.message and "eth0" in e.value.message


def test_nccl_socket_ifname_is_honoured_for_gloo():
    got = control_interface({"NCCL_SOCKET_IFNAME": "ib"}, spans_hosts=True, if_addrs=IFS)
    assert (got.name, got.export) == ("ib0", "ib0")
    assert (
        control_interface({"NCCL_SOCKET_IFNAME": "^docker,lo"}, spans_hosts=True, if_addrs=IFS).name
        == "eth0"
    )
    assert match_nccl_ifname("=eth", ["eth0", "eth"]) == ["eth"]
    with pytest.raises(UsageError):
        control_interface({"NCCL_SOCKET_IFNAME": "mlx"}, spans_hosts=True, if_addrs=IFS)


def test_a_multi_host_job_on_a_loopback_host_name_is_refused():
    with pytest.raises(UsageError) as e:
        control_interface({}, spans_hosts=True, if_addrs=IFS, host_addr="127.0.1.1")
    assert "GLOO_SOCKET_IFNAME" in (e.value.hint or "")
    assert (
        control_interface({}, spans_hosts=False, if_addrs=IFS, host_addr="127.0.0.1").name == "lo"
    )
    assert (
        control_interface({}, spans_hosts=True, if_addrs=IFS, host_addr="10.0.0.5").name == "eth0"
    )


# --- queue window and bounds -----------------------------------------------------------------------


def test_queue_depth_keeps_every_call_inside_a_share_of_the_timeout():
    # 1000 calls of 0.5 s against a 150 s process-group timeout: all queued at once, call 1000 would
    # wait 500 s after its enqueue; the window holds 75 (75 x 0.5 s = 37.5 s = 25% of 150 s)
    assert queue_depth(1000, 0.5, 150.0) == 75
    assert queue_depth(1000, 0.5, 150.0) * 0.5 <= QUEUE_SHARE * 150.0
    assert (
        queue_depth(20, 1e-5, 150.0) == 20
    )  # small calls: the whole loop back to back, as nccl-tests
    assert queue_depth(20, None, 150.0) == 1  # no warm-up to estimate from: one at a time
    assert queue_depth(20, 400.0, 150.0) == 1


def test_the_timed_loop_waits_for_call_i_minus_depth_before_enqueueing_call_i():
    trace: list[str] = []
    dev = CpuStandInDevice(gpus=1, trace=trace)

    def call() -> None:
        trace.append("call")

    per, calls = timed_queued(
        dev,
        call,
        5,
        2,
        blocking=False,
        barrier=lambda: None,
        before=lambda: None,
        timeout_s=5.0,
        beat=lambda: None,
    )
    assert len(calls) == 5 and per >= 0
    body = [t for t in trace if t != "record"]
    # calls 0 and 1 go straight in; calls 2, 3, 4 each wait for one earlier end first; then the tail is waited for
    assert body[:2] == ["call", "call"] and body[2:8] == [
        "wait",
        "call",
        "wait",
        "call",
        "wait",
        "call",
    ]
    assert body[8:] == ["wait", "wait", "wait"]


def test_stand_in_events_time_with_the_host_clock():
    a, b = StandInEvent(), StandInEvent()
    a.record()
    b.record()
    assert a.query() and a.elapsed_time(b) >= 0


def test_what_rank_0_receives_is_bounded_at_4096_ranks():
    steps = 62  # 8 B .. 8 GiB in powers of two, in and out of place
    for iters in (20, 1000, 1_000_000):
        kept = calls_kept(iters, 4096, steps)
        assert 4096 * steps * kept <= MAX_GATHERED_CALL_TIMES
    assert calls_kept(20, 4096, steps) == 8 and calls_kept(20, 8, 14) == 20
    assert kept_indices(1000, 8) == (0, 125, 250, 375, 500, 625, 750, 875)
    # one rank's gathered payload does not grow with --iters
    sizes = []
    for iters in (1000, 100_000):
        keep = kept_indices(iters, calls_kept(iters, 4096, steps))
        values = [(123.4, 120.0, [119.5 + i for i in keep], 0) for _ in range(steps)]
        sizes.append(
            len(
                pickle.dumps(
                    {
                        "info": (
                            "rank",
                            4095,
                            "gpu-node-0511",
                            7,
                            123456,
                            "cuda:7 NVIDIA H100 80GB HBM3",
                            1.5,
                            "ib0 (GLOO_SOCKET_IFNAME)",
                        ),
                        "values": values,
                    }
                )
            )
        )
    assert sizes[0] == sizes[1] < 8000
    assert heartbeat_period(8) == heartbeat_period(1024) == 1.0 and heartbeat_period(4096) == 4.0
    assert 4096 / heartbeat_period(4096) <= 1024 and diagnose_wait(4096) > 2 * heartbeat_period(
        4096
    )


# --- supervisor blame ------------------------------------------------------------------------------


def test_a_rank_aborted_after_the_diagnosis_is_not_blamed():
    # rank 0 wrote its diagnosis at t=10 then died by SIGABRT; rank 2 was aborted by NCCL's watchdog at
    # t=11 without a report; rank 1 (the stuck one) is still alive
    codes = [-6, None, -6]
    causes, after = blame(codes, {0: 10.0}, {0: 10.1, 2: 11.0})
    assert causes == [] and after == [2]


def test_a_rank_killed_before_any_report_is_the_cause():
    causes, after = blame([-6, -9, -6], {0: 10.0}, {0: 10.1, 1: 3.0, 2: 11.0})
    assert causes == [1] and after == [2]
    assert blame([None, -9], {}, {1: 3.0}) == ([1], [])
