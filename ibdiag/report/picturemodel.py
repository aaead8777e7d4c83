"""The model of the fabric the page draws (``ibdiag report --fabric -o html``): boxes per tier, the lines
between them, host dots, and what lies on each. Built by :mod:`ibdiag.report.fabricpicture` (which
stands on the fabric's graph), drawn by :mod:`ibdiag.report.fabricsvg`; this module imports neither,
so the page's renderer loads without networkx.
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.findings.model import Finding, Severity

#: What an element shows, worst first: the likely culprit, a failing or warning finding of the saved
#: fabric, on a slow pair's path, nothing.
CULPRIT, FAIL, WARN, OK = "culprit", "fail", "warn", "ok"
_ORDER = (CULPRIT, FAIL, WARN, OK)


@dataclass(frozen=True)
class Shown:
    """What lies on one drawn element: culprit numbers, the saved fabric's findings, slow pairs on it
    (exactly: a host link, a followed route's ISL) or maybe (a candidate uplink: routes not read)."""

    culprits: tuple[int, ...] = ()
    findings: tuple[Finding, ...] = ()
    slow: int = 0
    candidate: int = 0

    @property
    def state(self) -> str:
        if self.culprits:
            return CULPRIT
        if any(f.severity is Severity.FAIL for f in self.findings):
            return FAIL
        return WARN if self.findings else OK

    @property
    def shows(self) -> bool:
        return bool(self.culprits or self.findings or self.slow or self.candidate)

    def rank(self) -> tuple[int, int]:
        return (_ORDER.index(self.state), -(self.slow + self.candidate))


@dataclass(frozen=True)
class Box:
    """A switch, or a run of switches of one tier folded into one."""

    key: str
    label: str
    tier: int
    members: tuple[str, ...]
    """The switches' GUIDs."""
    names: tuple[str, ...]
    mark: Shown
    """Its own (a finding on the switch, its uplinks the culprit) and, folded, its members' links' too."""
    path: Shown
    """Everything on it and its links: what decides whether it is drawn alone, and its path halo."""
    hosts: int = 0
    """Host links below it (leaves)."""
    dots: tuple[tuple[str, Shown], ...] = ()
    """Host adapters drawn under it (``gpu03 mlx5_0``), each with what lies on its cable."""

    @property
    def folded(self) -> bool:
        return len(self.members) > 1


@dataclass(frozen=True)
class Bundle:
    """The ISLs between two boxes: one line."""

    low: str
    high: str
    cables: int
    mark: Shown


@dataclass(frozen=True)
class Picture:
    tiers: tuple[tuple[int, str, tuple[Box, ...]], ...]
    """(tier, its name, its boxes), top tier first; tier -1: switches whose tier is not known."""
    bundles: tuple[Bundle, ...]
    culprits: tuple[tuple[int, str], ...]
    """(number, text) of each culprit drawn, as the badges read."""
    notes: tuple[str, ...]
    """What was folded or left out, in words."""
    switches: int
    isls: int
