"""nccl-tests ``*_perf`` output -> :class:`BenchRun` (``kind: collective``), every format era, as people capture it.

Pure functions of text. What is read (see ``shared/reference/FORMATS.md``):

* before Aug 2022: ``#   Rank  0 Pid ... on host device 0 [0x1a] GPU`` lines (no Group), a float
  ``error`` column per half, no ``root`` column for the unrooted ops, ``... validation: 1``;
* Aug 2022 - 2025: ``Group`` in the rank lines, ``#wrong`` integers, ``root`` ``-1`` where it does not
  apply, ``agg iters: 1 validation: 1 graph: 0``;
* 2025 on: ``# nccl-tests version ...``, ``# Collective test starting: all_reduce_perf``, PCI ids like
  ``[000f:01:00]``, ``unalign: 0``, ``# Collective test concluded``; ``timestamp``/``cputime`` columns,
  ``-I 1`` per-iteration columns (kept per row as ``iter_us``) and ``-N`` cycles (the table printed
  again: the first cycle's rows are the run's, every cycle is summarised in ``cycle_stats``);
* ``N/A`` in a ``#wrong`` column (sendrecv, ``-c 0``);
* lines prefixed by ``mpirun --tag-output`` (``[1,0]<stdout>:``), ``[0] `` or ``srun --label``, and
  whatever surrounds the table (:mod:`~ibdiag.bench.importers.lines` cleans CR, ANSI escapes and ``> ``
  quotes; :mod:`~ibdiag.bench.importers.context` reads command lines and ``NCCL INFO`` lines; prompts,
  launcher chatter and script output are skipped and counted);
* a paste that starts at the units line ``#  (B) (elements)`` or at the rows: the columns are told
  from the rows' shape (:func:`~ibdiag.bench.importers.nccl_tests_table.columns_from_row`) and the run says
  its header was cut;
* several runs in one file: one after the other, one per tag, or interleaved line by line (a binary
  built without MPI started by mpirun runs N independent 1-rank jobs). Runs are returned separately,
  never averaged; rows of untagged interleaved runs are attributed in order of appearance (the k-th
  copy of a size goes to the k-th run), which the run's ``separation`` says.

Refused (InputError with the line number): no table, a row that does not fit its header, a run that
reports a failure (``Test NCCL failure``), more than :data:`MAX_ROWS` rows of distinct sizes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ibdiag.bench.importers.context import Context
from ibdiag.bench.importers.lines import Line
from ibdiag.bench.importers.nccl_tests_run import MAX_ROWS, Cycles, choose_op, collective_meta
from ibdiag.bench.importers.nccl_tests_table import (
    HINT,
    Columns,
    columns_from_row,
    parse_columns,
    parse_row,
    row_shaped,
)
from ibdiag.bench.results.collective_meta import NcclRank, NcclTestsLog
from ibdiag.bench.results.model import BenchRun, CollectiveResult
from ibdiag.bench.results.provenance import ImportInfo, Provenance, RunPosition
from ibdiag.collectives import op_in_text
from ibdiag.errors import InputError

__all__ = ["HINT", "MAX_ROWS", "looks_like", "marks", "parse_lines", "parse_log"]

"""Most row halves of distinct sizes kept per run (a real table has tens; ``-i`` steps a few thousand)."""

_FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b|\bTest failure\b")
_RANK_LINE = re.compile(
    r"^Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<gpu>.*)$"
)
_VERSION_LINE = re.compile(r"^nccl-tests version (?P<version>\S+)(?P<rest>.*)$")
_STARTING = re.compile(r"^Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^Collective test concluded:\s*(?P<name>\S+)")
_OOB = re.compile(r"^Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<state>\w*)")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(?P<v>[-+0-9.eEnaNinf]+)\s*(?P<state>\w*)")
_UNITS = re.compile(r"^\(B\)\s+\(elements\)")

_PARAM_PATTERNS = (
    ("nThread", r"nThread\s+(\d+)"),
    ("nGpus", r"nGpus\s+(\d+)"),
    ("minBytes", r"minBytes\s+(\d+)"),
    ("maxBytes", r"maxBytes\s+(\d+)"),
    ("step", r"step:\s+(\S+)"),
    ("warmup_iters", r"warmup iters:\s+(\d+)"),
    ("iters", r"(?<!warmup )(?<!agg )iters:\s+(\d+)"),
    ("agg_iters", r"agg iters:\s+(\d+)"),
    ("validation", r"validation:\s+(\d+)"),
    ("graph", r"graph:\s+(\d+)"),
    ("unalign", r"unalign:\s+(\d+)"),
)


@dataclass
class _Run:
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

    @property
    def fresh(self) -> bool:
        """Only the version / starting lines seen so far."""
        return not self.params and self.columns is None and not self.rows


def _parse_params(body: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, pat in _PARAM_PATTERNS:
        m = re.search(pat, body)
        if m:
            v = m.group(1)
            out[key] = int(v) if v.isdigit() else v
    return out


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.runs: list[_Run] = []
        self.skipped = 0

    # which run a line belongs to ------------------------------------------------------------------

    def _open(self, tag: str | None) -> list[_Run]:
        return [r for r in self.runs if r.tag == tag and not r.finished]

    def _start(self, tag: str | None, line_no: int) -> _Run:
        open_runs = self._open(tag)
        if tag is not None:
            for r in open_runs:  # a tagged run restarted without its footer: it ended there
                r.finished = True
        elif open_runs:
            started = [r for r in open_runs if not r.fresh]
            if started:
                for r in open_runs:
                    r.interleaved = True
        run = _Run(tag, line_no)
        run.interleaved = tag is None and any(not r.fresh for r in open_runs)
        self.runs.append(run)
        return run

    def _fresh_or_new(self, tag: str | None, line_no: int, want: str) -> _Run:
        """The open run still waiting for this header part, or a new run."""
        for r in self._open(tag):
            if want == "binary" and r.binary is None and not r.params and r.columns is None:
                return r
            if want == "params" and not r.params and r.columns is None and not r.rows:
                return r
        return self._start(tag, line_no)

    def _for_header(self, tag: str | None, line_no: int, pred: Any) -> _Run:
        for r in self._open(tag):
            if pred(r):
                return r
        cands = self._open(tag)
        if cands:
            return cands[-1]
        return self._start(tag, line_no)

    # line handling -------------------------------------------------------------------------------

    def feed(self, line: Line) -> None:
        s = line.text.strip()
        if not s:
            return
        if line.truncated:
            self.skipped += 1
            return
        if s.startswith("#"):
            self._comment(line, s.lstrip("#").strip())
            return
        if _FAILURE.search(s):
            raise InputError(
                f"{self.source}:{line.number}: the nccl-tests run reported a failure: {s[:200]}",
                hint="the run did not finish: fix the failure (NCCL_DEBUG=WARN shows why) and rerun",
            )
        tokens = s.split()
        if row_shaped(tokens) and self._row(line, tokens):
            return
        self.skipped += 1  # a prompt, launcher chatter, a script's output: not part of the table

    def _comment(self, line: Line, body: str) -> None:
        if not self._header_comment(line, body):
            self._footer_comment(line, body)

    def _header_comment(self, line: Line, body: str) -> bool:
        """The lines above the table (version, binary, parameters, ranks, column names): True if one."""
        tag, n = line.tag, line.number
        m = _VERSION_LINE.match(body)
        if m:
            run = self._start(tag, n)
            run.nccl_tests_version = m.group("version")
            run.version_rest = m.group("rest").strip()
            run.eras.add("2025")
            return True
        m = _STARTING.match(body)
        if m:
            run = self._fresh_or_new(tag, n, "binary")
            run.binary = m.group("name")
            run.eras.add("2025")
            return True
        if body.startswith("nThread"):
            run = self._fresh_or_new(tag, n, "params")
            run.params = _parse_params(body)
            if "unalign" in run.params:
                run.eras.add("2025")
            elif "agg_iters" in run.params or "graph" in run.params:
                run.eras.add("2022")
            else:
                run.eras.add("old")
            return True
        m = _RANK_LINE.match(body)
        if m:
            rank = int(m.group("rank"))
            run = self._for_header(
                tag, n, lambda r: r.columns is None and all(x.rank != rank for x in r.ranks)
            )
            run.ranks.append(
                NcclRank(
                    rank=rank,
                    group=None if m.group("group") is None else int(m.group("group")),
                    pid=int(m.group("pid")),
                    host=m.group("host"),
                    device=int(m.group("device")),
                    bus_id=m.group("bus"),
                    gpu=m.group("gpu").strip(),
                )
            )
            run.eras.add("2022" if m.group("group") is not None else "old")
            return True
        tokens = body.split()
        if "size" in tokens and "count" in tokens:
            run = self._for_header(tag, n, lambda r: r.columns is None)
            run.columns = parse_columns(body, n, self.source)
            if any("error" in h for h in run.columns.halves):
                run.eras.add("old")
            elif any("#wrong" in h for h in run.columns.halves):
                run.eras.add("2022")
            return True
        return False

    def _footer_comment(self, line: Line, body: str) -> None:
        """The lines below the table (units, out of bounds, average, conclusion, blocking, errors)."""
        tag, n = line.tag, line.number
        if _UNITS.match(body):
            open_runs = [r for r in self._open(tag) if r.columns is not None]
            if not open_runs:
                run = self._for_header(tag, n, lambda r: r.columns is None)
                run.units_seen = True
            return
        m = _OOB.match(body)
        if m:
            run = self._for_header(tag, n, lambda r: r.columns is not None and r.oob is None)
            run.oob = int(m.group("n"))
            return
        m = _AVG.match(body)
        if m:
            run = self._for_header(
                tag, n, lambda r: r.columns is not None and r.avg_reported is None
            )
            try:
                run.avg_reported = float(m.group("v"))
            except ValueError:
                run.avg_reported = None
            run.finished = True
            return
        m = _CONCLUDED.match(body)
        if m:
            done = [r for r in self.runs if r.tag == tag and r.finished and not r.concluded]
            if done:
                done[0].concluded = True
            return
        if body.startswith("Blocking Enabled"):
            run = self._for_header(tag, n, lambda r: r.columns is None and not r.blocking)
            run.blocking = True
            return
        if body.startswith("error:"):
            cands = [r for r in self.runs if r.tag == tag]
            if cands:
                cands[-1].errors.append(body[len("error:") :].strip()[:300])
            return
        # anything else after '#' is a comment nccl-tests or the user wrote (Using devices, out-of-place,
        # Reducing maxBytes, GPU memory usage ...), or a root prompt's command (read by the context)

    def _row(self, line: Line, tokens: list[str]) -> bool:
        """Read a row-shaped line; False when it is not part of any table (then it is skipped)."""
        tag = line.tag
        cands = [r for r in self._open(tag) if r.columns is not None]
        if not cands:
            cols = columns_from_row(tokens, line.number)
            if cols is None:
                return False
            run = self._for_header(tag, line.number, lambda r: r.columns is None)
            run.columns = cols
            run.header = "cut: from the units line" if run.units_seen else "cut: from the rows"
            run.eras.add("old" if "error" in cols.halves[0] else "2022")
            cands = [run]
        size = int(tokens[0])
        run = cands[0]
        if tag is None and len(cands) > 1:
            # untagged interleaved runs: the first run whose sizes have not reached this one yet
            for r in cands:
                if not r.rows or r.rows[-1].bytes < size:
                    run = r
                    break
        halves = parse_row(line, run.columns, self.source)  # type: ignore[arg-type]  # cands are runs with columns
        cyc = run.cycles
        if run.rows and size <= run.last_size and (len(cands) == 1 or tag is not None):
            cyc.count += 1  # -N: the table starts again at the smallest size
        run.last_size = size
        if cyc.count == 1:
            if len(run.rows) + len(halves) > MAX_ROWS:
                raise InputError(
                    f"{self.source}:{line.number}: more than {MAX_ROWS} result rows in one run",
                    hint="a benchmark table has tens of rows; give the benchmark's own log",
                )
            run.rows.extend(halves)
        for h in halves:
            cyc.add(h)
        return True


def _era(eras: set[str]) -> str | None:
    if "2025" in eras:
        return "2025"
    if "2022" in eras:
        return "2022-2025"
    if "old" in eras:
        return "before 2022"
    return None


def _to_bench_run(
    run: _Run,
    parser: _Parser,
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
        complete=run.finished,
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
        nccl_path=ctx.nccl_path(),
        skipped_lines=(parser.skipped + len(ctx.commands)) or None,
    )
    meta = collective_meta(rows, run.ranks, choice, log, run.blocking)
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
    return command.ranks * per


def marks(line: Line) -> bool:
    """True when the line is an nccl-tests marker: a header, rank or footer line, or a row of a table."""
    text = line.text.lstrip()
    body = text.lstrip("#").strip()
    if text.startswith("#"):
        if body.startswith(
            (
                "nThread",
                "nccl-tests version",
                "Collective test starting",
                "Avg bus bandwidth",
                "Out of bounds values",
            )
        ):
            return True
        if _RANK_LINE.match(body) or _UNITS.match(body):
            return True
        tokens = body.split()
        return "algbw" in tokens and "busbw" in tokens
    return not line.truncated and columns_from_row(body.split(), line.number) is not None


def looks_like(lines: Sequence[Line]) -> bool:
    """True when the text carries an nccl-tests marker line."""
    return any(marks(ln) for ln in lines[:4000])


def parse_lines(
    lines: Iterable[Line],
    ctx: Context,
    source: str = "<text>",
    *,
    op: str | None = None,
    file_name: str | None = None,
) -> list[BenchRun]:
    """Every run in an nccl-tests log, in the order they started (``lines``: those the context did not take)."""
    parser = _Parser(source)
    for ln in lines:
        parser.feed(ln)
    runs = [r for r in parser.runs if r.rows or r.columns is not None or r.params]
    if not runs:
        raise InputError(f"{source}: no nccl-tests result table found", hint=HINT)
    out = []
    tags = {r.tag for r in runs}
    interleaved = any(r.interleaved for r in runs)
    for i, r in enumerate(runs, start=1):
        position = None
        if len(runs) > 1:
            if interleaved and r.tag is None:
                sep = "interleaved (untagged lines; rows attributed in order of appearance)"
            elif len(tags) > 1:
                sep = "one run per output tag"
            else:
                sep = "one after the other"
            position = RunPosition(i, len(runs), sep)
        out.append(_to_bench_run(r, parser, ctx, source, op, file_name, position))
    return out


def parse_log(
    text: str, source: str = "<text>", *, op: str | None = None, file_name: str | None = None
) -> list[BenchRun]:
    """Every run in an nccl-tests log held in ``text`` (see the module docstring)."""
    ctx = Context()
    return parse_lines(
        ctx.table_lines(text.splitlines()),
        ctx,
        source,
        op=op,
        file_name=file_name,
    )
