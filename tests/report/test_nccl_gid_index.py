"""``ibdiag report``: the NCCL_IB_GID_INDEX each node's topo judged is compared across the fleet."""

from __future__ import annotations

import json

from tests.support.fleet_fixtures import host_of


def test_a_node_with_another_gid_index_is_an_outlier(cli, fleet_dir, tmp_path):
    out = tmp_path / "fleet"
    out.mkdir()
    for path in fleet_dir.glob("*.topo.json"):
        doc = json.loads(path.read_text())
        index = "0" if doc["host"] == host_of("healthy") else "3"
        doc["nccl_env"] = {"source": "environment", "variables": {"NCCL_IB_GID_INDEX": index}}
        (out / path.name).write_text(json.dumps(doc))
    res = cli("report", out, "-o", "json")
    doc = json.loads(res.stdout)
    (o,) = [o for o in doc["outliers"] if o["key"] == "NCCL_IB_GID_INDEX"]
    assert (o["host"], o["value"], o["majority"]) == (host_of("healthy"), "0", "3")
    finding = next(
        f
        for f in doc["findings"]
        if f["check"] == "report.config" and f["subject"] == host_of("healthy")
    )
    assert "NCCL_IB_GID_INDEX is 0" in finding["message"]


def test_files_without_nccl_env_say_nothing(cli, fleet_dir):
    doc = json.loads(cli("report", fleet_dir, "-o", "json").stdout)
    assert not [o for o in doc["outliers"] if o["key"] == "NCCL_IB_GID_INDEX"]
