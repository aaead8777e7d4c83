"""Real ``ibdiag`` processes while the counter files change under them: --interval, --watch in a
pseudo-terminal with a real Ctrl-C, and a CSV series interrupted half way."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from tests.support.counters import node, write

pytestmark = pytest.mark.slow


def read_until(fd: int, needle: bytes, timeout: float, buf: bytearray | None = None) -> bytearray:
    """Read ``fd`` (a pty master) until ``needle`` shows up; fail with what was seen on timeout."""
    buf = buf if buf is not None else bytearray()
    deadline = time.monotonic() + timeout
    while needle not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} not seen in {timeout} s; got {bytes(buf[-2000:])!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other side closed
                raise AssertionError(
                    f"{needle!r} not seen before the process closed the terminal; got {bytes(buf[-2000:])!r}"
                ) from None
            if not chunk:
                break
            buf.extend(chunk)
    return buf


def read_to_eof(fd: int, timeout: float, buf: bytearray) -> bytearray:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        buf.extend(chunk)
    return buf


def test_interval_in_a_real_process_while_the_files_change(ibdiag_exe, tmp_path):
    node(
        tmp_path,
        {"counters": {"symbol_error": 100, "port_xmit_data": 10**9, "port_xmit_wait": 500}},
        {"counters": {"port_xmit_wait": 4294967000}},
        {"counters": {"link_error_recovery": 40, "port_rcv_data": 10**6}},
    )
    master, slave = (
        os.openpty()
    )  # stderr on a terminal: the progress line tells us the baseline is read
    # a terminal someone reads has a size (a pty of none is mpirun\'s: laid out as a pipe)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(
        [ibdiag_exe, "counters", "--root", str(tmp_path), "--interval", "2", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    try:
        read_until(master, b"baseline read of 3 port(s)", 60)
        write(tmp_path, "mlx5_0", "symbol_error", 125)  # +25 > threshold 10: FAIL
        write(tmp_path, "mlx5_0", "port_xmit_data", 10**9 + 250_000_000)  # +1 GB
        write(tmp_path, "mlx5_0", "port_xmit_wait", 500 + 4000)  # +4000 > 1000: backpressure WARN
        write(tmp_path, "mlx5_1", "port_xmit_wait", 4294967295)  # saturates: no delta
        write(tmp_path, "mlx5_2", "link_error_recovery", 3)  # went down: reset
        write(tmp_path, "mlx5_2", "port_rcv_data", 10)  # reset too
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 1
    doc = json.loads(out)
    assert doc["mode"] == "interval" and 1.9 <= doc["interval_s"] <= 10
    p0, p1, p2 = doc["ports"]
    dt = p0["interval_s"]
    assert p0["deltas"]["symbol_error"] == 25 and p0["rates"]["symbol_error"] == pytest.approx(
        25 / dt
    )
    assert p0["deltas"]["xmit_bytes"] == 10**9 and p0["tx_gbps"] == pytest.approx(8 / dt)
    assert p0["tx_util_pct"] == pytest.approx(8 / dt / 400 * 100)
    assert p0["deltas"]["port_xmit_wait"] == 4000 and p0["xmit_wait_est_pct"] == pytest.approx(
        4000 * 8 / (50e9 * dt) * 100
    )
    assert (
        p1["deltas"]["port_xmit_wait"] is None
        and p1["unknown"]["port_xmit_wait"] == "saturated"
        and "port_xmit_wait" in p1["saturated"]
    )
    assert p2["deltas"]["link_error_recovery"] == 3 and set(p2["resets"]) >= {
        "link_error_recovery",
        "port_rcv_data",
        "rcv_bytes",
    }
    assert p2["deltas"]["rcv_bytes"] == 40  # from zero after the reset
    assert all(v is None or v >= 0 for p in doc["ports"] for v in p["deltas"].values())
    sev = {(f["check"], f["subject"]): f["severity"] for f in doc["findings"]}
    assert sev[("counters.errors", "mlx5_0:1")] == "fail"
    assert sev[("counters.xmit_wait", "mlx5_0:1")] == "warn"
    assert sev[("counters.xmit_wait", "mlx5_1:1")] == "warn"
    assert sev[("counters.reset", "mlx5_2:1")] == "warn"
    assert sev[("counters.errors", "mlx5_2:1")] == "warn"


def _spawn_in_pty(argv: list[str], rows: int = 50, cols: int = 220) -> tuple[int, int]:
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is its controlling terminal, so ^C on it is a real SIGINT
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            # An explicit environment: COLUMNS/LINES inherited from the test runner would override the pty size.
            env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
            env["TERM"] = "xterm-256color"
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    return pid, fd


def test_watch_in_a_terminal_refreshes_and_exits_130_on_ctrl_c(ibdiag_exe, tmp_path):
    node(tmp_path, {}, {})
    pid, fd = _spawn_in_pty(
        [ibdiag_exe, "counters", "--root", str(tmp_path), "--watch", "--interval", "0.3"]
    )
    attrs_before = termios.tcgetattr(fd)
    buf = bytearray()
    try:
        read_until(fd, b"sample 1 ", 60, buf)
        write(tmp_path, "mlx5_1", "symbol_error", 7)
        read_until(
            fd, b"symbol_error+7", 30, buf
        )  # the table refreshed in place with the new delta
        read_until(fd, b"sample 3 ", 30, buf)
        os.write(fd, b"\x03")  # Ctrl-C through the terminal's line discipline
        read_to_eof(fd, 30, buf)
        _, status = os.waitpid(pid, 0)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    text = buf.decode("utf-8", "replace")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 130, text[-1500:]
    assert "ibdiag: interrupted" in text and "Traceback" not in text
    # The cursor was hidden for the live table and shown again on the way out.
    assert "\x1b[?25l" in text and text.rfind("\x1b[?25h") > text.rfind("\x1b[?25l")
    attrs_after = termios.tcgetattr(fd)
    lflag = 3
    for flag in (termios.ECHO, termios.ICANON, termios.ISIG):
        assert attrs_after[lflag] & flag == attrs_before[lflag] & flag
    os.close(fd)


def test_watch_with_count_stops_by_itself_with_the_findings_status(ibdiag_exe, tmp_path):
    node(tmp_path, {"state": "1: DOWN", "phys_state": "2: Polling"})
    pid, fd = _spawn_in_pty(
        [
            ibdiag_exe,
            "counters",
            "--root",
            str(tmp_path),
            "--watch",
            "--interval",
            "0.2",
            "--count",
            "2",
        ]
    )
    buf = read_to_eof(fd, 60, bytearray())
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = buf.decode("utf-8", "replace")
    assert os.WEXITSTATUS(status) == 1, text[-1500:]
    assert "sample 2 " in text and "FAIL port_state" in text


def _write_atomically(root, adapter: str, name: str, value: int) -> None:
    """Change a counter as one step (a reader never sees the file empty)."""
    path = root / "sys" / "class" / "infiniband" / adapter / "ports" / "1" / "counters" / name
    tmp = path.with_name(f".{name}.{os.getpid()}")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def test_a_reset_between_samples_is_plus_150_with_the_reset_through_interval_count(
    ibdiag_exe, tmp_path
):
    """Issue 13's second wrong answer, first half: 100 -> 0 (reset) -> 150 is +150, reset flagged."""
    node(tmp_path, {"counters": {"symbol_error": 100}})
    master, slave = (
        os.openpty()
    )  # stderr on a terminal: the progress lines say when each sample is read
    # a terminal someone reads has a size (a pty of none is mpirun\'s: laid out as a pipe)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(
        [
            ibdiag_exe,
            "counters",
            "--root",
            str(tmp_path),
            "--interval",
            "1.5",
            "--count",
            "2",
            "-o",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    try:
        buf = read_until(master, b"baseline read of 1 port(s)", 60)
        _write_atomically(tmp_path, "mlx5_0", "symbol_error", 0)
        read_until(master, b"sample 1/2 taken", 30, buf)
        _write_atomically(tmp_path, "mlx5_0", "symbol_error", 150)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    doc = json.loads(out)
    (port,) = doc["ports"]
    assert [s["ports"][0]["deltas"]["symbol_error"] for s in doc["samples"]] == [0, 150]
    assert port["deltas"]["symbol_error"] == 150 and "symbol_error" in port["resets"]
    assert {f["check"] for f in doc["findings"] if f["severity"] != "ok"} == {
        "counters.errors",
        "counters.reset",
    }


def test_a_reset_between_samples_is_plus_150_with_the_reset_through_watch(ibdiag_exe, tmp_path):
    """Issue 13's second wrong answer, second half: --watch said +50 and no reset (it compared the
    first sample with the last); it totals step by step like --interval --count now."""
    node(tmp_path, {"counters": {"symbol_error": 100}})
    pid, fd = _spawn_in_pty(
        [
            ibdiag_exe,
            "counters",
            "--root",
            str(tmp_path),
            "--watch",
            "--interval",
            "1.5",
            "--count",
            "2",
        ]
    )
    buf = bytearray()
    status = None
    try:
        read_until(fd, b"first sample taken", 60, buf)
        _write_atomically(tmp_path, "mlx5_0", "symbol_error", 0)
        read_until(fd, b"sample 1 ", 30, buf)
        _write_atomically(tmp_path, "mlx5_0", "symbol_error", 150)
        read_to_eof(fd, 60, buf)
        _, status = os.waitpid(pid, 0)
    finally:
        if status is None:  # not reaped yet: the pid is still ours to kill
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    text = buf.decode("utf-8", "replace")
    last = text[text.rindex("sample 2 ") :]
    assert os.WEXITSTATUS(status) == 1, text[-1500:]
    assert "symbol_error+150" in last and "symbol_error+50" not in last, last
    assert "mlx5_0:1 counters.reset: 1 counter(s) went down" in last, last


def test_csv_series_interrupted_is_still_valid_csv(ibdiag_exe, tmp_path):
    node(tmp_path, {})
    err_file = tmp_path / "stderr"
    with open(err_file, "wb") as err_fh:
        proc = subprocess.Popen(
            [
                ibdiag_exe,
                "counters",
                "--root",
                str(tmp_path),
                "--interval",
                "0.2",
                "--count",
                "1000",
                "-o",
                "csv",
            ],
            stdout=subprocess.PIPE,
            stderr=err_fh,
        )
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            lines.append(line)
            if line.startswith("3,"):
                break
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()  # the buffered reader: nothing read ahead is lost
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err_file.read_bytes()
    text = "".join(lines) + rest.decode()
    assert proc.returncode == 130 and b"interrupted" in err and b"Traceback" not in err
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows and {r["sample"] for r in rows} >= {"1", "2", "3"}
    # Rows go out a whole sample at a time: every sample printed is complete.
    per_sample = {}
    for r in rows:
        per_sample[r["sample"]] = per_sample.get(r["sample"], 0) + 1
    assert len(set(per_sample.values())) == 1, per_sample


def test_benchmark_script_runs(tmp_path):
    """The benchmark is a script people run for the docs' numbers; keep it working (no timing asserted)."""
    import sys

    from tests.support.env import REPO

    res = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "counters_sample.py"),
            "--runs",
            "3",
            "--adapters",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert (
        "tree: 2 adapters, 2 ports" in res.stdout
        and "one full sample" in res.stdout
        and "--watch at 1 s" in res.stdout
    )
