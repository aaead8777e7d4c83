"""Inputs -> the verdict and its findings: is the network the bottleneck, and is the fabric doing its job?

Check ids are stable (CI and dashboards key on them); one finding per judgement:

* ``verdict.network_bound``     exposed communication above ``network_bound_share`` of the step
* ``verdict.fabric_efficiency`` measured busbw below ``min_efficiency`` of the ceiling (underperforming);
                                warn above the ceiling (SHARP/NVLS) or when the ceiling is unknown
* ``verdict.fabric_health``     ``--root`` topo/port/counters checks fail (port down, trained narrow or slow,
                                GPUs without GPUDirect RDMA, error counters); only with ``--root``
* ``verdict.bucket_size``       another bucket size would cut the step by ``bucket_gain_share`` or more

Which judgements fail (exit 1) rather than warn is ``[verdict] fail_on``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ibdiag.errors import InputError, UsageError
from ibdiag.report.checks import CheckRegistry
from ibdiag.report.model import Finding, Severity
from ibdiag.units import format_bytes
from ibdiag.units import format_seconds as _format_seconds
from ibdiag.verdict import model
from ibdiag.verdict.inputs import Measured, Workload

CHECKS = CheckRegistry("verdict")
CHECKS.declare("verdict.network_bound", "exposed communication above network_bound_share of the step")
CHECKS.declare("verdict.fabric_efficiency", "measured busbw below min_efficiency of the ceiling; warn above the ceiling or when it is unknown")
CHECKS.declare("verdict.fabric_health", "with --root: failing topo/counters checks, or GPUs without GPUDirect RDMA")
CHECKS.declare("verdict.bucket_size", "another bucket size would cut the step by bucket_gain_share or more: warn")
CHECKS.declare("verdict.rails", "with --root: no active RDMA port beside any GPU: fail (part of fabric health)")

def format_seconds(s: float | None) -> str:
    """:func:`ibdiag.units.format_seconds`, except that zero reads ``0 s``."""
    return "0 s" if s == 0 else _format_seconds(s)


JUDGEMENTS = ("network-bound", "underperforming", "unhealthy", "bucket-size")


@dataclass(frozen=True)
class VerdictConfig:
    """``[verdict]`` settings."""

    network_bound_share: float = 0.10
    """Exposed communication above this share of the step is network-bound (issue 6's default: 10%)."""
    min_efficiency: float = 0.8
    """Measured busbw below this share of the ceiling is underperforming (ml-engineering's network
    chapter: about 80% of the advertised rate is what is achievable in practice)."""
    max_over_ceiling: float = 2.2
    """A busbw above this multiple of the ceiling is refused as an input error (exit 2). With in-network
    reduction (SHARP on the switches, NVLS on NVSwitch) each rank sends and receives S once instead of
    2(n-1)/n x S, so nccl-tests' busbw (algbw x 2(n-1)/n) can reach about twice the link rate; 10% on
    top of 2x for measurement noise. Anything higher is a wrong unit, link rate or rail count."""
    link_payload_share: float = 1.0
    """Share of the link's signalling rate that carries payload. 1.0 keeps the seed's arithmetic
    (400 Gb/s -> 50 GB/s "at best", seed 000); lower it (e.g. 0.95) to account for headers."""
    latency_us: float = 50.0
    """Per-collective latency (µs) when neither --latency-us nor the bench gives one: the order of
    nccl-tests all_reduce_perf's time for the smallest messages across InfiniBand nodes (tens of µs).
    An assumption, labelled as such in the output; measure it with --bench or --nccl-tests."""
    bucket_gain_share: float = 0.05
    """Recommend another bucket size (warn) when it would shorten the step by this share or more."""
    scaling_max_ranks: int = 16384
    """Largest rank count in the scaling table (issue 6)."""
    fail_on: tuple[str, ...] = ("network-bound", "underperforming", "unhealthy")
    """Judgements that fail (exit 1); the others warn. Any of network-bound, underperforming, unhealthy, bucket-size."""

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> InputError:
            return InputError(f"config [verdict] {key} {why}", hint="see the README's verdict section for the keys and their ranges")

        if not 0 < self.network_bound_share < 1:
            raise bad("network_bound_share", "must be between 0 and 1 (a share of the step)")
        if not 0 < self.min_efficiency <= 1:
            raise bad("min_efficiency", "must be above 0 and at most 1")
        if not self.max_over_ceiling >= 1:
            raise bad("max_over_ceiling", "must be at least 1")
        if not 0 < self.link_payload_share <= 1:
            raise bad("link_payload_share", "must be above 0 and at most 1")
        if not 0 <= self.latency_us <= 1e6:
            raise bad("latency_us", "must be between 0 and 1e6 µs")
        if not 0 <= self.bucket_gain_share < 1:
            raise bad("bucket_gain_share", "must be between 0 and 1")
        if not 2 <= self.scaling_max_ranks <= 2**20:
            raise bad("scaling_max_ranks", "must be between 2 and 1048576")
        unknown = sorted(set(self.fail_on) - set(JUDGEMENTS))
        if unknown:
            raise InputError(f"config [verdict] fail_on has unknown judgement(s) {', '.join(unknown)}", hint=f"the judgements are {', '.join(JUDGEMENTS)}")

    def severity(self, judgement: str) -> Severity:
        return Severity.FAIL if judgement in self.fail_on else Severity.WARN


# --- the ceiling ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RailInfo:
    """What ``--root`` says about the rails: the active ports of the adapters paired with GPUs."""

    ports: tuple[str, ...]
    """``mlx5_0:1`` ..."""
    rate_gbps: float | None
    """The highest rate among them (a node is cabled uniformly; a slower port is a health finding)."""
    link_layer: str | None


def rails_from_topology(topo: Any) -> RailInfo:
    """Rail ports from ``topo.pairings[*].nearest`` (deduplicated), keeping the most common link layer
    so that a storage Ethernet adapter that ties for "nearest" is not counted as a training rail."""
    seen: list[Any] = []
    for pairing in topo.pairings:
        for name in pairing.nearest:
            adapter = topo.adapter(name)
            if adapter is None:
                continue
            for port in adapter.ports:
                if port.active and port not in seen:
                    seen.append(port)
    if not seen:
        return RailInfo((), None, None)
    layer = Counter(p.link_layer for p in seen).most_common(1)[0][0]
    ports = [p for p in seen if p.link_layer == layer]
    rates = [p.rate_gbps for p in ports if p.rate_gbps]
    return RailInfo(tuple(f"{p.adapter}:{p.port}" for p in ports), max(rates) if rates else None, layer)


@dataclass(frozen=True)
class Ceiling:
    """The best busbw the node's rails could carry: rails used x link rate / 8 x payload share."""

    link_gbps: float | None
    link_source: str
    rails_per_node: int
    rails_source: str
    rails_used: int
    payload_share: float
    rail_ports: tuple[str, ...] = ()
    root_read: bool = False
    """``--root`` was read (its rails, if any, are in rail_ports)."""

    @property
    def rail_gbs(self) -> float | None:
        return None if self.link_gbps is None else self.link_gbps / 8.0 * self.payload_share

    @property
    def busbw_gbs(self) -> float | None:
        return None if self.rail_gbs is None else self.rails_used * self.rail_gbs

    def to_json(self) -> dict[str, Any]:
        return {
            "link_gbps": self.link_gbps,
            "link_source": self.link_source,
            "rails_per_node": self.rails_per_node,
            "rails_source": self.rails_source,
            "rails_used": self.rails_used,
            "rail_ports": list(self.rail_ports),
            "payload_share": self.payload_share,
            "rail_gbs": self.rail_gbs,
            "busbw_gbs": self.busbw_gbs,
        }


def ceiling(*, link_gbps: float | None, rails_per_node: int | None, ranks_per_node: int, rails: RailInfo | None, payload_share: float) -> Ceiling:
    """``--link-gbps`` / ``--rails-per-node`` win; else ``--root``'s rails; else one rail, rate unknown.

    Rails found under ``--root`` are capped at ranks per node (a rank drives the rail beside its GPU);
    an explicit ``--rails-per-node`` is taken as given (a GPU may drive several adapters).
    """
    if link_gbps is not None:
        link, link_src = float(link_gbps), "--link-gbps"
    elif rails is not None and rails.rate_gbps is not None:
        link, link_src = rails.rate_gbps, "--root"
    else:
        link, link_src = None, "unknown"
    if rails_per_node is not None:
        n, src, used = rails_per_node, "--rails-per-node", rails_per_node
    elif rails is not None and rails.ports:
        n, src = len(rails.ports), "--root"
        used = min(n, ranks_per_node)
    else:
        n, src, used = 1, "default", 1
    return Ceiling(link, link_src, n, src, used, payload_share, rails.ports if rails else (), rails is not None)


# --- fabric health ------------------------------------------------------------------------------


# topo warnings that, for a training job, mean GPUs without GPUDirect RDMA: the data is staged through
# host memory (NCCL docs, NCCL_NET_GDR_LEVEL), so they make the fabric unhealthy here.
_GDR_CHECKS = ("topo.gpu_nic_path",)


@dataclass(frozen=True)
class Health:
    """The ``--root`` node's topo (and counters) findings, sorted into what makes the fabric unhealthy."""

    checked: tuple[str, ...]
    """Sources that ran: ``topo``, ``counters``."""
    failing: tuple[Finding, ...]
    warnings: tuple[Finding, ...]
    passed: int

    @property
    def ok(self) -> bool:
        return not self.failing

    def to_json(self) -> dict[str, Any]:
        return {
            "state": "unhealthy" if self.failing else "ok",
            "checked": list(self.checked),
            "failing": [f.to_json() for f in self.failing],
            "warnings": [f.to_json() for f in self.warnings],
            "passed": self.passed,
        }


def sort_health(findings: list[Finding], *, checked: tuple[str, ...], rails: RailInfo | None = None) -> Health:
    """FAIL findings, plus GPUs without GPUDirect RDMA (path beyond the GDR level, or no peer-memory
    module), make the fabric unhealthy; other warnings are listed; no rail at all is unhealthy too."""
    failing: list[Finding] = []
    warnings: list[Finding] = []
    passed = 0
    for f in findings:
        if f.severity is Severity.FAIL:
            failing.append(f)
        elif f.severity is Severity.WARN and (f.check in _GDR_CHECKS or (f.check == "topo.gdr_module" and f.value == "absent")):
            failing.append(f)
        elif f.severity is Severity.WARN:
            warnings.append(f)
        else:
            passed += 1
    if rails is not None and not rails.ports:
        failing.append(
            Finding(
                "verdict.rails",
                Severity.FAIL,
                "node",
                "no active RDMA port beside any GPU: this node cannot carry the job's traffic over RDMA",
                value=0,
                hint="check `ibdiag topo` on this node: adapters present, ports ACTIVE, GPUs visible",
            )
        )
    return Health(checked, tuple(failing), tuple(warnings), passed)


# --- the verdict --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    workload: Workload
    measured: Measured
    latency_s: float
    latency_source: str
    ceiling: Ceiling
    factor: float
    step: model.Step
    recommended_bucket: int
    recommended: model.Step
    scaling: tuple[model.ScalingRow, ...]
    health: Health | None
    config: VerdictConfig
    notes: tuple[str, ...] = field(default_factory=tuple)

    # --- derived numbers ---
    @property
    def wire_bytes_per_rank(self) -> float:
        return self.factor * self.workload.grad_bytes

    @property
    def wire_s(self) -> float:
        """Bandwidth term alone: factor x S / busbw (the seed's "0.64 s")."""
        return model.transfer_s(self.wire_bytes_per_rank, self.measured.busbw_gbs)

    @property
    def ceiling_wire_s(self) -> float | None:
        c = self.ceiling.busbw_gbs
        return None if c is None else model.transfer_s(self.wire_bytes_per_rank, c)

    @property
    def efficiency(self) -> float | None:
        c = self.ceiling.busbw_gbs
        return None if c is None else self.measured.busbw_gbs / c

    @property
    def verdict(self) -> str:
        return model.classify(self.step, self.config.network_bound_share)

    @property
    def underperforming(self) -> bool:
        e = self.efficiency
        return e is not None and e < self.config.min_efficiency

    @property
    def above_ceiling(self) -> bool:
        e = self.efficiency
        return e is not None and e > 1.0 + 1e-9

    @property
    def fabric(self) -> str:
        """``unhealthy`` > ``underperforming`` > ``ok``; ``unknown`` when neither could be judged."""
        if self.health is not None and not self.health.ok:
            return "unhealthy"
        if self.underperforming:
            return "underperforming"
        if self.efficiency is None and self.health is None:
            return "unknown"
        return "ok"

    @property
    def wall_ranks(self) -> int | None:
        return model.scaling_wall(self.scaling)

    @property
    def bucket_gain_s(self) -> float:
        return self.step.step_s - self.recommended.step_s

    def to_json(self) -> dict[str, Any]:
        ov = self.step.overlap
        return {
            "inputs": self.workload.to_json(),
            "traffic_factor": self.factor,
            "grad_bytes": self.workload.grad_bytes,
            "wire_bytes_per_rank": self.wire_bytes_per_rank,
            "busbw_gbs": self.measured.busbw_gbs,
            "busbw_source": self.measured.to_json(),
            "latency_us": round(self.latency_s * 1e6, 6),
            "latency_source": self.latency_source,
            "ceiling_busbw_gbs": self.ceiling.busbw_gbs,
            "ceiling": self.ceiling.to_json(),
            "efficiency": self.efficiency,
            "wire_s": self.wire_s,
            "ceiling_wire_s": self.ceiling_wire_s,
            "comm_s": ov.comm_s,
            "exposed_comm_s": self.step.exposed_s,
            "step_s": self.step.step_s,
            "comm_share": self.step.comm_share,
            "overlap": {
                "buckets": ov.buckets,
                "bucket_bytes": ov.bucket_bytes,
                "last_bucket_bytes": ov.last_bucket_bytes,
                "bucket_comm_s": ov.bucket_comm_s,
                "bucket_compute_s": ov.bucket_compute_s,
                "hidden_buckets": ov.hidden_buckets,
                "first_exposed_bucket": ov.first_exposed_bucket,
                "comm_end_s": ov.comm_end_s,
            },
            "verdict": self.verdict,
            "fabric": self.fabric,
            "fabric_health": None if self.health is None else self.health.to_json(),
            "recommended_bucket_bytes": self.recommended_bucket,
            "recommended_exposed_comm_s": self.recommended.exposed_s,
            "recommended_step_s": self.recommended.step_s,
            "scaling_wall_ranks": self.wall_ranks,
            "scaling": [r.to_json() for r in self.scaling],
            "thresholds": {
                "network_bound_share": self.config.network_bound_share,
                "min_efficiency": self.config.min_efficiency,
                "max_over_ceiling": self.config.max_over_ceiling,
                "bucket_gain_share": self.config.bucket_gain_share,
                "fail_on": list(self.config.fail_on),
            },
            "notes": list(self.notes),
        }


def judge(
    workload: Workload,
    measured: Measured,
    ceil: Ceiling,
    *,
    health: Health | None = None,
    config: VerdictConfig = VerdictConfig(),
    latency_us: float | None = None,
) -> Verdict:
    """Run the arithmetic; raise UsageError when the busbw is above what SHARP/NVLS could explain."""
    c = ceil.busbw_gbs
    if c is not None and measured.busbw_gbs > config.max_over_ceiling * c:
        raise UsageError(
            f"measured busbw {measured.busbw_gbs:g} GB/s is {measured.busbw_gbs / c:.3g} x the ceiling of {c:g} GB/s "
            f"({ceil.rails_used} rail(s) x {ceil.link_gbps:g} Gb/s / 8): more than in-network reduction (SHARP/NVLS, about 2x) "
            f"could explain (limit {config.max_over_ceiling:g} x)",
            hint="check that --busbw is GB/s (bytes, not Gb/s bits), --link-gbps, and --rails-per-node; or raise [verdict] max_over_ceiling",
        )
    if latency_us is not None:
        lat_s, lat_src = latency_us * 1e-6, "--latency-us"
    elif measured.latency_s is not None:
        lat_s, lat_src = measured.latency_s, f"{measured.source}: {measured.latency_how}"
    else:
        lat_s, lat_src = config.latency_us * 1e-6, "assumed: [verdict] latency_us, not measured"
    w = workload
    factor = model.traffic_factor(w.strategy, w.ranks)
    ov = model.simulate_overlap(w.grad_bytes, w.bucket_bytes, w.backward_s, factor, measured.busbw_gbs, lat_s)
    step = model.Step(w.forward_s, ov)
    best_size, best_ov = model.best_bucket(w.grad_bytes, w.backward_s, factor, measured.busbw_gbs, lat_s)
    rows = model.scaling_table(
        grad_bytes=w.grad_bytes,
        strategy=w.strategy,
        ranks=w.ranks,
        ranks_per_node=w.ranks_per_node,
        backward_s=w.backward_s,
        forward_s=w.forward_s,
        bucket_bytes=w.bucket_bytes,
        busbw_gbs=measured.busbw_gbs,
        latency_s=lat_s,
        network_bound_share=config.network_bound_share,
        max_ranks=config.scaling_max_ranks,
    )
    notes = list(measured.notes)
    if latency_us is None and measured.latency_s is None:
        notes.append(f"the per-collective latency is assumed ({config.latency_us:g} µs, [verdict] latency_us): measure it with --bench or --nccl-tests, or give --latency-us")
    if w.forward_s == 0:
        notes.append("no --forward-s: the step counts the backward pass only, so the communication share is an upper bound")
    return Verdict(w, measured, lat_s, lat_src, ceil, factor, step, best_size, model.Step(w.forward_s, best_ov), rows, health, config, tuple(notes))


def _pct(x: float) -> float:
    return round(x * 100, 2)


def findings(v: Verdict) -> list[Finding]:
    cfg = v.config
    out: list[Finding] = []
    share = v.step.comm_share
    exposed = format_seconds(v.step.exposed_s)
    if v.verdict == model.NETWORK_BOUND:
        out.append(
            Finding(
                "verdict.network_bound",
                cfg.severity("network-bound"),
                "step",
                f"network-bound: {exposed} of communication is exposed per step, {share:.1%} of the {format_seconds(v.step.step_s)} step (limit {cfg.network_bound_share:.0%})",
                value=_pct(share),
                limit=_pct(cfg.network_bound_share),
                unit="%",
                hint=_network_hint(v),
            )
        )
    else:
        out.append(
            Finding(
                "verdict.network_bound",
                Severity.OK,
                "step",
                f"compute-bound: {exposed} of communication is exposed per step, {share:.1%} of the {format_seconds(v.step.step_s)} step (limit {cfg.network_bound_share:.0%})",
                value=_pct(share),
                limit=_pct(cfg.network_bound_share),
                unit="%",
            )
        )

    eff = v.efficiency
    c = v.ceiling.busbw_gbs
    if eff is None:
        out.append(
            Finding(
                "verdict.fabric_efficiency",
                Severity.WARN,
                "busbw",
                f"not judged: the ceiling is unknown (measured busbw {v.measured.busbw_gbs:.4g} GB/s, no link rate)",
                value=v.measured.busbw_gbs,
                unit="GB/s",
                hint="give --link-gbps (e.g. 400 for NDR) and --rails-per-node, or --root on the node to read them",
            )
        )
    elif v.underperforming:
        out.append(
            Finding(
                "verdict.fabric_efficiency",
                cfg.severity("underperforming"),
                "busbw",
                f"underperforming: busbw {v.measured.busbw_gbs:.4g} GB/s is {eff:.1%} of the ceiling {c:.4g} GB/s (limit {cfg.min_efficiency:.0%})",
                value=_pct(eff),
                limit=_pct(cfg.min_efficiency),
                unit="%",
                hint="run ibdiag counters for errors and xmit_wait, ibdiag topo for slow/narrow links, and compare ibdiag bench p2p per rail; check NCCL_IB_HCA and that every rail is used",
            )
        )
    elif v.above_ceiling:
        out.append(
            Finding(
                "verdict.fabric_efficiency",
                Severity.WARN,
                "busbw",
                f"busbw {v.measured.busbw_gbs:.4g} GB/s is {eff:.1%} of the ceiling {c:.4g} GB/s: in-network reduction (SHARP/NVLS) at work, or the ceiling is set too low",
                value=_pct(eff),
                limit=100.0,
                unit="%",
                hint="if SHARP/NVLS is not in use, check --link-gbps and --rails-per-node",
            )
        )
    else:
        out.append(
            Finding(
                "verdict.fabric_efficiency",
                Severity.OK,
                "busbw",
                f"busbw {v.measured.busbw_gbs:.4g} GB/s is {eff:.1%} of the ceiling {c:.4g} GB/s (limit {cfg.min_efficiency:.0%})",
                value=_pct(eff),
                limit=_pct(cfg.min_efficiency),
                unit="%",
            )
        )

    h = v.health
    if h is not None:
        if h.failing:
            listed = "; ".join(f"{f.subject}: {f.message}" for f in h.failing[:4])
            more = f"; and {len(h.failing) - 4} more" if len(h.failing) > 4 else ""
            out.append(
                Finding(
                    "verdict.fabric_health",
                    cfg.severity("unhealthy"),
                    "node",
                    f"unhealthy: {len(h.failing)} {'/'.join(h.checked)} problem(s): {listed}{more}",
                    value=len(h.failing),
                    limit=0,
                    hint="fix these first: a slow, narrow or missing rail drags the whole all-reduce (see ibdiag topo / ibdiag counters)",
                )
            )
        elif h.warnings:
            listed = "; ".join(f"{f.subject}: {f.message}" for f in h.warnings[:4])
            more = f"; and {len(h.warnings) - 4} more" if len(h.warnings) > 4 else ""
            out.append(
                Finding(
                    "verdict.fabric_health",
                    Severity.WARN,
                    "node",
                    f"no failing {'/'.join(h.checked)} check, {len(h.warnings)} warning(s): {listed}{more}",
                    value=0,
                    limit=0,
                    hint="see ibdiag topo / ibdiag counters --interval 10 on this node: a warning here can still cost bandwidth",
                )
            )
        else:
            out.append(
                Finding(
                    "verdict.fabric_health",
                    Severity.OK,
                    "node",
                    f"healthy: {'/'.join(h.checked)} checks passed ({h.passed} ok)",
                    value=0,
                    limit=0,
                )
            )

    gain = v.bucket_gain_s
    cur, best = v.workload.bucket_bytes, v.recommended_bucket
    if gain >= cfg.bucket_gain_share * v.step.step_s and gain > 0:
        out.append(
            Finding(
                "verdict.bucket_size",
                cfg.severity("bucket-size"),
                "bucket",
                f"a {format_bytes(best)} bucket would expose {format_seconds(v.recommended.exposed_s)} instead of {format_seconds(v.step.exposed_s)} "
                f"(step {format_seconds(v.recommended.step_s)} instead of {format_seconds(v.step.step_s)})",
                value=best,
                limit=cur,
                unit="B",
                hint=f"DDP: bucket_cap_mb={best // 2**20 if best >= 2**20 else best / 2**20:g}; FSDP/DeepSpeed: the matching bucket/prefetch size",
            )
        )
    else:
        out.append(
            Finding(
                "verdict.bucket_size",
                Severity.OK,
                "bucket",
                f"{format_bytes(cur)} buckets are within {cfg.bucket_gain_share:.0%} of the step of the best size ({format_bytes(best)}, {format_seconds(max(gain, 0.0))} shorter)",
                value=best,
                limit=cur,
                unit="B",
            )
        )
    return out


def _network_hint(v: Verdict) -> str:
    parts = []
    if v.underperforming:
        parts.append("first bring busbw up to the ceiling (the fabric underperforms)")
    if v.bucket_gain_s > 0:
        parts.append(f"try {format_bytes(v.recommended_bucket)} buckets")
    if v.workload.strategy in ("fsdp", "zero3"):
        parts.append("zero2 moves 2/3 of fsdp's traffic if memory allows")
    parts.append("raise the per-rank batch (more compute per step to hide behind), or add rails/bandwidth")
    return "; ".join(parts)
