"""RoCE lossless settings: the roce-lossless profile built once per misconfiguration, each giving exactly
its finding and the value that fits; the healthy node giving none; what cannot be read is unknown."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest

from ibdiag.findings.model import Severity
from ibdiag.node import dcb
from ibdiag.node.discover import discover
from ibdiag.node.roce import active_mtu
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo.configuration import check_configuration, read_configuration
from ibdiag.topo.nccl_env import from_environ
from tests.support.env import SYSFS_FIXTURES, need_root
from tests.sysfsgen.builder import Tree
from tests.sysfsgen.profiles import roce_lossless

JOB = {"NCCL_IB_TC": "106", "NCCL_IB_GID_INDEX": "3"}
PORTS = ("mlx5_0:1", "mlx5_1:1")


def judge(root, env=JOB):
    sysfs = SysfsRoot(root)
    topo = discover(sysfs)
    config = read_configuration(sysfs, topo, from_environ(env), lambda n: dcb.read_saved(root, n))
    return config, check_configuration(topo, config)


def build(tmp_path, **change):
    roce_lossless.build(Tree(tmp_path), **change)
    return tmp_path


def problems(findings):
    return sorted(
        (f.severity.value, f.check, f.subject) for f in findings if f.severity is not Severity.OK
    )


def both(severity, check):
    return [(severity, check, p) for p in PORTS]


MISTAKES = {
    # name: (profile change, job environment, findings, the value that fits)
    # rdma_cm's ToS 106 (DSCP 26) lands on priority 3 as well: it loses PFC with the job's traffic
    "pfc_on_another_priority": (
        {"pfc": (4,)},
        JOB,
        both("fail", "topo.roce_pfc") + both("warn", "topo.roce_cm"),
        {"topo.roce_pfc": "NCCL_IB_TC=128", "topo.roce_cm": 128},
    ),
    "pfc_off_everywhere": ({"pfc": ()}, JOB, both("warn", "topo.roce_pfc"), "prio-pfc 3:on"),
    "traffic_class_unset": ({}, {}, both("fail", "topo.roce_pfc"), "NCCL_IB_TC=104"),
    "pcp_trust_without_sl": ({"dscp_prio": ()}, JOB, both("fail", "topo.roce_pfc"), "NCCL_IB_SL=3"),
    "ecn_np_off_on_traffic_priority": (
        {"ecn_off": (("roce_np", 3),)},
        JOB,
        both("warn", "topo.roce_ecn"),
        1,
    ),
    "ecn_rp_off_on_traffic_priority": (
        {"ecn_off": (("roce_rp", 3),)},
        JOB,
        both("warn", "topo.roce_ecn"),
        1,
    ),
    "rdma_cm_roce_v1": ({"cm_mode": "IB/RoCE v1"}, JOB, both("warn", "topo.roce_cm"), "RoCE v2"),
    "rdma_cm_tos_without_pfc": ({"cm_tos": 0}, JOB, both("warn", "topo.roce_cm"), 104),
    "mtu_1500": ({"mtu": 1500}, JOB, both("warn", "topo.roce_mtu"), 9000),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_mistake_gives_exactly_its_finding(tmp_path, name):
    change, env, expected, fits = MISTAKES[name]
    _, out = judge(build(tmp_path, **change), env)
    assert problems(out) == sorted(expected)
    for f in out:
        if f.severity is not Severity.OK:
            want = fits[f.check] if isinstance(fits, dict) else fits
            assert f.limit == want and f.hint, (f.message, f.limit)


def test_bundled_healthy_node_gives_none_and_says_what_it_read():
    config, out = judge(SYSFS_FIXTURES / "roce-lossless")
    assert problems(out) == []
    ok = {(f.check, f.subject) for f in out}
    assert {
        (c, p) for c in ("topo.roce_pfc", "topo.roce_ecn", "topo.roce_mtu") for p in PORTS
    } <= ok
    doc = config.roce[0].to_json()
    assert doc["dcb"] == {
        "pfc": [3],
        "dscp_prio": [[26, 3]],
        "trust": "dscp",
        "source": "dcb/enp25s0np0",
        "unknown_why": None,
    }
    assert (doc["mtu"], doc["active_mtu"], doc["rdma_cm_roce_mode"], doc["rdma_cm_roce_tos"]) == (
        9000,
        4096,
        "RoCE v2",
        106,
    )


def test_unreadable_settings_are_unknown_never_ok(tmp_path):
    config, out = judge(build(tmp_path, dcb=False, ecn=False, cm_mode=None, cm_tos=None))
    assert [f for f in out if f.check in ("topo.roce_pfc", "topo.roce_ecn", "topo.roce_cm")] == []
    doc = config.roce[0].to_json()
    assert doc["dcb"]["pfc"] is None and doc["dcb"]["trust"] is None
    assert "no dcb/" in doc["dcb"]["unknown_why"]
    assert doc["ecn_np"] is None and doc["rdma_cm_roce_mode"] is None


def test_existing_fixtures_gain_no_roce_problem():
    # roce-node has no ecn/, configfs or dcb JSON: unknown, so nothing; dgx-h100's RoCE ports are storage.
    for name in ("roce-node", "dgx-h100", "bnxt-roce"):
        _, out = judge(SYSFS_FIXTURES / name, {})
        assert [f for f in problems(out) if f[1].startswith("topo.roce_")] == []


@pytest.mark.parametrize(
    "netdev_mtu, active", [(9000, 4096), (4200, 4096), (4191, 2048), (1500, 1024), (300, None)]
)
def test_active_mtu_follows_iboe_get_mtu(netdev_mtu, active):
    assert active_mtu(netdev_mtu) == active


def test_malformed_dcb_output_is_unknown(tmp_path):
    root = build(tmp_path)
    (root / "dcb" / "enp25s0np0" / "pfc.json").write_text('{"prio_pfc": [true, "on"]}')
    config, out = judge(root)
    assert config.roce[0].dcb.pfc is None and "prio_pfc" in config.roce[0].dcb.unknown_why
    assert [f.subject for f in out if f.check == "topo.roce_pfc"] == ["mlx5_1:1"]


# --- the live dcb ----------------------------------------------------------------------------------


def test_real_dcb_on_a_veth_is_unknown_with_the_reason():
    """iproute2's dcb on a real veth pair: veth has no DCB, so the state is unknown, never ok."""
    need_root()
    path = "/usr/sbin/dcb"
    if not os.path.exists(path):
        pytest.skip("iproute2's dcb is not installed")
    subprocess.run(
        ["ip", "link", "add", "ibdcbt0", "type", "veth", "peer", "name", "ibdcbt1"], check=True
    )
    try:
        state = dcb.read_live(path, "ibdcbt0")
    finally:
        subprocess.run(["ip", "link", "del", "ibdcbt0"], check=False)
    assert state.pfc is None and state.source == "dcb -j"
    assert "not supported" in state.unknown_why.lower()
    assert dcb.read_live(None, "eth0").unknown_why.startswith("iproute2's dcb is not installed")


def test_dcb_that_hangs_is_cut_by_the_timeout(tmp_path):
    # A stand-in for dcb on a driver that never answers (no such driver here): a real process that sleeps.
    fake = tmp_path / "dcb"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    state = dcb.read_live(str(fake), "eth0", timeout_s=0.5)
    assert state.pfc is None and "did not answer within 0.5 s" in state.unknown_why


def test_dcb_json_as_iproute2_prints_it_is_parsed(tmp_path):
    # What dcb -j prints (dcb_pfc.c, dcb_app.c), through the real subprocess path of read_live.
    fake = tmp_path / "dcb"
    pfc = json.dumps(
        {
            "pfc_cap": 8,
            "macsec_bypass": False,
            "delay": 0,
            "prio_pfc": [False] * 3 + [True] + [False] * 4,
        }
    )
    app = json.dumps({"dscp_prio": [[26, 3, " "], [48, 6, " "]]})
    fake.write_text(f"#!/bin/sh\ncase \"$2\" in pfc) echo '{pfc}';; app) echo '{app}';; esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    state = dcb.read_live(str(fake), "eth0")
    assert state.pfc == (False, False, False, True, False, False, False, False)
    assert state.dscp_prio == ((26, 3), (48, 6)) and state.trust == "dscp"


def test_cli_on_the_bundled_node_with_and_without_the_jobs_traffic_class(cli):
    root = SYSFS_FIXTURES / "roce-lossless"
    res = cli("topo", "--root", root, "-o", "line", env={"NCCL_IB_TC": ""})
    assert res.exit_code == 1 and "topo.roce_pfc mlx5_0:1" in res.stdout
    res = cli("topo", "--root", root, "-o", "json", env={"NCCL_IB_TC": "106"})
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["status"] == "ok", res.stdout
    assert [r["dcb"]["pfc"] for r in doc["roce"]] == [[3], [3]]


def test_a_malformed_configfs_value_is_unknown_and_said(cli, tmp_path):
    root = build(tmp_path, cm_mode="RoCE v3")
    config, out = judge(root)
    assert config.roce[0].settings.cm_mode is None and not [
        f for f in out if f.check == "topo.roce_cm"
    ]
    doc = json.loads(cli("topo", "--root", root, "-o", "json", env={"NCCL_IB_TC": "106"}).stdout)
    said = [f for f in doc["findings"] if f["check"] == "topo.sysfs_value"]
    assert {f["subject"] for f in said} == {
        f"/sys/kernel/config/rdma_cm/mlx5_{i}/ports/1/default_roce_mode" for i in (0, 1)
    }


def test_a_dcb_dir_leading_outside_the_tree_is_not_read(tmp_path):
    elsewhere = build(tmp_path / "other")
    root = build(tmp_path / "node", pfc=())
    shutil.rmtree(root / "dcb")
    (root / "dcb").symlink_to(elsewhere / "dcb")
    state = dcb.read_saved(root, "enp25s0np0")
    assert state.pfc is None and "outside the tree" in state.unknown_why
