"""``ibdiag report`` over ``counters --history`` documents: the fleet's most-flapping ports."""

from __future__ import annotations

import json
import time

from ibdiag.history.config import HistoryConfig
from ibdiag.history.store import write_record
from tests.history.support import HOUR, counters_record
from tests.support.counters import node, write


def _node_doc(cli, tmp_path, host: str, flaps: int):
    root = tmp_path / host
    node(root, {}, {}, host=host)
    store = tmp_path / f"{host}-store"
    store.mkdir()
    write_record(store, counters_record(root, time.time() - 2 * HOUR, host=host), HistoryConfig())
    write(root, "mlx5_1", "link_downed", flaps)
    res = cli("counters", "--root", root, "--history", store, "-o", "json")
    out = tmp_path / "docs" / f"{host}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(res.stdout)
    return out


def test_most_flapping_ports(cli, tmp_path):
    _node_doc(cli, tmp_path, "gpu-a-01", 1)
    _node_doc(cli, tmp_path, "gpu-a-02", 4)
    _node_doc(cli, tmp_path, "gpu-a-03", 0)
    res = cli("report", tmp_path / "docs", "-o", "json")
    doc = json.loads(res.stdout)
    flapping = doc["flapping_ports"]
    assert [(f["host"], f["port"], f["flaps"]) for f in flapping] == [
        ("gpu-a-02", "mlx5_1:1", 4),
        ("gpu-a-01", "mlx5_1:1", 1),
    ]
    assert flapping[0]["last_flap"].endswith("Z")
    table = cli("report", tmp_path / "docs", env={"COLUMNS": "200"}).stdout
    assert "Most-flapping ports" in table and "gpu-a-02" in table


def test_malformed_history_is_refused(cli, tmp_path):
    path = _node_doc(cli, tmp_path, "gpu-b-01", 2)
    doc = json.loads(path.read_text())
    doc["history"]["ports"][1]["flaps"] = -3
    path.write_text(json.dumps(doc))
    res = cli("report", path, "-o", "json")
    assert "history.ports[1].flaps" in res.stdout + res.stderr
