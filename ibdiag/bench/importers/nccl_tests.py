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

Also read (issue 26, logs of every shape): rank labels stacked after a launcher's prefix or standing
inside a row; a row split in two by an NCCL line that ran into it (joined again); header and footer
lines pasted without their ``#``; 11-cell rows (``size count type`` + two halves: the unreduced ops
before 2022) and an empty ``redop`` cell (all-to-all); repeated sizes (several sizes round to 0 bytes
over many ranks) are rows, not ``-N`` cycles, unless the size goes down or the command line says
``-N``; numbers in markdown emphasis (``**5544.28**``). A run that ends in nccl-tests' failure line
(``Test NCCL failure common.cu:958 ...``) is a run with its ``provenance.failure`` (the
``import.run_failed`` finding), with whatever rows it printed before.

Refused (InputError with the line number): no table and no failure line, a row that does not fit its
header, more than :data:`MAX_ROWS` rows of distinct sizes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from ibdiag.bench.importers.context import Context
from ibdiag.bench.importers.lines import Line, row_tokens
from ibdiag.bench.importers.nccl_log import nccl_log_run, says_something
from ibdiag.bench.importers.nccl_tests_run import MAX_ROWS, Run, to_bench_run
from ibdiag.bench.importers.nccl_tests_table import (
    HINT,
    columns_from_row,
    parse_columns,
    parse_row,
    row_shaped,
)
from ibdiag.bench.results.collective_meta import NcclRank
from ibdiag.bench.results.model import BenchRun
from ibdiag.bench.results.provenance import RunPosition
from ibdiag.errors import InputError

__all__ = ["HINT", "MAX_ROWS", "looks_like", "marks", "parse_lines"]

"""Most row halves of distinct sizes kept per run (a real table has tens; ``-i`` steps a few thousand)."""

_FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b|\bTest failure\b")
_RANK_LINE = re.compile(
    r"^Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<gpu>.*)$"
)
_VERSION_LINE = re.compile(r"^nccl-tests version (?P<version>\S+)(?P<rest>.*)$")
_STARTING = re.compile(r"^Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^Collective test concluded:\s*(?P<name>\S+)")
# nccl-tests pads the name to 20 characters ("# %-20s : %d %s"): a few spaces before the colon.
_OOB = re.compile(
    r"^Out of bounds values\s{0,32}:\s{0,32}(?P<n>\d{1,20})\s{0,32}(?P<state>\w{0,16})"
)
_AVG = re.compile(
    r"^Avg bus bandwidth\s{0,32}:\s{0,32}(?P<v>[-+0-9.eEnaNinf]{1,32})\s{0,32}(?P<state>\w{0,16})"
)
_UNITS = re.compile(r"^\(B\)\s+\(elements\)")
#: How a header or footer line starts when it was pasted without its ``#``.
_BARE_START = re.compile(
    r"^(?:nThread\s|nccl-tests version\s|Collective test (?:starting|concluded)|Rank\s+\d|size\s|"
    r"\(B\)\s|Out of bounds values|Avg bus bandwidth|Using devices|Blocking Enabled)"
)
_HEADER_WORDS = frozenset({"size", "count", "type", "algbw", "busbw"})
_CELL = re.compile(r"^(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|N/A|-)$", re.IGNORECASE)

_PARAM_PATTERNS = tuple(
    (key, re.compile(pattern))
    for key, pattern in (
        ("nThread", r"nThread\s{1,32}(\d{1,10})"),
        ("nGpus", r"nGpus\s{1,32}(\d{1,10})"),
        ("minBytes", r"minBytes\s{1,32}(\d{1,20})"),
        ("maxBytes", r"maxBytes\s{1,32}(\d{1,20})"),
        ("step", r"step:\s{1,32}(\S{1,64})"),
        ("warmup_iters", r"warmup iters:\s{1,32}(\d{1,10})"),
        ("iters", r"(?<!warmup )(?<!agg )iters:\s{1,32}(\d{1,10})"),
        ("agg_iters", r"agg iters:\s{1,32}(\d{1,10})"),
        ("validation", r"validation:\s{1,32}(\d{1,10})"),
        ("graph", r"graph:\s{1,32}(\d{1,10})"),
        ("unalign", r"unalign:\s{1,32}(\d{1,10})"),
    )
)


def _parse_params(body: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, pattern in _PARAM_PATTERNS:
        m = pattern.search(body)
        if m:
            v = m.group(1)
            out[key] = int(v) if v.isdigit() else v
    return out


class _Parser:
    def __init__(self, source: str, ctx: Context | None = None) -> None:
        self.source = source
        self.ctx = ctx
        self.runs: list[Run] = []
        self.skipped = 0
        self.pending: tuple[Line, list[str]] | None = None
        """A row shorter than its header, waiting for the rest (a line ran into it)."""

    # which run a line belongs to ------------------------------------------------------------------

    def _open(self, tag: str | None) -> list[Run]:
        return [r for r in self.runs if r.tag == tag and not r.finished]

    def _start(self, tag: str | None, line_no: int) -> Run:
        open_runs = self._open(tag)
        if tag is not None:
            for r in open_runs:  # a tagged run restarted without its footer: it ended there
                r.finished = True
        elif open_runs:
            started = [r for r in open_runs if not r.fresh]
            if started:
                for r in open_runs:
                    r.interleaved = True
        run = Run(tag, line_no)
        run.interleaved = tag is None and any(not r.fresh for r in open_runs)
        self.runs.append(run)
        return run

    def _fresh_or_new(self, tag: str | None, line_no: int, want: str) -> Run:
        """The open run still waiting for this header part, or a new run."""
        for r in self._open(tag):
            if want == "binary" and r.binary is None and not r.params and r.columns is None:
                return r
            if want == "params" and not r.params and r.columns is None and not r.rows:
                return r
        return self._start(tag, line_no)

    def _for_header(self, tag: str | None, line_no: int, pred: Any) -> Run:
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
            self._flush()
            self._comment(line, s.lstrip("#").strip())
            return
        if _FAILURE.search(s):
            self._flush()
            self._failure(line, s)
            return
        tokens = row_tokens(s)
        if self.pending is not None and self._join(line, tokens):
            return
        self._flush()
        if row_shaped(tokens) and self._row(line, tokens):
            return
        if _BARE_START.match(s) and self._comment(line, s, hashed=False):
            return  # a header or footer line pasted without its '#'
        self.skipped += 1  # a prompt, launcher chatter, a script's output: not part of the table

    def finish(self) -> None:
        """The end of the lines: a row still waiting for its continuation is read as it stands."""
        self._flush()

    def _flush(self) -> None:
        if self.pending is not None:
            line, tokens = self.pending
            self.pending = None
            self._row(line, tokens, whole=True)

    def _join(self, line: Line, tokens: list[str]) -> bool:
        """A row split in two by a line that ran into it (an NCCL INFO line): the continuation is all
        cells and the two parts make a whole row. True when joined and read."""
        first, head = self.pending  # type: ignore[misc]  # checked by the caller
        if not tokens or any(not _CELL.match(t) for t in tokens):
            return False
        cands = [r for r in self._open(first.tag) if r.columns is not None]
        if not cands:
            return False
        width = cands[0].columns.width  # type: ignore[union-attr]  # cands have columns
        if len(head) + len(tokens) == width:
            joined = head + tokens
        elif len(head) + len(tokens) - 1 == width:  # the line ran in mid-number: 35.4|7
            joined = [*head[:-1], head[-1] + tokens[0], *tokens[1:]]
        else:
            return False
        self.pending = None
        return self._row(first, joined, whole=True)

    def _failure(self, line: Line, s: str) -> None:
        """A tool's error line where rows were expected: the run failed (the first such line is kept)."""
        runs = self._open(line.tag) or [r for r in self.runs if not r.finished]
        if not runs and self.runs and self.runs[-1].failure is not None:
            return  # every rank prints the failure: the run already has its first line
        run = runs[-1] if runs else self._start(line.tag, line.number)
        if run.failure is None:
            run.failure = f"line {line.number}: {s[:200]}"
        run.finished = True

    def _comment(self, line: Line, body: str, *, hashed: bool = True) -> bool:
        """A ``#`` line (or, ``hashed`` False, a line that starts like one pasted without it): True if read."""
        return self._header_comment(line, body, hashed) or self._footer_comment(line, body, hashed)

    def _header_comment(self, line: Line, body: str, hashed: bool = True) -> bool:
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
        if "size" in tokens and "count" in tokens and (hashed or _HEADER_WORDS <= set(tokens)):
            run = self._for_header(tag, n, lambda r: r.columns is None)
            run.columns = parse_columns(body, n, self.source)
            if any("error" in h for h in run.columns.halves):
                run.eras.add("old")
            elif any("#wrong" in h for h in run.columns.halves):
                run.eras.add("2022")
            return True
        return False

    def _footer_comment(self, line: Line, body: str, hashed: bool = True) -> bool:
        """The lines below the table (units, out of bounds, average, conclusion, blocking, errors)."""
        tag, n = line.tag, line.number
        if _UNITS.match(body):
            open_runs = [r for r in self._open(tag) if r.columns is not None]
            if not open_runs:
                run = self._for_header(tag, n, lambda r: r.columns is None)
                run.units_seen = True
            return True
        m = _OOB.match(body)
        if m:
            run = self._for_header(tag, n, lambda r: r.columns is not None and r.oob is None)
            run.oob = int(m.group("n"))
            return True
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
            return True
        m = _CONCLUDED.match(body)
        if m:
            done = [r for r in self.runs if r.tag == tag and r.finished and not r.concluded]
            if done:
                done[0].concluded = True
            return True
        if body.startswith("Blocking Enabled"):
            run = self._for_header(tag, n, lambda r: r.columns is None and not r.blocking)
            run.blocking = True
            return True
        if hashed and body.startswith("error:"):
            cands = [r for r in self.runs if r.tag == tag]
            if cands:
                cands[-1].errors.append(body[len("error:") :].strip()[:300])
            return True
        return body.startswith("Using devices")
        # anything else after '#' is a comment nccl-tests or the user wrote (Using devices, out-of-place,
        # Reducing maxBytes, GPU memory usage ...), or a root prompt's command (read by the context)

    def _row(self, line: Line, tokens: list[str], *, whole: bool = False) -> bool:
        """Read a row-shaped line; False when it is not part of any table (then it is skipped). A row
        shorter than its header waits for its continuation (:meth:`_join`) unless ``whole``."""
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
        if not whole and len(tokens) < run.columns.width - 1:  # type: ignore[union-attr]  # cands have columns
            self.pending = (line, tokens)
            return True
        if tag is None and len(cands) > 1:
            # untagged interleaved runs: the first run whose sizes have not reached this one yet
            for r in cands:
                if not r.rows or r.rows[-1].bytes < size:
                    run = r
                    break
        halves = parse_row(line, run.columns, self.source, tokens)  # type: ignore[arg-type]  # cands are runs with columns
        cyc = run.cycles
        if run.rows and self._new_cycle(run, size) and (len(cands) == 1 or tag is not None):
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

    def _new_cycle(self, run: Run, size: int) -> bool:
        """A row starts the table again (``-N``): its size is below the last row's, or equal to it when
        the command line says ``-N`` (a repeated size alone is not a cycle: several sizes round to 0
        bytes for all-to-all over many ranks)."""
        if size < run.last_size:
            return True
        if size != run.last_size:
            return False
        cmd = self.ctx.command_for(run.start_line) if self.ctx is not None else None
        cycles = cmd.options.get("cycles") if cmd is not None else None
        return isinstance(cycles, int) and not isinstance(cycles, bool) and cycles > 1


def marks(line: Line) -> bool:
    """True when the line is an nccl-tests marker: a header, rank or footer line (with its ``#`` or
    pasted without it), a row of a table, or nccl-tests' own failure line (``Test NCCL failure x.cu:N``)."""
    text = line.text.lstrip()
    body = text.lstrip("#").strip()
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
    if "algbw" in tokens and "busbw" in tokens:
        return True
    if text.startswith("#"):
        return False
    if ".cu" in text and _FAILURE.search(text):
        return True
    return not line.truncated and columns_from_row(row_tokens(body), line.number) is not None


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
    parser = _Parser(source, ctx)
    for ln in lines:
        parser.feed(ln)
    parser.finish()
    runs = [
        r
        for r in parser.runs
        if r.rows or r.columns is not None or r.params or r.failure or r.ranks
    ]
    if not runs:
        if says_something(ctx):  # only rank lines of a header, and NCCL's own lines
            return [nccl_log_run(ctx, source, op=op, file_name=file_name, skipped=parser.skipped)]
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
        out.append(to_bench_run(r, parser.skipped, ctx, source, op, file_name, position))
    return out
