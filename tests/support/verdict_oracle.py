"""The test oracle for verdict's overlap model: the same model simulated bucket by bucket.

``ibdiag.verdict.model.simulate_overlap`` computes the overlap in closed form; this module walks the
buckets one at a time, the way the model is stated, so the tests (``tests/verdict/test_model.py``) and the
speed comparison (``benchmarks/verdict_overlap.py``) can check the closed form against it. Test code
only: the product never calls it.
"""

from __future__ import annotations

from ibdiag.verdict.model import Overlap, transfer_s

REL_TOL = 1e-9
"""The model's tolerance for "ends no later than the backward pass" (``ibdiag.verdict.model._REL_TOL``)."""


def simulate_overlap_stepwise(
    grad_bytes: int,
    bucket_bytes: int,
    backward_s: float,
    factor: float,
    busbw_gbs: float,
    latency_s: float,
) -> Overlap:
    """The overlap model bucket by bucket, exactly as seed 001 states it: the reference that
    :func:`ibdiag.verdict.model.simulate_overlap` must agree with, O(buckets) instead of O(1)."""
    if backward_s <= 0:
        raise ValueError("backward time must be positive")
    if latency_s < 0:
        raise ValueError("latency cannot be negative")
    if grad_bytes < 1 or bucket_bytes < 1:
        raise ValueError("sizes must be at least 1 byte")
    b = min(bucket_bytes, grad_bytes)
    full, rest = divmod(grad_bytes, b)
    sizes = [b] * full + ([rest] if rest else [])
    limit = backward_s * (1 + REL_TOL)
    done = 0
    end = 0.0
    comm = 0.0
    hidden = 0
    prefix = True
    for size in sizes:
        done += size
        ready = backward_s * done / grad_bytes
        took = latency_s + transfer_s(factor * size, busbw_gbs)
        end = max(ready, end) + took
        comm += took
        if prefix and end <= limit:
            hidden += 1
        else:
            prefix = False
    return Overlap(
        buckets=len(sizes),
        full_buckets=full,
        bucket_bytes=b,
        last_bucket_bytes=sizes[-1],
        bucket_comm_s=latency_s + transfer_s(factor * b, busbw_gbs),
        last_bucket_comm_s=latency_s + transfer_s(factor * sizes[-1], busbw_gbs),
        bucket_compute_s=backward_s * b / grad_bytes,
        comm_s=comm,
        comm_end_s=end,
        backward_s=backward_s,
        hidden_buckets=hidden,
    )
