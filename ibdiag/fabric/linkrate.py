"""``fabric.link_rate``: a link slower or narrower than what its two ends can do. Pure.

A link trains to the fastest speed and widest width both ends support, so a link below that has a bad
cable, optic or port. What the ends support comes from, in order:

1. the dump itself: iblinkinfo's ``Could be 53.125 Gbps`` / ``Could be 4X`` says both ends support
   more than the link runs (a width above 4x there is ignored: ibsim and old switches advertise 12x on
   every port, and no NDR-era port trains it) -- below that fails;
2. the device IDs of both ends (:mod:`.devices`): a ConnectX-5 does EDR at best, so an EDR storage
   server on an HDR switch is as fast as it can be. Below the slower end's best fails, unless most
   links of its class (the same two devices, the same kind of link) run as slow: then it warns (a SKU,
   firmware or cable limit the dump cannot tell from a fault);
3. otherwise its class's peers: below what most links of its class run warns, and says the capability
   is not in the dump.

A link is never judged against the fabric's most common speed alone: slow by design is not slow.
``[fabric] expect_width``/``expect_speed`` still state what every link must run where its ends can.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ibdiag.fabric.checks import CHECKS, switch_end
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.devices import device_key, max_speed, slower
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.linkinfo import LANE_SPEED
from ibdiag.fabric.model import LANE_GBPS, SPEED_ORDER, Fabric, FabricPort
from ibdiag.findings.model import Finding, Severity

#: A class's norm needs this many links, this share of them at the norm, to say a link is below it.
MIN_CLASS = 3
NORM_SHARE = 0.5
_COULD_W = re.compile(r"\b(\d{1,2})X\b")
_COULD_S = re.compile(r"\b(\d{1,3}(?:\.\d{1,6})?) Gbps\b")

Link = tuple[FabricPort, FabricPort | None]


@dataclass(frozen=True)
class Bound:
    """What a link could run at, and where that was read."""

    width: int | None
    width_from: str
    speed: str | None
    speed_from: str


class _Ends:
    """Each node's device key and best speed, looked up once (a fabric has thousands of links)."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.seen: dict[str, tuple[str, str | None]] = {}
        self.slowest: dict[tuple[str | None, str | None], str | None] = {}

    def of(self, guid: str) -> tuple[str, str | None]:
        got = self.seen.get(guid)
        if got is None:
            node = self.fab.node(guid)
            got = self.seen[guid] = (device_key(node), max_speed(node))
        return got

    def bound(self, a: FabricPort, b: FabricPort | None) -> Bound:
        could = a.could_be or (b.could_be if b is not None else "")
        if could:
            w = _COULD_W.search(could)
            width = None if w is None else int(w.group(1))
            if width is not None and width > 4 and (a.width or 0) <= 4:
                width = 4  # "Could be 12X": ibsim and old switches advertise it on every port
            s = _COULD_S.search(could)
            dump_speed = LANE_SPEED.get(s.group(1)) if s else None
            if dump_speed is not None:
                return Bound(width, "iblinkinfo", dump_speed, "iblinkinfo")
        else:
            width = None
        dev = self.slowest_of(a, b)
        return Bound(width, "iblinkinfo" if width else "", dev, "devices" if dev else "")

    def slowest_of(self, a: FabricPort, b: FabricPort | None) -> str | None:
        """The slower of the two ends' best speeds (None when either is unknown)."""
        pair = (self.of(a.guid)[1], self.of(b.guid)[1] if b is not None else None)
        dev = self.slowest.get(pair, "")
        if dev == "":
            dev = self.slowest[pair] = slower(*pair)
        return dev


def _norms(
    ends: _Ends, links: list[Link]
) -> tuple[
    list[tuple[tuple[str, str, str], str | None]],
    dict[tuple[str, str, str], tuple[Counter[int], Counter[str]]],
]:
    """Per link its class (the kind, and both ends' devices: links of one class should run alike)
    and the slower of its ends' best speeds; per class the widths and speeds its links run."""
    of, is_isl, slowest = ends.of, ends.fab.is_isl, ends.slowest
    per_link = []
    widths: dict[tuple[str, str, str], list[int]] = {}
    speeds: dict[tuple[str, str, str], list[str]] = {}
    for a, b in links:
        x, xs = of(a.guid)
        y, ys = of(b.guid) if b is not None else (x, None)
        kind = "isl" if is_isl(a) else "host"
        cls = (kind, x, y) if x <= y else (kind, y, x)
        fastest = slowest.get((xs, ys), "")
        if fastest == "":
            fastest = slowest[(xs, ys)] = slower(xs, ys)
        per_link.append((cls, fastest))
        w = widths.get(cls)
        if w is None:
            w, sp = widths[cls], speeds[cls] = [], []
        else:
            sp = speeds[cls]
        w.append(a.width or 0)
        sp.append(a.speed or "?")
    return per_link, {cls: (Counter(w), Counter(speeds[cls])) for cls, w in widths.items()}


def _norm(c: Counter[str] | Counter[int]) -> object | None:
    total = sum(c.values())
    if total < MIN_CLASS:
        return None
    value, n = c.most_common(1)[0]
    return value if n >= NORM_SHARE * total else None


_RANKS = {s: i for i, s in enumerate(SPEED_ORDER)}


def _rank(speed: str | None) -> int:
    return _RANKS.get(speed, -1) if speed is not None else -1


def _speed(
    a: FabricPort,
    bd: Bound,
    norm: object | None,
    fab: Fabric,
    b: FabricPort | None,
    cfg: FabricConfig,
) -> tuple[Severity, str] | None:
    got = _rank(a.speed)
    if bd.speed is not None and got < _rank(bd.speed):
        if bd.speed_from == "iblinkinfo":
            return Severity.FAIL, f"{a.speed} where both ends could do {bd.speed} (iblinkinfo)"
        models = " and ".join(
            sorted({device_key(fab.node(p.guid)) for p in (a, b) if p is not None})
        )
        if isinstance(norm, str) and _rank(norm) <= got:
            return Severity.WARN, (
                f"{a.speed} where both ends support {bd.speed} ({models}); every link of its class runs so "
                "(a cable, SKU or firmware limit?)"
            )
        return Severity.FAIL, f"{a.speed} where both ends support {bd.speed} ({models})"
    if bd.speed is None and isinstance(norm, str) and _rank(norm) > got:
        return (
            Severity.WARN,
            f"{a.speed} where its class (the same devices) runs {norm}; what its ends support is not in the dump",
        )
    if (
        cfg.expect_speed
        and got < _rank(cfg.expect_speed)
        and (bd.speed is None or _rank(bd.speed) >= _rank(cfg.expect_speed))
    ):
        return Severity.FAIL, f"{a.speed} where [fabric] expect_speed says {cfg.expect_speed}"
    return None


def _width(
    a: FabricPort, bd: Bound, norm: object | None, cfg: FabricConfig
) -> tuple[Severity, str] | None:
    got = a.width or 0
    if bd.width is not None and got < bd.width:
        return Severity.FAIL, f"{got}x where both ends could do {bd.width}x (iblinkinfo)"
    if cfg.expect_width and got < cfg.expect_width:
        return Severity.FAIL, f"{got}x where [fabric] expect_width says {cfg.expect_width}x"
    if bd.width is None and isinstance(norm, int) and norm > got:
        return (
            Severity.WARN,
            f"{got}x where its class runs {norm}x; what its ends support is not in the dump",
        )
    return None


@CHECKS.check(
    "fabric.link_rate",
    "a link slower or narrower than both its ends can do (iblinkinfo's 'Could be', the devices' best, "
    "[fabric] expect_width/expect_speed): fail; below its class's peers with the capability unknown: warn",
)
def link_rate(fab: Fabric, names: Names, cfg: FabricConfig) -> list[Finding]:
    links = [
        (a, b)
        for a, b in fab.links()
        if a.state in ("Active", None) and a.width and a.speed and (b is None or a.guid != b.guid)
    ]
    ends = _Ends(fab)
    per_link, counts = _norms(ends, links)
    norms = {cls: (_norm(w), _norm(sp)) for cls, (w, sp) in counts.items()}
    out = []
    plain = not cfg.expect_speed and not cfg.expect_width
    ranks = _RANKS
    for (a, b), (cls, fastest) in zip(links, per_link, strict=True):
        width_norm, speed_norm = norms[cls]
        if (
            plain
            and not a.could_be
            and (b is None or not b.could_be)
            and width_norm in (None, a.width)
        ):
            # The common link: no "Could be", its class's width; judged on speed alone, cheaply
            # (a.speed is set: the links judged here have one).
            if speed_norm in (None, a.speed) and (
                fastest is None or ranks.get(a.speed or "", -1) >= ranks.get(fastest, -1)
            ):
                continue
        bd = ends.bound(a, b)
        said = [
            x for x in (_width(a, bd, width_norm, cfg), _speed(a, bd, speed_norm, fab, b, cfg)) if x
        ]
        if not said:
            continue
        sev = Severity.FAIL if any(s is Severity.FAIL for s, _ in said) else Severity.WARN
        kind = "inter-switch link" if fab.is_isl(a) else "host link"
        where = f"{names.port(a.ref)} — {names.port(b.ref) if b else '?'}"
        if kind == "host link":
            where = names.cable(switch_end(fab, a, b))
        best = (bd.width or a.width or 0) * LANE_GBPS.get(bd.speed or a.speed or "", 0.0)
        out.append(
            Finding(
                "fabric.link_rate",
                sev,
                names.link_subject(a, b),
                f"{kind} {where} trained at {a.link_text} ({a.rate_gbps:g} Gb/s): {' and '.join(t for _, t in said)}",
                value=a.rate_gbps,
                limit=best or None,
                unit="Gb/s",
                hint="a link that trains narrow or slow has a bad lane, cable or optic, or a port set to less: reseat or replace it, then check `iblinkinfo` shows the full width and speed"
                if sev is Severity.FAIL
                else "compare the link's cable and both ports' settings with a peer of its class (`iblinkinfo`, `mlxlink`); a slower cable or SKU may be by design",
            )
        )
    return out
