"""Inspector's per-rank timings -> per communicator: bus bandwidth by collective and size, and the
ranks and hosts that keep the others waiting.

Stragglers are found by ``ibdiag bench collective``'s method, reused as it is
(:func:`ibdiag.bench.collective.analysis.find_stragglers`, its docstring has the arithmetic). Inspector
gives what that method needs: per rank and per call (the same ``coll_sn`` on every rank of a
communicator) the time the collective's kernel ran on that rank. A rank that arrives late finds the
others already inside and waits least, so its time is the shortest. A *row* is one collective at one
message size in one communicator; its calls are the sequence numbers every rank present recorded (the
ring buffer and the size filter drop calls per rank); the row's time (bench's loop time) is, per
call, the longest rank's kernel time — from the first arrival to the end — averaged over the calls.

Bus bandwidth per row is the median over ranks and calls of Inspector's own ``coll_busbw_gbs``
(nccl-tests' definitions, GB/s = 1e9 B/s), so it includes the time early ranks waited for late ones:
it is what the job got, not what the fabric can give.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ibdiag.bench.collective.analysis import find_stragglers, judged_rows
from ibdiag.bench.collective.measurement import MeasuredRow
from ibdiag.bench.collective.plan import SizePlan
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.bench.results.collective_meta import Straggler
from ibdiag.job.inspector import CollRecord

#: Calls per row kept for the straggler arithmetic: the most recent ones (Inspector's ring holds 1024).
MAX_CALLS = 1024


@dataclass(frozen=True)
class RowTiming:
    coll: str
    bytes: int
    ranks: int
    """Ranks with at least one record of this row."""
    calls: int
    """Calls every rank present recorded (the ones the straggler arithmetic uses)."""
    busbw_gbs: float | None
    """Median over ranks and calls of Inspector's busbw (None: none was a number)."""
    busbw_min_gbs: float | None
    exec_us: float
    """Median kernel time over ranks and calls."""

    def to_json(self) -> dict[str, Any]:
        return {
            "coll": self.coll,
            "bytes": self.bytes,
            "ranks": self.ranks,
            "calls_all_ranks": self.calls,
            "busbw_gbs": self.busbw_gbs,
            "busbw_min_gbs": self.busbw_min_gbs,
            "exec_us": self.exec_us,
        }


@dataclass(frozen=True)
class CommTiming:
    comm: str
    name: str | None
    nranks: int
    nnodes: int | None
    hosts: tuple[tuple[int, str, int | None], ...]
    """(rank, host, pid) of every rank present."""
    rows: tuple[RowTiming, ...]
    stragglers: tuple[Straggler, ...]
    """With real rank numbers."""
    rows_judged: int
    cpu_timed: int
    """Records timed by the host's clock (less exact than the GPU's)."""

    @property
    def ranks_seen(self) -> int:
        return len(self.hosts)

    def host_of(self, rank: int) -> tuple[str, int | None] | None:
        for r, h, p in self.hosts:
            if r == rank:
                return h, p
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "comm": self.comm,
            "name": self.name,
            "nranks": self.nranks,
            "nnodes": self.nnodes,
            "ranks_seen": self.ranks_seen,
            "rows": [r.to_json() for r in self.rows],
            "stragglers": [s.to_json() for s in self.stragglers],
            "rows_judged": self.rows_judged,
            "cpu_timed_records": self.cpu_timed,
        }


def _row(
    coll: str, size: int, recs: Sequence[CollRecord], order: Sequence[int]
) -> tuple[RowTiming, MeasuredRow | None]:
    by_rank: dict[int, dict[int, CollRecord]] = {}
    for r in recs:
        by_rank.setdefault(r.rank, {})[r.sn] = r
    common = set.intersection(*(set(v) for v in by_rank.values())) if by_rank else set()
    calls = sorted(common)[-MAX_CALLS:]
    busbw = [r.busbw_gbs for r in recs if r.busbw_gbs is not None]
    timing = RowTiming(
        coll=coll,
        bytes=size,
        ranks=len(by_rank),
        calls=len(calls),
        busbw_gbs=statistics.median(busbw) if busbw else None,
        busbw_min_gbs=min(busbw) if busbw else None,
        exec_us=statistics.median(r.exec_us for r in recs),
    )
    if not calls or len(by_rank) != len(order):
        return timing, None
    per_call = [[by_rank[rank][sn].exec_us for sn in calls] for rank in order]
    loop = statistics.fmean(
        max(per_call[i][c] for i in range(len(order))) for c in range(len(calls))
    )
    plan = SizePlan(requested=size, bytes=size, count=0, send_elems=0, recv_elems=0)
    row = MeasuredRow(
        plan=plan,
        in_place=False,
        time_us=tuple(loop for _ in order),
        coll_us=tuple(statistics.fmean(x) for x in per_call),
        wrong=None,
        coll_iter_us=tuple(tuple(x) for x in per_call),
    )
    return timing, row


def comm_timing(comm: str, recs: Sequence[CollRecord], cfg: CollectiveConfig) -> CommTiming:
    """One communicator's rows and stragglers (module docstring)."""
    hosts: dict[int, tuple[str, int | None]] = {}
    for r in recs:
        hosts.setdefault(r.rank, (r.host, r.pid))
    order = sorted(hosts)
    rows: dict[tuple[str, int], list[CollRecord]] = {}
    for r in recs:
        rows.setdefault((r.coll, r.bytes), []).append(r)
    timings: list[RowTiming] = []
    measured: list[MeasuredRow] = []
    for (coll, size), group in sorted(rows.items()):
        timing, row = _row(coll, size, group, order)
        timings.append(timing)
        if row is not None:
            measured.append(row)
    names = [hosts[r][0] for r in order]
    found = find_stragglers(measured, names, cfg) if len(order) >= 2 else []
    stragglers = tuple(replace(s, ranks=tuple(order[i] for i in s.ranks)) for s in found)
    first = recs[0]
    return CommTiming(
        comm=comm,
        name=first.name,
        nranks=first.nranks,
        nnodes=first.nnodes,
        hosts=tuple((r, *hosts[r]) for r in order),
        rows=tuple(timings),
        stragglers=stragglers,
        rows_judged=len(judged_rows(measured, cfg)),
        cpu_timed=sum(1 for r in recs if not r.gpu_timed),
    )


def timings(records: Sequence[CollRecord], cfg: CollectiveConfig) -> tuple[CommTiming, ...]:
    """Every communicator of ``records``, the largest first."""
    by_comm: dict[str, list[CollRecord]] = {}
    for r in records:
        by_comm.setdefault(r.comm, []).append(r)
    out = [comm_timing(c, recs, cfg) for c, recs in by_comm.items()]
    return tuple(sorted(out, key=lambda t: (-t.nranks, t.comm)))


def largest_rows(t: CommTiming) -> list[RowTiming]:
    """Per collective, the row of its largest message size (where busbw is judged)."""
    best: dict[str, RowTiming] = {}
    for r in t.rows:
        if r.coll not in best or r.bytes > best[r.coll].bytes:
            best[r.coll] = r
    return list(best.values())
