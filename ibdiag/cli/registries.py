"""Every package's check registry, gathered: only the CLI sees all the command packages at once."""

from __future__ import annotations

from ibdiag.bench.collective.analysis import CHECKS as collective
from ibdiag.bench.importers.checks import CHECKS as importers
from ibdiag.bench.p2p.checks import CHECKS as p2p
from ibdiag.counters.checks import CHECKS as counters
from ibdiag.fabric.judge import CHECKS as fabric
from ibdiag.findings.registry import Check, CheckRegistry
from ibdiag.history.checks import CHECKS as history
from ibdiag.history.kernel_checks import CHECKS as kernel
from ibdiag.job.command import CHECKS as job
from ibdiag.ports.checks import CHECKS as ports
from ibdiag.report.checks import CHECKS as report
from ibdiag.sweep.checks import CHECKS as sweep
from ibdiag.topo.configuration import CHECKS as topo
from ibdiag.verdict.checks import CHECKS as verdict
from ibdiag.verdict.placement import placement as _registers_verdict_placement  # noqa: F401


def all_registries() -> tuple[CheckRegistry, ...]:
    """Every package's ``CHECKS``, in the order of the command references in docs/ (tests, docs)."""
    return (
        topo,
        ports,
        counters,
        history,
        kernel,
        fabric,
        p2p,
        collective,
        importers,
        verdict,
        sweep,
        report,
        job,
    )


def all_checks() -> dict[str, Check]:
    """Check id -> :class:`Check` over every registry; an id in two registries is a bug."""
    out: dict[str, Check] = {}
    for registry in all_registries():
        for check in registry:
            if check.id in out:
                raise RuntimeError(f"check id {check.id} is registered by two packages")
            out[check.id] = check
    return out
