"""``counters --since`` baselines that would hide errors or break the arithmetic: each is exit 2 with a
clear message, through the real command on a sysfs-shaped tree."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from tests.support.counters import node, write


@pytest.fixture
def saved(cli, tmp_path):
    """A node and the JSON of its counters now (a baseline to mangle)."""
    node(tmp_path, {}, {})
    res = cli("counters", "--root", tmp_path, "-o", "json")
    assert res.exit_code == 0, res.stderr
    return tmp_path, json.loads(res.stdout)


def since(cli, root, doc) -> object:
    before = root / "before.json"
    before.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return cli("counters", "--root", root, "--since", before, "-o", "json")


def port0(doc, **changes):
    return {**doc, "ports": [{**doc["ports"][0], **changes}, *doc["ports"][1:]]}


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat().replace("+00:00", "Z")


def test_counters_null_in_the_baseline_cannot_hide_60000_symbol_errors(cli, saved):
    root, doc = saved
    write(root, "mlx5_0", "symbol_error", 60000)
    res = since(cli, root, port0(doc, counters=None))
    assert res.exit_code == 2, (res.exit_code, res.stdout)
    assert "has no counters for mlx5_0:1" in res.stderr and "hint:" in res.stderr


def test_counters_null_on_both_sides_still_compares(cli, tmp_path):
    node(tmp_path, {"counters": None}, {})
    doc = json.loads(cli("counters", "--root", tmp_path, "-o", "json").stdout)
    assert doc["ports"][0]["counters"] is None
    write(tmp_path, "mlx5_1", "symbol_error", 500)
    res = since(cli, tmp_path, doc)
    assert res.exit_code == 1, res.stderr
    assert ("counters.errors", "mlx5_1:1") in {
        (f["check"], f["subject"])
        for f in json.loads(res.stdout)["findings"]
        if f["severity"] == "fail"
    }


def test_ports_missing_from_the_baseline_still_warn(cli, saved):
    root, doc = saved
    res = since(cli, root, {**doc, "ports": []})
    assert res.exit_code == 0
    assert {
        f["subject"]
        for f in json.loads(res.stdout)["findings"]
        if f["check"] == "counters.baseline"
    } == {"mlx5_0:1", "mlx5_1:1"}


@pytest.mark.parametrize(
    "changes, words",
    [
        (
            {"counters_symbol_error": 10**30},
            "counters.symbol_error is 1000000000000000000000000000000, more than its 16-bit counter can hold",
        ),
        ({"counters_symbol_error": 70000}, "more than its 16-bit counter can hold"),
        ({"counters_link_downed": 256}, "more than its 8-bit counter can hold"),
        ({"counters_port_xmit_data": 2**64}, "more than its 64-bit counter can hold"),
        (
            {"data_counter_bits": 32, "counters_port_xmit_data": 2**40},
            "more than its 32-bit counter can hold",
        ),
        ({"hw_counters_out_of_sequence": 2**64}, "more than its 64-bit counter can hold"),
        ({"counters_symbol_error": 1.5}, "not a count"),
        ({"counters_symbol_error": "12"}, "not a count"),
        ({"counters_symbol_error": True}, "not a count"),
        ({"xmit_bytes": 10**40}, "not a byte count"),
        ({"state": 4}, "state is 4, not a name"),
        ({"link_layer": ["InfiniBand"]}, "link_layer"),
        ({"phys_state": "Link\x1b[2JUp"}, "phys_state is 'Link\\x1b[2JUp', not a name"),
        ({"rate_gbps": "fast"}, "rate_gbps is 'fast', not a port rate"),
        ({"rate_gbps": 1e300}, "not a port rate"),
        ({"adapter": "mlx5_\n0"}, "adapter is 'mlx5_\\n0', not a name"),
        ({"port": 2**40}, "not a port number"),
        ({"saturated": [1]}, "saturated is not a list of counter names"),
        ({"hw_counters_lifespan_ms": "12"}, "hw_counters_lifespan_ms"),
        ({"counters": [1, 2]}, "counters is not an object"),
    ],
)
def test_impossible_or_mistyped_values_are_refused(cli, saved, changes, words):
    root, doc = saved
    p = dict(doc["ports"][0])
    for key, value in changes.items():
        # "counters_<name>" / "hw_counters_<name>" change one value of that table; other keys the record.
        table = next(
            (
                t
                for t in ("hw_counters", "counters")
                if key.startswith(t + "_") and key != "hw_counters_lifespan_ms"
            ),
            None,
        )
        if table:
            p[table] = {**p[table], key[len(table) + 1 :]: value}
        else:
            p[key] = value
    res = since(cli, root, {**doc, "ports": [p, *doc["ports"][1:]]})
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert words in res.stderr and "hint:" in res.stderr and "Traceback" not in res.stderr
    assert "\x1b" not in res.stderr and len(res.stderr) < 800


def test_infinity_in_json_is_not_a_rate(cli, saved):
    root, doc = saved
    text = json.dumps(port0(doc, rate_gbps=123.0)).replace("123.0", "Infinity", 1)
    res = since(cli, root, text)
    assert res.exit_code == 2 and "not a port rate" in res.stderr


@pytest.mark.parametrize(
    "when, words",
    [
        ("2099-01-01T00:00:00Z", "generated_at '2099-01-01T00:00:00Z' is in the future"),
        ("yesterday", "generated_at is 'yesterday', not an ISO 8601 time"),
        (5, "generated_at is 5, not a time"),
        ("2026-01-01T00:00:00", "without a time zone"),
    ],
)
def test_times_in_the_future_or_malformed_are_refused(cli, saved, when, words):
    root, doc = saved
    res = since(cli, root, {**doc, "generated_at": when})
    assert res.exit_code == 2, res.stdout
    assert words in res.stderr and "hint:" in res.stderr


def test_a_little_clock_skew_is_allowed(cli, saved):
    root, doc = saved
    res = since(cli, root, {**doc, "generated_at": iso(time.time() + 60)})
    assert res.exit_code == 0, res.stderr


def test_a_deeply_nested_baseline_is_exit_2(cli, saved):
    root, _ = saved
    res = since(cli, root, "[" * 100_000 + "]" * 100_000)
    assert (
        res.exit_code == 2 and "nested too deeply" in res.stderr and "Traceback" not in res.stderr
    )
