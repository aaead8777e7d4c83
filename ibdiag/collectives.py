"""Domain facts about collectives, in one place: nccl-tests' ops, the element types they move, and what
the data-parallel sharding strategies put on the wire.

Used by ``bench collective`` (size plans, the analysis), the importers (op names in file names, type
sizes in tables, the busbw check) and ``verdict`` (gradient types, traffic per strategy). Pure data
and arithmetic, no torch. The facts (nccl-tests ``src/*.cu``, DESIGN.md "Domain facts"):

* The size a user gives (``-b``/``-e``, ``--sizes``) is the per-rank buffer for all_reduce, broadcast,
  reduce and sendrecv, and the *total* over all ranks for all_gather, reduce_scatter and alltoall.
* algbw = bytes / time (GB/s = 1e9 B/s); busbw = algbw x factor with factor ``2(n-1)/n`` for
  all_reduce, ``(n-1)/n`` for all_gather, reduce_scatter and alltoall, ``1`` for broadcast, reduce
  and sendrecv. "Avg bus bandwidth" is the unweighted mean of busbw over every row.
* Traffic per gradient byte (seed 000; ZeRO paper): ddp is one all_reduce, ZeRO-1/2 a reduce_scatter
  and an all_gather, FSDP/ZeRO-3 an all_gather more: 2, 2 and 3 x (n-1)/n.
"""

from __future__ import annotations

import re
import statistics
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
    ring_k: int | None
    """busbw factor ``k x (n-1)/n`` (2 for all_reduce, 1 for the all-to-all family); None: factor 1."""
    placements: tuple[bool, ...]
    """``in_place`` values torch.distributed runs natively. all_reduce, broadcast and reduce only work
    in place in torch (an out-of-place variant would add a copy nccl-tests does not make); all_to_all and
    send/recv only out of place; all_gather and reduce_scatter both (the in-place input is a slice of
    the output, or the output a slice of the input, as in nccl-tests)."""
    description: str
    aliases: tuple[str, ...] = ()
    """Other names a user may type (``allreduce``, ``bcast``, ``ring``)."""

    def busbw_factor(self, nranks: int) -> float:
        """nccl-tests' bus-bandwidth factor for ``nranks`` ranks."""
        n = int(nranks)
        if n < 1:
            raise ValueError("nranks must be at least 1")
        return 1.0 if self.ring_k is None else self.ring_k * (n - 1) / n

    @property
    def names_in_text(self) -> tuple[str, ...]:
        """How the op shows in a binary or file name: ``all_reduce``, ``allreduce``, ``alltoall``."""
        return tuple(
            dict.fromkeys(
                (self.name, self.name.replace("_", ""), self.nccl_tests.removesuffix("_perf"))
            )
        )


OPS: dict[str, OpSpec] = {
    s.name: s
    for s in (
        OpSpec(
            "all_reduce",
            "all_reduce_perf",
            True,
            False,
            False,
            2,
            (True,),
            "every rank gets the element-wise sum (data-parallel gradients)",
            ("allreduce",),
        ),
        OpSpec(
            "all_gather",
            "all_gather_perf",
            False,
            False,
            True,
            1,
            (False, True),
            "every rank gets every rank's shard (ZeRO-3/FSDP parameters)",
            ("allgather",),
        ),
        OpSpec(
            "reduce_scatter",
            "reduce_scatter_perf",
            True,
            False,
            True,
            1,
            (False, True),
            "rank i gets the sum of shard i (ZeRO/FSDP gradients)",
            ("reducescatter",),
        ),
        OpSpec(
            "broadcast",
            "broadcast_perf",
            False,
            True,
            False,
            None,
            (True,),
            "rank 0's buffer to every rank",
            ("bcast",),
        ),
        OpSpec(
            "reduce",
            "reduce_perf",
            True,
            True,
            False,
            None,
            (True,),
            "the element-wise sum to rank 0",
        ),
        OpSpec(
            "all_to_all",
            "alltoall_perf",
            False,
            False,
            True,
            1,
            (False,),
            "rank i sends chunk j to rank j (expert parallelism)",
            ("alltoall", "all2all"),
        ),
        OpSpec(
            "sendrecv",
            "sendrecv_perf",
            False,
            False,
            False,
            None,
            (False,),
            "ring: each rank sends to rank+1 and receives from rank-1 (pipeline stages)",
            ("send_recv", "ring"),
        ),
    )
}


def placement(in_place: bool) -> str:
    """nccl-tests' name for a half of its table: ``in-place`` or ``out-of-place``."""
    return "in-place" if in_place else "out-of-place"


def find_op(name: str) -> OpSpec | None:
    """``all_reduce``, ``allreduce``, ``all_reduce_perf``, ``alltoall``, ``all-gather`` ... -> the OpSpec, or None."""
    key = str(name).strip().lower().replace("-", "_").removesuffix("_perf")
    found = OPS.get(key) or next((s for s in OPS.values() if key in s.aliases), None)
    if found is None:  # ReduceScatter, reduce scatter, all_to_all
        flat = re.sub(r"[-_\s]+", "", key)
        found = next(
            (s for s in OPS.values() if flat in {n.replace("_", "") for n in s.names_in_text}),
            None,
        )
    return found


def get_op(name: str) -> OpSpec:
    """:func:`find_op`, or a UsageError naming the ops."""
    spec = find_op(name)
    if spec is None:
        raise UsageError(f"unknown collective {name!r}", hint=f"use one of: {', '.join(OPS)}")
    return spec


def op_in_text(text: str) -> str | None:
    """The op named in a binary or file name (``logs/allreduce-64n.log`` -> ``all_reduce``), longest name
    first so ``reduce_scatter`` is not read as ``reduce``, whatever the spelling (``reduce-scatter``,
    ``ReduceScatter``, ``reduce scatter``, ``all_to_all``); None when no op name is in it."""
    squashed = re.sub(r"[-_\s]+", "", text.lower())
    names = sorted(
        ((n.replace("_", ""), s.name) for s in OPS.values() for n in s.names_in_text),
        key=lambda p: -len(p[0]),
    )
    return next((op for needle, op in names if needle in squashed), None)


def algbw_gbs(nbytes: int, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s): bytes / time, as nccl-tests prints it; 0 for no time."""
    if time_s <= 0:
        return 0.0
    return nbytes / time_s / 1e9


def avg_busbw(busbws: Iterable[float]) -> float | None:
    """nccl-tests' "Avg bus bandwidth": the unweighted mean over every row (None without rows)."""
    values = list(busbws)
    if not values:
        return None
    return statistics.fmean(values)


@dataclass(frozen=True)
class DType:
    name: str
    """torch's name (``float32``)."""
    nccl_name: str | None
    """nccl-tests' name in the ``type`` column (``float``, ``half``, ``bfloat16``); None: not an NCCL type."""
    size: int
    """Bytes per element."""
    short: str
    """The name ML people write (``fp32``, ``bf16``), as ``verdict`` prints it."""
    aliases: tuple[str, ...] = ()
    collective: bool = False
    """``bench collective`` runs it (``--dtype``)."""
    gradient: bool = False
    """A gradient type ``verdict --dtype`` takes."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.name, self.nccl_name, self.short, *self.aliases) if n)


#: Element types: torch's, nccl-tests' (``src/common.cu`` ``test_typenames``) and ML shorthand.
#: tf32 is stored as fp32 (4 bytes); fp8 is e4m3 or e5m2 (1 byte).
DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", "float", 4, "fp32", ("f32",), collective=True, gradient=True),
        DType("bfloat16", "bfloat16", 2, "bf16", (), collective=True, gradient=True),
        DType("float16", "half", 2, "fp16", ("f16",), collective=True, gradient=True),
        DType("tf32", None, 4, "tf32", (), gradient=True),
        DType("float8_e4m3fn", "f8e4m3", 1, "fp8", ("float8", "e4m3", "float8e4m3"), gradient=True),
        DType("float8_e5m2", "f8e5m2", 1, "fp8", ("e5m2", "float8e5m2"), gradient=True),
        DType("float64", "double", 8, "fp64", ("f64",)),
        DType("int8", "int8", 1, "int8", ("char",)),
        DType("uint8", "uint8", 1, "uint8"),
        DType("int32", "int32", 4, "int32", ("int",)),
        DType("uint32", "uint32", 4, "uint32"),
        DType("int64", "int64", 8, "int64"),
        DType("uint64", "uint64", 8, "uint64"),
    )
}


def find_dtype(name: str) -> DType | None:
    """Any of a type's names (``float``, ``fp32``, ``bf16``, ``half``, ``e5m2``), any case -> its DType."""
    key = str(name).strip().lower()
    return next((d for d in DTYPES.values() if key in d.names), None)


@dataclass(frozen=True)
class Strategy:
    """A data-parallel sharding strategy: the collectives each gradient byte goes through per step."""

    name: str
    ops: tuple[str, ...]
    aliases: tuple[str, ...] = ()

    @property
    def multiplier(self) -> int:
        """k in ``k x (n-1)/n`` wire bytes per gradient byte: the sum of its ops' ring factors."""
        return sum(OPS[op].ring_k or 0 for op in self.ops)

    def traffic_factor(self, ranks: int) -> float:
        """Bytes each rank puts on its wire per gradient byte: the sum of its ops' busbw factors,
        ``k x (n-1)/n`` (computed in that form, so it is the same number nccl-tests' factor gives)."""
        if ranks < 1:
            raise ValueError("ranks must be at least 1")
        flat = sum(1 for op in self.ops if OPS[op].ring_k is None)
        return self.multiplier * (ranks - 1) / ranks + flat


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("ddp", ("all_reduce",)),
        Strategy("zero1", ("reduce_scatter", "all_gather"), ("zero-1",)),
        Strategy("zero2", ("reduce_scatter", "all_gather"), ("zero-2",)),
        Strategy("fsdp", ("all_gather", "all_gather", "reduce_scatter")),
        Strategy("zero3", ("all_gather", "all_gather", "reduce_scatter"), ("zero-3",)),
    )
}


def find_strategy(name: str) -> Strategy | None:
    key = str(name).strip().lower()
    return STRATEGIES.get(key) or next((s for s in STRATEGIES.values() if key in s.aliases), None)


def collective_dtype(name: str) -> DType:
    """The element type ``bench collective --dtype`` runs: float32, bfloat16 or float16 (any of their names)."""
    d = find_dtype(name)
    hint = "use float32, bfloat16 or float16 (nccl-tests' float, bfloat16, half)"
    if d is None:
        raise UsageError(f"unknown data type {name!r}", hint=hint)
    if not d.collective:
        raise UsageError(f"ibdiag bench collective does not run data type {name!r}", hint=hint)
    return d
