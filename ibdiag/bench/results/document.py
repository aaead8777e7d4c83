"""What ``bench p2p``, ``bench collective`` and ``bench import`` return: the ``ibdiag.bench/1`` document
(the report and the run's metadata, what ``-o json`` and ``--save`` write) with the runs it holds, which
the views draw (:func:`ibdiag.bench.views.outputs`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ibdiag.bench.results.model import BenchRun
from ibdiag.findings.model import Finding, Report, RunMeta


@dataclass(frozen=True)
class BenchResult:
    """One bench command's result: its report (``data`` is the run's, or ``{"runs": [...]}`` for several
    runs of one imported file; the findings), the metadata of this run of ibdiag, and the runs."""

    report: Report
    meta: RunMeta
    runs: tuple[BenchRun, ...]

    @classmethod
    def of_run(cls, run: BenchRun, findings: Sequence[Finding], meta: RunMeta) -> BenchResult:
        """The result of one run: its data and its findings."""
        return cls(Report("bench", run.to_data(), tuple(findings)), meta, (run,))
