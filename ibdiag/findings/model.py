"""The report model: findings with a severity, and the report that carries them with command data.

A finding is the unit CI acts on: a stable ``check`` id (``topo.gpu_nic_path``), the ``subject``
it is about (``GPU3/mlx5_3``), a sentence, the measured ``value`` against its ``limit`` in ``unit``,
and a ``hint`` saying what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from ibdiag import __version__


class Severity(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def __str__(self) -> str:
        return self.value


_RANK = {Severity.OK: 0, Severity.WARN: 1, Severity.FAIL: 2}


def worst(severities: Iterable[Severity]) -> Severity:
    """The most severe of ``severities`` (OK when there are none)."""
    out = Severity.OK
    for s in severities:
        if s.rank > out.rank:
            out = s
    return out


@dataclass(frozen=True)
class Finding:
    check: str
    severity: Severity
    subject: str
    message: str
    value: Any = None
    limit: Any = None
    unit: str | None = None
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity.value,
            "subject": self.subject,
            "message": self.message,
            "value": self.value,
            "limit": self.limit,
            "unit": self.unit,
            "hint": self.hint,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Finding:
        return cls(
            check=str(doc["check"]),
            severity=Severity(doc["severity"]),
            subject=str(doc.get("subject", "")),
            message=str(doc.get("message", "")),
            value=doc.get("value"),
            limit=doc.get("limit"),
            unit=doc.get("unit"),
            hint=doc.get("hint"),
        )


@dataclass(frozen=True)
class Report:
    """What a command returns: its name, JSON-ready data built from its models, and findings.

    ``data`` holds the command's own top-level JSON keys (``gpus``, ``ports`` ...); the envelope
    keys (schema, version, host, generated_at, status, findings) are added by the JSON renderer.
    """

    command: str
    data: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()

    @property
    def schema(self) -> str:
        return f"ibdiag.{self.command}/1"

    @property
    def status(self) -> Severity:
        return worst(f.severity for f in self.findings)

    def failing(self, strict: bool = False) -> tuple[Finding, ...]:
        """Findings that make the command exit 1: FAIL, and WARN too under ``--strict``."""
        bad = {Severity.FAIL, Severity.WARN} if strict else {Severity.FAIL}
        return tuple(f for f in self.findings if f.severity in bad)

    def problems(self) -> tuple[Finding, ...]:
        """Findings that are not OK, most severe first, in their original order otherwise."""
        return tuple(
            sorted(
                (f for f in self.findings if f.severity is not Severity.OK),
                key=lambda f: -f.severity.rank,
            )
        )


@dataclass(frozen=True)
class RunMeta:
    """Who produced a report and when: the envelope's ``version``, ``host`` and ``generated_at``."""

    host: str
    version: str
    generated_at: str
    """ISO 8601 UTC, e.g. ``2026-11-29T09:14:00Z``."""

    @classmethod
    def now(cls, host: str) -> RunMeta:
        """This version of ibdiag, on ``host``, now (to the second)."""
        at = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        return cls(host=host, version=__version__, generated_at=at)
