"""Fabric health for the verdict: the ``--root`` node's topo, port and counters findings, sorted into
what makes the fabric unhealthy for a training job, with the verdict's own judgement of the node (no
rail at all: ``verdict.rails``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.findings.model import Finding, Severity
from ibdiag.verdict.ceiling import RailInfo
from ibdiag.verdict.registry import CHECKS

# topo warnings that, for a training job, mean GPUs without GPUDirect RDMA: the data is staged through
# host memory (NCCL docs, NCCL_NET_GDR_LEVEL), so they make the fabric unhealthy here.
_GDR_CHECKS = ("topo.gpu_nic_path",)


@dataclass(frozen=True)
class Health:
    """The ``--root`` node's topo (and counters) findings, sorted into what makes the fabric unhealthy."""

    checked: tuple[str, ...]
    """Sources that ran: ``topo``, ``counters``."""
    failing: tuple[Finding, ...]
    warnings: tuple[Finding, ...]
    passed: int

    @property
    def ok(self) -> bool:
        return not self.failing

    def to_json(self) -> dict[str, Any]:
        return {
            "state": "unhealthy" if self.failing else "ok",
            "checked": list(self.checked),
            "failing": [f.to_json() for f in self.failing],
            "warnings": [f.to_json() for f in self.warnings],
            "passed": self.passed,
        }


@CHECKS.check(
    "verdict.rails",
    "with --root: no active RDMA port beside any GPU: fail (one of the fabric health problems)",
)
def no_rails(rails: RailInfo) -> Finding | None:
    if rails.ports:
        return None
    return Finding(
        "verdict.rails",
        Severity.FAIL,
        "node",
        "no active RDMA port beside any GPU: this node cannot carry the job's traffic over RDMA",
        value=0,
        hint="check `ibdiag topo` on this node: adapters present, ports ACTIVE, GPUs visible",
    )


def sort_health(
    findings: list[Finding], *, checked: tuple[str, ...], rails: RailInfo | None = None
) -> Health:
    """FAIL findings, plus GPUs without GPUDirect RDMA (path beyond the GDR level, or no peer-memory
    module), make the fabric unhealthy; other warnings are listed; no rail at all is unhealthy too."""
    failing: list[Finding] = []
    warnings: list[Finding] = []
    passed = 0
    for f in findings:
        if f.severity is Severity.FAIL:
            failing.append(f)
        elif f.severity is Severity.WARN and (
            f.check in _GDR_CHECKS or (f.check == "topo.gdr_module" and f.value == "absent")
        ):
            failing.append(f)
        elif f.severity is Severity.WARN:
            warnings.append(f)
        else:
            passed += 1
    if rails is not None:
        failing.extend(no_rails(rails))
    return Health(checked, tuple(failing), tuple(warnings), passed)


def with_source_findings(
    health: Health | None, findings: tuple[Finding, ...], source: str
) -> Health | None:
    """``health`` with the measured source's own failing findings (an nccl-tests log that shows a
    NET/Socket fallback across nodes) added as problems; a Health of them alone without ``--root``."""
    failing = tuple(f for f in findings if f.severity is Severity.FAIL)
    if not failing:
        return health
    if health is None:
        return Health((source,), failing, (), 0)
    return Health(
        (*health.checked, source), (*health.failing, *failing), health.warnings, health.passed
    )
