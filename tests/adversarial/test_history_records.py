"""One bad record in the history store must not break every later run (issue 42, item 3).

The store is a directory anyone with write access to it (or a full disk, or a bad block) can leave a
damaged file in; as a health check, an internal error on it would drain the node until someone
deleted the file. Every record is parsed within ``ibdiag/jsonread.py``'s budget: a bad one is skipped
with a note (``history.records`` warns, as docs/history.md promises) and the run goes on."""

from __future__ import annotations

import json
import os
import time

import pytest

from ibdiag.history.config import HistoryConfig
from ibdiag.history.model import Record
from ibdiag.history.store import MAX_RECORD_BYTES, read_records, record_name, write_record
from tests.history.support import HOUR, counters_record
from tests.support.counters import HOST, node

NOW = time.time()

#: What a record file may hold instead of a record, each a way past a plain ``json.loads``.
BAD = {
    "deep arrays": "[" * 100_000,
    "deep objects": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "deep but closed": "[" * 5_000 + "]" * 5_000,
    "a 5000-digit number": '{"schema": "ibdiag.history/1", "taken_at_epoch_s": ' + "9" * 5000 + "}",
    "not UTF-8": b'{"schema": "\xff\xfe"}',
    "a million empty arrays": "[" + ",".join(["[]"] * (MAX_RECORD_BYTES // 3 - 2)) + "]",
    "Infinity": '{"schema": "ibdiag.history/1", "taken_at_epoch_s": Infinity}',
}


def _plant(store, at_s: float, content: str | bytes, pid: int) -> str:
    name = record_name(Record(at_s, HOST, "counters", ()), pid=pid)
    data = content.encode() if isinstance(content, str) else content
    (store / name).write_bytes(data)
    return name


@pytest.mark.parametrize("what", list(BAD))
def test_a_bad_record_is_skipped_with_a_note(tmp_path, what: str) -> None:
    root = tmp_path / "n"
    node(root, {}, {})
    store = tmp_path / "store"
    store.mkdir()
    write_record(store, counters_record(root, NOW - 2 * HOUR), HistoryConfig())
    name = _plant(store, NOW - HOUR, BAD[what], pid=7)
    write_record(store, counters_record(root, NOW - 0.5 * HOUR), HistoryConfig())
    loaded = read_records(store, host=HOST, since_s=0)
    assert [r.taken_at_s for r in loaded.records] == [NOW - 2 * HOUR, NOW - 0.5 * HOUR]
    assert len(loaded.skipped) == 1 and loaded.skipped[0].startswith(name), loaded.skipped
    assert len(loaded.skipped[0]) < 300


def test_a_health_check_keeps_running_over_a_bad_record(cli, tmp_path) -> None:
    """Through the command line, twice: the run that finds the bad record and the one after it both
    judge the node (exit 0 or 1, never 3) and say the record was skipped; each run still records."""
    root = tmp_path / "n"
    node(root, {}, {})
    store = tmp_path / "store"
    store.mkdir()
    write_record(store, counters_record(root, NOW - 2 * HOUR), HistoryConfig())
    _plant(store, NOW - HOUR, "[" * 100_000, pid=7)
    for run in range(2):
        res = cli("counters", "--root", root, "--history", store, "-o", "json")
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        assert res.exit_code in (0, 1), (res.exit_code, res.stderr)
        doc = json.loads(res.stdout)
        records = [f for f in doc["findings"] if f["check"] == "history.records"]
        assert records and records[0]["severity"] == "warn", records
        assert "skipped" in records[0]["message"] or "unreadable" in records[0]["message"], records
        written = [n for n in os.listdir(store) if n.endswith("-counters.json")]
        assert len(written) == 3 + run
