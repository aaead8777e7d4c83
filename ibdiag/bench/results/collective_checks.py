"""The findings that judge collective rows, wherever they come from: ``collective.wrong`` and ``collective.busbw``.

Shared by a measured run (:mod:`ibdiag.bench.collective.analysis`, which declares the ids in its
``CHECKS``) and an imported nccl-tests log (:mod:`ibdiag.bench.importers.checks`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.bench.results.model import CollectiveResult
from ibdiag.collectives import placement
from ibdiag.findings.model import Finding, Severity
from ibdiag.units import format_bytes


def row_label(nbytes: int, in_place: bool) -> str:
    return f"{format_bytes(nbytes)} {placement(in_place)}"


def wrong_findings(
    op: str, results: Sequence[CollectiveResult], *, checked: bool = True
) -> list[Finding]:
    """``collective.wrong``: one FAIL naming the rows with wrong elements, or one OK when all rows were checked."""
    bad = [r for r in results if r.wrong]
    if bad:
        total = sum(r.wrong or 0 for r in bad)
        first = ", ".join(f"{row_label(r.bytes, r.in_place)}: {r.wrong}" for r in bad[:3])
        more = f" and {len(bad) - 3} more rows" if len(bad) > 3 else ""
        return [
            Finding(
                "collective.wrong",
                Severity.FAIL,
                op,
                f"validation found {total} wrong elements in {len(bad)} of {len(results)} rows ({first}{more})",
                value=total,
                limit=0,
                unit="elements",
                hint="data corrupted in flight or by a faulty GPU/NIC: rerun, then check ibdiag counters and the node's GPUs (dcgmi diag)",
            )
        ]
    if checked and results and all(r.wrong is not None for r in results):
        return [
            Finding(
                "collective.wrong",
                Severity.OK,
                op,
                f"every element correct in all {len(results)} rows",
                value=0,
                limit=0,
                unit="elements",
            )
        ]
    return []


def busbw_findings(
    op: str, results: Sequence[CollectiveResult], cfg: CollectiveConfig
) -> list[Finding]:
    """``collective.busbw``: the largest size's best busbw against ``min_busbw_gbs`` (when configured)."""
    if cfg.min_busbw_gbs is None or not results:
        return []
    largest = max(r.bytes for r in results)
    best = max(r.busbw_gbs for r in results if r.bytes == largest)
    sev = Severity.FAIL if best < cfg.min_busbw_gbs else Severity.OK
    return [
        Finding(
            "collective.busbw",
            sev,
            f"{op} {format_bytes(largest)}",
            f"busbw at the largest size ({format_bytes(largest)}) is {best:.4g} GB/s",
            value=round(best, 3),
            limit=cfg.min_busbw_gbs,
            unit="GB/s",
            hint="compare with rails x rail bandwidth; check ibdiag topo (GPU-NIC paths) and ibdiag counters"
            if sev is Severity.FAIL
            else None,
        )
    ]
