"""``--engine sockperf``: TCP latency measured by ``sockperf ping-pong`` (tested with sockperf 3.7, Debian 12).

Command lines: the server ``sockperf server --tcp -i ADDR -p PORT`` keeps serving until it is stopped
(ibdiag stops it after the client's run); the client ``sockperf ping-pong --tcp -i SERVER -p PORT -m
SIZE -t S``: ``--sizes`` -> ``-m`` (14 to 65,507 bytes: sockperf's header is 14 bytes, and a larger
message closes the connection), ``--duration`` -> ``-t`` (whole seconds; 1 without it). sockperf
warms up for 400 ms on its own and takes ``-i`` as an IPv4 address only (3.7: "Invalid address: ::1").

What is read (:func:`read_result`): the histogram sockperf prints after ``Printing statistics`` —
``<MIN> observation``, ``percentile 50.000``, ``99.000``, ``99.900``, ``<MAX> observation``,
``avg-latency`` and ``Total N observations`` — in microseconds, one way (sockperf's "latency" is half
the round trip; a log of ``--full-rtt`` says ``Round trip is`` and is halved here). Lines may carry a
prefix before ``sockperf:`` (a CI log's ``[STDOUT]``, a mail quote's ``>``) and ANSI colours.
"""

from __future__ import annotations

import re

from ibdiag.bench.p2p.external.output import UnreadableResult, error_lines, plain
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.results.model import LatencyStats, P2PResult
from ibdiag.errors import CannotRunError

INSTALL_HINT = (
    "install sockperf on both hosts (apt install sockperf, or build github.com/Mellanox/sockperf)"
)
#: ``sockperf --version``: ``sockperf, version 3.7-no.git``.
#: "== version #3.7-no.git ==": the spaces bounded and the second run of them only after a "#"
#: (two unbounded runs of spaces side by side were quadratic on "version" and spaces alone).
_VERSION = re.compile(r"version\s{0,16}(?:#\s{0,16})?([0-9][0-9A-Za-z.\-+]{0,40})")
#: sockperf's warm-up before its ``-t`` and the time around it (seconds).
SETUP_S = 4.0
#: Longest line looked at (the histogram's lines are under 100 characters).
_MAX_LINE = 400

_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_PERCENTILE = re.compile(r"--->\s*percentile\s+([0-9.]{1,7})\s*=\s*" + _NUMBER)
_OBSERVATION = re.compile(r"--->\s*<(MIN|MAX)>\s*observation\s*=\s*" + _NUMBER)
_AVG = re.compile(r"avg-(?:latency|rtt)\s*=\s*" + _NUMBER)
_TOTAL = re.compile(r"Total\s+([0-9]{1,12})\s+observations")
_ROUND_TRIP = re.compile(r"Summary:\s*Round trip is")


def parse_version(text: str) -> str | None:
    m = _VERSION.search(plain(text))
    return m.group(1)[:32] if m else None


def seconds_of(req: RunRequest) -> int:
    return int(req.duration_s) if req.duration_s is not None else 1


def server_argv(program: str, bind: str, port: int) -> list[str]:
    return [program, "server", "--tcp", "-i", bind, "-p", str(port)]


def client_argv(program: str, req: RunRequest, size: int, port: int, server: str) -> list[str]:
    return [
        program,
        "ping-pong",
        "--tcp",
        "-i",
        server,
        "-p",
        str(port),
        "-m",
        str(size),
        "-t",
        str(seconds_of(req)),
    ]


def run_limit_s(req: RunRequest, timeout_s: float) -> float:
    return seconds_of(req) + SETUP_S + timeout_s


def read_stats(output: str) -> tuple[LatencyStats, int] | None:
    """(one-way latency in µs, observations) from sockperf's histogram; None when it printed none."""
    pct: dict[str, float] = {}
    ends: dict[str, float] = {}
    avg: float | None = None
    total: int | None = None
    for line in plain(output).splitlines():
        line = line[:_MAX_LINE]
        if m := _PERCENTILE.search(line):
            pct[m.group(1)] = float(m.group(2))
        elif m := _OBSERVATION.search(line):
            ends[m.group(1)] = float(m.group(2))
        elif m := _AVG.search(line):
            avg = float(m.group(1))
        elif m := _TOTAL.search(line):
            total = int(m.group(1))
    need = ("50.000", "99.000", "99.900")
    if not all(k in pct for k in need) or set(ends) != {"MIN", "MAX"} or not total:
        return None
    half = 0.5 if _ROUND_TRIP.search(output) else 1.0
    stats = LatencyStats(
        ends["MIN"] * half,
        pct["50.000"] * half,
        pct["99.000"] * half,
        pct["99.900"] * half,
        ends["MAX"] * half,
        None if avg is None else avg * half,
    )
    return stats, total


def read_result(output: str, size: int, what: str) -> P2PResult:
    """The latency row for ``size`` in the sockperf client's output."""
    if re.search(r"sockperf:\s*ERROR", plain(output)):
        raise CannotRunError(
            f"{what}: sockperf failed: {error_lines(output)}",
            hint="run the same command by hand to see what sockperf says",
        )
    got = read_stats(output)
    if got is None:
        raise UnreadableResult(
            f"{what}: sockperf printed no latency histogram (its last lines: {error_lines(output)})",
            hint="run the same command by hand to see what sockperf says",
        )
    stats, observations = got
    return P2PResult(bytes=size, iters=observations, lat_us=stats)
