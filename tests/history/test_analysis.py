"""Flaps, recoveries and bursts from successive sysfs trees: link_downed increments, state and rate
changes, counter resets and saturation between records."""

from __future__ import annotations

import time

from ibdiag.findings.model import Severity
from ibdiag.history.analysis import port_stories
from ibdiag.history.checks import check_history
from ibdiag.history.config import HistoryConfig
from ibdiag.history.store import Loaded
from tests.history.support import HOUR, counters_record, topo_record
from tests.support.counters import node, write

NOW = time.time()


def _judge(records, cfg=None):
    cfg = cfg or HistoryConfig()
    stories = port_stories(records, since_s=NOW - cfg.window_s)
    found = check_history(stories, Loaded(tuple(records[:-1])), cfg, now_s=NOW, directory="store")
    return {s.subject: s for s in stories}, {(f.check, f.subject): f for f in found}


def test_two_flaps_fail_then_recover(tmp_path):
    root = tmp_path / "n"
    node(root, {}, {})
    recs = [counters_record(root, NOW - 3 * HOUR)]
    write(root, "mlx5_0", "link_downed", 1)
    recs.append(counters_record(root, NOW - 2 * HOUR))
    # Down, seen by topo between two counters runs; then up again with link_downed +1: one flap, not two.
    write(root, "mlx5_0", None, "1: DOWN", attr="state")
    write(root, "mlx5_0", None, "2: Polling", attr="phys_state")
    recs.append(topo_record(root, NOW - 1.5 * HOUR))
    write(root, "mlx5_0", None, "4: ACTIVE", attr="state")
    write(root, "mlx5_0", None, "5: LinkUp", attr="phys_state")
    write(root, "mlx5_0", "link_downed", 2)
    recs.append(counters_record(root, NOW))
    stories, found = _judge(recs)
    s = stories["mlx5_0:1"]
    assert s.flap_count == 2
    assert [f.how for f in s.flaps] == ["link_downed +1", "state ACTIVE -> DOWN"]
    assert s.last_flap_s == NOW - 1.5 * HOUR
    f = found[("history.flaps", "mlx5_0:1")]
    assert f.severity is Severity.FAIL and f.value == 2
    assert ("history.recovered", "mlx5_0:1") not in found
    assert found[("history.flaps", "mlx5_1:1")].severity is Severity.OK
    # The same history judged with a recovery window shorter than the time since the last flap.
    _, found = _judge(recs, HistoryConfig(recovery_hours=1.0))
    assert ("history.flaps", "mlx5_0:1") not in found
    r = found[("history.recovered", "mlx5_0:1")]
    assert r.severity is Severity.OK and "recovered" in r.message and r.value == 2


def test_down_now_is_never_recovered(tmp_path):
    root = tmp_path / "n"
    node(root, {})
    recs = [counters_record(root, NOW - 10 * HOUR)]
    write(root, "mlx5_0", None, "1: DOWN", attr="state")
    write(root, "mlx5_0", "link_downed", 1)
    recs.append(counters_record(root, NOW - 9 * HOUR))
    recs.append(counters_record(root, NOW))
    _, found = _judge(recs, HistoryConfig(recovery_hours=1.0))
    f = found[("history.flaps", "mlx5_0:1")]
    assert f.severity is Severity.WARN and "not ACTIVE now" in f.message


def test_flaps_outside_the_window_do_not_count(tmp_path):
    root = tmp_path / "n"
    node(root, {})
    recs = [counters_record(root, NOW - 30 * HOUR)]
    write(root, "mlx5_0", "link_downed", 5)
    recs.append(counters_record(root, NOW - 25 * HOUR))
    recs.append(counters_record(root, NOW))
    stories, found = _judge(recs)
    assert stories["mlx5_0:1"].flap_count == 0
    assert found[("history.flaps", "mlx5_0:1")].severity is Severity.OK


def test_reset_between_records_counts_from_zero(tmp_path):
    root = tmp_path / "n"
    node(root, {"counters": {"link_downed": 7, "symbol_error": 40}})
    recs = [counters_record(root, NOW - 2 * HOUR)]
    # perfquery -R (or a driver reload) reset the counters; then the link went down once.
    write(root, "mlx5_0", "link_downed", 1)
    write(root, "mlx5_0", "symbol_error", 0)
    recs.append(counters_record(root, NOW - HOUR))
    stories, _ = _judge(recs)
    s = stories["mlx5_0:1"]
    assert s.flap_count == 1  # 7 -> 1 is a reset and one flap, never -6 or nothing
    assert "reset" in s.flaps[0].how
    assert s.resets == 1


def test_saturated_link_downed_is_not_a_flap(tmp_path):
    root = tmp_path / "n"
    node(root, {"counters": {"link_downed": 255}})  # LinkDownedCounter is 8 bits
    recs = [counters_record(root, NOW - 2 * HOUR), counters_record(root, NOW - HOUR)]
    stories, found = _judge(recs)
    assert stories["mlx5_0:1"].flap_count == 0
    assert stories["mlx5_0:1"].unknown_steps == 1
    assert "not comparable" in found[("history.flaps", "mlx5_0:1")].message


def test_rate_change_is_a_flap_and_bursts_warn(tmp_path):
    root = tmp_path / "n"
    node(root, {})
    recs = [counters_record(root, NOW - 2 * HOUR)]
    write(root, "mlx5_0", None, "200 Gb/sec (4X HDR)", attr="rate")
    write(root, "mlx5_0", "symbol_error", 500)
    recs.append(counters_record(root, NOW - HOUR))
    stories, found = _judge(recs)
    s = stories["mlx5_0:1"]
    assert [f.how for f in s.flaps] == ["rate 400 -> 200 Gb/s"]
    b = found[("history.errors", "mlx5_0:1")]
    assert b.severity is Severity.WARN and "symbol_error +500" in b.message
    assert ("history.errors", "mlx5_1:1") not in found
