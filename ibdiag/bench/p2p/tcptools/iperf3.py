"""``--engine iperf3``: TCP bandwidth measured by iperf3 on both ends (tested with iperf3 3.12, Debian 12).

Command lines (:func:`server_argv`, :func:`client_argv`): the server ``iperf3 -s -1 -B ADDR -p PORT``
serves the one test and exits; the client ``iperf3 -c SERVER -p PORT -l SIZE (-t S | -k N) -P STREAMS
[-w BUF] [--bidir] -J -i 0``: ``--sizes`` -> ``-l`` (one run per size, at most 1 MiB: iperf3's
``MAX_BLOCKSIZE``), ``--duration`` -> ``-t`` (whole seconds), ``--iters`` -> ``-k`` (blocks, all
streams together: ``--iters`` counts per stream in ibdiag's engine, so ``-k`` is iters x streams),
``--streams`` -> ``-P``, ``--socket-buffer`` -> ``-w``, ``--bidir`` -> ``--bidir``; ``-J -i 0``: one
JSON document without per-second intervals (kept short, read whole). Without ``--iters`` or
``--duration`` iperf3 runs ``-t 1``, ibdiag's default of 1 s per size.

What is read (:func:`read_result`) — the receiver's figures, as ibdiag's own engine reports them:
``end.sum_received`` bytes over its seconds (plus ``end.sum_received_bidir_reverse`` with
``--bidir``: the sum, like perftest's ``-b``); iperf3 counts bytes, not writes, so ``iters`` is bytes /
size; CPU seconds per GB from ``end.cpu_utilization_percent`` (``host_total`` this end, ``remote_total``
the server: per cent of one CPU over the test, user + system, as ``iperf3 -V`` prints); each stream's
receiver bytes and seconds from ``end.streams`` when there are several. A document with ``error``, or
whose receiver counted no bytes (iperf3 3.9 reports 0 received for a transfer too short for the
server to count), is not a measurement.
"""

from __future__ import annotations

import re
from typing import Any

from ibdiag.bench.p2p.external.output import UnreadableResult
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.results.model import P2PResult, StreamFigure
from ibdiag.bench.results.stats import cpu_s_per_gb
from ibdiag.errors import CannotRunError
from ibdiag.jsonread import Fields, JsonFieldError, loads
from ibdiag.text import safe_excerpt

INSTALL_HINT = "install iperf3 on both hosts (apt install iperf3, dnf install iperf3)"
#: ``iperf3 --version``: ``iperf 3.12 (cJSON 1.7.15)``.
_VERSION = re.compile(r"iperf\s+(3\.[0-9][0-9A-Za-z.\-+]*)")
#: Seconds iperf3 spends around its test (connecting, exchanging results) beyond ``-t``.
SETUP_S = 4.0
#: Slowest rate assumed when bounding an ``--iters`` run (bytes/s).
SLOWEST_BPS = 1e6


def parse_version(text: str) -> str | None:
    m = _VERSION.search(text)
    return m.group(1)[:32] if m else None


def seconds_of(req: RunRequest) -> int:
    """``-t``: whole seconds (checked when the request was built); 1 without ``--duration``."""
    return int(req.duration_s) if req.duration_s is not None else 1


def server_argv(program: str, bind: str, port: int) -> list[str]:
    return [program, "-s", "-1", "-B", bind, "-p", str(port)]


def client_argv(
    program: str,
    req: RunRequest,
    size: int,
    port: int,
    server: str,
    socket_buffer: int | None = None,
) -> list[str]:
    argv = [program, "-c", server, "-p", str(port), "-l", str(size)]
    if req.iters is not None:
        argv += ["-k", str(req.iters * req.streams)]
    else:
        argv += ["-t", str(seconds_of(req))]
    argv += ["-P", str(req.streams)]
    if socket_buffer is not None:
        argv += ["-w", str(socket_buffer)]
    if req.bidir:
        argv.append("--bidir")
    return [*argv, "-J", "-i", "0"]


def run_limit_s(req: RunRequest, size: int, timeout_s: float) -> float:
    """Longest one run may take before it is killed (seconds)."""
    if req.iters is not None:
        expected = req.iters * req.streams * size / SLOWEST_BPS
    else:
        expected = float(seconds_of(req))
    return expected + SETUP_S + timeout_s


def _document(output: str, what: str) -> Fields:
    """iperf3's one JSON document in ``output`` (stderr may hold lines around it)."""
    start, end = output.find("{"), output.rfind("}")
    try:
        if start < 0 or end < start:
            raise JsonFieldError("", "no JSON document")
        doc = loads(output[start : end + 1])
        return Fields(doc, "iperf3")
    except ValueError as e:
        raise UnreadableResult(
            f"{what}: iperf3's output has no result: {e}",
            hint="run the same command by hand to see what iperf3 says",
        ) from None


def _sum(end: Fields, key: str) -> tuple[int, float]:
    s = end.object(key)
    if s is None:
        return 0, 0.0
    return s.integer("bytes", required=True), s.number("seconds", 0.0, 1e7, required=True)


def _streams(end: Fields) -> tuple[StreamFigure, ...]:
    """Each stream's receiver bytes and seconds (with --bidir the server's streams follow), when several."""
    out = []
    for item in end.objects("streams", lambda f: f, max_items=1024):
        rx = item.object("receiver")
        if rx is not None:
            out.append(
                StreamFigure(
                    rx.integer("bytes", required=True),
                    rx.number("seconds", 0.0, 1e7, required=True),
                )
            )
    return tuple(out) if len(out) > 1 else ()


def read_result(output: str, req: RunRequest, size: int, what: str) -> P2PResult:
    """The bandwidth row for ``size`` in the iperf3 client's ``-J`` output (see the module docstring)."""
    f = _document(output, what)
    error = f.doc.get("error")
    if error is not None:
        raise CannotRunError(
            f"{what}: iperf3 failed: {safe_excerpt(str(error), 300)}",
            hint="run the same command by hand to see what iperf3 says",
        )
    try:
        end = f.object("end")
        if end is None:
            raise JsonFieldError("iperf3.end", "is missing")
        rx_bytes, rx_s = _sum(end, "sum_received")
        if req.bidir:
            back_bytes, back_s = _sum(end, "sum_received_bidir_reverse")
            rx_bytes, rx_s = rx_bytes + back_bytes, max(rx_s, back_s)
        cpu = end.object("cpu_utilization_percent")
        host = None if cpu is None else cpu.number("host_total", 0.0, 1e6)
        remote = None if cpu is None else cpu.number("remote_total", 0.0, 1e6)
        per_stream = _streams(end)
    except ValueError as e:
        raise UnreadableResult(
            f"{what}: iperf3's result is not what iperf3 3.x writes: {e}",
            hint="run the same command by hand to see what iperf3 says",
        ) from None
    if rx_bytes <= 0 or rx_s <= 0:
        raise UnreadableResult(
            f"{what}: iperf3's receiver counted no bytes (sum_received: {rx_bytes} bytes in {rx_s:g} s)",
            hint="give a longer --duration, or run the same command by hand",
        )
    return _row(size, rx_bytes, rx_s, host, remote, per_stream)


def _row(
    size: int,
    rx_bytes: int,
    rx_s: float,
    host_pct: float | None,
    remote_pct: float | None,
    per_stream: tuple[StreamFigure, ...],
) -> P2PResult:
    messages = rx_bytes // size
    cpu: dict[str, Any] = {
        "client": None if host_pct is None else cpu_s_per_gb(host_pct / 100 * rx_s, rx_bytes),
        "server": None if remote_pct is None else cpu_s_per_gb(remote_pct / 100 * rx_s, rx_bytes),
    }
    return P2PResult(
        bytes=size,
        iters=messages,
        bw_gbs=rx_bytes / rx_s / 1e9,
        msg_rate_mpps=messages / rx_s / 1e6,
        cpu_s_per_gb=cpu,
        elapsed_s=rx_s,
        per_stream=per_stream,
    )
