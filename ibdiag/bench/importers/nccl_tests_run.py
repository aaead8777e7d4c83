"""From what an nccl-tests log says to a run: which op it measured, and the run's collective metadata.

Shared by the text reader (:mod:`~ibdiag.bench.importers.nccl_tests`) and the ``-J`` reader
(:mod:`~ibdiag.bench.importers.nccl_tests_json`), so both decide the op the same way: the log's own
binary name, else the command line around the table, else ``--op``, else the file name, else the
table (:func:`infer_op`); and the per-size statistics over a log's cycles (:class:`Cycles`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from ibdiag.bench.results.collective_meta import CollectiveMeta, CycleStats, NcclRank, NcclTestsLog
from ibdiag.bench.results.model import CollectiveResult
from ibdiag.collectives import OPS, avg_busbw, find_dtype, op_in_text

#: Most result rows of distinct sizes in one run (a log with more is refused).
MAX_ROWS = 1 << 17


@dataclass
class Cycles:
    """Running per-(size, placement) statistics over every cycle, in constant memory per size."""

    count: int = 1
    stats: dict[tuple[int, bool], list[float]] = field(default_factory=dict)
    """(bytes, in_place) -> [n, busbw min, busbw sum, busbw max, time min, time max]."""
    busbw_sum: float = 0.0
    rows: int = 0

    def add(self, r: CollectiveResult) -> None:
        self.busbw_sum += r.busbw_gbs
        self.rows += 1
        s = self.stats.get((r.bytes, r.in_place))
        if s is None:
            if len(self.stats) >= MAX_ROWS:
                return
            self.stats[(r.bytes, r.in_place)] = [
                1,
                r.busbw_gbs,
                r.busbw_gbs,
                r.busbw_gbs,
                r.time_us,
                r.time_us,
            ]
            return
        s[0] += 1
        s[1] = min(s[1], r.busbw_gbs)
        s[2] += r.busbw_gbs
        s[3] = max(s[3], r.busbw_gbs)
        s[4] = min(s[4], r.time_us)
        s[5] = max(s[5], r.time_us)

    def summary(self) -> tuple[CycleStats, ...]:
        return tuple(
            CycleStats(b, ip, int(s[0]), s[1], s[2] / s[0], s[3], s[4], s[5])
            for (b, ip), s in self.stats.items()
        )


@dataclass(frozen=True)
class OpChoice:
    op: str | None
    source: str | None
    """``header``, ``command line``, ``option``, ``file name``, ``inferred from the table``, or None when not known."""
    candidates: tuple[str, ...] = ()
    """The ops the table fits when it cannot tell them apart."""


def choose_op(
    header: str | None,
    option: str | None,
    file_name: str | None,
    rows: Sequence[CollectiveResult],
    nranks: int | None,
    *,
    command: str | None = None,
) -> OpChoice:
    """The op of a run: ``header`` (the log names its binary), the command line found around the table,
    ``option`` (``--op``, canonical), the file name, else the table."""
    if header:
        return OpChoice(header, "header")
    if command:
        return OpChoice(command, "command line")
    if option:
        return OpChoice(option, "option")
    named = op_in_text(file_name) if file_name else None
    if named:
        return OpChoice(named, "file name")
    op, cands = infer_op(rows, nranks)
    return OpChoice(op, "inferred from the table" if op else None, tuple(cands))


def infer_op(rows: Sequence[CollectiveResult], nranks: int | None) -> tuple[str | None, list[str]]:
    """The op from the table itself: redop, root, how count relates to size, busbw/algbw.

    Returns (op, candidates); op is None when the table fits several ops (all_gather and alltoall
    print the same columns and the same arithmetic).
    """
    if not rows:
        return None, []
    first = rows[0]
    rooted = any(r.root is not None for r in rows)
    has_redop = first.redop is not None
    dtype = find_dtype(first.dtype)
    ws = None if dtype is None else dtype.size
    per_rank_count: bool | None = None
    if ws and nranks and nranks > 1:
        sized = [r for r in rows if r.count > 0]
        if sized:
            r = sized[-1]
            if r.count * ws * nranks == r.bytes:
                per_rank_count = True
            elif r.count * ws == r.bytes:
                per_rank_count = False
    if rooted:
        return ("reduce", []) if has_redop else ("broadcast", [])
    ratios = [r.busbw_gbs / r.algbw_gbs for r in rows if r.algbw_gbs >= 0.05]
    ratio = statistics.median(ratios) if ratios else None
    if has_redop:
        cands = ["all_reduce", "reduce_scatter"]
        if per_rank_count is True:
            return "reduce_scatter", []
        if per_rank_count is False:
            return "all_reduce", []
    else:
        cands = ["all_gather", "all_to_all", "sendrecv"]
        if per_rank_count is False:
            return "sendrecv", []
        if per_rank_count is True:
            return None, ["all_gather", "all_to_all"]
    if ratio is not None and nranks:
        fits = [
            op for op in cands if abs(OPS[op].busbw_factor(nranks) - ratio) <= 0.02 + 0.01 * ratio
        ]
        if len(fits) == 1:
            return fits[0], []
        cands = fits or cands
    return None, cands


def collective_meta(
    rows: Sequence[CollectiveResult],
    ranks: Sequence[NcclRank],
    choice: OpChoice,
    log: NcclTestsLog,
    blocking: bool | None,
) -> CollectiveMeta:
    """What the rows and the header's rank lines say, the same for text and ``-J`` logs."""
    hosts: dict[str, int] = {}
    for r in ranks:
        hosts[str(r.host)] = hosts.get(str(r.host), 0) + 1
    return CollectiveMeta(
        op=choice.op,
        backend="nccl",
        dtype=rows[0].dtype if rows else None,
        redop=rows[0].redop if rows else None,
        world_size=len({r.rank for r in ranks}) or None,
        ranks_per_node=max(hosts.values()) if hosts else None,
        nodes=len(hosts) or None,
        hosts=tuple(hosts),
        blocking=blocking,
        avg_busbw_gbs=avg_busbw(r.busbw_gbs for r in rows),
        nccl_tests=log,
    )
