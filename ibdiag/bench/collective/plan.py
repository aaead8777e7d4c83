"""What a requested size becomes for one op and world size: element counts, bytes, buffers (nccl-tests' way).

The run's *plan* (what each size becomes), as opposed to its *spec* (:mod:`.spec`, what the user asked),
its *measurement* (:mod:`.measurement`) and its *meta* (:mod:`ibdiag.bench.results.collective_meta`).

Pure arithmetic, no torch; the op and type facts are in :mod:`ibdiag.collectives`. nccl-tests prints
``max(send, recv)`` bytes and, in the ``count`` column, the per-call element count (per rank for the
ops whose size is the total: all_gather, reduce_scatter, alltoall).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ibdiag.collectives import DType, OpSpec


@dataclass(frozen=True)
class SizePlan:
    """What one requested size becomes for one op and world size (nccl-tests' ``getCollByteCount``)."""

    requested: int
    """The size asked for (bytes)."""
    bytes: int
    """What nccl-tests prints in the size column: max(send, recv) bytes actually moved through the call."""
    count: int
    """nccl-tests' ``count`` column: elements per call (per rank for all_gather/reduce_scatter/alltoall)."""
    send_elems: int
    """Elements in each rank's input buffer."""
    recv_elems: int
    """Elements in each rank's output buffer."""


def plan_size(op: OpSpec, size: int, nranks: int, dtype: DType) -> SizePlan | None:
    """The element counts for ``size`` bytes; None when it rounds down to no element per rank.

    nccl-tests divides without rounding up: 8 bytes of float over 3 ranks is 0 elements per rank.
    """
    total = int(size) // dtype.size
    n = int(nranks)
    if op.size_is_total:
        per = total // n
        if per == 0:
            return None
        if op.name == "all_gather":
            send, recv = per, per * n
        elif op.name == "reduce_scatter":
            send, recv = per * n, per
        else:  # all_to_all
            send, recv = per * n, per * n
        return SizePlan(int(size), max(send, recv) * dtype.size, per, send, recv)
    if total == 0:
        return None
    return SizePlan(int(size), total * dtype.size, total, total, total)


def plan_sizes(
    op: OpSpec, sizes: Iterable[int], nranks: int, dtype: DType
) -> tuple[tuple[SizePlan, ...], tuple[int, ...]]:
    """Plans for every size, and the sizes skipped because they hold no element per rank.

    Two requested sizes that round to the same plan (``6`` and ``7`` bytes of float) are measured once.
    """
    plans: list[SizePlan] = []
    skipped: list[int] = []
    seen: set[int] = set()
    for s in sizes:
        p = plan_size(op, s, nranks, dtype)
        if p is None:
            skipped.append(int(s))
        elif p.bytes not in seen:
            seen.add(p.bytes)
            plans.append(p)
    return tuple(plans), tuple(skipped)


def buffer_bytes(op: OpSpec, plan: SizePlan, dtype: DType, *, check: bool = True) -> int:
    """Bytes one rank allocates for ``plan``: input, output (when separate) and the validation reference."""
    if op.placements == (True,):
        data = plan.send_elems  # one buffer, used in place
    else:
        data = plan.send_elems + plan.recv_elems
    ref = plan.recv_elems if check else 0
    return (data + ref) * dtype.size
