"""From what an nccl-tests log says to a run: which op it measured, and the run's collective metadata.

Shared by the text reader (:mod:`~ibdiag.bench.importers.nccl_tests`) and the ``-J`` reader
(:mod:`~ibdiag.bench.importers.nccl_tests_json`), so both decide the op the same way: the log's own
binary name, else the command line around the table, else ``--op``, else the table's own shape
(:func:`infer_op`) where it decides, else the file name where the table does not contradict it; and
the per-size statistics over a log's cycles (:class:`Cycles`). Also the run being read (:class:`Run`)
and how it becomes a :class:`BenchRun` (:func:`to_bench_run`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ibdiag.bench.importers.context import Context
from ibdiag.bench.importers.nccl_tests_table import Columns
from ibdiag.bench.results.collective_meta import CollectiveMeta, CycleStats, NcclRank, NcclTestsLog
from ibdiag.bench.results.model import BenchRun, CollectiveResult
from ibdiag.bench.results.provenance import ImportInfo, Provenance, RunPosition
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
    """``header``, ``command line``, ``option``, ``inferred from the table`` (with what the file name
    said, when it disagreed), ``file name``, or None when not known."""
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
    ``option`` (``--op``, canonical), else the table where its shape decides, else the file name where
    the table does not rule it out (a file name is a person's label, the table is the tool's output)."""
    if header:
        return OpChoice(header, "header")
    if command:
        return OpChoice(command, "command line")
    if option:
        return OpChoice(option, "option")
    named = op_in_text(file_name) if file_name else None
    op, cands = infer_op(rows, nranks)
    if named and (named == op or named in cands or (op is None and not cands)):
        return OpChoice(named, "file name")
    if op:
        said = f" (the file name says {named})" if named else ""
        return OpChoice(op, "inferred from the table" + said)
    return OpChoice(None, None, tuple(cands))


def infer_op(rows: Sequence[CollectiveResult], nranks: int | None) -> tuple[str | None, list[str]]:
    """The op from the table itself: redop, root, how count relates to size, busbw/algbw.

    Returns (op, candidates): op None when the table fits several ops (all_gather and alltoall print
    the same columns and the same arithmetic), the candidates then; with an op, the candidates are the
    other ops it cannot be told from (sendrecv prints a ``sum`` redop and all_reduce's counts: told
    apart by busbw/algbw, except over 2 ranks where both factors are 1). Without the rank count (a
    paste without its header, a log piped on stdin) ``size / (count x type size)`` gives it for the ops
    that count per rank (reduce_scatter, all_gather), and busbw/algbw for all_reduce.
    """
    if not rows:
        return None, []
    op, cands, per_rank = _infer_by_shape(rows, nranks)
    ratios = [r.busbw_gbs / r.algbw_gbs for r in rows if r.algbw_gbs >= 0.05]
    ratio = statistics.median(ratios) if ratios else None
    if not nranks or nranks < 2:
        nranks = per_rank or (ranks_from_ratio(ratio) if op == "all_reduce" else None)
    if ratio is None or not nranks or nranks < 2:
        return op, ([] if op else cands)

    def fits(name: str) -> bool:
        return abs(OPS[name].busbw_factor(nranks) - ratio) <= 0.02 + 0.01 * ratio

    if op == "all_reduce" and fits("sendrecv"):
        return ("all_reduce", ["sendrecv"]) if fits("all_reduce") else ("sendrecv", [])
    if op is not None:
        return op, []
    found = [name for name in cands if fits(name)]
    if len(found) == 1:
        return found[0], []
    return None, found or cands


def table_ranks(rows: Sequence[CollectiveResult], op: str | None) -> int | None:
    """The rank count the table itself gives for ``op``, when its header does not: ``size / (count x
    type size)`` for the ops that count per rank, busbw/algbw for all_reduce."""
    if not rows or op is None:
        return None
    dtype = find_dtype(rows[0].dtype)
    if op in ("reduce_scatter", "all_gather", "all_to_all") and dtype is not None:
        per_rank, k = _per_rank_count(rows, dtype.size, None)
        return k if per_rank else None
    if op == "all_reduce":
        ratios = [r.busbw_gbs / r.algbw_gbs for r in rows if r.algbw_gbs >= 0.05]
        return ranks_from_ratio(statistics.median(ratios)) if ratios else None
    return None


def ranks_from_ratio(ratio: float | None) -> int | None:
    """The rank count an all_reduce's busbw/algbw = 2(n-1)/n gives, when it is a whole number."""
    if ratio is None or not 1.0 < ratio < 1.999:
        return None
    n = 2.0 / (2.0 - ratio)
    return round(n) if abs(n - round(n)) <= 0.03 * n else None


def _per_rank_count(
    rows: Sequence[CollectiveResult], ws: int, nranks: int | None
) -> tuple[bool | None, int | None]:
    """(whether count is per rank, the rank count the rows say): size = count x type size (x ranks)."""
    sized = [r for r in rows if r.count > 0]
    if not sized:
        return None, None
    r = sized[-1]
    if nranks and nranks > 1:
        if r.count * ws * nranks == r.bytes:
            return True, nranks
        if r.count * ws == r.bytes:
            return False, None
        return None, None
    k, rest = divmod(r.bytes, r.count * ws)
    if rest or k < 1 or any(x.bytes != x.count * ws * k for x in sized):
        return None, None
    return (False, None) if k == 1 else (True, k)


def _infer_by_shape(
    rows: Sequence[CollectiveResult], nranks: int | None
) -> tuple[str | None, list[str], int | None]:
    """The op from the columns and the count arithmetic alone, and the rank count it implies."""
    first = rows[0]
    rooted = any(r.root is not None for r in rows)
    has_redop = first.redop is not None
    dtype = find_dtype(first.dtype)
    per_rank_count, ranks = (None, None) if not dtype else _per_rank_count(rows, dtype.size, nranks)
    if rooted:
        return ("reduce", [], None) if has_redop else ("broadcast", [], None)
    if has_redop:
        if per_rank_count is True:
            return "reduce_scatter", [], ranks
        if per_rank_count is False:
            return "all_reduce", [], None
        return None, ["all_reduce", "reduce_scatter"], None
    if per_rank_count is False:
        return "sendrecv", [], None
    if per_rank_count is True:
        return None, ["all_gather", "all_to_all"], ranks
    return None, ["all_gather", "all_to_all", "sendrecv"], None


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


@dataclass
class Run:
    tag: str | None
    start_line: int
    nccl_tests_version: str | None = None
    version_rest: str | None = None
    binary: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    ranks: list[NcclRank] = field(default_factory=list)
    columns: Columns | None = None
    header: str | None = None
    rows: list[CollectiveResult] = field(default_factory=list)
    cycles: Cycles = field(default_factory=Cycles)
    last_size: int = -1
    """The size of the last row read, in whichever cycle."""
    oob: int | None = None
    avg_reported: float | None = None
    finished: bool = False
    concluded: bool = False
    blocking: bool = False
    units_seen: bool = False
    errors: list[str] = field(default_factory=list)
    eras: set[str] = field(default_factory=set)
    interleaved: bool = False
    failure: str | None = None
    """The tool's error line (``line 12: Test NCCL failure ...``) where rows were expected."""

    @property
    def fresh(self) -> bool:
        """Only the version / starting lines seen so far."""
        return not self.params and self.columns is None and not self.rows


def _era(eras: set[str]) -> str | None:
    if "2025" in eras:
        return "2025"
    if "2022" in eras:
        return "2022-2025"
    if "old" in eras:
        return "before 2022"
    return None


def to_bench_run(
    run: Run,
    skipped: int,
    ctx: Context,
    source: str,
    option: str | None,
    file_name: str | None,
    position: RunPosition | None,
) -> BenchRun:
    command = ctx.command_for(run.start_line)
    header = (op_in_text(run.binary) or run.binary.removesuffix("_perf")) if run.binary else None
    from_command = op_in_text(command.binary) if command is not None and command.binary else None
    nranks = len({r.rank for r in run.ranks}) or _command_ranks(command)
    choice = choose_op(header, option, file_name, run.rows, nranks, command=from_command)
    rows = tuple(run.rows)
    cyc = run.cycles
    log = NcclTestsLog(
        op_source=choice.source,
        op_candidates=choice.candidates,
        gpus=tuple(sorted({r.gpu for r in run.ranks if r.gpu})),
        ranks=tuple(run.ranks),
        params=run.params,
        avg_busbw_gbs_reported=run.avg_reported,
        out_of_bounds=run.oob,
        complete=run.finished and run.failure is None,
        header=run.header,
        cycles=cyc.count if cyc.count > 1 else None,
        cycle_stats=cyc.summary() if cyc.count > 1 else (),
        avg_busbw_gbs_all_cycles=cyc.busbw_sum / cyc.rows if cyc.count > 1 and cyc.rows else None,
        per_iter_timing=True if run.columns is not None and run.columns.per_iter else None,
    )
    provenance = Provenance(
        imported=ImportInfo(
            tool="nccl-tests",
            source=source,
            format=_era(run.eras),
            first_line=run.start_line,
            tag=run.tag,
            position=position,
        ),
        nccl_version=ctx.nccl_version,
        nccl_tests_version=run.nccl_tests_version,
        nccl_errors=tuple(run.errors),
        nccl_warnings=tuple(f"line {n}: {t}" for n, t in ctx.warnings),
        nccl_warning_count=ctx.warning_count or None,
        command=command,
        nccl_path=ctx.nccl_path(command),
        skipped_lines=(skipped + len(ctx.commands)) or None,
        failure=run.failure,
    )
    meta = collective_meta(rows, run.ranks, choice, log, run.blocking)
    if (
        not nranks
        and choice.source is not None
        and choice.source.startswith("inferred from the table")
    ):
        nranks = table_ranks(rows, choice.op)
    if meta.world_size is None and nranks:
        nodes = command.nodes if command is not None else None
        meta = replace(
            meta,
            world_size=nranks,
            nodes=nodes or (provenance.nccl_path.nodes if provenance.nccl_path else None),
        )
    return BenchRun(meta, rows, provenance)


def _command_ranks(command: Any) -> int | None:
    """Ranks from ``mpirun -np`` / ``srun -n`` (times nccl-tests' ``-t`` threads and ``-g`` GPUs each)."""
    if command is None or command.ranks is None:
        return None
    per = 1
    for key in ("threads", "gpus_per_thread"):
        v = command.options.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 10:
            per *= v
    ranks: int = command.ranks
    return ranks * per
