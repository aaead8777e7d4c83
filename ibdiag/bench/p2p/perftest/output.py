"""What perftest printed: its result row (through the perftest importer).

READ latency is halved to one way here, so a row means the same whichever engine measured it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ibdiag.bench.importers.perftest import parse_log
from ibdiag.bench.p2p.external.output import UnreadableResult, error_lines
from ibdiag.bench.results.model import LatencyStats, P2PResult
from ibdiag.errors import InputError
from ibdiag.units import format_bytes


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
