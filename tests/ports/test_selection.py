"""Which adapters an expectation means (issue 38): ``--expect-on SET`` / ``[topo] expect_on`` /
``[ports] expect_on``, and a GPU node without a usable adapter failing with ``[topo] gpus_need_adapters``.
Through the library entry point (``topo.command.run``) on the bundled fixtures and on a copy of the
healthy one with a cable pulled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ibdiag.config import load_config
from ibdiag.errors import InputError, UsageError
from ibdiag.findings.model import Severity
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.config import SetKind, parse_set
from ibdiag.ports.selection import gpu_facing, select_adapters
from ibdiag.topo.command import TopoRequest, run
from tests.support.env import SYSFS_FIXTURES

DGX = SYSFS_FIXTURES / "dgx-h100"
FAULTY = SYSFS_FIXTURES / "dgx-h100-faulty"
NO_MLX5 = SYSFS_FIXTURES / "gpu-no-mlx5"
COMPUTE = [f"mlx5_{i}" for i in (0, 1, 2, 3, 6, 7, 8, 9)]


def _topo(root: Path):
    return discover(SysfsRoot(root))


def _findings(result, check: str):
    return [f for f in result.report.findings if f.check == check]


@pytest.mark.parametrize(
    "text,kind,layer,patterns",
    [
        ("all", SetKind.ALL, None, ()),
        (" GPU ", SetKind.GPU, None, ()),
        ("ib", SetKind.LINK_LAYER, "InfiniBand", ()),
        ("InfiniBand", SetKind.LINK_LAYER, "InfiniBand", ()),
        ("roce", SetKind.LINK_LAYER, "Ethernet", ()),
        ("mlx5_[0-3], mlx5_4:1,mlx5_[0-3]", SetKind.NAMES, None, ("mlx5_[0-3]", "mlx5_4:1")),
    ],
)
def test_a_set_parses_to_what_it_names(text, kind, layer, patterns):
    s = parse_set(text)
    assert (s.kind, s.link_layer, s.patterns) == (kind, layer, patterns)
    assert parse_set(s.spec) == s  # what the config and the messages carry reads back the same


@pytest.mark.parametrize(
    "text",
    ["", "  ", "mlx5_0,", "bad name", "mlx5_0:x", "a" * 65, "\x1b[2J", ",".join(["m"] * 257)],
)
def test_a_bad_set_is_refused(text):
    with pytest.raises(ValueError):
        parse_set(text)


def test_the_gpu_facing_adapters_of_the_fixtures():
    assert gpu_facing(_topo(DGX)) == tuple(COMPUTE)  # not the four storage RoCE functions
    # GPU2's rail adapter is in a socket-1 slot (mlx5_11): it faces no GPU, GPU2 shares mlx5_0..2
    assert gpu_facing(_topo(FAULTY)) == (
        "mlx5_0",
        "mlx5_1",
        "mlx5_2",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
    )
    assert (
        len(gpu_facing(_topo(SYSFS_FIXTURES / "hgx-dualport"))) == 16
    )  # both functions of each card
    assert gpu_facing(_topo(NO_MLX5)) == ()
    assert gpu_facing(_topo(SYSFS_FIXTURES / "rxe-node")) == ()  # no GPU


def test_a_pulled_cable_does_not_shrink_the_gpu_facing_set(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(DGX, root, symlinks=True)
    port = (
        root
        / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0/infiniband/mlx5_0/ports/1"
    )
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("2: Polling\n")
    topo = _topo(root)
    assert "mlx5_0:1" not in {f"{p.adapter}:{p.port}" for p in topo.nccl_ports}  # NCCL loses it
    assert gpu_facing(topo) == tuple(COMPUTE)  # the node was still built with it
    result = run(TopoRequest(root=root, expect_on="gpu", expect_adapters=8, expect_rate_gbps=400))
    (adapters,) = _findings(result, "topo.adapters")
    assert adapters.severity is Severity.OK and adapters.value == 8
    state = {f.subject: f.severity for f in _findings(result, "port.state")}
    assert state["mlx5_0:1"] is Severity.FAIL  # the pulled cable fails where it is


def test_expect_on_gpu_judges_the_compute_adapters_and_leaves_storage_to_its_peers():
    result = run(TopoRequest(root=DGX, expect_on="gpu", expect_adapters=8, expect_rate_gbps=400))
    assert not result.report.failing()
    rates = {f.subject: f for f in _findings(result, "port.rate")}
    assert {s for s, f in rates.items() if f.limit == 400} == {f"{a}:1" for a in COMPUTE}
    assert rates["mlx5_4:1"].limit == 200  # the fastest active Ethernet port among the storage ones
    (adapters,) = _findings(result, "topo.adapters")
    assert adapters.message.startswith("8 GPU-facing RDMA adapter(s) (expect_on gpu: mlx5_0,")
    # without the set, as the old NHC line: the storage ports fail
    old = run(TopoRequest(root=DGX, expect_adapters=8, expect_rate_gbps=400))
    failing = sorted(f.subject for f in old.report.findings if f.severity is Severity.FAIL)
    assert failing == ["mlx5_10:1", "mlx5_11:1", "mlx5_4:1", "mlx5_5:1"]


def test_a_missing_gpu_facing_adapter_fails_the_count_and_says_which_were_counted():
    result = run(TopoRequest(root=FAULTY, expect_on="gpu", expect_adapters=8))
    (adapters,) = _findings(result, "topo.adapters")
    assert adapters.severity is Severity.FAIL and (adapters.value, adapters.limit) == (7, 8)
    assert (
        "7 GPU-facing RDMA adapter(s) found, 8 expected (expect_on gpu: mlx5_0, mlx5_1, mlx5_2, mlx5_5"
        in adapters.message
    )
    # counted by link layer the misplaced one is there: 8 InfiniBand adapters
    (ib,) = _findings(
        run(TopoRequest(root=FAULTY, expect_on="ib", expect_adapters=8)), "topo.adapters"
    )
    assert ib.severity is Severity.OK and ib.value == 8


@pytest.mark.parametrize(
    "spec,n", [("mlx5_[0-3],mlx5_[6-9]", 8), ("mlx5_4:1,mlx5_5", 2), ("ethernet", 4), ("all", 12)]
)
def test_named_and_link_layer_sets_count_what_they_name(spec, n):
    assert len(select_adapters(parse_set(spec), _topo(DGX))) == n


def test_the_config_keys_and_the_flag(tmp_path):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text(
        '[topo]\nexpect_adapters = 8\nexpect_on = "ib"\n[ports]\nexpected_rate_gbps = 400\nexpect_on = "ib"\n'
    )
    result = run(TopoRequest(root=DGX, config=load_config(cfg)))
    assert not result.report.failing()
    # the flag overrides both keys
    result = run(TopoRequest(root=DGX, config=load_config(cfg), expect_on="all"))
    assert bool(result.report.failing())
    cfg.write_text('[ports]\nexpect_on = "gpu nodes"\n')
    with pytest.raises(InputError, match=r"\[ports\] expect_on: gpu nodes is neither"):
        run(TopoRequest(root=DGX, config=load_config(cfg)))
    with pytest.raises(UsageError, match="--expect-on: is empty"):
        run(TopoRequest(root=DGX, expect_on=" "))


def test_a_gpu_node_without_its_fabric_fails_when_the_config_says_it_needs_one(tmp_path):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[topo]\ngpus_need_adapters = true\n")
    (warn,) = _findings(run(TopoRequest(root=NO_MLX5)), "topo.adapters")
    assert warn.severity is Severity.WARN and "gpus_need_adapters" in (warn.hint or "")
    result = run(TopoRequest(root=NO_MLX5, config=load_config(cfg)))
    (fail,) = _findings(result, "topo.adapters")
    assert fail.severity is Severity.FAIL and bool(result.report.failing())
    assert fail.message.startswith("8 GPU(s) but no usable RDMA adapter")
    assert "12 Mellanox PCI function(s) have no RDMA device" in fail.message
    # nodes without GPUs, or with their adapters, are not concerned
    for name in ("dgx-h100", "vm-no-rdma", "rxe-node", "roce-node"):
        result = run(TopoRequest(root=SYSFS_FIXTURES / name, config=load_config(cfg)))
        (f,) = _findings(result, "topo.adapters")
        assert f.severity is Severity.OK, (name, f)


def test_the_cli_refuses_a_bad_set_with_a_hint(cli):
    r = cli("topo", "--root", DGX, "--expect-on", "mlx5_0;rm")
    assert r.exit_code == 2 and "--expect-on: mlx5_0;rm is neither" in r.stderr
    assert "hint: give all, gpu" in r.stderr


def test_counters_takes_the_same_set_as_topo(cli):
    """counters --expect-on: the GPU-facing set is discovered from the node's topology, as topo does; the
    documented line passes a healthy DGX H100 with its 200 Gb/s storage ports."""
    root = str(SYSFS_FIXTURES / "dgx-h100")
    res = cli("counters", "--root", root, "--expect-rate", "400", "-o", "line")
    assert res.exit_code == 1 and "port.rate" in res.stdout
    res = cli(
        "counters", "--root", root, "--expect-on", "gpu", "--expect-rate", "400", "-o", "line"
    )
    assert res.exit_code == 0, res.stdout
    res = cli(
        "counters", "--root", root, "--expect-on", "gpu", "--expect-rate", "800", "-o", "json"
    )
    failing = {f["subject"] for f in json.loads(res.stdout)["findings"] if f["severity"] == "fail"}
    assert res.exit_code == 1 and len(failing) == 8


def test_a_set_that_holds_no_port_is_said(cli):
    root = str(SYSFS_FIXTURES / "dgx-h100")
    for command in ("topo", "counters"):
        res = cli(
            command, "--root", root, "--expect-on", "mlx9_*", "--expect-rate", "400", "-o", "json"
        )
        found = [f for f in json.loads(res.stdout)["findings"] if f["check"] == "port.expect_on"]
        assert found and found[0]["severity"] == "warn", (command, res.stdout[-400:])
        res = cli(command, "--root", root, "--expect-on", "mlx9_*", "-o", "json")
        assert not [f for f in json.loads(res.stdout)["findings"] if f["check"] == "port.expect_on"]
