"""Findings of a point-to-point run: is the bandwidth near the line rate?

Settings come from the ``[p2p]`` table of the config file (``[bench]`` before; still read, with a
deprecation warning)::

    [p2p]
    min_bw_share = 0.8        # fail below 80% of line rate
    judge_min_bytes = 1048576 # judge sizes of 1 MiB and up
    tcp_severity = "warn"     # what a slow TCP result is
    line_rate_gbps = 100      # when the interface/port does not say
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ibdiag.bench.results.model import P2PResult
from ibdiag.errors import InputError
from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.units import format_bytes

CHECK_BANDWIDTH = "bench.p2p_bandwidth"

#: Check ids of point-to-point runs (the mechanism: :mod:`ibdiag.findings.registry`).
CHECKS = CheckRegistry("bench")
CHECKS.declare(
    CHECK_BANDWIDTH,
    "best bandwidth of the judged sizes below min_bw_share of the line rate: fail (RDMA) / warn (TCP)",
)


@dataclass(frozen=True)
class P2PConfig:
    min_bw_share: float = 0.8
    """Share of the line rate below which the best bandwidth fails. A healthy link typically gives a
    point-to-point benchmark about 80-90% of its line rate or more at large messages (perftest
    ib_write_bw results; the network chapter of Stas Bekman's ml-engineering book); below the low end
    of that range something is wrong: link trained down, PCIe width, remote NUMA node, errors."""
    judge_min_bytes: int = 2**20
    """Only sizes of at least this many bytes are judged: small messages are bound by per-message
    cost, not the wire (perftest and NCCL reach their plateau by about 1 MiB)."""
    tcp_severity: str = "warn"
    """Severity of a low TCP result. TCP throughput is often limited by the host (one core per
    stream, interrupts, copies), so a slow TCP result does not prove the link bad: warn by default,
    "fail" to make it fail."""
    line_rate_gbps: float | None = None
    """Line rate to judge by (Gb/s) when the port or interface does not report one; ``--line-rate-gbps`` wins."""

    def __post_init__(self) -> None:
        if not 0.0 < self.min_bw_share <= 1.0:
            raise InputError(
                f"config: [p2p] min_bw_share {self.min_bw_share} must be in (0, 1]",
                hint="e.g. 0.8 for 80% of line rate",
            )
        if self.judge_min_bytes < 1:
            raise InputError(
                f"config: [p2p] judge_min_bytes {self.judge_min_bytes} must be at least 1",
                hint="e.g. 1048576 (1 MiB)",
            )
        if self.tcp_severity not in ("warn", "fail"):
            raise InputError(
                f'config: [p2p] tcp_severity "{self.tcp_severity}" must be "warn" or "fail"',
                hint='write tcp_severity = "warn"',
            )
        if self.line_rate_gbps is not None and not self.line_rate_gbps > 0:
            raise InputError(
                f"config: [p2p] line_rate_gbps {self.line_rate_gbps} must be positive",
                hint="e.g. 400 for NDR",
            )


def bandwidth_findings(
    results: Sequence[P2PResult],
    *,
    transport: str,
    subject: str,
    line_rate_gbps: float | None,
    line_rate_source: str,
    bidir: bool,
    cfg: P2PConfig,
) -> list[Finding]:
    """One ``bench.p2p_bandwidth`` finding for the best bandwidth at judged sizes, or none.

    No finding when the line rate is unknown or no judged size was measured for bandwidth.
    Bidirectional runs are judged against twice the line rate (full duplex).
    """
    if line_rate_gbps is None:
        return []
    judged = [r for r in results if r.bw_gbs is not None and r.bytes >= cfg.judge_min_bytes]
    if not judged:
        return []
    best = max(judged, key=lambda r: r.bw_gbs or 0.0)
    best_gbps = (best.bw_gbs or 0.0) * 8.0
    ceiling = line_rate_gbps * (2.0 if bidir else 1.0)
    limit = ceiling * cfg.min_bw_share
    share = best_gbps / ceiling
    value = round(best_gbps, 2)
    where = f"at {format_bytes(best.bytes)}"
    rate_txt = (
        f"{ceiling:g} Gb/s {'(both directions) ' if bidir else ''}line rate ({line_rate_source})"
    )
    if best_gbps >= limit:
        return [
            Finding(
                CHECK_BANDWIDTH,
                Severity.OK,
                subject,
                f"best bandwidth {value:g} Gb/s {where} is {share:.0%} of the {rate_txt}",
                value=value,
                limit=round(limit, 2),
                unit="Gb/s",
            )
        ]
    if transport == "rdma":
        severity = Severity.FAIL
        hint = (
            "check the link (ibdiag topo: width/speed trained down; ibdiag counters: symbol errors, link downs, "
            "xmit_wait), the adapter's PCIe link, and that each side uses the adapter and memory of its NUMA node"
        )
    else:
        severity = Severity.FAIL if cfg.tcp_severity == "fail" else Severity.WARN
        hint = (
            "one TCP stream is often limited by one CPU core: try --streams 4 or --transport rdma; "
            "if that is slow too, check the link with ibdiag counters and the interface with ethtool"
        )
    return [
        Finding(
            CHECK_BANDWIDTH,
            severity,
            subject,
            f"best bandwidth {value:g} Gb/s {where} is only {share:.0%} of the {rate_txt}; expected at least {cfg.min_bw_share:.0%}",
            value=value,
            limit=round(limit, 2),
            unit="Gb/s",
            hint=hint,
        )
    ]
