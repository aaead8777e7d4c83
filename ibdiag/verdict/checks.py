"""The verdict's findings: is the network the bottleneck, and is the fabric doing its job?

Check ids are stable (CI and dashboards key on them); one finding per judgement, each one function registered in ``CHECKS``:

* ``verdict.network_bound``     exposed communication above ``network_bound_share`` of the step
* ``verdict.fabric_efficiency`` measured busbw below ``min_efficiency`` of the ceiling (underperforming);
                                warn above the ceiling (SHARP/NVLS) or when the ceiling is unknown
* ``verdict.fabric_health``     ``--root`` topo/port/counters checks fail (port down, trained narrow or slow,
                                GPUs without GPUDirect RDMA, error counters); only with ``--root``
* ``verdict.bucket_size``       another bucket size would cut the step by ``bucket_gain_share`` or more
* ``verdict.rails``             ``--root`` shows no active RDMA port beside any GPU (one of the health problems;
                                :mod:`ibdiag.verdict.health` judges it)

Which judgements fail (exit 1) rather than warn is ``[verdict] fail_on``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ibdiag.findings.model import Finding, Severity
from ibdiag.units import format_bytes, format_term_seconds
from ibdiag.verdict import model
from ibdiag.verdict.health import Health
from ibdiag.verdict.registry import CHECKS

if TYPE_CHECKING:
    from ibdiag.verdict.judge import Verdict

__all__ = ["CHECKS", "findings"]


def _pct(x: float) -> float:
    return round(x * 100, 2)


def findings(v: Verdict) -> list[Finding]:
    """Every judgement of the verdict, in the order shown."""
    return [*network_bound(v), *fabric_efficiency(v), *fabric_health(v), *bucket_size(v)]


@CHECKS.check(
    "verdict.network_bound", "exposed communication above network_bound_share of the step"
)
def network_bound(v: Verdict) -> Finding:
    cfg = v.config
    share = v.step.comm_share
    exposed = format_term_seconds(v.step.exposed_s)
    text = f"{exposed} of communication is exposed per step, {share:.1%} of the {format_term_seconds(v.step.step_s)} step (limit {cfg.network_bound_share:.0%})"
    if v.verdict == model.NETWORK_BOUND:
        return Finding(
            "verdict.network_bound",
            cfg.severity("network-bound"),
            "step",
            f"network-bound: {text}",
            value=_pct(share),
            limit=_pct(cfg.network_bound_share),
            unit="%",
            hint=_network_hint(v),
        )
    return Finding(
        "verdict.network_bound",
        Severity.OK,
        "step",
        f"compute-bound: {text}",
        value=_pct(share),
        limit=_pct(cfg.network_bound_share),
        unit="%",
    )


@CHECKS.check(
    "verdict.fabric_efficiency",
    "measured busbw below min_efficiency of the ceiling; warn above the ceiling or when it is unknown",
)
def fabric_efficiency(v: Verdict) -> Finding:
    cfg = v.config
    eff = v.efficiency
    c = v.ceiling.busbw_gbs
    if eff is None or c is None:
        return Finding(
            "verdict.fabric_efficiency",
            Severity.WARN,
            "busbw",
            f"not judged: the ceiling is unknown (measured busbw {v.measured.busbw_gbs:.4g} GB/s, no link rate)",
            value=v.measured.busbw_gbs,
            unit="GB/s",
            hint="give --link-gbps (e.g. 400 for NDR) and --rails-per-node, or --root on the node to read them",
        )
    of_ceiling = f"busbw {v.measured.busbw_gbs:.4g} GB/s is {eff:.1%} of the ceiling {c:.4g} GB/s"
    if v.underperforming:
        return Finding(
            "verdict.fabric_efficiency",
            cfg.severity("underperforming"),
            "busbw",
            f"underperforming: {of_ceiling} (limit {cfg.min_efficiency:.0%})",
            value=_pct(eff),
            limit=_pct(cfg.min_efficiency),
            unit="%",
            hint="run ibdiag counters for errors and xmit_wait, ibdiag topo for slow/narrow links, and compare ibdiag bench p2p per rail; check NCCL_IB_HCA and that every rail is used",
        )
    if v.above_ceiling:
        return Finding(
            "verdict.fabric_efficiency",
            Severity.WARN,
            "busbw",
            f"{of_ceiling}: in-network reduction (SHARP/NVLS) at work, or the ceiling is set too low",
            value=_pct(eff),
            limit=100.0,
            unit="%",
            hint="if SHARP/NVLS is not in use, check --link-gbps and --rails-per-node",
        )
    return Finding(
        "verdict.fabric_efficiency",
        Severity.OK,
        "busbw",
        f"{of_ceiling} (limit {cfg.min_efficiency:.0%})",
        value=_pct(eff),
        limit=_pct(cfg.min_efficiency),
        unit="%",
    )


def _listed(found: tuple[Finding, ...]) -> str:
    """The first four findings as ``subject: message``, and how many more."""
    listed = "; ".join(f"{f.subject}: {f.message}" for f in found[:4])
    return listed + (f"; and {len(found) - 4} more" if len(found) > 4 else "")


@CHECKS.check(
    "verdict.fabric_health",
    "with --root: failing topo/port/counters checks, or GPUs without GPUDirect RDMA",
)
def fabric_health(v: Verdict) -> Finding | None:
    h: Health | None = v.health
    if h is None:
        return None
    checked = "/".join(h.checked)
    if h.failing:
        return Finding(
            "verdict.fabric_health",
            v.config.severity("unhealthy"),
            "node",
            f"unhealthy: {len(h.failing)} {checked} problem(s): {_listed(h.failing)}",
            value=len(h.failing),
            limit=0,
            hint="fix these first: a slow, narrow or missing rail drags the whole all-reduce (see ibdiag topo / ibdiag counters)",
        )
    if h.warnings:
        return Finding(
            "verdict.fabric_health",
            Severity.WARN,
            "node",
            f"no failing {checked} check, {len(h.warnings)} warning(s): {_listed(h.warnings)}",
            value=0,
            limit=0,
            hint="see ibdiag topo / ibdiag counters --interval 10 on this node: a warning here can still cost bandwidth",
        )
    return Finding(
        "verdict.fabric_health",
        Severity.OK,
        "node",
        f"healthy: {checked} checks passed ({h.passed} ok)",
        value=0,
        limit=0,
    )


@CHECKS.check(
    "verdict.bucket_size",
    "another bucket size would cut the step by bucket_gain_share or more: warn",
)
def bucket_size(v: Verdict) -> Finding:
    cfg = v.config
    gain = v.bucket_gain_s
    cur, best = v.workload.bucket_bytes, v.recommended_bucket
    if gain >= cfg.bucket_gain_share * v.step.step_s and gain > 0:
        return Finding(
            "verdict.bucket_size",
            cfg.severity("bucket-size"),
            "bucket",
            f"a {format_bytes(best)} bucket would expose {format_term_seconds(v.recommended.exposed_s)} instead of {format_term_seconds(v.step.exposed_s)} "
            f"(step {format_term_seconds(v.recommended.step_s)} instead of {format_term_seconds(v.step.step_s)})",
            value=best,
            limit=cur,
            unit="B",
            hint=f"DDP: bucket_cap_mb={best // 2**20 if best >= 2**20 else best / 2**20:g}; FSDP/DeepSpeed: the matching bucket/prefetch size",
        )
    return Finding(
        "verdict.bucket_size",
        Severity.OK,
        "bucket",
        f"{format_bytes(cur)} buckets are within {cfg.bucket_gain_share:.0%} of the step of the best size ({format_bytes(best)}, {format_term_seconds(max(gain, 0.0))} shorter)",
        value=best,
        limit=cur,
        unit="B",
    )


def _network_hint(v: Verdict) -> str:
    parts = []
    if v.underperforming:
        parts.append("first bring busbw up to the ceiling (the fabric underperforms)")
    if v.bucket_gain_s > 0:
        parts.append(f"try {format_bytes(v.recommended_bucket)} buckets")
    if v.workload.strategy in ("fsdp", "zero3"):
        parts.append("zero2 moves 2/3 of fsdp's traffic if memory allows")
    parts.append(
        "raise the per-rank batch (more compute per step to hide behind), or add rails/bandwidth"
    )
    return "; ".join(parts)
