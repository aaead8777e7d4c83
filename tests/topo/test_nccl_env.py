"""NCCL's environment judged against the bundled fixture nodes: one environment per mistake, each giving
exactly its finding and the value that fits; healthy environments giving none."""

from __future__ import annotations

import json
import random

import pytest

from ibdiag.findings.model import Severity
from ibdiag.node.dcb import read_saved
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo.configuration import check_configuration, read_configuration
from ibdiag.topo.nccl_env import from_environ, parse_env_text
from ibdiag.topo.nccl_match import parse_list, selected_ports
from tests.support import nccl_hca
from tests.support.env import SYSFS_FIXTURES

DGX_FITS = "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"
ROCE_FITS = "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"


def judge(fixture: str, env: dict[str, str]):
    sysfs = SysfsRoot(SYSFS_FIXTURES / fixture)
    topo = discover(sysfs)
    root = SYSFS_FIXTURES / fixture
    config = read_configuration(sysfs, topo, from_environ(env), lambda n: read_saved(root, n))
    return check_configuration(topo, config)


def problems(findings):
    return sorted(
        (f.severity.value, f.check, f.subject) for f in findings if f.severity is not Severity.OK
    )


# (fixture, environment, exactly these findings, the value that fits in each finding's limit)
MISTAKES = {
    "hca_leaves_out_nearest_port": (
        "dgx-h100",
        {"NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8"},
        [("fail", "topo.nccl_ib_hca", "GPU7")],
        DGX_FITS,
    ),
    "hca_leaves_out_tied_ports": (
        "roce-node",
        {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_2:1"},
        [("warn", "topo.nccl_ib_hca", f"GPU{i}") for i in range(4)],
        ROCE_FITS,
    ),
    "hca_names_missing_device": (
        "dgx-h100",
        {"NCCL_IB_HCA": DGX_FITS + ",mlx5_12"},
        [("fail", "topo.nccl_ib_hca", "NCCL_IB_HCA")],
        DGX_FITS,
    ),
    "hca_names_down_device": (
        "dgx-h100-faulty",
        {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_10"},
        [("fail", "topo.nccl_ib_hca", "NCCL_IB_HCA")],
        "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1",
    ),
    "hca_excludes_a_device_that_is_not_there": (
        "dgx-h100",
        {"NCCL_IB_HCA": "^=mlx5_12"},
        [("warn", "topo.nccl_ib_hca", "NCCL_IB_HCA")],
        DGX_FITS,
    ),
    "hca_prefix_selects_others": (
        "dgx-h100",
        {"NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9"},
        [("warn", "topo.nccl_ib_hca", "NCCL_IB_HCA")],
        DGX_FITS,
    ),
    "gid_index_not_roce_v2_ipv4": (
        "roce-node",
        {"NCCL_IB_GID_INDEX": "1"},
        [("fail", "topo.nccl_gid_index", f"mlx5_{i}:1") for i in range(4)],
        "3",
    ),
    "gdr_level_below_the_path": (
        "roce-node",
        {"NCCL_NET_GDR_LEVEL": "PIX"},
        [("warn", "topo.nccl_gdr", "GPU0"), ("warn", "topo.nccl_gdr", "GPU1")],
        "PXB",
    ),
    "gdr_level_across_numa_nodes": (
        "epyc-nps2",
        {"NCCL_NET_GDR_LEVEL": "SYS"},
        [("warn", "topo.nccl_gdr", "GPU1"), ("warn", "topo.nccl_gdr", "GPU3")],
        "PXB",
    ),
    "gdr_read_off_on_nvlink_node": (
        "dgx-h100",
        {"NCCL_NET_GDR_READ": "0"},
        [("warn", "topo.nccl_gdr", "NCCL_NET_GDR_READ")],
        "1",
    ),
    "socket_ifname_not_on_node": (
        "roce-node",
        {"NCCL_SOCKET_IFNAME": "eth0"},
        [("fail", "topo.nccl_socket_ifname", "NCCL_SOCKET_IFNAME")],
        "=enp71s0f0np0,enp71s0f1np1,enp195s0f0np0,enp195s0f1np1",
    ),
    "socket_ifname_entry_matches_nothing": (
        "roce-node",
        {"NCCL_SOCKET_IFNAME": "=enp71s0f0np0,eth0"},
        [("warn", "topo.nccl_socket_ifname", "NCCL_SOCKET_IFNAME")],
        "=enp71s0f0np0,enp71s0f1np1,enp195s0f0np0,enp195s0f1np1",
    ),
    "gdr_level_nccl_does_not_know": (
        "roce-node",
        {"NCCL_NET_GDR_LEVEL": "NODE"},
        [("fail", "topo.nccl_gdr", "NCCL_NET_GDR_LEVEL")],
        "PXB",
    ),
    "gdr_level_off": (
        "dgx-h100",
        {"NCCL_NET_GDR_LEVEL": "LOC"},
        [("warn", "topo.nccl_gdr", f"GPU{i}") for i in range(8)],
        "PXB",
    ),
    "ib_tc_out_of_range": (
        "roce-node",
        {"NCCL_IB_TC": "300"},
        [("fail", "topo.nccl_ib_tc_sl", "NCCL_IB_TC")],
        "0..255",
    ),
    "ib_sl_beyond_roce_priorities": (
        "roce-node",
        {"NCCL_IB_SL": "9"},
        [("fail", "topo.nccl_ib_tc_sl", "NCCL_IB_SL")],
        "0..7",
    ),
    "ib_disabled_with_active_ports": (
        "dgx-h100",
        {"NCCL_IB_DISABLE": "1"},
        [("fail", "topo.nccl_net", "NCCL_IB_DISABLE")],
        "0",
    ),
    "net_socket_with_active_ports": (
        "roce-node",
        {"NCCL_NET": "Socket"},
        [("fail", "topo.nccl_net", "NCCL_NET")],
        "IB",
    ),
    "forced_algo": (
        "dgx-h100",
        {"NCCL_ALGO": "Ring"},
        [("warn", "topo.nccl_tuning", "NCCL_ALGO")],
        None,
    ),
    "forced_proto": (
        "dgx-h100",
        {"NCCL_PROTO": "Simple"},
        [("warn", "topo.nccl_tuning", "NCCL_PROTO")],
        None,
    ),
    "max_nchannels_below_rails": (
        "roce-node",
        {"NCCL_MAX_NCHANNELS": "2"},
        [("warn", "topo.nccl_tuning", "NCCL_MAX_NCHANNELS")],
        4,
    ),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_mistake_gives_exactly_its_finding_and_the_value_that_fits(name):
    fixture, env, expected, fits = MISTAKES[name]
    out = judge(fixture, env)
    assert problems(out) == sorted(expected)
    for f in out:
        if f.severity is not Severity.OK:
            assert f.limit == fits, (f.message, f.limit)
            assert f.hint


HEALTHY = {
    "dgx-h100": {
        "NCCL_IB_HCA": DGX_FITS,
        "NCCL_NET_GDR_LEVEL": "PXB",
        "NCCL_NET_GDR_READ": "1",
        "NCCL_SOCKET_IFNAME": "=eno1",
        "NCCL_IB_SL": "0",
        "NCCL_MAX_NCHANNELS": "32",
        "NCCL_IB_DISABLE": "0",
        "NCCL_NET": "IB",
        "NCCL_DEBUG": "INFO",
    },
    "roce-node": {
        "NCCL_IB_HCA": ROCE_FITS,
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_TC": "106",
        "NCCL_IB_SL": "3",
        "NCCL_SOCKET_IFNAME": "enp",
        "NCCL_MIN_NCHANNELS": "4",
    },
    "hgx-dualport": {"NCCL_IB_HCA": "mlx5"},
    "vm-no-rdma": {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket", "NCCL_IB_HCA": "mlx5"},
}


@pytest.mark.parametrize("fixture", sorted(HEALTHY))
def test_healthy_environments_give_no_finding(fixture):
    out = judge(fixture, HEALTHY[fixture])
    assert problems(out) == []


def test_no_nccl_variables_no_findings():
    assert judge("dgx-h100", {"PATH": "/usr/bin", "NCCLX": "1"}) == []


def test_messages_name_what_is_wrong():
    (f,) = judge(
        "dgx-h100", {"NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9"}
    )
    assert "mlx5_10, mlx5_11" in f.message and "'='" in f.hint
    out = judge("roce-node", {"NCCL_IB_GID_INDEX": "1"})
    assert "RoCE v2, not IPv4-mapped" in out[0].message and "index 3" in out[0].message
    out = judge("dgx-h100-faulty", {"NCCL_IB_HCA": "=mlx5_10"})
    down = [f for f in out if f.subject == "NCCL_IB_HCA"]
    assert "mlx5_10:1 DOWN" in down[0].message


def test_tied_port_left_out_on_dual_port_cards():
    # GPU k ties on both functions of its card (mlx5_k and mlx5_{k+8}); listing one function per card
    # leaves the other idle for every GPU.
    out = judge("hgx-dualport", {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8))})
    assert problems(out) == [("warn", "topo.nccl_ib_hca", f"GPU{i}") for i in range(8)]


# --- NCCL's matching rules -----------------------------------------------------------------------


def test_documented_matching_rules():
    ports = [(f"mlx5_{i}", 1, True) for i in (0, 1, 2, 10, 11)] + [("mlx5_1", 2, False)]
    assert selected_ports("mlx5_1", ports) == [("mlx5_1", 1), ("mlx5_10", 1), ("mlx5_11", 1)]
    assert selected_ports("=mlx5_1", ports) == [("mlx5_1", 1)]
    assert selected_ports("^mlx5_1", ports) == [("mlx5_0", 1), ("mlx5_2", 1)]
    assert selected_ports("^=mlx5_1", ports) == [
        ("mlx5_0", 1),
        ("mlx5_2", 1),
        ("mlx5_10", 1),
        ("mlx5_11", 1),
    ]
    assert selected_ports("=mlx5_1:2,mlx5_2:1", ports) == [("mlx5_2", 1)]  # port 2 is down
    assert selected_ports(None, ports) == [p[:2] for p in ports if p[2]]
    assert parse_list("=a:1x,,b").entries[0].port == 1 and len(parse_list("=a:1x,,b").entries) == 2


def test_matching_agrees_with_the_model_of_ncclIbInit():
    """tests/support/nccl_hca.py models NCCL's own code; on random lists both select the same ports."""
    rng = random.Random(30)
    names = [f"mlx5_{i}" for i in range(14)] + ["mlx4_0", "bnxt_re0"]
    ports = [(n, p, rng.random() > 0.2) for n in names for p in (1, 2)]
    for _ in range(500):
        k = rng.randint(1, 4)
        items = []
        for _ in range(k):
            item = rng.choice([*names, "mlx5", "mlx5_1", "mlx", "bnxt"])
            if rng.random() < 0.4:
                item += f":{rng.randint(0, 3)}"
            items.append(item)
        value = rng.choice(["", "=", "^", "^="]) + ",".join(items)
        assert selected_ports(value, ports) == nccl_hca.selected(value, ports), value


# --- where the environment comes from ------------------------------------------------------------


def test_env_file_lines_and_launcher_lines():
    env = parse_env_text(
        '# job\nexport NCCL_IB_HCA="=mlx5_0:1"\nNCCL_ALGO=Ring  # forced\nOMP=4\n', "job.env"
    )
    assert env.variables == (("NCCL_IB_HCA", "=mlx5_0:1"), ("NCCL_ALGO", "Ring"))
    cmd = "mpirun -np 16 \\\n  -x NCCL_IB_HCA=mlx5_1 -x NCCL_DEBUG \\\n  -x NCCL_IB_GID_INDEX=3 ./all_reduce_perf"
    env = parse_env_text(cmd, "cmd")
    assert env.variables == (("NCCL_IB_HCA", "mlx5_1"), ("NCCL_IB_GID_INDEX", "3"))


def test_cli_reads_its_environment_and_files(cli, tmp_path):
    root = SYSFS_FIXTURES / "roce-node"
    res = cli("topo", "--root", root, "-o", "json", env={"NCCL_IB_GID_INDEX": "0"})
    assert res.exit_code == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["nccl_env"] == {"source": "environment", "variables": {"NCCL_IB_GID_INDEX": "0"}}
    assert {f["subject"] for f in doc["findings"] if f["check"] == "topo.nccl_gid_index"} == {
        f"mlx5_{i}:1" for i in range(4)
    }
    job = tmp_path / "job.sh"
    job.write_text("mpirun -x NCCL_IB_HCA==mlx5_0:1,mlx5_2:1 -x NCCL_IB_GID_INDEX=3 ./train\n")
    # --nccl-env replaces the environment's settings
    res = cli(
        "topo", "--root", root, "-o", "json", "--nccl-env", job, env={"NCCL_IB_GID_INDEX": "0"}
    )
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["nccl_env"]["source"] == str(job)
    warned = [
        f for f in doc["findings"] if f["severity"] == "warn" and f["check"] != "topo.gpu_nic_path"
    ]
    assert [f["check"] for f in warned] == ["topo.nccl_ib_hca"] * 4
    assert warned[0]["limit"] == ROCE_FITS


def test_cli_bad_env_file_is_exit_2(cli, tmp_path):
    bad = tmp_path / "bad.env"
    bad.write_text("NCCL_IB_HCA mlx5_0\n")
    res = cli("topo", "--root", SYSFS_FIXTURES / "roce-node", "--nccl-env", bad)
    assert res.exit_code == 2 and "expected KEY=VALUE" in res.stderr and "hint:" in res.stderr
    res = cli("topo", "--root", SYSFS_FIXTURES / "roce-node", "--nccl-env", tmp_path / "none")
    assert res.exit_code == 2 and "cannot read" in res.stderr


def test_table_says_which_settings_it_judged(cli):
    res = cli(
        "topo",
        "--root",
        SYSFS_FIXTURES / "roce-node",
        env={"NCCL_IB_GID_INDEX": "3", "NCCL_ALGO": "Ring"},
    )
    assert "NCCL settings judged (environment): NCCL_IB_GID_INDEX, NCCL_ALGO" in res.stdout
    assert "NCCL settings judged" not in cli("topo", "--root", SYSFS_FIXTURES / "vm-no-rdma").stdout
