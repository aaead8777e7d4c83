"""``ibdiag report --fabric``: the saved fabric's own health beside the sweep.

The snapshot is judged by ``ibdiag fabric``'s library entry point (:func:`ibdiag.fabric.command.run`
with ``source``: exactly ``ibdiag fabric --from SNAPSHOT``, the same checks, thresholds and names), and
its failing and warning findings are kept. Each is then looked for on the slow pairs' paths: a
finding on a port (``leaf-r0-1:3``) or a cable (``leaf-r0-1:5<>spine-1:1``) lies on a hop when that
port is one of the hop's — a host link's switch port or adapter port, an ISL's two ends, or (routes
not read) any candidate uplink of a switch and the spine port it goes to; a finding on a switch as a
whole (``leaf-r0-1``: its oversubscription, its routes' balance) lies on that switch's uplink group
(not on one ISL of it: the routes name the ISL, and the switch's finding may be about another). What lies on a slow pair's path is said as such
(:class:`OnPath`): the report's ``report.fabric_health`` at the fabric finding's severity, and on the
culprit it explains; the rest is listed, and summarised in one finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ibdiag.config import Config
from ibdiag.fabric.model import PortRef
from ibdiag.findings.model import Finding, Severity, worst
from ibdiag.report.fabricmodel import HOST_LINK, ISL, UPLINKS, Hop, SweepOnFabric

if TYPE_CHECKING:  # networkx behind fabric's judgement: loaded for --fabric only
    from ibdiag.fabric.judge import Judged

#: Slow pairs named per finding on a path (all are counted).
PAIRS_SHOWN = 6


@dataclass(frozen=True)
class OnPath:
    """A failing or warning finding of the saved fabric on the path of a sweep's slow pairs."""

    finding: Finding
    sweep: str
    hops: tuple[Hop, ...]
    """The hops it lies on (a host link, an ISL, a switch's uplinks)."""
    slow_pairs: tuple[str, ...]
    healthy: int
    """Healthy pairs through the busiest of those hops."""
    exact: bool
    """On a host link or a followed route's ISL: every one of those slow pairs crosses it. False when
    it is one of a switch's candidate uplinks (the routes were not read)."""
    on_switch: bool = False
    """The finding is about a switch as a whole (its oversubscription), not one port or cable."""

    @property
    def text(self) -> str:
        f = self.finding
        n = len(self.slow_pairs)
        shown = ", ".join(self.slow_pairs[:PAIRS_SHOWN]) + (
            f" and {n - PAIRS_SHOWN} more" if n > PAIRS_SHOWN else ""
        )
        labels = ", ".join(h.label for h in self.hops[:3]) + (
            f" and {len(self.hops) - 3} more" if len(self.hops) > 3 else ""
        )
        if self.on_switch:
            where = f"{n} slow pair(s) of {self.sweep} cross {labels} ({shown})"
        elif self.exact:
            where = f"{n} slow pair(s) of {self.sweep} cross it ({shown})"
        else:
            where = (
                f"it is one of {labels}, which {n} slow pair(s) of {self.sweep} cross ({shown}); "
                "without the routes (fabric --routes --save) which uplink each took is not known"
            )
        healthy = f"; {self.healthy} healthy pair(s) also do" if self.healthy else ""
        return f"the saved fabric's {f.check} ({f.severity.value}): {f.message} — {where}{healthy}"

    def to_json(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "check": self.finding.check,
            "severity": self.finding.severity.value,
            "subject": self.finding.subject,
            "hops": [h.subject for h in self.hops],
            "slow_pairs": len(self.slow_pairs),
            "pairs": list(self.slow_pairs[:PAIRS_SHOWN]),
            "healthy_pairs": self.healthy,
            "exact": self.exact,
            "on_switch": self.on_switch,
            "text": self.text,
        }


@dataclass(frozen=True)
class FabricHealth:
    """The saved fabric as ``ibdiag fabric --from`` judges it: what fails or warns, and where."""

    source: str
    findings: tuple[Finding, ...]
    """Failing, then warning findings, in the order ``ibdiag fabric`` gives them."""
    passed: int
    """Findings that passed (``ok``)."""
    on_paths: tuple[OnPath, ...] = ()

    @property
    def status(self) -> Severity:
        return worst(f.severity for f in self.findings)

    @property
    def off_paths(self) -> tuple[Finding, ...]:
        """Failing and warning findings on no slow pair's path."""
        near = {id(o.finding) for o in self.on_paths}
        return tuple(f for f in self.findings if id(f) not in near)

    def counts(self) -> str:
        """``1 failing, 2 warning, 40 passed``."""
        fails = sum(1 for f in self.findings if f.severity is Severity.FAIL)
        return f"{fails} failing, {len(self.findings) - fails} warning, {self.passed} passed"

    def to_json(self) -> dict[str, Any]:
        return {
            "fabric": self.source,
            "status": self.status.value,
            "findings": [f.to_json() for f in self.findings],
            "passed": self.passed,
            "on_slow_paths": [o.to_json() for o in self.on_paths],
        }


def judge_snapshot(snapshot: Path, config: Config) -> Judged:
    """The snapshot built and judged by ``ibdiag fabric``'s entry point (``--from SNAPSHOT``)."""
    # lazy: fabric's entry point loads the judgement (networkx); --fabric only
    from ibdiag.fabric.command import FabricRequest, run

    return run(FabricRequest(config=config, source=snapshot)).judged


class _Ports:
    """The finding subjects (``leaf-r0-1:3``, ``gpu03/mlx5_0``, ``leaf-r0-1``) each hop holds."""

    def __init__(self, judged: Judged, uplinks: dict[str, tuple[int, ...]]) -> None:
        self.judged, self.uplinks = judged, uplinks
        self._cache: dict[Hop, set[str]] = {}

    def _cable(self, ref: PortRef) -> list[str]:
        names, p = self.judged.names, self.judged.fabric.port(ref)
        out = [names.subject(ref)]
        if p is not None and p.peer is not None:
            out.append(names.subject(p.peer))
        return out

    def of(self, hop: Hop) -> set[str]:
        if hop not in self._cache:
            names = self.judged.names
            tokens: list[str] = []
            if hop.kind == HOST_LINK:
                tokens += self._cable(PortRef(hop.switch, hop.port))
            elif hop.kind == ISL:
                tokens += self._cable(PortRef(hop.switch, hop.port))
                tokens += self._cable(PortRef(hop.far_switch, hop.far_port))
            elif hop.kind == UPLINKS:
                for port in self.uplinks.get(hop.switch, ()):
                    tokens += self._cable(PortRef(hop.switch, port))
                tokens.append(names.switch_token(hop.switch))
            self._cache[hop] = set(tokens)
        return self._cache[hop]


def fabric_health(judged: Judged, placed: Sequence[SweepOnFabric]) -> FabricHealth:
    """The judged snapshot's failing and warning findings, and those on each sweep's slow pairs' paths."""
    found = [f for f in judged.findings if f.severity is Severity.FAIL]
    found += [f for f in judged.findings if f.severity is Severity.WARN]
    passed = sum(1 for f in judged.findings if f.severity is Severity.OK)
    by_token: dict[str, list[int]] = {}
    for i, f in enumerate(found):
        for token in dict.fromkeys(f.subject.split("<>")):
            by_token.setdefault(token, []).append(i)
    on: list[OnPath] = []
    for sweep in placed:
        ports = _Ports(judged, dict(sweep.uplinks))
        hits: dict[int, list[int]] = {}  # finding -> indices of the loads it lies on
        for k, load in enumerate(sweep.loads):
            for i in dict.fromkeys(i for t in ports.of(load.hop) for i in by_token.get(t, ())):
                hits.setdefault(i, []).append(k)
        for i, ks in sorted(hits.items()):
            mine = [sweep.loads[k] for k in ks]
            pairs = tuple(dict.fromkeys(p for x in mine for p in x.slow_pairs))
            exact = any(x.hop.kind in (HOST_LINK, ISL) for x in mine)
            hops = tuple(x.hop for x in mine if exact is (x.hop.kind in (HOST_LINK, ISL)))
            busiest = max(x.healthy for x in mine)
            whole = found[i].subject in {judged.names.switch_token(h.switch) for h in hops}
            on.append(OnPath(found[i], sweep.sweep, hops, pairs, busiest, exact, whole))
    on.sort(key=lambda o: (-o.finding.severity.rank, not o.exact, -len(o.slow_pairs)))
    return FabricHealth(judged.fabric.source, tuple(found), passed, tuple(on))


#: Findings of the saved fabric listed in the table (JSON and the page have them all).
TABLE_FINDINGS = 20


def health_lines(health: FabricHealth, limit: int = TABLE_FINDINGS) -> list[str]:
    """The saved fabric's health in plain lines: its status, then each failing or warning finding,
    those on a slow pair's path first, saying so."""
    lines = [
        f"fabric {health.source} as `ibdiag fabric --from` judges it: "
        f"{health.status.value.upper()} ({health.counts()})"
    ]
    near: dict[int, int] = {}
    for o in health.on_paths:
        near[id(o.finding)] = max(near.get(id(o.finding), 0), len(o.slow_pairs))
    ordered = sorted(health.findings, key=lambda f: (id(f) not in near, -f.severity.rank))
    for f in ordered[:limit]:
        on = f" [on the path of {near[id(f)]} slow pair(s)]" if id(f) in near else ""
        lines.append(f"  {f.severity.value.upper()} {f.check} {f.subject}: {f.message}{on}")
    if len(ordered) > limit:
        lines.append(f"  ... {len(ordered) - limit} more (-o json and -o html have them all)")
    return lines


def with_fabric_says(
    placed: Iterable[SweepOnFabric], health: FabricHealth
) -> tuple[SweepOnFabric, ...]:
    """Each sweep's culprits with what the saved fabric says of their hops (a 1x link, errors)."""
    out = []
    for sweep in placed:
        said: dict[str, list[str]] = {}
        for o in health.on_paths:
            if o.sweep == sweep.sweep:
                for h in o.hops:
                    said.setdefault(h.subject, []).append(
                        f"{o.finding.message} ({o.finding.check}, {o.finding.severity.value})"
                    )
        culprits = tuple(
            replace(c, fabric_says=tuple(said.get(c.hop.subject, ()))) for c in sweep.culprits
        )
        out.append(replace(sweep, culprits=culprits))
    return tuple(out)
