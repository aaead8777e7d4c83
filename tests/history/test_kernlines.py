"""Every kernel log line shape nodes write, read into one LogLine: the message, its host, its time
(the strings are the project's own, in the shapes of the real logs listed in docs/history.md)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from ibdiag.history.kernlines import LogLine, parse_line, safe_name
from ibdiag.history.kernlog import LINK_DOWN, LINK_UP, match
from ibdiag.history.kerntime import place_years


def _utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


MSG = "mlx5_core 0000:47:00.0 enp71s0f0np0: Link down"


@pytest.mark.parametrize(
    ("raw", "epoch", "uptime", "host"),
    [
        ("3,1501,86400123456,-;" + MSG, None, 86400.123456, None),  # /dev/kmsg
        ("[ 8123.551002] " + MSG, None, 8123.551002, None),  # dmesg
        ("<3>[ 8123.551002] " + MSG, None, 8123.551002, None),  # dmesg -r
        ("kern  :info  : [ 8123.551002] " + MSG, None, 8123.551002, None),  # dmesg -x
        ("[Tue Dec  1 03:12:40 2026] " + MSG, _utc(2026, 12, 1, 3, 12, 40), None, None),  # dmesg -T
        (
            "2026-12-01T03:12:40,551002+01:00 " + MSG,
            _utc(2026, 12, 1, 2, 12, 40, 551002),
            None,
            None,
        ),
        (
            "2026-12-01T03:12:40+0000 gpu-a01 kernel: " + MSG,
            _utc(2026, 12, 1, 3, 12, 40),
            None,
            "gpu-a01",
        ),
        (
            "2026-12-01T03:12:40.551002+01:00 gpu-a01 kernel: [ 8123.551002] " + MSG,
            _utc(2026, 12, 1, 2, 12, 40, 551002),
            8123.551002,
            "gpu-a01",
        ),  # rsyslog RFC 3339, the kernel's own time kept
        (
            "2026 Dec  1 03:12:40.551002 sw-leaf-7 INFO kernel: [ 8123.551002] " + MSG,
            _utc(2026, 12, 1, 3, 12, 40, 551002),
            8123.551002,
            "sw-leaf-7",
        ),
        (
            "Tue Dec  1 03:12:40 2026 kern.info kernel: [ 8123.551002] " + MSG,
            _utc(2026, 12, 1, 3, 12, 40),
            8123.551002,
            None,
        ),
        ("1700[ 8123.551002] " + MSG, None, 8123.551002, None),  # an editor's line number
        ("1700: [ 8123.551002] " + MSG, None, 8123.551002, None),  # grep -n
        ("> > [ 8123.551002] " + MSG, None, 8123.551002, None),  # quoted twice
    ],
)
def test_timed_shapes(
    raw: str, epoch: float | None, uptime: float | None, host: str | None
) -> None:
    line = parse_line(raw + "   <- a note after it", 7)
    assert line is not None and line.message.startswith(MSG)
    assert line.epoch_s == (pytest.approx(epoch) if epoch is not None else None)
    assert line.uptime_s == (pytest.approx(uptime) if uptime is not None else None)
    assert (line.host, line.number, line.kernel) == (host, 7, True)
    ev = match(line)
    assert ev is not None and (ev.kind, ev.pci, ev.name) == (
        LINK_DOWN,
        "0000:47:00.0",
        "enp71s0f0np0",
    )


@pytest.mark.parametrize(
    "raw",
    [
        "Dec  1 03:12:40 gpu-a01 kernel: " + MSG,  # syslog, /var/log/messages
        "Dec 01 03:12:40 gpu-a01 kernel: " + MSG,  # journalctl -k (short)
        "Dec 01 03:12:40.551002 gpu-a01 kernel: " + MSG,  # journalctl -o short-precise
    ],
)
def test_yearless_shapes_keep_their_clock_and_host(raw: str) -> None:
    line = parse_line(raw)
    assert line is not None and line.epoch_s is None and line.host == "gpu-a01" and line.local
    assert line.clock is not None and line.clock[:5] == (12, 1, 3, 12, 40)
    assert line.message == MSG


def test_other_programs_and_comments_are_not_kernel_lines() -> None:
    nm = parse_line(
        "Nov 30 22:41:07 roce-node-03 NetworkManager[1203]: <info>  device (enp195s0f0np0): state change: activated -> unavailable"
    )
    assert nm is not None and not nm.kernel and match(nm) is None
    assert not parse_line("# dmesg of a node, written by hand").kernel  # type: ignore[union-attr]
    assert parse_line(" SUBSYSTEM=pci") is None  # /dev/kmsg dictionary
    bare = parse_line(MSG)
    assert bare is not None and bare.kernel and bare.epoch_s is None and bare.uptime_s is None


def test_journal_json_export() -> None:
    entry = {
        "__REALTIME_TIMESTAMP": str(int(_utc(2026, 12, 3, 3, 21, 24) * 1e6)),
        "_SOURCE_MONOTONIC_TIMESTAMP": "8184009000",
        "_HOSTNAME": "dgx-b07",
        "_TRANSPORT": "kernel",
        "MESSAGE": MSG,
    }
    line = parse_line(json.dumps(entry))
    assert line is not None and line.host == "dgx-b07" and line.message == MSG
    assert line.epoch_s == pytest.approx(
        _utc(2026, 12, 3, 3, 21, 24)
    ) and line.uptime_s == pytest.approx(8184.009)
    as_bytes = dict(
        entry, MESSAGE=list((MSG + " \xff").encode("latin-1"))
    )  # journald's bytes for non-UTF-8
    line = parse_line(json.dumps(as_bytes))
    assert line is not None and line.message.startswith(MSG) and match(line) is not None
    other = parse_line(json.dumps(dict(entry, _TRANSPORT="journal", SYSLOG_IDENTIFIER="systemd")))
    assert other is not None and not other.kernel and match(other) is None
    broken = parse_line('{"MESSAGE": "' + "x" * 100)
    assert broken is not None and broken.epoch_s is None and match(broken) is None


def test_journal_markers() -> None:
    span = parse_line(
        "-- Logs begin at Mon 2026-11-30 00:00:02 UTC, end at Tue 2026-12-01 10:14:55 UTC. --"
    )
    assert (
        span is not None and span.marker == "span" and span.epoch_s == _utc(2026, 12, 1, 10, 14, 55)
    )
    newer = parse_line(
        "-- Journal begins at Wed 2026-12-02 14:00:00 UTC, ends at Wed 2026-12-02 14:21:19 UTC. --"
    )
    assert newer is not None and newer.epoch_s == _utc(2026, 12, 2, 14, 21, 19)
    for raw in ("-- Reboot --", "-- Boot 9c1e2d3f4a5b6c7d8e9f0a1b2c3d4e5f --"):
        assert parse_line(raw).marker == "boot"  # type: ignore[union-attr]
    assert (
        parse_line("[    0.000000] Linux version 6.8.0-49-generic (buildd@host) #49").marker
        == "boot"
    )  # type: ignore[union-attr]


def test_names_from_a_log_are_escaped() -> None:
    assert safe_name("gpu-a01.example.org") == "gpu-a01.example.org"
    assert "\x1b" not in safe_name("eth0\x1b[2J") and "\\x1b" in safe_name("eth0\x1b[2J")
    line = parse_line("Dec  1 03:12:40 evil\x1bc\x07 kernel: " + MSG)
    assert (
        line is not None
        and line.host is not None
        and "\x1b" not in line.host
        and "\x07" not in line.host
    )
    assert match(line) is not None


def _clock(raw: str) -> LogLine:
    line = parse_line(raw)
    assert line is not None and line.clock is not None
    return line


def test_years_from_the_log_itself_and_from_a_reference() -> None:
    dec = _clock("Dec 31 23:59:58 h kernel: " + MSG)
    jan = _clock("Jan  1 00:00:03 h kernel: mlx5_core 0000:47:00.0 enp71s0f0np0: Link up")
    # A file's modification time in January: December's line is of the year before.
    placed, source = place_years([dec, jan], _utc(2027, 1, 1, 8, 0, 0))
    assert placed[0].epoch_s == _utc(2026, 12, 31, 23, 59, 58)
    assert placed[1].epoch_s == _utc(2027, 1, 1, 0, 0, 3) and source == "the reference time"
    # A dated line after them decides, not the reference.
    dated = parse_line("[Fri Jan  1 00:01:00 2021] " + MSG)
    assert dated is not None
    placed, source = place_years([dec, jan, dated], _utc(2027, 6, 1))
    assert [ln.epoch_s for ln in placed[:2]] == [
        _utc(2020, 12, 31, 23, 59, 58),
        _utc(2021, 1, 1, 0, 0, 3),
    ]
    assert source == "the log's own dates"
    # The journal's header gives the span's end wherever it stands.
    head = parse_line(
        "-- Logs begin at Sun 2023-01-01 00:00:00 UTC, end at Mon 2023-03-06 10:00:00 UTC. --"
    )
    placed, _ = place_years([head, _clock("Feb 14 18:48:25 h kernel: " + MSG)], None)  # type: ignore[list-item]
    assert placed[1].epoch_s == _utc(2023, 2, 14, 18, 48, 25)
    # 29 February goes to a leap year; without any reference the line stays without a time.
    placed, _ = place_years([_clock("Feb 29 12:00:00 h kernel: " + MSG)], _utc(2025, 3, 1))
    assert placed[0].epoch_s == _utc(2024, 2, 29, 12, 0, 0)
    assert place_years([_clock("Feb 14 18:48:25 h kernel: " + MSG)], None)[0][0].epoch_s is None


def test_link_up_shapes_of_every_driver() -> None:
    for raw, driver, name in [
        ("[ 31.0] mlx4_en: eth2: Link Up", "mlx4_en", "eth2"),
        (
            "[ 52.9] ice 0000:51:00.0 ens2f0: NIC Link is up 100 Gbps Full Duplex, Requested FEC: RS-FEC",
            "ice",
            "ens2f0",
        ),
        (
            "[ 52.9] bnxt_en 0000:31:00.0 ens2f0np0: NIC Link is Up, 200000 Mbps (NRZ) full duplex",
            "bnxt_en",
            "ens2f0np0",
        ),
        ("[ 52.9] infiniband rxe0: set active", "infiniband", "rxe0"),
    ]:
        ev = match(parse_line(raw))  # type: ignore[arg-type]
        assert ev is not None and (ev.kind, ev.driver, ev.name) == (LINK_UP, driver, name)
