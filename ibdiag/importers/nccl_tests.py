"""nccl-tests ``*_perf`` output -> :class:`BenchRun` (``kind: collective``), every format era.

Pure functions of text. What is read (see ``shared/reference/FORMATS.md``):

* before Aug 2022: ``#   Rank  0 Pid ... on host device 0 [0x1a] GPU`` lines (no Group), a float
  ``error`` column per half, no ``root`` column for the unrooted ops, ``... validation: 1``;
* Aug 2022 - 2025: ``Group`` in the rank lines, ``#wrong`` integers, ``root`` ``-1`` where it does not
  apply, ``agg iters: 1 validation: 1 graph: 0``;
* 2025 on: ``# nccl-tests version ...``, ``# Collective test starting: all_reduce_perf``, PCI ids like
  ``[000f:01:00]``, ``unalign: 0``, ``# Collective test concluded``; optional ``timestamp``/``cputime``
  and per-iteration columns;
* ``N/A`` in a ``#wrong`` column (sendrecv, ``-c 0``);
* lines prefixed by ``mpirun --tag-output`` (``[1,0]<stdout>:``), ``[0] `` or ``srun --label``;
* NCCL's own ``NCCL INFO``/``NCCL WARN`` lines (skipped, warnings kept);
* several runs in one file: one after the other, one per tag, or interleaved line by line (a binary
  built without MPI started by mpirun runs N independent 1-rank jobs). Runs are returned separately,
  never averaged; rows of untagged interleaved runs are attributed in order of appearance (the k-th
  copy of a size goes to the k-th run), which the run's ``separation`` says.

The ``-J`` JSON file is :mod:`~ibdiag.importers.nccl_tests_json`'s; which op a run measured and its
metadata are decided for both in :mod:`~ibdiag.importers.nccl_tests_run`.

The table's columns are read from the header line, so a column added or dropped in some version is
found where it is. Any other line is an error naming its number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ibdiag.bench.collective.meta import NcclRank, NcclTestsLog
from ibdiag.bench.provenance import MAX_WARNINGS, ImportInfo, Provenance, RunPosition
from ibdiag.bench.results import BenchRun, CollectiveResult
from ibdiag.collectives import op_in_text
from ibdiag.errors import InputError
from ibdiag.importers.lines import Line, number, split_lines, whole
from ibdiag.importers.nccl_tests_run import choose_op, collective_meta

HINT = "ibdiag bench import reads nccl-tests *_perf output and perftest ib_* output; remove unrelated lines or give --op"

_NCCL_DEBUG = re.compile(r"\bNCCL (INFO|WARN|TRACE|ERROR|ABORT)\b")
_NCCL_VERSION = re.compile(r"^NCCL version (\S+)")
_FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b|\bTest failure\b")
_RANK_LINE = re.compile(
    r"^Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<gpu>.*)$"
)
_VERSION_LINE = re.compile(r"^nccl-tests version (?P<version>\S+)(?P<rest>.*)$")
_STARTING = re.compile(r"^Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^Collective test concluded:\s*(?P<name>\S+)")
_OOB = re.compile(r"^Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<state>\w*)")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(?P<v>[-+0-9.eEnaNinf]+)\s*(?P<state>\w*)")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"^\d{2}:\d{2}:\d{2}$")

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
class _Columns:
    head: list[str]
    """The columns before the first half (size, count, type, redop, root)."""
    halves: list[list[str]]
    timestamp: bool
    line: int

    @property
    def width(self) -> int:
        return len(self.head) + sum(len(h) for h in self.halves)


@dataclass
class _Run:
    tag: str | None
    start_line: int
    nccl_tests_version: str | None = None
    version_rest: str | None = None
    binary: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    ranks: list[NcclRank] = field(default_factory=list)
    columns: _Columns | None = None
    rows: list[CollectiveResult] = field(default_factory=list)
    oob: int | None = None
    avg_reported: float | None = None
    finished: bool = False
    concluded: bool = False
    blocking: bool = False
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


def _parse_columns(body: str, line_no: int, source: str) -> _Columns:
    tokens = body.split()
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    if not times:
        raise InputError(f"{source}:{line_no}: a table header without a time column", hint=HINT)
    timestamp = tokens[-1] == "timestamp"
    if timestamp:
        tokens = tokens[:-1]
    head = tokens[: times[0]]
    halves = [tokens[a:b] for a, b in zip(times, [*times[1:], len(tokens)])]
    for need in ("size", "count", "type"):
        if need not in head:
            raise InputError(f"{source}:{line_no}: table header without a {need!r} column", hint=HINT)
    for h in halves:
        if "algbw" not in h or "busbw" not in h:
            raise InputError(f"{source}:{line_no}: table header without algbw/busbw", hint=HINT)
    return _Columns(head, halves, timestamp, line_no)


def _parse_row(line: Line, cols: _Columns, source: str) -> list[CollectiveResult]:
    tokens = line.text.split()
    if cols.timestamp and len(tokens) >= 2 and _TIMESTAMP.match(tokens[-2]) and _CLOCK.match(tokens[-1]):
        tokens = tokens[:-2]
    n = line.number
    halves = list(cols.halves)
    in_place_flags = [False, True][: len(halves)] if len(halves) > 1 else [False]
    if len(tokens) != cols.width:
        if len(halves) == 2 and len(tokens) == len(cols.head) + len(halves[1]):
            halves, in_place_flags = [halves[1]], [True]  # out-of-place left blank (nccl-tests trace replay)
        else:
            raise InputError(f"{source}:{n}: expected {cols.width} columns as in the header (line {cols.line}), found {len(tokens)}", hint=HINT)
    head = dict(zip(cols.head, tokens))
    size = whole(head["size"], f"{source}:{n}", "size", HINT)
    count = whole(head["count"], f"{source}:{n}", "count", HINT)
    dtype = head["type"]
    redop = head.get("redop")
    if redop is not None and redop.lower() == "none":
        redop = None
    root_tok = head.get("root")
    root = None
    if root_tok is not None:
        r = whole(root_tok, f"{source}:{n}", "root", HINT)
        root = r if r >= 0 else None
    out: list[CollectiveResult] = []
    pos = len(cols.head)
    for names, in_place in zip(halves, in_place_flags):
        vals = dict(zip(names, tokens[pos : pos + len(names)]))
        pos += len(names)
        if all(v == "-" for v in vals.values()):
            continue  # a half that was not measured (ibdiag prints '-', e.g. all_reduce out of place)
        time_us = number(vals[names[0]], f"{source}:{n}", names[0], HINT)
        algbw = number(vals["algbw"], f"{source}:{n}", "algbw", HINT)
        busbw = number(vals["busbw"], f"{source}:{n}", "busbw", HINT)
        wrong: int | None = None
        error: float | None = None
        if "#wrong" in vals:
            w = vals["#wrong"]
            if w.upper() != "N/A":
                wrong = int(round(number(w, f"{source}:{n}", "#wrong", HINT)))
        elif "error" in vals:
            e = vals["error"]
            if e.upper() != "N/A":
                error = number(e, f"{source}:{n}", "error", HINT)
        out.append(
            CollectiveResult(
                bytes=size,
                count=count,
                dtype=dtype,
                redop=redop,
                root=root,
                in_place=in_place,
                time_us=time_us,
                algbw_gbs=algbw,
                busbw_gbs=busbw,
                wrong=wrong,
                **({"max_error": error} if error is not None else {}),
            )
        )
    return out


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.runs: list[_Run] = []
        self.nccl_warnings: list[tuple[int, str]] = []
        self.nccl_version: str | None = None
        self.debug_lines = 0

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
        if _NCCL_DEBUG.search(s):
            self.debug_lines += 1
            kind = _NCCL_DEBUG.search(s).group(1)  # type: ignore[union-attr]
            if kind in ("WARN", "ERROR", "ABORT"):
                self.nccl_warnings.append((line.number, s[:300]))
            return
        m = _NCCL_VERSION.match(s)
        if m:
            self.nccl_version = m.group(1)
            return
        if s.startswith("#"):
            self._comment(line, s.lstrip("#").strip())
            return
        if _FAILURE.search(s):
            raise InputError(
                f"{self.source}:{line.number}: the nccl-tests run reported a failure: {s[:200]}",
                hint="the run did not finish: fix the failure (NCCL_DEBUG=WARN shows why) and rerun",
            )
        first = s.split()[0]
        if first.isdigit():
            self._row(line)
            return
        raise InputError(f"{self.source}:{line.number}: not nccl-tests output: {s[:100]!r}", hint=HINT)

    def _comment(self, line: Line, body: str) -> None:
        tag, n = line.tag, line.number
        m = _VERSION_LINE.match(body)
        if m:
            run = self._start(tag, n)
            run.nccl_tests_version = m.group("version")
            run.version_rest = m.group("rest").strip()
            run.eras.add("2025")
            return
        m = _STARTING.match(body)
        if m:
            run = self._fresh_or_new(tag, n, "binary")
            run.binary = m.group("name")
            run.eras.add("2025")
            return
        if body.startswith("nThread"):
            run = self._fresh_or_new(tag, n, "params")
            run.params = _parse_params(body)
            if "unalign" in run.params:
                run.eras.add("2025")
            elif "agg_iters" in run.params or "graph" in run.params:
                run.eras.add("2022")
            else:
                run.eras.add("old")
            return
        m = _RANK_LINE.match(body)
        if m:
            rank = int(m.group("rank"))
            run = self._for_header(tag, n, lambda r: r.columns is None and all(x.rank != rank for x in r.ranks))
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
            return
        tokens = body.split()
        if "size" in tokens and "count" in tokens:
            run = self._for_header(tag, n, lambda r: r.columns is None)
            run.columns = _parse_columns(body, n, self.source)
            if any("error" in h for h in run.columns.halves):
                run.eras.add("old")
            elif any("#wrong" in h for h in run.columns.halves):
                run.eras.add("2022")
            return
        m = _OOB.match(body)
        if m:
            run = self._for_header(tag, n, lambda r: r.columns is not None and r.oob is None)
            run.oob = int(m.group("n"))
            return
        m = _AVG.match(body)
        if m:
            run = self._for_header(tag, n, lambda r: r.columns is not None and r.avg_reported is None)
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
                cands[-1].errors.append(body[len("error:") :].strip())
            return
        # anything else after '#' is a comment nccl-tests or the user wrote (Using devices, out-of-place,
        # (B) units, Reducing maxBytes, GPU memory usage ...): not data

    def _row(self, line: Line) -> None:
        tag = line.tag
        cands = [r for r in self._open(tag) if r.columns is not None]
        if not cands:
            raise InputError(f"{self.source}:{line.number}: a result row before any table header", hint=HINT)
        size = int(line.text.split()[0])
        run = cands[0]
        if tag is None and len(cands) > 1:
            # untagged interleaved runs: the first run whose sizes have not reached this one yet
            for r in cands:
                if not r.rows or r.rows[-1].bytes < size:
                    run = r
                    break
        run.rows.extend(_parse_row(line, run.columns, self.source))  # type: ignore[arg-type]


def _era(eras: set[str]) -> str | None:
    if "2025" in eras:
        return "2025"
    if "2022" in eras:
        return "2022-2025"
    if "old" in eras:
        return "before 2022"
    return None


def _to_bench_run(run: _Run, parser: _Parser, source: str, option: str | None, file_name: str | None, position: RunPosition | None) -> BenchRun:
    header = (op_in_text(run.binary) or run.binary.removesuffix("_perf")) if run.binary else None
    choice = choose_op(header, option, file_name, run.rows, len({r.rank for r in run.ranks}) or None)
    rows = tuple(run.rows)
    log = NcclTestsLog(
        op_source=choice.source,
        op_candidates=choice.candidates,
        gpus=tuple(sorted({r.gpu for r in run.ranks if r.gpu})),
        ranks=tuple(run.ranks),
        params=run.params,
        avg_busbw_gbs_reported=run.avg_reported,
        out_of_bounds=run.oob,
        complete=run.finished,
    )
    provenance = Provenance(
        imported=ImportInfo(tool="nccl-tests", source=source, format=_era(run.eras), first_line=run.start_line, tag=run.tag, position=position),
        nccl_version=parser.nccl_version,
        nccl_tests_version=run.nccl_tests_version,
        nccl_errors=tuple(run.errors),
        nccl_warnings=tuple(f"line {n}: {t}" for n, t in parser.nccl_warnings[:MAX_WARNINGS]),
        nccl_warning_count=len(parser.nccl_warnings) or None,
    )
    return BenchRun(collective_meta(rows, run.ranks, choice, log, run.blocking), rows, provenance)


def looks_like(lines: Sequence[Line]) -> bool:
    """True when the text carries an nccl-tests marker line."""
    for ln in lines[:4000]:
        body = ln.text.lstrip("#").strip()
        if body.startswith(("nThread", "nccl-tests version", "Collective test starting", "Avg bus bandwidth", "Out of bounds values")):
            return True
        if _RANK_LINE.match(body) and ln.text.lstrip().startswith("#"):
            return True
        tokens = body.split()
        if ln.text.lstrip().startswith("#") and "algbw" in tokens and "busbw" in tokens:
            return True
    return False


def parse_log(text: str, source: str = "<text>", *, op: str | None = None, file_name: str | None = None) -> list[BenchRun]:
    """Every run in an nccl-tests log, in the order they started (see the module docstring)."""
    lines = split_lines(text)
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
        out.append(_to_bench_run(r, parser, source, op, file_name, position))
    return out
