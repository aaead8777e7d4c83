"""Existing benchmark logs -> the shared results model (:class:`~ibdiag.bench.results.model.BenchRun`).

Formats recognised by content, not by file name:

* nccl-tests ``*_perf`` stdout of every era, with or without launcher prefixes -> ``kind: collective``
* nccl-tests ``-J`` JSON -> ``kind: collective``
* perftest ``ib_*_bw`` / ``ib_*_lat`` stdout -> ``kind: p2p``; perftest ``--out_json`` -> ``kind: p2p``
* ibdiag's own ``ibdiag.bench/1`` JSON (``--save``, ``-o json``) -> itself
* NCCL's own ``NCCL_DEBUG`` lines without a result table (a training job's log, a benchmark that died
  before its table) -> ``kind: collective`` without rows, ``provenance.imported.tool`` ``NCCL``
  (:mod:`~ibdiag.bench.importers.nccl_log`): the transport, GPUDirect RDMA, devices, hosts, NCCL
  version, GID index and fatal network errors the log holds

The interface other commands use (``ibdiag verdict --nccl-tests FILE`` among them):

``load(path) -> BenchRun``
    The one measured run in the file, read as a stream. Raises :class:`~ibdiag.errors.InputError`
    (exit 2) for an unreadable, empty or binary file, a file without a result table (NCCL's lines
    alone are no measurement), a row that does not fit its header (the message names its line), a
    file without result rows, a run that failed (its tool's error line, ``provenance.failure``: no
    measurement), and a file that holds several runs: they are never averaged, and the message says
    how many there are and how they were told apart. Lines around the table (prompts, command lines, NCCL debug lines, launcher chatter) are
    read for provenance or skipped. Callers that can handle several runs use ``read_runs``.
``read_runs(path, *, op=None, file_name=None) -> (list[BenchRun], source)``
    Every run in the file at ``path`` (``-``: stdin; ``.gz`` opened transparently).
``parse_text(text, source="<text>") -> BenchRun``
    The same for text already in memory.
``parse_runs(text, source="<text>", *, op=None, file_name=None) -> list[BenchRun]``
    Every run, in the order they started; with several, each run's ``provenance.imported.position``
    has its index (1-based), the count and the ``separation`` ("one after the other", "one run per
    output tag", or "interleaved (untagged lines; rows attributed in order of appearance)").
``select_run(runs, source, run_index=None) -> (BenchRun, findings)``
    The policy for a file of several runs (refuse and list them, or pick ``--run N`` with a warning).
    A run without rows is returned: what its log says is judged (``ibdiag bench import``).
``separate_runs(runs) -> bool``
    Several runs one after the other, which ``ibdiag bench import`` imports each of.

A run is typed: nccl-tests runs have a ``CollectiveMeta`` (``op`` None when the log does not say and
the table fits several ops) whose ``nccl_tests`` part holds the header's ranks and parameters, the
footer's average and out-of-bounds count, ``complete``, ``header`` (cut or whole) and ``-N`` cycles;
perftest runs a ``P2PMeta`` with the ``perftest`` banner; both carry the command line and (nccl-tests)
the NCCL path in ``provenance``. Every parser here is a pure function of text; a format is one module listed in
:data:`TEXT_FORMATS` or :data:`JSON_FORMATS`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

from ibdiag.bench.importers import nccl_tests, nccl_tests_json, perftest, perftest_json
from ibdiag.bench.importers.checks import multiple_runs
from ibdiag.bench.importers.context import Context
from ibdiag.bench.importers.lines import Line
from ibdiag.bench.importers.nccl_log import is_nccl_log, nccl_log_run, says_something
from ibdiag.bench.importers.source import _JSON_LIST, _PREFIXED, MAX_BYTES, open_log
from ibdiag.bench.results.collective_meta import CollectiveMeta
from ibdiag.bench.results.model import SCHEMA, BenchRun, bench_run_from_json
from ibdiag.collectives import get_op
from ibdiag.errors import InputError, UsageError
from ibdiag.findings.model import Finding
from ibdiag.jsonread import JsonFieldError, loads

__all__ = [
    "MAX_BYTES",
    "load",
    "parse_text",
    "parse_runs",
    "read_runs",
    "select_run",
    "separate_runs",
]


class TextFormat(Protocol):
    """A text format's module: ``marks(line)`` (a line only that tool prints) and its parser."""

    def marks(self, line: Line) -> bool: ...

    def parse_lines(
        self,
        lines: Iterable[Line],
        ctx: Context,
        source: str = ...,
        *,
        op: str | None = ...,
        file_name: str | None = ...,
    ) -> list[BenchRun]: ...


class JsonFormat(Protocol):
    """A JSON format's module: ``is_json_doc(doc)`` and ``parse_doc(doc, source, *, op, file_name)``."""

    def is_json_doc(self, doc: Any) -> bool: ...

    def parse_doc(
        self, doc: Any, source: str, *, op: str | None = ..., file_name: str | None = ...
    ) -> BenchRun: ...


#: Text formats, tried in order.
TEXT_FORMATS: tuple[TextFormat, ...] = (nccl_tests, perftest)
#: JSON formats (ibdiag's own ``ibdiag.bench/1`` documents are read before these).
JSON_FORMATS: tuple[JsonFormat, ...] = (nccl_tests_json, perftest_json)

_LOOKAHEAD_BYTES = 8 * 2**20
"""Lines kept while no format has shown itself yet (older ones are noise before the table and dropped)."""
_EMPTY_HINT = "give the output of an nccl-tests *_perf or perftest ib_* run"


def parse_json(
    text: str, source: str, *, op: str | None = None, file_name: str | None = None
) -> list[BenchRun]:
    """A JSON document: ibdiag's own, nccl-tests ``-J`` or perftest ``--out_json``."""
    if "MsgSize" in text:
        doc = perftest_json.load_json_text(text, source)
    else:
        try:
            doc = loads(text)
        except JsonFieldError as e:
            raise InputError(f"{source}: {e.problem}", hint=nccl_tests.HINT) from None
    if isinstance(doc, dict) and "schema" in doc:
        if doc["schema"] != SCHEMA:
            raise InputError(
                f"{source}: schema is {str(doc['schema'])[:80]!r}, expected {SCHEMA}",
                hint="give a file written by ibdiag bench ... --save or -o json",
            )
        return [bench_run_from_json(doc, source=source)]
    for fmt in JSON_FORMATS:
        if fmt.is_json_doc(doc):
            return [fmt.parse_doc(doc, source, op=op, file_name=file_name)]
    raise InputError(
        f"{source}: JSON, but neither nccl-tests -J, perftest --out_json nor ibdiag bench output",
        hint=nccl_tests.HINT,
    )


def parse_lines(
    raw_lines: Iterable[str],
    source: str = "<text>",
    *,
    op: str | None = None,
    file_name: str | None = None,
) -> list[BenchRun]:
    """Every run in a text log given line by line (read lazily: memory is bounded by the rows kept).

    Every line goes to the :class:`~ibdiag.bench.importers.context.Context` first (command lines, NCCL
    lines); the others are held until a line only one format prints (its ``marks``) says whose table
    this is, then that format reads them all. No marker but NCCL's own lines: one run without rows
    (:func:`~ibdiag.bench.importers.nccl_log.nccl_log_run`). Neither: InputError (nothing to read).
    """
    op = None if op is None else get_op(op).name
    ctx = Context()
    table_lines = ctx.table_lines(raw_lines)
    held: deque[Line] = deque()
    held_bytes = 0
    seen = 0
    first: Line | None = None
    for ln in table_lines:
        if ln.text.strip():
            seen += 1
            first = first or ln
        for fmt in TEXT_FORMATS:
            if fmt.marks(ln):
                return fmt.parse_lines(
                    chain(held, [ln], table_lines), ctx, source, op=op, file_name=file_name
                )
        held.append(ln)
        held_bytes += len(ln.text) + 64
        while held_bytes > _LOOKAHEAD_BYTES and held:
            held_bytes -= len(held.popleft().text) + 64
    if says_something(ctx):
        return [nccl_log_run(ctx, source, op=op, file_name=file_name, skipped=seen)]
    if ctx.commands:
        what = "the command line is there, but no result table and no NCCL line"
    elif first is None:
        raise InputError(f"{source}: empty (no text lines)", hint=_EMPTY_HINT)
    else:
        what = f"neither nccl-tests nor perftest output (first line {first.number}: {first.text.strip()[:80]!r})"
    raise InputError(f"{source}: no benchmark table found: {what}", hint=nccl_tests.HINT)


def parse_runs(
    text: str, source: str = "<text>", *, op: str | None = None, file_name: str | None = None
) -> list[BenchRun]:
    """Every run in ``text`` (see the module docstring); InputError for a file without a table."""
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{source}: empty", hint=_EMPTY_HINT)
    if stripped[0] == "{" or (
        stripped[0] == "[" and not _prefixed(stripped) and _json_list(stripped)
    ):
        return parse_json(
            text, source, op=None if op is None else get_op(op).name, file_name=file_name
        )
    return parse_lines(text.splitlines(), source, op=op, file_name=file_name)


def _prefixed(text: str) -> bool:
    return bool(_PREFIXED.match(text[:64].encode("utf-8", errors="replace")))


def _json_list(text: str) -> bool:
    """A list of lists or objects (a JSON document), not a log line that starts with ``[``."""
    return bool(_JSON_LIST.match(text[:128].encode("utf-8", errors="replace")))


def read_runs(
    path: str | Path, *, op: str | None = None, file_name: str | None = None
) -> tuple[list[BenchRun], str]:
    """(every run in the log at ``path``, its source name), reading a text log as a stream
    (:mod:`~ibdiag.bench.importers.source`: ``-`` is stdin, gzip is opened transparently, bounded size)."""
    log = open_log(path)
    name = (
        file_name
        if file_name is not None
        else (Path(log.source).name if log.source != "<stdin>" else None)
    )
    if log.is_json:
        return parse_json(
            log.json_text(), log.source, op=None if op is None else get_op(op).name, file_name=name
        ), log.source
    return parse_lines(log.lines(), log.source, op=op, file_name=name), log.source


def describe_runs(runs: list[BenchRun]) -> str:
    """``2 runs, interleaved (...): 1: all_reduce 1 rank on node01 (12 rows); 2: ...``."""
    parts = []
    for i, r in enumerate(runs, start=1):
        m = r.meta
        if isinstance(m, CollectiveMeta):
            what, ranks, hosts = m.op or r.kind, m.world_size, m.hosts
        else:
            what, ranks, hosts = (m.perftest.test if m.perftest else r.kind), None, ()
        where = f" {ranks} rank{'s' if ranks != 1 else ''}" if ranks else ""
        if hosts:
            where += f" on {', '.join(hosts[:2])}{'...' if len(hosts) > 2 else ''}"
        parts.append(f"{i}: {what}{where} ({len(r.results)} rows)")
    return f"{len(runs)} runs, {_separation(runs)}: " + "; ".join(parts)


def _separation(runs: list[BenchRun]) -> str:
    first = runs[0].provenance.imported if runs else None
    return (
        first.position.separation
        if first is not None and first.position is not None
        else "separate"
    )


def separate_runs(runs: list[BenchRun]) -> bool:
    """True when the file holds several runs printed one after the other (different ops too): each
    can be imported on its own. Interleaved or per-tag runs are not (they are how a binary built
    without MPI runs under mpirun)."""
    return len(runs) > 1 and all(
        r.provenance.imported is not None
        and r.provenance.imported.position is not None
        and r.provenance.imported.position.separation == "one after the other"
        for r in runs
    )


def select_run(
    runs: list[BenchRun], source: str, run_index: int | None = None
) -> tuple[BenchRun, list[Finding]]:
    """The run to import from ``runs`` (all the runs of one file) and the finding that says what was left out.

    Several runs are never averaged: without ``run_index`` they are an InputError listing them (with the
    MPI hint when they look like a binary built without MPI under mpirun); ``run_index`` (1-based) picks
    one, with an ``import.multiple_runs`` warning. A run without rows is returned (its log is judged);
    :func:`parse_text` and :func:`load`, which need a measurement, refuse it.
    """
    findings: list[Finding] = []
    if len(runs) > 1:
        if run_index is None:
            interleaved = any(
                (
                    r.provenance.imported is not None
                    and r.provenance.imported.position is not None
                    and r.provenance.imported.position.interleaved
                )
                or (isinstance(r.meta, CollectiveMeta) and r.meta.world_size == 1)
                for r in runs
            )
            raise InputError(
                f"{source}: holds {describe_runs(runs)}; they are not averaged",
                hint=(
                    "a binary built without MPI under mpirun runs independent 1-rank jobs: rebuild nccl-tests with MPI=1; "
                    if interleaved and runs[0].kind == "collective"
                    else ""
                )
                + f"import one run with ibdiag bench import FILE --run N (1..{len(runs)})",
            )
        if not 1 <= run_index <= len(runs):
            raise UsageError(
                f"--run {run_index}: {source} holds {len(runs)} runs",
                hint=f"use --run 1..{len(runs)}",
            )
        findings += multiple_runs(source, run_index, len(runs), _separation(runs))
    elif run_index not in (None, 1):
        raise UsageError(f"--run {run_index}: {source} holds one run", hint="drop --run")
    return runs[(run_index or 1) - 1], findings


def _measured(run: BenchRun, source: str) -> BenchRun:
    """``run`` if it has result rows (or its tool's failure line); InputError otherwise."""
    if not run.results and run.provenance.failure is None:
        raise InputError(
            f"{source}: the run has a header but no result rows (it stopped before measuring?)"
            if not is_nccl_log(run)
            else f"{source}: NCCL's lines but no result table: no measurement",
            hint="rerun the benchmark to completion; ibdiag bench import FILE shows what the log says",
        )
    return run


def parse_text(
    text: str, source: str = "<text>", *, op: str | None = None, file_name: str | None = None
) -> BenchRun:
    """The single run in ``text``; InputError when there is none or several (never averaged)."""
    return _measured(
        select_run(parse_runs(text, source, op=op, file_name=file_name), source)[0], source
    )


def load(path: str | Path) -> BenchRun:
    """The one run in the log at ``path`` (see the module docstring for what is accepted and refused)."""
    runs, source = read_runs(path)
    run = _measured(select_run(runs, source)[0], source)
    if run.provenance.failure is not None:
        raise InputError(
            f"{source}: the run failed ({run.provenance.failure}): its numbers are not a measurement",
            hint="fix what the error names and rerun; ibdiag bench import FILE shows what was read",
        )
    return run
