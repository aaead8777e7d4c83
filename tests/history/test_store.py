"""The store: concurrent writers (real processes), crash leftovers, retention and size bounds,
untrusted records."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from ibdiag.errors import UsageError
from ibdiag.history.config import HistoryConfig
from ibdiag.history.model import Record
from ibdiag.history.store import check_store, prune, read_records, record_name, write_record
from tests.history.support import HOUR, counters_record
from tests.support.counters import HOST, node

NOW = time.time()


def _writer(args: tuple[str, str, int, float]) -> int:
    root, store, n, base = args
    rec = counters_record(Path(root), base)
    cfg = HistoryConfig(max_bytes=2**16)
    for i in range(n):
        write_record(
            Path(store),
            Record(base + i * 0.001 + os.getpid() % 1000 * 1e-6, rec.host, "counters", rec.ports),
            cfg,
        )
    return os.getpid()


def test_concurrent_runs(tmp_path):
    """Six processes record and prune the same store at once: every file left is a whole record,
    none is a temporary file, and pruning kept the store near its bound."""
    root = tmp_path / "n"
    node(root, {}, {})
    store = check_store(tmp_path / "store")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        pids = pool.map(_writer, [(str(root), str(store), 40, NOW + k) for k in range(6)])
    assert len(set(pids)) > 1
    names = os.listdir(store)
    assert not [n for n in names if n.endswith(".tmp")]
    loaded = read_records(store, host=HOST, since_s=0)
    assert not loaded.skipped
    assert len(loaded.records) == len(names) > 0
    size = sum((store / n).stat().st_size for n in names)
    one = (store / names[0]).stat().st_size
    assert size <= 2**16 + 6 * one  # each concurrent writer may add one record past the bound
    times = [r.taken_at_s for r in loaded.records]
    assert times == sorted(times)


def test_retention_size_and_leftovers(tmp_path):
    root = tmp_path / "n"
    node(root, {})
    store = check_store(tmp_path / "store")
    cfg = HistoryConfig(retention_days=1)
    for hours in (50, 30, 2, 1):
        write_record(
            store, counters_record(root, NOW - hours * HOUR), HistoryConfig(retention_days=30)
        )
    stale = store / ("." + record_name(counters_record(root, NOW - 3 * HOUR), pid=1) + ".1.tmp")
    stale.write_text("{")  # what a SIGKILLed writer leaves
    os.utime(stale, (NOW - 2 * HOUR, NOW - 2 * HOUR))
    fresh = store / ("." + record_name(counters_record(root, NOW), pid=2) + ".2.tmp")
    fresh.write_text("{")  # a writer still at work
    (store / "notes.txt").write_text("mine")
    assert prune(store, cfg, now=NOW) == 2
    left = sorted(os.listdir(store))
    assert "notes.txt" in left and fresh.name in left and stale.name not in left
    assert len([n for n in left if n.endswith("-counters.json")]) == 2
    one = (store / [n for n in left if n.endswith(".json")][0]).stat().st_size
    assert prune(store, HistoryConfig(max_bytes=max(2**16, one)), now=NOW) >= 0
    # The newest record always stays, whatever the bound.
    assert any(n.endswith(".json") for n in os.listdir(store))


def test_untrusted_records_are_skipped(tmp_path):
    root = tmp_path / "n"
    node(root, {})
    store = check_store(tmp_path / "store")
    cfg = HistoryConfig()
    good = write_record(store, counters_record(root, NOW - HOUR), cfg)
    write_record(store, counters_record(root, NOW - 0.9 * HOUR, host="other-node"), cfg)
    doc = json.loads(good.read_text())
    doc["taken_at_epoch_s"] = NOW - 0.8 * HOUR
    doc["ports"][0]["state"] = "ACTIVE\x1b[2J"
    (store / record_name(Record(NOW - 0.8 * HOUR, HOST, "counters", ()), pid=7)).write_text(
        json.dumps(doc)
    )
    doc["ports"][0]["state"] = "ACTIVE"
    doc["ports"][0]["counters"]["link_downed"] = 256  # more than its 8 bits hold
    (store / record_name(Record(NOW - 0.7 * HOUR, HOST, "counters", ()), pid=8)).write_text(
        json.dumps(doc)
    )
    (store / record_name(Record(NOW - 0.6 * HOUR, HOST, "counters", ()), pid=9)).write_text(
        '{"schema": "ibdiag'
    )
    loaded = read_records(store, host=HOST, since_s=0)
    assert [r.taken_at_s for r in loaded.records] == [NOW - HOUR]
    assert len(loaded.skipped) == 4
    joined = "\n".join(loaded.skipped)
    assert "other-node" in joined and "non-printable" in joined and "outside" in joined


def test_window_reads_one_record_before_it(tmp_path):
    root = tmp_path / "n"
    node(root, {})
    store = check_store(tmp_path / "store")
    for hours in (40, 30, 20, 10):
        write_record(
            store, counters_record(root, NOW - hours * HOUR), HistoryConfig(retention_days=30)
        )
    loaded = read_records(store, host=HOST, since_s=NOW - 24 * HOUR)
    assert [round((NOW - r.taken_at_s) / HOUR) for r in loaded.records] == [30, 20, 10]


def test_store_must_be_a_writable_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match="not a directory|cannot create"):
        check_store(f)
    made = check_store(tmp_path / "a" / "b")
    assert made.is_dir()


def test_a_link_in_the_store_is_never_followed(tmp_path):
    store = check_store(tmp_path / "store")
    secret = tmp_path / "secret.json"
    secret.write_text('{"schema": "ibdiag.history/1"}')
    name = record_name(Record(NOW, HOST, "counters", ()), pid=3)
    (store / name).symlink_to(secret)
    (store / ("." + name + ".3.tmp")).symlink_to(secret)
    assert read_records(store, host=HOST, since_s=0).records == ()
    prune(store, HistoryConfig(retention_days=1), now=NOW + 10 * 86400)
    assert secret.exists()  # pruning deletes only regular files, never a link's target
