"""Collective operations the way nccl-tests defines them: what a size means, element counts, busbw factor.

Pure arithmetic, no torch. The facts (nccl-tests ``src/*.cu``, DESIGN.md "Domain facts"):

* The size a user gives (``-b``/``-e``, ``--sizes``) is the per-rank buffer for all_reduce, broadcast,
  reduce and sendrecv, and the *total* over all ranks for all_gather, reduce_scatter and alltoall
  (each rank then contributes or receives ``size / n``). nccl-tests prints ``max(send, recv)`` bytes
  and, in the ``count`` column, the per-call element count (per rank for the "total" ops).
* algbw = bytes / time (GB/s = 1e9 B/s); busbw = algbw x factor with factor ``2(n-1)/n`` for
  all_reduce, ``(n-1)/n`` for all_gather, reduce_scatter and alltoall, ``1`` for broadcast, reduce
  and sendrecv.
* "Avg bus bandwidth" is the unweighted mean of busbw over every row, out-of-place and in-place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ibdiag.errors import UsageError


@dataclass(frozen=True)
class OpSpec:
    """One collective: its names, its busbw factor, and which placements torch.distributed has natively."""

    name: str
    """Canonical name (``all_reduce``); also the JSON ``op``."""
    nccl_tests: str
    """The nccl-tests binary that measures it (``all_reduce_perf``)."""
    redop: bool
    """Takes a reduction operator (sum)."""
    rooted: bool
    """Has a root rank (broadcast, reduce)."""
    size_is_total: bool
    """nccl-tests' size is the total over ranks (all_gather, reduce_scatter, alltoall)."""
    placements: tuple[bool, ...]
    """``in_place`` values torch.distributed runs natively. all_reduce, broadcast and reduce only work
    in place in torch (an out-of-place variant would add a copy nccl-tests does not make); all_to_all and
    send/recv only out of place; all_gather and reduce_scatter both (the in-place input is a slice of
    the output, or the output a slice of the input, as in nccl-tests)."""
    description: str

    def busbw_factor(self, nranks: int) -> float:
        """nccl-tests' bus-bandwidth factor for ``nranks`` ranks."""
        n = int(nranks)
        if n < 1:
            raise ValueError("nranks must be at least 1")
        if self.name == "all_reduce":
            return 2.0 * (n - 1) / n
        if self.name in ("all_gather", "reduce_scatter", "all_to_all"):
            return (n - 1) / n
        return 1.0


OPS: dict[str, OpSpec] = {
    s.name: s
    for s in (
        OpSpec("all_reduce", "all_reduce_perf", True, False, False, (True,), "every rank gets the element-wise sum (data-parallel gradients)"),
        OpSpec("all_gather", "all_gather_perf", False, False, True, (False, True), "every rank gets every rank's shard (ZeRO-3/FSDP parameters)"),
        OpSpec("reduce_scatter", "reduce_scatter_perf", True, False, True, (False, True), "rank i gets the sum of shard i (ZeRO/FSDP gradients)"),
        OpSpec("broadcast", "broadcast_perf", False, True, False, (True,), "rank 0's buffer to every rank"),
        OpSpec("reduce", "reduce_perf", True, True, False, (True,), "the element-wise sum to rank 0"),
        OpSpec("all_to_all", "alltoall_perf", False, False, True, (False,), "rank i sends chunk j to rank j (expert parallelism)"),
        OpSpec("sendrecv", "sendrecv_perf", False, False, False, (False,), "ring: each rank sends to rank+1 and receives from rank-1 (pipeline stages)"),
    )
}

_ALIASES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "bcast": "broadcast",
    "alltoall": "all_to_all",
    "all2all": "all_to_all",
    "send_recv": "sendrecv",
    "ring": "sendrecv",
}


def op_names() -> tuple[str, ...]:
    return tuple(OPS)


def get_op(name: str) -> OpSpec:
    """``all_reduce``, ``allreduce``, ``all_reduce_perf``, ``alltoall`` ... -> the OpSpec; UsageError otherwise."""
    key = str(name).strip().lower().replace("-", "_")
    if key.endswith("_perf"):
        key = key[: -len("_perf")]
    key = _ALIASES.get(key, key)
    if key in OPS:
        return OPS[key]
    raise UsageError(f"unknown collective {name!r}", hint=f"use one of: {', '.join(OPS)}")


@dataclass(frozen=True)
class DType:
    name: str
    """torch's name (``float32``)."""
    nccl_name: str
    """nccl-tests' name in the ``type`` column (``float``, ``half``, ``bfloat16``)."""
    size: int
    """Bytes per element."""


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", "float", 4),
        DType("bfloat16", "bfloat16", 2),
        DType("float16", "half", 2),
    )
}

_DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "f32": "float32", "bf16": "bfloat16", "half": "float16", "fp16": "float16", "f16": "float16"}


def get_dtype(name: str) -> DType:
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key in DTYPES:
        return DTYPES[key]
    raise UsageError(f"unknown data type {name!r}", hint="use float32, bfloat16 or float16 (nccl-tests' float, bfloat16, half)")


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


def plan_sizes(op: OpSpec, sizes: Iterable[int], nranks: int, dtype: DType) -> tuple[tuple[SizePlan, ...], tuple[int, ...]]:
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


def algbw_gbs(nbytes: int, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s): bytes / time, as nccl-tests prints it."""
    if time_s <= 0:
        return 0.0
    return nbytes / time_s / 1e9


def busbw_gbs(op: OpSpec, nbytes: int, time_s: float, nranks: int) -> float:
    """Bus bandwidth in GB/s: algbw x the op's factor for ``nranks``."""
    return algbw_gbs(nbytes, time_s) * op.busbw_factor(nranks)


def avg_busbw(busbws: Iterable[float]) -> float | None:
    """nccl-tests' "Avg bus bandwidth": the unweighted mean over every row (None without rows)."""
    values = list(busbws)
    if not values:
        return None
    return sum(values) / len(values)
