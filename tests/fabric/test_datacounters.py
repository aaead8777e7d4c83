"""Every switch port's data and packet counters (issue 39, from issue 38's exporter names):
``ibqueryerrors --counters --switch`` read beside the error counters, joined to each port's reading,
exported as treydock/infiniband_exporter's ``port_transmit_data_bytes_total`` ... (bytes = 4-octet
words x 4). Parsed from outputs in the shapes real ones have (64-bit values whose human units
overflow to ``inf``, ``-r``'s ``Link info`` lines, a switch's port 0, a 32-bit switch at its
maximum), then live in the simulator: the exported bytes are the value set on the port (and the
management traffic since), never more than perfquery -x reads just after, and they rise between two
reads; a saved dump keeps them; the command line reads them for -o prom and --textfile."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ibdiag.counters.model import PortCounters, Sample
from ibdiag.errors import UsageError
from ibdiag.fabric import views
from ibdiag.fabric.command import FabricRequest, run
from ibdiag.fabric.datacounters import run_name, with_data
from tests.support.cli import run_cli
from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

SW = "0xb8cef60300000003"
# The shape of a real `ibqueryerrors --counters -r` (a QDR campus's router node, values past 2^32
# words, ibqueryerrors' human units gone to "inf"); the project's own GUIDs and values.
EXTENDED = f"""Data Counters for {SW} "leaf-r2-1"
   GUID {SW} port 0: [PortXmitData == 0 (0.000B)] [PortRcvData == 0 (0.000B)] [PortXmitPkts == 0 (0.000)] [PortRcvPkts == 0 (0.000)] [PortUnicastXmitPkts == 0 (0.000)] [PortUnicastRcvPkts == 0 (0.000)] [PortMulticastXmitPkts == 0 (0.000)] [PortMulticastRcvPkts == 0 (0.000)]
   GUID {SW} port 3: [PortXmitData == 18446744073709551615 (  infPB)] [PortRcvData == 12277010233891 (  infPB)] [PortXmitPkts == 43200188410 (40.233G)] [PortRcvPkts == 43422311879 (40.440G)] [PortUnicastXmitPkts == 43200188366 (40.233G)] [PortUnicastRcvPkts == 43310213208 (40.336G)] [PortMulticastXmitPkts == 44 (44.000)] [PortMulticastRcvPkts == 112098301 (106.905M)]
       Link info:     13    3[  ] ==( 4X          10.0 Gbps Active/  LinkUp)==>  0x0002c90300000311      5    1[  ] "gpu03 mlx5_2" ( )

## Summary: 1 nodes checked, 0 bad nodes found
##          2 ports checked, 0 ports have errors beyond threshold
"""
# A switch without PortCountersExtended: 32-bit PortCounters data counters, one at its maximum.
BASIC = f"""Data Counters for {SW} "leaf-r2-1"
   GUID {SW} port 3: [PortXmitData == 4294967295 (16.000GB)] [PortRcvData == 1200 (4.688KB)] [PortXmitPkts == 300 (300.000)] [PortRcvPkts == 301 (301.000)]
"""


def _sample(*ports: int) -> Sample:
    zeros = {"symbol_error": 0, "port_xmit_wait": 0}
    return Sample(1.0, None, tuple(PortCounters(SW, p, None, dict(zeros), None) for p in ports))


def test_data_counters_join_each_ports_reading_at_their_width():
    got = {pc.port: pc for pc in with_data(_sample(3, 7), EXTENDED).ports}
    pc = got[3]
    assert pc.counters is not None and pc.counters["symbol_error"] == 0  # the errors' read kept
    assert (
        pc.counters["port_xmit_data"] == 2**64 - 1
        and pc.counters["multicast_rcv_packets"] == 112098301
    )
    assert pc.data_bits == 64 and pc.saturated == frozenset({"port_xmit_data"})
    assert pc.xmit_bytes == (2**64 - 1) * 4 and pc.rcv_bytes == 12277010233891 * 4
    assert got[7].counters == {"symbol_error": 0, "port_xmit_wait": 0}  # not listed: unchanged
    basic = with_data(_sample(3), BASIC).ports[0]
    assert basic.data_bits == 32 and basic.saturated == frozenset({"port_xmit_data"})
    assert basic.counters is not None and "unicast_xmit_packets" not in basic.counters
    assert run_name("ibqueryerrors") == "ibqueryerrors-data"
    assert run_name("ibqueryerrors-1") == "ibqueryerrors-data-1"


def test_asking_for_them_from_a_saved_dump_is_a_usage_error(tmp_path: Path):
    net = tmp_path / "f.net"
    net.write_text(rail_fat_tree(hosts=4, rails=2).text())
    with pytest.raises(UsageError, match="--data-counters reads the live fabric"):
        run(FabricRequest(source=net, data_counters=True))


def _exported(result, name: str) -> dict[tuple[str, str], float]:
    """``ibdiag_fabric_switch_<name>`` by (switch GUID, port), as Prometheus reads the text."""
    from ibdiag.output.prom import render_prom

    text = render_prom(views.prom(result))
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == f"ibdiag_fabric_switch_{name}":
                out[(s.labels["guid"], s.labels["port"])] = s.value
    return out


def _perfquery_xmit_words(sim: SimFabric, lid: int, port: int) -> int:
    done = sim.run(["perfquery", "-x", str(lid), str(port)])
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("PortXmitData:"))
    return int(line.rsplit(".", 1)[-1])


def test_live_the_exported_bytes_are_the_ports_words_x4_and_rise(tmp_path: Path):
    need_simulator()
    t = rail_fat_tree()
    sw, port = t.host_cable("gpu03", 2)
    guid = f"0x{sw.guid:016x}"
    planted = 123_456_789
    with SimFabric(t.text(), tmp_path / "sim") as sim:
        sim.console(
            f'PerformanceSet "{sw.node_id}"[{port}] PortCountersExtended.PortXmitData={planted}'
        )
        first = run(FabricRequest(environ=sim.env(), data_counters=True, save=tmp_path / "dump"))
        sent = _exported(first, "port_transmit_data_bytes_total")
        assert len(sent) == 6 * 16  # every cabled port of the 6 switches, 16 each
        got = sent[(guid, str(port))]
        # the planted words x 4, plus the management datagrams that crossed the port since
        assert planted * 4 <= got < (planted + 50_000) * 4
        lid = first.judged.fabric.node(guid).lid  # type: ignore[union-attr]
        assert got <= _perfquery_xmit_words(sim, lid, port) * 4  # read later: never less
        assert _exported(first, "port_receive_packets_total")[(guid, str(port))] > 0
        # Management traffic (another discovery) crosses the tools' own leaf: its counters rise.
        subprocess.run(
            ["ibnetdiscover"], env=sim.env(), cwd=tmp_path, capture_output=True, timeout=60
        )
        second = _exported(
            run(FabricRequest(environ=sim.env(), data_counters=True)),
            "port_transmit_data_bytes_total",
        )
        assert any(second[k] > v for k, v in sent.items())
        assert all(second[k] >= v for k, v in sent.items())
    # the dump keeps them: --from exports the same bytes
    again = run(FabricRequest(source=tmp_path / "dump"))
    assert _exported(again, "port_transmit_data_bytes_total") == sent


def test_the_command_line_reads_them_for_prometheus_and_not_for_json(tmp_path: Path):
    need_simulator()
    with SimFabric(rail_fat_tree(hosts=4, rails=2).text(), tmp_path / "sim") as sim:
        prom = run_cli("fabric", "-o", "prom", env=sim.env())
        assert prom.exit_code == 0, prom.stderr
        assert "ibdiag_fabric_switch_port_transmit_data_bytes_total{" in prom.stdout
        off = run_cli("fabric", "-o", "prom", "--no-data-counters", env=sim.env())
        assert off.exit_code == 0 and "port_transmit_data_bytes_total{" not in off.stdout
        doc = run_cli("fabric", "-o", "json", "--save", str(tmp_path / "plain"), env=sim.env())
        assert doc.exit_code == 0 and not (tmp_path / "plain" / "ibqueryerrors-data.out").exists()
        textfile = tmp_path / "fabric.prom"
        line = run_cli("fabric", "-o", "line", "--textfile", str(textfile), env=sim.env())
        assert line.exit_code == 0, line.stderr
        assert "port_receive_data_bytes_total{" in textfile.read_text()
