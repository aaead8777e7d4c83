"""What perftest printed: its complaint when it failed, its result row (through the perftest importer).

READ latency is halved to one way here, so a row means the same whichever engine measured it.
"""

from __future__ import annotations

import re
import signal
from dataclasses import replace
from typing import Any

from ibdiag.bench.importers.perftest import parse_log
from ibdiag.bench.results.model import LatencyStats, P2PResult
from ibdiag.errors import CannotRunError, InputError
from ibdiag.units import format_bytes

_ROW_PREFIX = re.compile(r"^\s*\d+(?:\s+[\d.]+)+(?=[A-Za-z])")


def status_text(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by signal {rc * -1} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def error_lines(output: str, limit: int = 3) -> str:
    """perftest's own complaint from its output: the lines that say what failed, else the last lines."""
    # perftest may print its complaint right after a table row, on the same line ("65536 0 0.00 ... 0.000000ethernet_read_keys: ...").
    lines = [_ROW_PREFIX.sub("", ln).strip() for ln in output.splitlines()]
    lines = [ln for ln in lines if ln and not set(ln) <= set("-*")]
    bad = [
        ln
        for ln in lines
        if re.search(
            r"(?i)couldn't|could not|can't|unable|fail|error|not |invalid|should be|no ", ln
        )
    ]
    picked = (bad or lines)[-limit:] if (bad or lines) else ["(no output)"]
    return "; ".join(ln[:200] for ln in picked)


class UnreadableResult(CannotRunError):
    """perftest ended well but its output holds no readable row for the size (under emulation
    ib_write_lat now and then prints ``inf`` or no row at all, ib_send_bw a 0.00 average):
    :func:`run_all` runs it again."""


#: Extra runs of one size and kind whose output was unreadable (every command run is listed in the
#: result's ``perftest_commands``, so a repeated run shows there).
UNREADABLE_RETRIES = 2


def read_result(output: str, size: int, kind: str, verb: str, source: str) -> P2PResult:
    """The row for ``size`` in perftest's output, in ibdiag's model (perftest importer).

    READ latency is printed as the round trip; ibdiag's own engine reports half of it (one way), so
    it is halved here to keep one meaning per field. CannotRunError when the output has no such row.
    """
    try:
        runs = parse_log(output, source)
    except InputError as e:
        raise UnreadableResult(
            f"{source}: perftest's output has no result: {e.message}",
            hint="run the same command by hand to see what perftest says",
        ) from None
    failed = next((r.provenance.failure for r in runs if r.provenance.failure), None)
    if failed is not None:  # the importer reads a failed run; a measurement it is not
        raise UnreadableResult(
            f"{source}: perftest's output has no result: perftest reported an error ({failed})",
            hint="run the same command by hand to see what perftest says",
        )
    rows = [r for run in runs for r in run.p2p_rows() if r.bytes == size]
    if not rows:
        raise UnreadableResult(
            f"{source}: perftest printed no {format_bytes(size)} row (its last lines: {error_lines(output)})",
            hint="run the same command by hand to see what perftest says",
        )
    row = rows[-1]
    if kind == "bw" and not (row.bw_gbs or 0) > 0:
        # Bytes moved in a run that ended well cannot take no time: a 0.00 average is perftest's
        # timing gone wrong (seen under emulation: ib_send_bw -q 2, 100 iterations), not a rate.
        raise UnreadableResult(
            f"{source}: perftest printed a {format_bytes(size)} row with no bandwidth (BW average 0)",
            hint="run the same command by hand, with more --iters, to see what perftest says",
        )
    if kind == "lat" and verb == "read":
        row = _halved(row)
    return row


def _halved(r: P2PResult) -> P2PResult:
    lat = r.lat_us
    if lat is not None:
        halves: dict[str, Any] = {k: (None if v is None else v / 2) for k, v in vars(lat).items()}
        lat = LatencyStats(**halves)
    return replace(r, lat_us=lat, lat_avg_us=None if r.lat_avg_us is None else r.lat_avg_us / 2)
