"""The window a kernel log is judged over: a saved log over its own last day, narrowed by a start
time; a live log up to now; what was left out and why, said in ``kernel.log`` and the JSON span."""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

from ibdiag.history.config import HistoryConfig
from ibdiag.history.kernsource import KernelText
from ibdiag.history.kerntime import Window
from ibdiag.history.run import judge_kernel_log, read_kernel_events
from tests.support.env import FIXTURES

KERNLOG = FIXTURES / "kernlog"
NOW = datetime(2027, 3, 1, tzinfo=timezone.utc).timestamp()


def _utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def judge(path: Path, **kw: float):
    findings, data = judge_kernel_log(str(path), None, HistoryConfig(), now_s=NOW, **kw)
    return {(f.check, f.subject): f for f in findings}, data


def test_an_old_saved_log_is_read_as_it_was_and_says_how_old() -> None:
    found, data = judge(KERNLOG / "dgx-h100-port-flapping.dmesg-T.txt")
    assert found[("kernel.link", "enp90s0f0np0")].severity.value == "fail"
    log = found[("kernel.log", "kernel log")]
    assert log.severity.value == "ok" and "90 days before this run" in log.message
    assert (
        data["span"]["window_end"] == "2026-12-01T03:16:09Z" and data["span"]["judged_lines"] == 8
    )


def test_a_start_time_narrows_the_window_and_an_empty_window_is_not_ok() -> None:
    # Between the two downs: only the second is judged.
    found, data = judge(
        KERNLOG / "dgx-h100-port-flapping.dmesg-T.txt", since_s=_utc(2026, 12, 1, 3, 14)
    )
    link = found[("kernel.link", "enp90s0f0np0")]
    assert link.severity.value == "warn" and link.value == 1
    assert (
        data["span"]["skipped_before_window"] == 5
        and data["span"]["window_start"] == "2026-12-01T03:14:00Z"
    )
    # After the log's end: nothing is judged, and that is a warning, not "0 events, ok".
    found, data = judge(KERNLOG / "dgx-h100-port-flapping.dmesg-T.txt", since_s=_utc(2026, 12, 2))
    assert list(found) == [("kernel.log", "kernel log")]
    log = found[("kernel.log", "kernel log")]
    assert (
        log.severity.value == "warn"
        and "nothing judged" in log.message
        and "8 earlier line(s) left out" in log.message
    )
    assert data["events"] == [] and data["span"]["judged_lines"] == 0


def test_a_shorter_window_leaves_out_and_counts_what_came_before() -> None:
    found, data = judge(KERNLOG / "roce-node-flapping-cable.journal.txt", window_s=45 * 60)
    # 10:36:00 .. 11:21:00: the second bounce is in, the unplug and the first bounce are not.
    assert found[("kernel.link", "enp71s0f0np0")].value == 1
    assert ("kernel.module", "0000:47:00.0") not in found
    assert data["span"]["skipped_before_window"] == 6
    assert "6 earlier line(s) left out" in found[("kernel.log", "kernel log")].message


def test_yearless_lines_take_the_year_of_the_files_modification_time(tmp_path: Path) -> None:
    copy = tmp_path / "messages"
    shutil.copy(KERNLOG / "roce-node-two-ports-down.messages.txt", copy)
    os.utime(copy, (_utc(2031, 1, 5), _utc(2031, 1, 5)))
    found, data = judge(copy)
    assert (
        data["span"]["first"] == "2030-11-27T04:10:31Z"
        and data["span"]["last"] == "2030-12-01T03:17:45Z"
    )
    assert data["span"]["years_from"] == "the file's modification time"
    assert (
        data["span"]["skipped_before_window"] == 2
    )  # the outage of 27 November, three days before the end
    assert (
        "years of syslog times from the file's modification time"
        in found[("kernel.log", "kernel log")].message
    )


def test_a_dmesg_of_two_boots_judges_the_last_boot(tmp_path: Path) -> None:
    log = tmp_path / "dmesg"
    log.write_text(
        "[ 5000.1] infiniband rxe0: set down\n[ 5002.3] infiniband rxe0: set active\n"
        "[    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org)\n"
        "[   12.0] infiniband rxe0: set active\n[  300.5] infiniband rxe0: set down\n"
        "infiniband rxe0: set active\n"  # a pasted line without its time: judged, counted
    )
    found, data = judge(log, since_s=_utc(2026, 1, 1))
    link = found[("kernel.link", "rxe0")]
    assert link.value == 1 and link.severity.value == "warn"
    span = data["span"]
    assert (span["clock"], span["skipped_earlier_boot"], span["lines_without_time"]) == (
        "time since boot",
        2,
        1,
    )
    said = found[("kernel.log", "kernel log")].message
    assert "of an earlier boot left out" in said and "not applied: the log has no dates" in said


def test_a_live_log_is_judged_up_to_now() -> None:
    boot = NOW - 86400 * 3
    text = KernelText(
        "/dev/kmsg",
        (
            f"3,10,{int(86400 * 1e6)},-;infiniband rxe0: set down",
            f"3,11,{int(3 * 86400 * 1e6 - 60e6)},-;infiniband rxe0: set down",
        ),
        boot_epoch_s=boot,
        live=True,
    )
    reading = read_kernel_events(
        text, Window(window_s=86400, now_s=NOW, boot_epoch_s=boot, reference_s=NOW)
    )
    assert [e.line.epoch_s for e in reading.events] == [NOW - 60]  # the one two days ago is out
    assert reading.span.live and reading.span.end_s == NOW and reading.span.before_window == 1
