"""Inputs -> the verdict: the 2xS all-reduce arithmetic, bucket overlap, the scaling wall, against the
ceiling and with the node's health. Its findings are :mod:`ibdiag.verdict.checks`'."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ibdiag.errors import UsageError
from ibdiag.verdict import model
from ibdiag.verdict.ceiling import Ceiling
from ibdiag.verdict.config import VerdictConfig
from ibdiag.verdict.health import Health, with_source_findings
from ibdiag.verdict.inputs import Measured, Workload


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
    health = with_source_findings(health, measured.fabric_findings, f"{measured.source} log")
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
    ov = model.simulate_overlap(
        w.grad_bytes, w.bucket_bytes, w.backward_s, factor, measured.busbw_gbs, lat_s
    )
    step = model.Step(w.forward_s, ov)
    best_size, best_ov = model.best_bucket(
        w.grad_bytes, w.backward_s, factor, measured.busbw_gbs, lat_s
    )
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
        notes.append(
            f"the per-collective latency is assumed ({config.latency_us:g} µs, [verdict] latency_us): measure it with --bench or --nccl-tests, or give --latency-us"
        )
    if w.forward_s == 0:
        notes.append(
            "no --forward-s: the step counts the backward pass only, so the communication share is an upper bound"
        )
    return Verdict(
        w,
        measured,
        lat_s,
        lat_src,
        ceil,
        factor,
        step,
        best_size,
        model.Step(w.forward_s, best_ov),
        rows,
        health,
        config,
        tuple(notes),
    )
