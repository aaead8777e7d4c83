"""The arithmetic behind ``ibdiag verdict``: pure functions of numbers, no I/O, no display strings.

Units: bytes (``*_bytes``), seconds (``*_s``), GB/s = 1e9 B/s (``*_gbs``, as nccl-tests prints).

* Traffic (seed 000, DESIGN.md): a ring all-reduce puts ``2(n-1)/n x S`` bytes on each rank's wire;
  ZeRO-1/2 move the same (reduce-scatter + all-gather); FSDP/ZeRO-3 add an all-gather of the
  parameters for the backward pass, ``3(n-1)/n x S``. nccl-tests' busbw is defined so that
  ``time = factor x S / busbw`` (busbw = algbw x factor), which is why a measured busbw plugs in here.
* Overlap (seed 001): gradients become ready uniformly over the backward pass, one bucket at a time;
  bucket k's collective takes ``latency + factor x bucket / busbw`` and starts when the bucket is
  ready and the previous collective is done. Exposed communication = end of the last collective
  minus the end of the backward pass. The last bucket has no compute after it, so it is always exposed.
* The scaling wall: for a fixed global batch, compute per rank shrinks as 1/n while the per-rank
  traffic ``factor x S`` stays flat (factor -> 2 or 3), so past some n communication stops hiding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ibdiag.collectives import STRATEGIES

#: Bytes on each rank's wire per byte of gradient, as k x (n-1)/n: the k per sharding strategy, from
#: its collectives in :data:`ibdiag.collectives.STRATEGIES` (ddp: one all_reduce, 2; zero1/zero2:
#: reduce-scatter + all-gather, 2; fsdp/zero3: two all-gathers + a reduce-scatter, 3: the ZeRO paper's
#: "1.5x the communication volume of data parallelism").
STRATEGY_MULTIPLIER: dict[str, int] = {s.name: s.multiplier for s in STRATEGIES.values()}

NETWORK_BOUND = "network-bound"
COMPUTE_BOUND = "compute-bound"
SINGLE_NODE = "single-node"

MIB = 2**20

#: Relative tolerance for "ends no later than the backward pass" and for ties between bucket sizes.
_REL_TOL = 1e-9


def traffic_factor(strategy: str, ranks: int) -> float:
    """Bytes each rank puts on its wire per gradient byte: ``k x (n-1)/n`` (2 for ddp/zero1/zero2, 3 for fsdp/zero3)."""
    return STRATEGIES[strategy].traffic_factor(ranks)


def transfer_s(nbytes: float, busbw_gbs: float) -> float:
    """Seconds to move ``nbytes`` (wire bytes per rank) at ``busbw_gbs`` GB/s; 0 at infinite bandwidth."""
    if busbw_gbs <= 0:
        raise ValueError("busbw must be positive")
    return 0.0 if math.isinf(busbw_gbs) else nbytes / (busbw_gbs * 1e9)


@dataclass(frozen=True)
class Overlap:
    """How the collectives of one step line up against the backward pass (times from its start)."""

    buckets: int
    full_buckets: int
    bucket_bytes: int
    """Size of every full bucket (the configured size, or S when S is smaller)."""
    last_bucket_bytes: int
    """Size of the last bucket (== bucket_bytes when S divides evenly)."""
    bucket_comm_s: float
    """One full bucket's collective: latency + factor x bucket / busbw."""
    last_bucket_comm_s: float
    bucket_compute_s: float
    """Backward time that produces one full bucket: backward x bucket / S."""
    comm_s: float
    """All collectives back to back, no overlap."""
    comm_end_s: float
    """When the last collective ends, measured from the start of the backward pass."""
    backward_s: float
    hidden_buckets: int
    """Buckets whose collective ends no later than the backward pass (always a prefix)."""

    @property
    def exposed_s(self) -> float:
        return max(0.0, self.comm_end_s - self.backward_s)

    @property
    def keeps_up(self) -> bool:
        """Each full bucket's collective is no longer than the compute that produces the next bucket."""
        return self.bucket_comm_s <= self.bucket_compute_s * (1 + _REL_TOL)

    @property
    def first_exposed_bucket(self) -> int | None:
        """1-based index of the first bucket that ends after the backward pass; None when none does."""
        return self.hidden_buckets + 1 if self.hidden_buckets < self.buckets else None

    def ready_s(self, k: int) -> float:
        """When bucket ``k`` (1-based) is ready: its last gradient byte is produced."""
        if k >= self.buckets:
            return self.backward_s
        return k * self.bucket_compute_s

    def end_s(self, k: int) -> float:
        """When bucket ``k``'s collective ends (1-based)."""
        if k < 1 or k > self.buckets:
            raise ValueError(f"bucket {k} out of range 1..{self.buckets}")
        if k <= self.full_buckets:
            return _full_bucket_end(k, self.bucket_compute_s, self.bucket_comm_s)
        before = (
            _full_bucket_end(self.full_buckets, self.bucket_compute_s, self.bucket_comm_s)
            if self.full_buckets
            else 0.0
        )
        return max(self.backward_s, before) + self.last_bucket_comm_s


def _full_bucket_end(k: int, every_s: float, comm_s: float) -> float:
    # Full bucket j is ready at j*every_s and its collective takes comm_s, one at a time:
    # end_k = max over j<=k of (j*every_s + (k-j+1)*comm_s); linear in j, so the max is at j=1 or j=k.
    return max(every_s + k * comm_s, k * every_s + comm_s)


def _split(grad_bytes: int, bucket_bytes: int) -> tuple[int, int, int]:
    """(bucket size, full buckets, remainder bytes) for S split into buckets of at most ``bucket_bytes``."""
    if grad_bytes < 1:
        raise ValueError("gradient size must be at least 1 byte")
    if bucket_bytes < 1:
        raise ValueError("bucket size must be at least 1 byte")
    b = min(bucket_bytes, grad_bytes)
    full, rest = divmod(grad_bytes, b)
    return b, full, rest


def simulate_overlap(
    grad_bytes: int,
    bucket_bytes: int,
    backward_s: float,
    factor: float,
    busbw_gbs: float,
    latency_s: float,
) -> Overlap:
    """The overlap model in closed form (exact for the model; the bucket-by-bucket oracle it must agree
    with is ``tests/support/verdict_oracle.py``)."""
    if backward_s <= 0:
        raise ValueError("backward time must be positive")
    if latency_s < 0:
        raise ValueError("latency cannot be negative")
    b, full, rest = _split(grad_bytes, bucket_bytes)
    every = backward_s * b / grad_bytes
    comm_full = latency_s + transfer_s(factor * b, busbw_gbs)
    comm_rest = latency_s + transfer_s(factor * rest, busbw_gbs) if rest else 0.0
    buckets = full + (1 if rest else 0)
    end_full = _full_bucket_end(full, every, comm_full) if full else 0.0
    if rest:
        comm_end = max(backward_s, end_full) + comm_rest
    else:
        comm_end = end_full
    # Full bucket k ends by the backward end iff every + k*comm <= B and k*every + comm <= B.
    limit = backward_s * (1 + _REL_TOL)
    if comm_full == 0:
        hidden = full
    else:
        k1 = math.floor((limit - every) / comm_full) if limit >= every else -1
        k2 = math.floor((limit - comm_full) / every)
        hidden = max(0, min(full, k1, k2))
    if hidden == full and rest and comm_end <= limit:
        hidden += 1
    return Overlap(
        buckets=buckets,
        full_buckets=full,
        bucket_bytes=b,
        last_bucket_bytes=rest if rest else b,
        bucket_comm_s=comm_full,
        last_bucket_comm_s=comm_rest if rest else comm_full,
        bucket_compute_s=every,
        comm_s=full * comm_full + comm_rest,
        comm_end_s=comm_end,
        backward_s=backward_s,
        hidden_buckets=hidden,
    )


def candidate_buckets(grad_bytes: int, smallest: int = MIB) -> tuple[int, ...]:
    """Powers of two from 1 MiB up to the first one that holds all of S (one bucket for everything)."""
    out = [smallest]
    while out[-1] < grad_bytes:
        out.append(out[-1] * 2)
    return tuple(out)


def best_bucket(
    grad_bytes: int,
    backward_s: float,
    factor: float,
    busbw_gbs: float,
    latency_s: float,
    candidates: tuple[int, ...] | None = None,
) -> tuple[int, Overlap]:
    """The candidate bucket size with the least exposed time; on a tie the larger bucket (fewer launches)."""
    best: tuple[int, Overlap] | None = None
    for size in candidates or candidate_buckets(grad_bytes):
        ov = simulate_overlap(grad_bytes, size, backward_s, factor, busbw_gbs, latency_s)
        if best is None or ov.exposed_s <= best[1].exposed_s * (1 + _REL_TOL) + 1e-15:
            best = (size, ov)
    assert best is not None
    return best


@dataclass(frozen=True)
class Step:
    """One training step under the model."""

    forward_s: float
    overlap: Overlap

    @property
    def exposed_s(self) -> float:
        return self.overlap.exposed_s

    @property
    def step_s(self) -> float:
        """forward + backward + exposed communication (optimizer step not modelled)."""
        return self.forward_s + self.overlap.backward_s + self.overlap.exposed_s

    @property
    def comm_share(self) -> float:
        """Share of the step spent waiting for the network (exposed communication / step)."""
        return self.exposed_s / self.step_s


def classify(step: Step, network_bound_share: float) -> str:
    """``network-bound`` when exposed communication exceeds ``network_bound_share`` of the step."""
    return NETWORK_BOUND if step.comm_share > network_bound_share else COMPUTE_BOUND


@dataclass(frozen=True)
class ScalingRow:
    ranks: int
    nodes: int
    compute_s: float
    """Backward time per rank at this size (fixed global batch: anchor x anchor ranks / ranks)."""
    forward_s: float
    factor: float
    wire_bytes_per_rank: float
    comm_s: float | None
    """All collectives, no overlap; None for a single node (no fabric traffic)."""
    exposed_s: float | None
    step_s: float
    comm_share: float | None
    verdict: str
    anchor: bool
    """The row of the job as given (--ranks)."""

    def to_json(self) -> dict[str, object]:
        """One ``scaling`` entry of ``ibdiag.verdict/1`` (and one CSV row)."""
        return {
            "ranks": self.ranks,
            "nodes": self.nodes,
            "compute_s": self.compute_s,
            "forward_s": self.forward_s,
            "traffic_factor": self.factor,
            "wire_bytes_per_rank": self.wire_bytes_per_rank,
            "comm_s": self.comm_s,
            "exposed_comm_s": self.exposed_s,
            "step_s": self.step_s,
            "comm_share": self.comm_share,
            "verdict": self.verdict,
            "job": self.anchor,
        }


def scaling_ranks(ranks: int, ranks_per_node: int, max_ranks: int) -> tuple[int, ...]:
    """ranks-per-node doubling up to ``max_ranks``, plus the job's own rank count."""
    out = set()
    n = ranks_per_node
    while n <= max_ranks:
        out.add(n)
        n *= 2
    out.add(ranks)
    return tuple(sorted(out))


def scaling_table(
    *,
    grad_bytes: int,
    strategy: str,
    ranks: int,
    ranks_per_node: int,
    backward_s: float,
    forward_s: float,
    bucket_bytes: int,
    busbw_gbs: float,
    latency_s: float,
    network_bound_share: float,
    max_ranks: int,
) -> tuple[ScalingRow, ...]:
    """The job at other rank counts with the same global batch, bucket, busbw and per-collective latency.

    A single node (ranks == ranks_per_node) reduces over NVLink, which this model does not cover: its
    row carries no communication and the verdict ``single-node``.
    """
    rows = []
    for n in scaling_ranks(ranks, ranks_per_node, max_ranks):
        scale = ranks / n
        bwd, fwd = backward_s * scale, forward_s * scale
        factor = traffic_factor(strategy, n)
        if n <= ranks_per_node:
            rows.append(
                ScalingRow(
                    n,
                    1,
                    bwd,
                    fwd,
                    factor,
                    factor * grad_bytes,
                    None,
                    None,
                    fwd + bwd,
                    None,
                    SINGLE_NODE,
                    n == ranks,
                )
            )
            continue
        step = Step(
            fwd, simulate_overlap(grad_bytes, bucket_bytes, bwd, factor, busbw_gbs, latency_s)
        )
        rows.append(
            ScalingRow(
                ranks=n,
                nodes=n // ranks_per_node,
                compute_s=bwd,
                forward_s=fwd,
                factor=factor,
                wire_bytes_per_rank=factor * grad_bytes,
                comm_s=step.overlap.comm_s,
                exposed_s=step.exposed_s,
                step_s=step.step_s,
                comm_share=step.comm_share,
                verdict=classify(step, network_bound_share),
                anchor=n == ranks,
            )
        )
    return tuple(rows)


def scaling_wall(rows: tuple[ScalingRow, ...]) -> int | None:
    """The first rank count at which the job is network-bound: where communication stops hiding."""
    return next((row.ranks for row in rows if row.verdict == NETWORK_BOUND), None)
