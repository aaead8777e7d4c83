"""Existing benchmark logs -> the shared results model (:class:`~ibdiag.bench.results.BenchRun`).

Formats recognised by content, not by file name:

* nccl-tests ``*_perf`` stdout of every era, with or without launcher prefixes -> ``kind: collective``
* nccl-tests ``-J`` JSON -> ``kind: collective``
* perftest ``ib_*_bw`` / ``ib_*_lat`` stdout -> ``kind: p2p``; perftest ``--out_json`` -> ``kind: p2p``
* ibdiag's own ``ibdiag.bench/1`` JSON (``--save``, ``-o json``) -> itself

The interface other commands use (``ibdiag verdict --nccl-tests FILE`` among them):

``load(path) -> BenchRun``
    The one run in the file. Raises :class:`~ibdiag.errors.InputError` (exit 2) for an unreadable
    file, an unrecognised line (the message names its number), a file without result rows, and a
    file that holds several runs: they are never averaged, and the message says how many there are
    and how they were told apart. Callers that can handle several runs use ``parse_runs``.
``parse_text(text, source="<text>") -> BenchRun``
    The same for text already in memory.
``parse_runs(text, source="<text>", *, op=None, file_name=None) -> list[BenchRun]``
    Every run, in the order they started; with several, each run's ``provenance.imported.position``
    has its index (1-based), the count and the ``separation`` ("one after the other", "one run per
    output tag", or "interleaved (untagged lines; rows attributed in order of appearance)").
``select_run(runs, source, run_index=None) -> (BenchRun, findings)``
    The policy for a file of several runs (refuse and list them, or pick ``--run N`` with a warning).

A run is typed: nccl-tests runs have a ``CollectiveMeta`` (``op`` None when the log does not say and
the table fits several ops) whose ``nccl_tests`` part holds the header's ranks and parameters, the
footer's average and out-of-bounds count and ``complete``; perftest runs a ``P2PMeta`` with the
``perftest`` banner. Every parser here is a pure function of text; a format is one module listed in
:data:`TEXT_FORMATS` or :data:`JSON_FORMATS`.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

from ibdiag.bench.collective.meta import CollectiveMeta
from ibdiag.bench.results import SCHEMA, BenchRun, bench_run_from_json
from ibdiag.collectives import get_op
from ibdiag.errors import InputError, UsageError
from ibdiag.importers import nccl_tests, nccl_tests_json, perftest, perftest_json
from ibdiag.importers.checks import multiple_runs
from ibdiag.report.model import Finding
from ibdiag.importers.lines import split_lines

__all__ = ["load", "parse_text", "parse_runs", "read_text", "select_run"]

_PREFIXED = re.compile(r"^\[\d+(?:,\d+\]<\w+>:|\]\s)")
"""A line prefixed by mpirun --tag-output ([1,0]<stdout>:) or -prepend-rank ([0] ), not a JSON list."""

#: Text formats, tried in order: each module has ``looks_like(lines)`` and
#: ``parse_log(text, source, *, op, file_name) -> list[BenchRun]``.
TEXT_FORMATS: tuple[Any, ...] = (nccl_tests, perftest)
#: JSON formats: ``is_json_doc(doc)`` and ``parse_doc(doc, source, *, op, file_name) -> BenchRun``
#: (ibdiag's own ``ibdiag.bench/1`` documents are read before these).
JSON_FORMATS: tuple[Any, ...] = (nccl_tests_json, perftest_json)

MAX_BYTES = 512 * 2**20
"""Logs larger than this are refused (a 512 MiB benchmark log is surely something else)."""


def read_text(path: str | Path) -> tuple[str, str]:
    """(text, source name) of a log file; ``-`` reads stdin; gzip files are opened transparently."""
    if str(path) == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        source = "<stdin>"
    else:
        p = Path(path)
        if p.is_dir():
            raise InputError(f"{p}: is a directory", hint="give the log file itself")
        try:
            if p.stat().st_size > MAX_BYTES:
                raise InputError(f"{p}: larger than {MAX_BYTES // 2**20} MiB", hint="give the benchmark's own log, not a whole job log")
            data = p.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{p}: no such file", hint="check the path") from None
        except PermissionError:
            raise InputError(f"{p}: permission denied", hint="check the file's permissions") from None
        except OSError as e:
            raise InputError(f"{p}: cannot read: {e.strerror}", hint="check the file") from None
        source = str(p)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise InputError(f"{source}: a damaged gzip file ({e})", hint="check the file") from None
    if b"\x00" in data[:65536]:
        raise InputError(f"{source}: a binary file, not a text log", hint="give the text output of nccl-tests or perftest")
    return data.decode("utf-8", errors="replace"), source


def parse_runs(text: str, source: str = "<text>", *, op: str | None = None, file_name: str | None = None) -> list[BenchRun]:
    """Every run in ``text`` (see the module docstring); InputError for anything unrecognised."""
    op = None if op is None else get_op(op).name
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{source}: empty", hint="give the output of an nccl-tests *_perf or perftest ib_* run")
    if stripped[0] == "{" or (stripped[0] == "[" and not _PREFIXED.match(stripped)):
        if "MsgSize" in text:
            doc = perftest_json.load_json_text(text, source)
        else:
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(f"{source}:{e.lineno}: not JSON ({e.msg})", hint=nccl_tests.HINT) from None
        if isinstance(doc, dict) and "schema" in doc:
            if doc["schema"] != SCHEMA:
                raise InputError(f"{source}: schema is {doc['schema']!r}, expected {SCHEMA}", hint="give a file written by ibdiag bench ... --save or -o json")
            return [bench_run_from_json(doc, source=source)]
        for fmt in JSON_FORMATS:
            if fmt.is_json_doc(doc):
                return [fmt.parse_doc(doc, source, op=op, file_name=file_name)]
        raise InputError(f"{source}: JSON, but neither nccl-tests -J, perftest --out_json nor ibdiag bench output", hint=nccl_tests.HINT)
    lines = split_lines(text)
    for fmt in TEXT_FORMATS:
        if fmt.looks_like(lines):
            return fmt.parse_log(text, source, op=op, file_name=file_name)
    first = next((ln for ln in lines if ln.text.strip()), lines[0])
    raise InputError(f"{source}:{first.number}: neither nccl-tests nor perftest output: {first.text.strip()[:100]!r}", hint=nccl_tests.HINT)


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
    return first.position.separation if first is not None and first.position is not None else "separate"


def select_run(runs: list[BenchRun], source: str, run_index: int | None = None) -> tuple[BenchRun, list[Finding]]:
    """The run to import from ``runs`` (all the runs of one file) and the finding that says what was left out.

    Several runs are never averaged: without ``run_index`` they are an InputError listing them (with the
    MPI hint when they look like a binary built without MPI under mpirun); ``run_index`` (1-based) picks
    one, with an ``import.multiple_runs`` warning. A run without rows is an InputError.
    """
    findings: list[Finding] = []
    if len(runs) > 1:
        if run_index is None:
            interleaved = any(
                (r.provenance.imported is not None and r.provenance.imported.position is not None and r.provenance.imported.position.interleaved)
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
            raise UsageError(f"--run {run_index}: {source} holds {len(runs)} runs", hint=f"use --run 1..{len(runs)}")
        findings += multiple_runs(source, run_index, len(runs), _separation(runs))
    elif run_index not in (None, 1):
        raise UsageError(f"--run {run_index}: {source} holds one run", hint="drop --run")
    run = runs[(run_index or 1) - 1]
    if not run.results:
        raise InputError(f"{source}: the run has a header but no result rows (it stopped before measuring?)", hint="rerun the benchmark to completion")
    return run, findings


def parse_text(text: str, source: str = "<text>", *, op: str | None = None, file_name: str | None = None) -> BenchRun:
    """The single run in ``text``; InputError when there is none or several (never averaged)."""
    return select_run(parse_runs(text, source, op=op, file_name=file_name), source)[0]


def load(path: str | Path) -> BenchRun:
    """The one run in the log at ``path`` (see the module docstring for what is accepted and refused)."""
    text, source = read_text(path)
    return parse_text(text, source, file_name=Path(source).name)
