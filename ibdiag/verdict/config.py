"""``[verdict]`` settings: the shares and limits each judgement uses, and which judgements fail."""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.errors import InputError
from ibdiag.findings.model import Severity

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
            return InputError(
                f"config [verdict] {key} {why}",
                hint="see docs/verdict.md (Configuration) for the keys and their ranges",
            )

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
            raise InputError(
                f"config [verdict] fail_on has unknown judgement(s) {', '.join(unknown)}",
                hint=f"the judgements are {', '.join(JUDGEMENTS)}",
            )

    def severity(self, judgement: str) -> Severity:
        return Severity.FAIL if judgement in self.fail_on else Severity.WARN
