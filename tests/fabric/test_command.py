"""``ibdiag.fabric.command.run`` without the command line: the library entry point on the bundled
dumps, its views, the files it writes (``slurm_topology``, ``save``) and the requests it refuses."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ibdiag.config import load_config
from ibdiag.errors import InputError, UsageError
from ibdiag.fabric import views
from ibdiag.fabric.command import FabricRequest, FabricResult, run
from ibdiag.output.outputs import TableLayout
from tests.support.env import FIXTURES
from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

FAULTY = FIXTURES / "fabric" / "rail-fat-tree-faulty"
TWO_TO_ONE = FIXTURES / "fabric" / "two-to-one.net"


def test_run_judges_a_saved_fabric_and_its_views_write_every_format():
    result = run(FabricRequest(source=FAULTY))
    bad = sorted((f.check, f.subject) for f in result.report.findings if f.severity.value != "ok")
    assert bad == [
        ("fabric.errors", "leaf-r2-1:3"),
        ("fabric.link_rate", "leaf-r3-1:11<>spine-1:14"),
        ("fabric.oversubscription", "leaf-r3-1"),
    ]
    assert result.report.failing(strict=False)
    fab = result.judged.fabric
    assert sum(1 for n in fab.nodes if n.kind == "switch") == 6 and len(fab.links()) == 64
    assert result.report.data["source"] == str(FAULTY) and result.report.data["partial"] is False
    out = views.outputs(result)
    assert out.csv is not None and out.prom is not None and out.table is not None
    header, rows = out.csv()
    # one row per cabled port, seen from both ends: 64 links x 2
    assert "remote_guid" in header and len(rows) == 128
    bad_port = next(r for r in rows if r["node"] == "leaf-r2-1" and r["port"] == 3)
    assert bad_port["symbol_error"] == 57 and bad_port["remote"] == "gpu03 mlx5_2"
    names = {m.name for m in out.prom()}
    assert (
        "ibdiag_fabric_switch_port_symbol_error_total" in names and "ibdiag_fabric_tiers" in names
    )
    items = out.table(TableLayout(strict=False, width=160))
    assert str(items[0]).startswith(f"fabric (from {FAULTY}): 6 switches, 32 adapters, 64 links")


def lost(result: FabricResult) -> list[str]:
    return [f.message for f in result.report.findings if f.check == "fabric.link_lost"]


def test_run_since_an_earlier_dump_names_the_links_lost_since():
    assert lost(run(FabricRequest(source=FAULTY, since=FAULTY))) == []
    # two-to-one.net has hosts gpu09-16 on leaves the faulty fabric's hosts are not cabled to
    gone = lost(run(FabricRequest(source=FAULTY, since=TWO_TO_ONE)))
    assert (
        "host link leaf-r0-2 port 1 (cable to gpu09 mlx5_0) was up in the reference and is not now"
        in gone
    )


def test_run_writes_slurm_topology_with_the_hosts_map(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("gpu01 node-a\n# the rest keep their names\n")
    conf = tmp_path / "topology.conf"
    run(FabricRequest(source=TWO_TO_ONE, slurm_topology=conf, hosts=hosts))
    text = conf.read_text()
    assert "node-a" in text and "gpu01" not in text.replace("node-a", "")
    assert "SwitchName=" in text and "Nodes=" in text


def test_run_saves_the_dump_it_judged(tmp_path):
    saved = tmp_path / "dump"
    first = run(FabricRequest(source=FAULTY, save=saved))
    again = run(FabricRequest(source=saved))
    assert [f.to_json() for f in again.report.findings] == [
        f.to_json() for f in first.report.findings
    ]


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        (FabricRequest(source=FAULTY, interval_s=5), "--interval reads the live fabric twice"),
        (FabricRequest(source=FAULTY, routes=True), "--routes reads the live fabric"),
        (FabricRequest(interval_s=0), "--interval 0 is outside"),
        (FabricRequest(timeout_s=5000), "--timeout 5000 is outside"),
        (FabricRequest(port=255), "--port 255 is not a port number"),
        (FabricRequest(source=FAULTY, hosts=FAULTY), "--hosts names Slurm's nodes"),
    ],
)
def test_meaningless_requests_are_usage_errors_before_any_work(request_, said):
    with pytest.raises(UsageError) as e:
        run(request_)
    assert said in e.value.message


def test_a_bad_fabric_setting_is_refused_before_the_tools_run(tmp_path):
    """The config's sections are read first: a live run with a bad [fabric] value says so, not that
    the tools are missing (the environment here has none on its PATH)."""
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[fabric]\nno_such_key = 1\n")
    with pytest.raises(InputError) as e:
        run(FabricRequest(config=load_config(cfg), environ={"PATH": str(tmp_path)}))
    assert "[fabric] has unknown key no_such_key" in e.value.message


def test_every_module_a_format_preloads_exists():
    """FORMAT_MODULES is what a live run imports while the tools run: a wrong name would fail there."""
    for modules in views.FORMAT_MODULES.values():
        for name in modules:
            assert importlib.util.find_spec(name) is not None, name


def test_a_live_run_judges_the_simulated_subnet_and_loads_the_views_meanwhile(tmp_path):
    need_simulator()
    assert "tabnanny" not in sys.modules  # a module nothing here imports: the preload's witness
    with SimFabric(rail_fat_tree().text(), tmp_path / "sim") as sim:
        result = run(FabricRequest(environ=sim.env(), preload=("tabnanny",), timeout_s=30))
    assert "tabnanny" in sys.modules
    assert result.report.data["source"] == "live" and not result.report.failing(strict=True)
    (sm,) = result.judged.fabric.sms
    assert sm.state == "master" and len(result.judged.fabric.links()) == 64
