"""``ibdiag report`` on the fixture fleet: every planted outlier named, bad files skipped, every format."""

from __future__ import annotations

import json
import os
import re
from xml.etree import ElementTree as ET

from ibdiag.report.hostlists import host_list
from tests.support.fleet_fixtures import host_of, variants


def _report(cli, *args):
    res = cli("report", *args)
    return res, (
        json.loads(res.stdout) if "-o" in args and args[args.index("-o") + 1] == "json" else None
    )


def test_every_planted_outlier_is_named_and_nothing_on_healthy_nodes(cli, fleet_dir):
    res, doc = _report(cli, fleet_dir, "-o", "json")
    assert res.exit_code == 1, res.stderr  # failing nodes
    assert doc["schema"] == "ibdiag.report/1"
    named = {(o["host"], o["key"], o["value"]) for o in doc["outliers"]}
    for variant, (_, outlier) in variants().items():
        if outlier is not None:
            assert (host_of(variant), *outlier) in named, (variant, outlier)
    hosts_named = {o["host"] for o in doc["outliers"]}
    assert hosts_named == {host_of(v) for v, (_, o) in variants().items() if o is not None}
    firmware = next(o for o in doc["outliers"] if o["key"] == "mlx5_3 firmware")
    assert (firmware["majority"], firmware["majority_hosts"], firmware["hosts"]) == (
        "28.39.1002",
        9,
        10,
    )
    assert doc["splits"] == []
    config = {f["subject"]: f for f in doc["findings"] if f["check"] == "report.config"}
    assert (
        "mlx5_3 firmware is 28.39.2048 (9 of 10 nodes: 28.39.1002)"
        in config[host_of("firmware")]["message"]
    )


def test_kernel_and_adapter_driver_drift_are_outliers_like_firmware(cli, fleet_dir):
    _, doc = _report(cli, fleet_dir, "-o", "json")
    by_host: dict = {}
    for o in doc["outliers"]:
        by_host.setdefault(o["host"], {})[o["key"]] = o
    kernel = by_host[host_of("kernel")]
    assert list(kernel) == ["kernel"]  # the one thing that differs
    assert (
        kernel["kernel"]["value"],
        kernel["kernel"]["majority"],
        kernel["kernel"]["majority_hosts"],
    ) == ("5.15.0-1071-nvidia", "5.15.0-1063-nvidia", 9)
    ofed = by_host[host_of("ofed")]
    assert sorted(ofed) == sorted(
        f"mlx5_{i} driver" for i in range(12)
    )  # every adapter, nothing else
    assert {(o["value"], o["majority"]) for o in ofed.values()} == {
        ("mlx5_core 24.10-1.1.4", "mlx5_core 24.07-0.6.1")
    }
    config = {f["subject"]: f for f in doc["findings"] if f["check"] == "report.config"}
    assert (
        "kernel is 5.15.0-1071-nvidia (9 of 10 nodes: 5.15.0-1063-nvidia)"
        in config[host_of("kernel")]["message"]
    )
    # the 12 adapters' same difference is one setting in the node's finding (mlx5_[0-11] driver)
    adapters = host_list(f"mlx5_{i}" for i in range(12))
    assert config[host_of("ofed")]["message"] == (
        f"differs from the fleet's majority in 12 settings: {adapters} driver is mlx5_core "
        "24.10-1.1.4 (9 of 10 nodes: mlx5_core 24.07-0.6.1)"
    )
    rows = {r["host"]: r for r in doc["nodes"]}
    assert rows[host_of("kernel")]["status"] == "warn" and rows[host_of("kernel")]["outliers"] == [
        "kernel"
    ]
    assert doc["not_compared"] == []


def test_topo_files_without_versions_are_not_outliers(cli, fleet_dir, tmp_path):
    """A topo file of an older ibdiag carries no kernel_release or driver_module: that node says nothing
    about them, so it neither counts towards nor differs from the majority (as a missing fw_ver)."""
    old = tmp_path / "old"
    old.mkdir()
    for path in fleet_dir.glob("*.topo.json"):
        doc = json.loads(path.read_text())
        if doc["host"] == host_of("healthy"):
            for key in ("kernel_release", "kernel_release_source"):
                doc.pop(key)
            for a in doc["adapters"]:
                for key in ("driver_module", "driver_version", "driver_version_kind"):
                    a.pop(key)
        (old / path.name).write_text(json.dumps(doc))
    _, doc = _report(cli, old, "-o", "json")
    assert host_of("healthy") not in {o["host"] for o in doc["outliers"]}
    kernel = next(o for o in doc["outliers"] if o["key"] == "kernel")
    assert (kernel["host"], kernel["majority_hosts"], kernel["hosts"]) == (host_of("kernel"), 8, 9)


def test_malformed_version_fields_skip_the_file(cli, fleet_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    src = json.loads(
        next(
            p for p in fleet_dir.glob("*.topo.json") if p.name.startswith(host_of("healthy"))
        ).read_text()
    )
    for name, change in {
        "kernel": lambda d: d.update(kernel_release="6.8 \x1b[2J"),
        "long": lambda d: d.update(kernel_release="6" * 65),
        "module": lambda d: d["adapters"][0].update(driver_module="../etc"),
        "kind": lambda d: d["adapters"][0].update(driver_version_kind="guess"),
        "version": lambda d: d["adapters"][0].update(driver_version="1" * 65),
    }.items():
        doc = json.loads(json.dumps(src))
        change(doc)
        (bad / f"{name}.topo.json").write_text(json.dumps(doc))
    (bad / "good.topo.json").write_text(json.dumps(src))
    res, doc = _report(cli, bad, "-o", "json")
    assert res.exit_code == 0, res.stderr
    reasons = {os.path.basename(s["path"]): s["reason"] for s in doc["skipped"]}
    assert set(reasons) >= {
        f"{n}.topo.json" for n in ("kernel", "long", "module", "kind", "version")
    }, reasons
    assert (
        "kernel_release" in reasons["kernel.topo.json"]
        and "driver_version_kind" in reasons["kind.topo.json"]
    )


def test_node_rows_drain_list_counter_errors_and_the_sweep(cli, fleet_dir):
    _, doc = _report(cli, fleet_dir, "-o", "json")
    rows = {r["host"]: r for r in doc["nodes"]}
    assert set(rows) == {host_of(v) for v in variants()}
    assert rows[host_of("healthy")]["status"] == "ok" and rows[host_of("healthy")]["sources"] == [
        "topo",
        "counters",
        "sweep",
    ]
    # topo's and counters' port-rate check (its id is being renamed: port.rate), once per check id
    slow_port = rows[host_of("slow-port")]["failing"]
    assert [f for f in slow_port if f.endswith("(mlx5_8:1)") and "rate" in f] == slow_port and len(
        set(slow_port)
    ) == len(slow_port) >= 1
    assert "topo.pcie_width (mlx5_7)" in rows[host_of("narrow")]["failing"]
    assert any(f.startswith("sweep.node (rank ") for f in rows[host_of("narrow")]["failing"])
    assert rows[host_of("narrow")]["sweep"] == "bad"
    assert "counters.errors (mlx5_1:1)" in rows[host_of("errors")]["warnings"]
    assert any(
        w.startswith("sweep.rails") for w in rows[host_of("wrong-socket")]["warnings"]
    )  # 7 rails, the fleet 8
    assert doc["drain"] == [host_of("narrow"), host_of("slow-port")] or doc["drain"] == [
        host_of("slow-port"),
        host_of("narrow"),
    ]
    assert set(doc["drain"]) == {host_of("narrow"), host_of("slow-port")}
    top = doc["counter_errors"][:2]
    assert [(c["host"], c["port"], c["counter"], c["value"], c["per_second"]) for c in top] == [
        (host_of("errors"), "mlx5_1:1", "symbol_error", 57.0, False),
        (host_of("errors"), "mlx5_1:1", "link_downed", 3.0, False),
    ]
    (sweep,) = doc["sweeps"]
    assert sweep["bad_nodes"] == [
        f"{host_of('narrow')} (rank {sorted(host_of(v) for v in variants()).index(host_of('narrow'))})"
    ]
    assert sweep["bad_links"] == [] and sweep["unreachable"] == []
    per_node = [f for f in doc["findings"] if f["check"] == "report.node"]
    assert len(per_node) == len(variants())
    assert doc["not_compared"] == []


def test_bad_files_are_named_and_skipped(cli, fleet_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "truncated.json").write_text('{"schema": "ibdiag.topo/1", "host": "x"')
    (bad / "foreign.json").write_text('{"schema": "acme.thing/3"}')
    (bad / "huge.json").write_text(" " * (2**20 + 1) + "{}")
    (bad / "evil.json").write_text(
        json.dumps(
            {
                "schema": "ibdiag.topo/1",
                "version": "0",
                "host": "a\u202eb",
                "generated_at": "x",
                "status": "ok",
                "findings": [],
            }
        )
    )
    (bad / "wrongtype.json").write_text(
        json.dumps(
            {
                "schema": "ibdiag.counters/1",
                "version": "0",
                "host": "n1",
                "generated_at": "x",
                "status": "ok",
                "findings": [],
                "mode": "snapshot",
                "ports": [{"adapter": "mlx5_0", "port": 1, "counters": {"symbol_error": "lots"}}],
            }
        )
    )
    (bad / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    os.mkfifo(bad / "fifo.json")
    res, doc = _report(
        cli, fleet_dir, bad, str(tmp_path / "nothing-*.json"), "--max-file-size", "1M", "-o", "json"
    )
    assert res.exit_code == 1
    reasons = {os.path.basename(s["path"]): s["reason"] for s in doc["skipped"]}
    assert reasons["truncated.json"].startswith("not JSON")
    assert (
        "acme.thing/3" in reasons["foreign.json"]
        and "is not one ibdiag report reads" in reasons["foreign.json"]
    )
    assert "more than the 1048576 allowed" in reasons["huge.json"]
    assert reasons["evil.json"] == "host: holds control or non-printable characters"
    assert reasons["wrongtype.json"] == "ports[0].counters.symbol_error: must be a finite number"
    assert reasons["binary.json"] == "not UTF-8 text"
    assert reasons["fifo.json"] == "a FIFO, not a regular file"
    assert reasons["nothing-*.json"] == "the pattern matches no file"
    warned = {
        os.path.basename(f["subject"]) for f in doc["findings"] if f["check"] == "report.input"
    }
    assert warned == set(reasons)
    assert len(doc["nodes"]) == len(variants())  # the good files are all still read


def test_nothing_readable_is_exit_2(cli, tmp_path):
    (tmp_path / "a.json").write_text("not json")
    res = cli("report", tmp_path)
    assert res.exit_code == 2
    assert (
        "ibdiag: error: nothing readable among the inputs:" in res.stderr
        and "a.json: not JSON" in res.stderr
    )
    assert cli("report", tmp_path / "missing").exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no .json file found" in cli("report", empty).stderr


def test_a_glob_and_single_files(cli, fleet_dir):
    res, doc = _report(cli, str(fleet_dir / "*.topo.json"), "-o", "json")
    assert {i["kind"] for i in doc["inputs"]} == {"topo"} and len(doc["inputs"]) == len(variants())
    res, doc = _report(cli, fleet_dir / f"{host_of('healthy')}.topo.json", "-o", "json")
    assert res.exit_code == 0 and [r["host"] for r in doc["nodes"]] == [host_of("healthy")]


def test_table_line_csv_prom_junit(cli, fleet_dir, tmp_path):
    import io

    import pandas as pd

    table = cli("report", fleet_dir, env={"COLUMNS": "200"})
    assert table.exit_code == 1
    for text in (
        "Configuration outliers",
        "Top counter errors",
        "Worst nodes",
        "drain: ",
        "5.15.0-1071-nvidia",
        "mlx5_core 24.10-1.1.4",
    ):
        assert text in table.stdout
    assert "not compared" not in table.stdout  # topo carries every setting the report compares
    line = cli("report", fleet_dir, "-o", "line").stdout
    assert line.count("\n") == 1 and len(line.rstrip("\n")) <= 80
    assert re.match(r"^fleet FAIL: drain dgx-(narrow|slow-port) dgx-(narrow|slow-port)", line)
    df = pd.read_csv(io.StringIO(cli("report", fleet_dir, "-o", "csv").stdout))
    assert len(df) == len(variants()) and set(df.columns) >= {
        "host",
        "status",
        "failing",
        "outliers",
    }
    prom = cli("report", fleet_dir, "-o", "prom").stdout
    assert 'ibdiag_fleet_nodes{status="fail"} 2' in prom
    assert (
        f'ibdiag_check_severity{{command="report",check="report.node",subject="{host_of("narrow")}"}} 2'
        in prom
    )
    cases = ET.fromstring(cli("report", fleet_dir, "-o", "junit").stdout).findall(
        ".//testcase[@classname='report.node']"
    )
    assert sorted(c.get("name") for c in cases) == sorted(host_of(v) for v in variants())
    png = tmp_path / "matrix.png"
    assert cli("report", fleet_dir, "--png", png, "-o", "line").exit_code == 1
    assert png.read_bytes()[:4] == b"\x89PNG"
    res = cli("report", fleet_dir / f"{host_of('healthy')}.topo.json", "--png", png)
    assert res.exit_code == 2 and "no sweep file was given" in res.stderr
