"""``ibdiag bench import FILE`` as a library: :func:`run` reads the nccl-tests or perftest log people
already have into the results model (``ibdiag.bench/1``) and judges it like a measured run; the views
draw the result (:func:`ibdiag.bench.views.outputs`).

A file of several runs one after the other (different ops too) gives them all (``{"runs": [...]}``,
findings named ``run N: subject``); interleaved runs are refused unless ``run_index`` picks one (the
policy is :func:`~ibdiag.bench.importers.select_run`'s).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.bench.importers import read_runs, select_run, separate_runs
from ibdiag.bench.importers.checks import import_findings
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.bench.results.document import BenchResult
from ibdiag.bench.results.model import BenchRun
from ibdiag.config import Config
from ibdiag.errors import UsageError
from ibdiag.findings.model import Finding, Report, RunMeta
from ibdiag.node.root import host_of
from ibdiag.outfile import check_output_path


@dataclass(frozen=True)
class ImportRequest:
    """What ``ibdiag bench import`` is asked: the log, which run of it, and the settings it is judged by."""

    file: str
    """The log's path (text, JSON or .gz), or ``-`` for stdin."""
    run_index: int | None = None
    """``--run N``: the run to import from a file of several (1-based); they are never averaged."""
    op: str | None = None
    """``--op``: the collective, when an old nccl-tests log does not say."""
    config: Config = field(default_factory=lambda: Config(None, {}))
    save: Path | None = None
    """``--save``: checked before the log is read (the caller writes it); a saved result is one run."""


def run(req: ImportRequest) -> BenchResult:
    """Read, judge and return the log's run(s); InputError (exit 2) for a log without a result, and the
    other errors :mod:`ibdiag.bench.importers` documents."""
    cfg = req.config.section("collective", CollectiveConfig)
    check_output_path(req.save, "--save")
    runs, source = read_runs(req.file, op=req.op)
    if req.run_index is None and separate_runs(runs):
        if req.save is not None:
            raise UsageError(
                f"--save: {source} holds {len(runs)} runs; a saved result is one run",
                hint=f"save one with --run N (1..{len(runs)})",
            )
        return _several(runs, [import_findings(r, cfg) for r in runs])
    one, extra = select_run(runs, source, req.run_index)
    findings = extra + import_findings(one, cfg)
    return BenchResult.of_run(one, findings, RunMeta.now(host_of(None)))


def _several(runs: list[BenchRun], findings: list[list[Finding]]) -> BenchResult:
    """Several runs of one file in one report: ``{"runs": [...]}``, each finding named ``run N: subject``."""
    named = tuple(
        dataclasses.replace(f, subject=f"run {i}: {f.subject}")
        for i, fs in enumerate(findings, start=1)
        for f in fs
    )
    report = Report("bench", {"runs": [r.to_data() for r in runs]}, named)
    return BenchResult(report, RunMeta.now(host_of(None)), tuple(runs))
