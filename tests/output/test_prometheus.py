"""Prometheus (#11): --textfile on every way out, and node_exporter's own names and values, checked
against a real node_exporter (Debian's prometheus-node-exporter) reading the same fixture tree, and
read back by prometheus_client's parser and node_exporter's textfile collector."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.env import SYSFS_FIXTURES, need_tool

F = SYSFS_FIXTURES


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out


def value(parsed, name, **labels):
    return parsed[(name, tuple(sorted(labels.items())))]


def test_textfile_keeps_the_exit_status_and_publishes_a_failing_node(cli, tmp_path):
    target = tmp_path / "ibdiag-topo.prom"
    res = cli("topo", "--root", F / "dgx-h100-faulty", "--textfile", target, "-o", "line")
    assert res.exit_code == 1 and res.stdout.startswith("FAIL ")
    parsed = samples(target.read_text())
    assert value(parsed, "ibdiag_up", command="topo") == 1
    assert value(parsed, "ibdiag_status", command="topo") == 2
    assert (
        abs(value(parsed, "ibdiag_last_run_timestamp_seconds", command="topo") - time.time()) < 60
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ibdiag-topo.prom"
    ]  # no temporary file left


@pytest.mark.parametrize(
    "argv,status",
    [
        (["counters", "--root", F / "vm-no-rdma"], 3),  # could not run
        (["topo", "--root", F / "missing"], 2),  # bad input, found by the command
        (["topo", "--root", F / "dgx-h100", "--bogus"], 2),  # usage error, found by click
    ],
)
def test_textfile_on_exit_2_and_3_says_ibdiag_up_0(cli, tmp_path, argv, status):
    target = tmp_path / "ibdiag.prom"
    good = cli(argv[0], "--root", F / "dgx-h100", "--textfile", target)
    assert (
        good.exit_code == 0
        and value(samples(target.read_text()), "ibdiag_up", command=argv[0]) == 1
    )
    res = cli(*argv, "--textfile", target)
    assert res.exit_code == status
    parsed = samples(target.read_text())  # the healthy file is replaced, never left standing
    assert value(parsed, "ibdiag_up", command=argv[0]) == 0
    assert (
        abs(value(parsed, "ibdiag_last_run_timestamp_seconds", command=argv[0]) - time.time()) < 60
    )
    assert not any(name.startswith("ibdiag_status") for name, _ in parsed)


def test_textfile_refuses_what_cannot_be_written(cli, tmp_path):
    res = cli("topo", "--root", F / "dgx-h100", "--textfile", tmp_path / "no" / "such.prom")
    assert res.exit_code == 2 and "--textfile" in res.stderr
    res = cli("counters", "--root", F / "dgx-h100", "--watch", "--textfile", tmp_path / "x.prom")
    assert res.exit_code == 2


def test_base_units_and_no_state_in_label_values(cli):
    topo = samples(cli("topo", "--root", F / "dgx-h100", "-o", "prom").stdout)
    names = {name for name, _ in topo}
    assert not any(n.endswith(("_gbps", "_gbs")) for n in names), names
    assert (
        value(
            topo,
            "ibdiag_topo_port_rate_bytes_per_second",
            device="mlx5_0",
            port="1",
            link_layer="InfiniBand",
        )
        == 400e9 / 8
    )
    assert value(topo, "ibdiag_topo_peermem_loaded") in (0, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def node_exporter(*flags: str):
    exe = need_tool("prometheus-node-exporter")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--collector.disable-defaults", f"--web.listen-address=127.0.0.1:{port}", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    yield r.read().decode()
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"node_exporter did not serve: {proc.stderr.read().decode() if proc.poll() is not None else 'timeout'}"
                    ) from None
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["dgx-h100", "hgx-dualport", "roce-node", "dgx-h100-faulty"])
def test_node_exporter_names_and_values_match(cli, fixture):
    """Every node_infiniband_* sample node_exporter's infiniband collector exports for the tree, ibdiag
    exports too, with the same labels and value (topo: node_infiniband_info; counters: the counters)."""
    root = F / fixture
    with node_exporter("--collector.infiniband", f"--path.sysfs={root / 'sys'}") as text:
        theirs = {k: v for k, v in samples(text).items() if k[0].startswith("node_infiniband_")}
    ours = {
        **samples(cli("topo", "--root", root, "-o", "prom").stdout),
        **samples(cli("counters", "--root", root, "-o", "prom").stdout),
    }
    assert len(theirs) > 20
    assert {name for name, _ in theirs} <= {name for name, _ in ours}
    missing = sorted(set(theirs) - set(ours))
    assert missing == []
    wrong = {
        k: (theirs[k], ours[k]) for k in theirs if ours[k] != pytest.approx(theirs[k], rel=1e-9)
    }
    assert wrong == {}


@pytest.mark.slow
def test_node_exporter_textfile_collector_reads_both_files(cli, tmp_path):
    root = F / "dgx-h100-faulty"
    assert cli("topo", "--root", root, "--textfile", tmp_path / "ibdiag-topo.prom").exit_code == 1
    assert cli(
        "counters", "--root", root, "--textfile", tmp_path / "ibdiag-counters.prom"
    ).exit_code in (0, 1)
    with node_exporter(
        "--collector.textfile", f"--collector.textfile.directory={tmp_path}"
    ) as text:
        parsed = samples(text)
    assert value(parsed, "node_textfile_scrape_error") == 0
    assert (
        value(parsed, "ibdiag_up", command="topo") == 1
        and value(parsed, "ibdiag_up", command="counters") == 1
    )
    assert value(parsed, "ibdiag_status", command="topo") == 2
    assert any(name == "node_infiniband_info" for name, _ in parsed)
    # one check, one series: port.rate/port.state are judged by both commands, exported by topo only
    severity = [labels for name, labels in parsed if name == "ibdiag_check_severity"]
    keys = [(dict(lb)["check"], dict(lb)["subject"]) for lb in severity]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    owners = {dict(lb)["command"] for lb in severity if dict(lb)["check"].startswith("port.")}
    assert owners == {"topo"}
    assert (
        value(
            parsed, "ibdiag_check_severity", command="topo", check="port.rate", subject="mlx5_7:1"
        )
        == 2
    )
    # counters still judges the ports (its status and line); only the series has one owner
    assert value(parsed, "ibdiag_status", command="counters") == 2
