"""``counters --history`` and ``topo --history`` end to end, on a store seeded with earlier readings."""

from __future__ import annotations

import json
import os
import time

from ibdiag.history.config import HistoryConfig
from ibdiag.history.store import write_record
from tests.history.support import HOUR, counters_record
from tests.support.counters import node, write
from tests.support.env import REPO, SYSFS_FIXTURES


def _seed(tmp_path, flaps: int, hours_ago: float):
    root = tmp_path / "n"
    node(root, {}, {})
    store = tmp_path / "store"
    store.mkdir()
    write_record(
        store, counters_record(root, time.time() - (hours_ago + 1) * HOUR), HistoryConfig()
    )
    write(root, "mlx5_0", "link_downed", flaps)
    write_record(store, counters_record(root, time.time() - hours_ago * HOUR), HistoryConfig())
    return root, store


def _history(res):
    doc = json.loads(res.stdout)
    return doc, {
        (f["check"], f["subject"]): f for f in doc["findings"] if f["check"].startswith("history.")
    }


def test_counters_fails_a_port_that_flapped_twice(cli, tmp_path):
    root, store = _seed(tmp_path, flaps=2, hours_ago=1)
    res = cli("counters", "--root", root, "--history", store, "-o", "json")
    assert res.exit_code == 1, res.stderr
    doc, found = _history(res)
    assert found[("history.flaps", "mlx5_0:1")]["severity"] == "fail"
    assert found[("history.flaps", "mlx5_1:1")]["severity"] == "ok"
    ports = {p["adapter"]: p for p in doc["history"]["ports"]}
    assert ports["mlx5_0"]["flaps"] == 2 and ports["mlx5_0"]["last_flap"]
    assert len([n for n in os.listdir(store) if n.endswith("-counters.json")]) == 3


def test_recovered_after_the_recovery_window(cli, tmp_path):
    root, store = _seed(tmp_path, flaps=2, hours_ago=6)
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[history]\nrecovery_hours = 5\n")
    res = cli("counters", "--root", root, "--history", store, "--config", cfg, "-o", "json")
    doc, found = _history(res)
    assert found[("history.recovered", "mlx5_0:1")]["severity"] == "ok"
    assert ("history.flaps", "mlx5_0:1") not in found
    # link_downed=2 since the last reset still warns as counters always did; the history does not fail.
    assert res.exit_code == 0, res.stdout


def test_topo_records_state_and_prom_metrics(cli, tmp_path):
    root, store = _seed(tmp_path, flaps=0, hours_ago=1)
    write(root, "mlx5_1", None, "1: DOWN", attr="state")
    res = cli("topo", "--root", root, "--history", store, "-o", "prom")
    assert 'ibdiag_history_flaps{device="mlx5_1",port="1"} 1' in res.stdout
    assert "ibdiag_history_last_flap_timestamp_seconds" in res.stdout
    assert [n for n in os.listdir(store) if n.endswith("-topo.json")]


def test_nothing_written_without_history(cli, tmp_path, monkeypatch):
    root, store = _seed(tmp_path, flaps=0, hours_ago=1)
    before = sorted(os.listdir(store))
    monkeypatch.chdir(tmp_path)
    res = cli("counters", "--root", root, "-o", "json")
    assert "history" not in json.loads(res.stdout)
    assert sorted(os.listdir(store)) == before
    assert sorted(os.listdir(tmp_path)) == ["n", "store"]


def test_history_refuses_watch_and_a_file(cli, tmp_path):
    root, store = _seed(tmp_path, flaps=0, hours_ago=1)
    f = tmp_path / "f"
    f.write_text("")
    res = cli("counters", "--root", root, "--history", f)
    assert res.exit_code == 2 and "--history" in res.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[history]\nflaps_fail = 0\n")
    res = cli("counters", "--root", root, "--history", store, "--config", bad)
    assert res.exit_code == 2 and "flaps_fail" in res.stderr


def test_counters_narrows_the_kernel_log_as_topo_does(cli):
    """--kernel-log-window 1m keeps the saved log's last minute (its second outage alone); the window
    without --kernel-log is a usage error."""
    log = REPO / "fixtures/kernlog/dgx-h100-port-flapping.dmesg-T.txt"
    root = SYSFS_FIXTURES / "dgx-h100"
    res = cli(
        "counters", "--root", root, "--kernel-log", log, "--kernel-log-window", "1m", "-o", "json"
    )
    assert res.exit_code in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    span = doc["kernel_log"]["span"]
    assert span["window_start"] == "2026-12-01T03:15:09Z" and span["skipped_before_window"] == 5
    assert [e["kind"] for e in doc["kernel_log"]["events"]] == ["link_down", "link_up"]
    res = cli("counters", "--root", root, "--kernel-log-since", "2026-12-02T00:00Z")
    assert res.exit_code == 2 and "--kernel-log" in res.stderr and "hint:" in res.stderr
