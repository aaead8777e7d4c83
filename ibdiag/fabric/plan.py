"""``ibdiag fabric --expect PLAN``: the cabling against a plan — missing, unexpected and moved cables.

A plan is CSV (one cable a line: ``node,adapter,switch,port`` for a host cable, ``switch,port,switch,port``
for an ISL; ``#`` comments and a header line allowed), TOML (``[[host]]`` tables with ``node``,
``adapter``, ``switch``, ``port``; ``[[isl]]`` tables with ``switch``, ``port``, ``peer``, ``peer_port``),
or a saved known-good fabric (anything ``--from`` reads). A cable is the set of its two ends; an end is a
host adapter (``gpu03``, ``mlx5_2``; ``mlx5_2:2`` for port 2 of a dual-port adapter) or a switch port. A
switch is named by its node description when that is unique in the fabric, else by its GUID (a plan may
use either). The diff is set arithmetic over the ends, linear in the cables: a cable in the plan and
not in the fabric whose one end is in an unplanned cable has *moved* (that end stayed, the other moved);
what is left is *missing* or *unexpected*.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ibdiag.errors import InputError
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.checks import CHECKS
from ibdiag.fabric.hosts import HostEnd, Names
from ibdiag.fabric.model import CA, SWITCH, Fabric, FabricPort
from ibdiag.fabric.naming import operator_name
from ibdiag.findings.model import Finding, Severity
from ibdiag.infile import read_text_file
from ibdiag.text import safe_excerpt, safe_value

_NAME = re.compile(r"\S{1,128}")
_DIGITS = re.compile(r"[0-9_]+")
MAX_PLAN_BYTES = 32 * 2**20
MAX_CABLES = 200_000
HINT = "a plan is CSV (node,adapter,switch,port / switch,port,switch,port), TOML ([[host]], [[isl]]), or a saved fabric"

#: ``("H", host, adapter)`` or ``("S", switch, port)``.
End = tuple[str, str, str]
Cable = frozenset[End]


def host_end(host: str, adapter: str) -> End:
    return ("H", host, adapter)


def switch_end(switch: str, port: int) -> End:
    return ("S", switch, str(port))


def end_text(e: End, texts: dict[End, str] | None = None) -> str:
    if texts and e in texts:
        return texts[e]
    return f"{e[1]} {e[2]}" if e[0] == "H" else f"{e[1]} port {e[2]}"


def end_subject(e: End) -> str:
    return f"{e[1]}/{e[2]}" if e[0] == "H" else f"{e[1]}:{e[2]}"


@dataclass(frozen=True)
class Plan:
    source: str
    cables: frozenset[Cable]
    lines: dict[Cable, int] = field(default_factory=dict, compare=False)
    """Where each cable was planned (CSV line), for messages."""


@dataclass(frozen=True)
class Cabling:
    """A fabric's cables as plan ends, and how to say each end."""

    cables: frozenset[Cable]
    texts: dict[End, str]
    aliases: dict[str, str]
    """A switch GUID or unique description -> the name its ends use."""


def switch_names(fab: Fabric) -> dict[str, str]:
    """Switch GUID -> its name in plans: the name its operator uses (the description, or the name inside
    ``MF0;<name>:<model>/U1``) when unique and one word, else the GUID."""
    named = {n.guid: operator_name(n.desc) for n in fab.nodes if n.kind == SWITCH}
    seen = Counter(named.values())
    return {g: x if x and seen[x] == 1 and " " not in x else g for g, x in named.items()}


def cabling(fab: Fabric, names: Names) -> Cabling:
    sw = switch_names(fab)
    texts: dict[End, str] = {}

    def end(p: FabricPort) -> End | None:
        node = fab.node(p.guid)
        if node is None:
            return None
        if node.kind == SWITCH:
            e = switch_end(sw[p.guid], p.port)
            texts[e] = f"{names.node(p.guid)} port {p.port}"
            return e
        if node.kind != CA:
            return None
        h: HostEnd | None = names.host(p.guid)
        host = h.host if h else (node.desc or p.guid)
        adapter = (h.adapter if h else "port") + (f":{p.port}" if node.ports > 1 else "")
        e = host_end(host, adapter)
        texts[e] = h.text if h else f"{host} {adapter}"
        return e

    cables = set()
    for a, b in fab.links():
        if b is None:
            continue
        ea, eb = end(a), end(b)
        if ea is not None and eb is not None:
            cables.add(frozenset((ea, eb)))
    aliases = (
        {g: n for g, n in sw.items()}
        | {n: n for n in sw.values()}
        | {fab.node(g).desc: n for g, n in sw.items() if fab.node(g) and fab.node(g).desc != n}  # type: ignore[union-attr]
    )
    return Cabling(frozenset(cables), texts, aliases)


# --- reading a plan -------------------------------------------------------------------------------


def _port(text: str, where: str) -> int:
    t = text.strip()
    # ASCII digits, at most 3 after leading zeros (``²`` is a digit to str.isdigit, and 5000 digits
    # are Python's error, not a port)
    digits = t.lstrip("0")
    if not (t.isascii() and t.isdigit() and len(digits) <= 3) or not 0 < int(digits or "0") < 256:
        raise InputError(f"{where}: port {safe_value(t)} is not a port number (1-255)", hint=HINT)
    return int(t)


def _name(text: str, where: str) -> str:
    t = text.strip()
    if not _NAME.fullmatch(t) or not t.isprintable():
        raise InputError(
            f"{where}: {safe_value(t) or 'an empty field'} is not a node, adapter or switch name",
            hint=HINT,
        )
    return t


def parse_csv(text: str, source: str) -> Plan:
    cables: dict[Cable, int] = {}
    seen: dict[End, int] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source} line {no}"
        fields = [x.strip() for x in line.split(",")]
        if len(fields) != 4:
            raise InputError(
                f"{where}: {len(fields)} fields, not 4 ({safe_excerpt(line, 60)})", hint=HINT
            )
        if fields[3].lower() == "port" and not cables and not fields[3].isdigit():
            continue  # the header
        if fields[1].isdigit():
            a = switch_end(_name(fields[0], where), _port(fields[1], where))
        else:
            a = host_end(_name(fields[0], where), _name(fields[1], where))
        b = switch_end(_name(fields[2], where), _port(fields[3], where))
        _add(cables, seen, a, b, no, where)
    return Plan(source, frozenset(cables), cables)


def _add(
    cables: dict[Cable, int], seen: dict[End, int], a: End, b: End, no: int, where: str
) -> None:
    for e in (a, b):
        if e in seen:
            raise InputError(
                f"{where}: {end_text(e)} is planned twice (line {seen[e]} too)", hint=HINT
            )
        seen[e] = no
    if a == b:
        raise InputError(f"{where}: a cable from {end_text(a)} to itself", hint=HINT)
    cables[frozenset((a, b))] = no
    if len(cables) > MAX_CABLES:
        raise InputError(f"{where}: more than {MAX_CABLES} cables", hint=HINT)


def _long_number(text: str) -> str:
    """`` line N: a number of D digits`` for the first line with a run of digits Python will not
    convert (a TOML integer may have ``_`` between digits)."""
    for no, line in enumerate(text.splitlines(), 1):
        longest = max((len(run) for run in _DIGITS.findall(line)), default=0)
        if longest > 4300:
            return f" line {no}: a number of {longest} digits (a port has at most 3)"
    return ": a number too long"


def parse_toml(text: str, source: str) -> Plan:
    if sys.version_info >= (3, 11):
        import tomllib  # novermin - guarded by the version check above
    else:  # Python 3.10: the same parser, as the tomli package
        import tomli as tomllib
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise InputError(f"{source}: not valid TOML: {safe_excerpt(e, 200)}", hint=HINT) from None
    except ValueError:  # an integer past Python's 4300 digits (tomllib says no more)
        raise InputError(f"{source}{_long_number(text)}", hint=HINT) from None
    unknown = sorted(set(doc) - {"host", "isl"})
    if unknown:
        raise InputError(f"{source}: unknown table {safe_value(unknown[0])}", hint=HINT)
    cables: dict[Cable, int] = {}
    seen: dict[End, int] = {}
    for kind, keys in (
        ("host", ("node", "adapter", "switch", "port")),
        ("isl", ("switch", "port", "peer", "peer_port")),
    ):
        rows = doc.get(kind, [])
        if not isinstance(rows, list):
            raise InputError(f"{source}: {kind} must be an array of tables ([[{kind}]])", hint=HINT)
        for i, row in enumerate(rows, 1):
            where = f"{source} [[{kind}]] {i}"
            if not isinstance(row, dict) or sorted(row) != sorted(keys):
                raise InputError(f"{where}: needs exactly {', '.join(keys)}", hint=HINT)
            bad = [
                k for k in keys if isinstance(row[k], bool) or not isinstance(row[k], (str, int))
            ]
            if bad:
                raise InputError(f"{where}: {bad[0]} must be a name or a number", hint=HINT)
            v = [str(row[k]) for k in keys]
            if kind == "host":
                a = host_end(_name(v[0], where), _name(v[1], where))
            else:
                a = switch_end(_name(v[0], where), _port(v[1], where))
            b = switch_end(_name(v[2], where), _port(v[3], where))
            _add(cables, seen, a, b, i, where)
    return Plan(source, frozenset(cables), cables)


def load_plan(path: Path, hosts: dict[str, HostEnd]) -> Plan:
    """CSV or TOML by suffix; anything else is a saved fabric (``--from``'s reader)."""
    source = safe_excerpt(str(path), 200)
    if path.suffix.lower() in (".csv", ".toml"):
        text = read_text_file(path, MAX_PLAN_BYTES, f"--expect {source}", HINT)
        if path.suffix.lower() == ".csv":
            return parse_csv(text, source)
        return parse_toml(text, source)
    try:
        fab = build_fabric(dump.load(path))
    except InputError as e:
        raise InputError(f"--expect: {e.message}", hint=f"{HINT}; {e.hint or ''}") from None
    return Plan(source, cabling(fab, Names(fab, hosts)).cables)


# --- the diff -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    kind: str
    """``moved`` (``end`` stayed, its other end is ``now`` where the plan says ``planned``),
    ``missing`` (planned, not cabled or not up) or ``unexpected`` (cabled, not planned)."""
    end: End
    planned: End | None
    now: End | None

    def to_json(self, texts: dict[End, str]) -> dict[str, Any]:
        def one(e: End | None) -> str | None:
            return None if e is None else end_text(e, texts)

        return {
            "kind": self.kind,
            "end": one(self.end),
            "planned": one(self.planned),
            "now": one(self.now),
        }


def _other(c: Cable, e: End) -> End:
    rest = [x for x in c if x != e]
    return rest[0] if rest else e


def resolve(plan: Plan, aliases: dict[str, str]) -> frozenset[Cable]:
    """The plan's switch names (GUID or description) as the fabric names them."""

    def one(e: End) -> End:
        return (e[0], aliases.get(e[1], e[1]), e[2]) if e[0] == "S" else e

    return frozenset(frozenset(one(e) for e in c) for c in plan.cables)


def diff(planned: frozenset[Cable], actual: frozenset[Cable]) -> list[Change]:
    missing = planned - actual
    unexpected = actual - planned
    by_end: dict[End, Cable] = {e: c for c in unexpected for e in c}
    used: set[Cable] = set()
    out: list[Change] = []
    for c in sorted(missing, key=lambda c: sorted(c)):
        for e in sorted(c):  # "H" before "S": a host end is the one said to stay
            u = by_end.get(e)
            if u is not None and u not in used:
                used.add(u)
                out.append(Change("moved", e, _other(c, e), _other(u, e)))
                break
        else:
            a = sorted(c)[0]
            out.append(Change("missing", a, _other(c, a), None))
    for u in sorted(unexpected - used, key=lambda c: sorted(c)):
        a = sorted(u)[0]
        out.append(Change("unexpected", a, None, _other(u, a)))
    return out


# --- the check ------------------------------------------------------------------------------------

#: Changes listed one finding each; more are summed up in one (``-o json`` lists every one).
MAX_FINDINGS = 50
_HINTS = {
    "moved": "re-cable it where the plan says (or fix the plan); a moved host cable changes its rail's leaf",
    "missing": "plug it in, or check both ends: a cable that is in but down shows as missing too (`iblinkinfo`)",
    "unexpected": "a cable the plan does not have: a plan out of date, or a cable in the wrong place",
}


def _message(ch: Change, texts: dict[End, str]) -> tuple[str, str]:
    e = end_text(ch.end, texts)
    if ch.kind == "moved":
        assert ch.now is not None and ch.planned is not None
        return end_subject(ch.end), (
            f"{e}: cabled to {end_text(ch.now, texts)}, the plan says {end_text(ch.planned, texts)}"
        )
    far = ch.planned if ch.kind == "missing" else ch.now
    assert far is not None
    subject = f"{end_subject(ch.end)}<>{end_subject(far)}"
    what = (
        "in the plan, not cabled (or not up)" if ch.kind == "missing" else "cabled, not in the plan"
    )
    return subject, f"{e} — {end_text(far, texts)}: {what}"


def plan_diff(fab: Fabric, names: Names, plan: Plan) -> tuple[list[Change], dict[str, Any]]:
    """The changes, and the diff for the JSON document."""
    cab = cabling(fab, names)
    changes = diff(resolve(plan, cab.aliases), cab.cables)
    doc = {
        "source": plan.source,
        "planned": len(plan.cables),
        "cabled": len(cab.cables),
        "changes": [c.to_json(cab.texts) for c in changes],
    }
    return changes, {"doc": doc, "texts": cab.texts}


@CHECKS.check(
    "fabric.plan",
    "the cabling against --expect PLAN: a cable moved, missing or not in the plan: fail",
)
def plan_check(plan: Plan, changes: list[Change], texts: dict[End, str]) -> list[Finding]:
    if not changes:
        isl = sum(1 for c in plan.cables if all(e[0] == "S" for e in c))
        return [
            Finding(
                "fabric.plan",
                Severity.OK,
                "fabric",
                f"the cabling matches {plan.source}: {len(plan.cables) - isl} host cables, {isl} ISLs",
            )
        ]
    out = []
    for ch in changes[:MAX_FINDINGS]:
        subject, msg = _message(ch, texts)
        out.append(
            Finding(
                "fabric.plan",
                Severity.FAIL,
                subject,
                f"{ch.kind}: {msg}",
                value=ch.kind,
                hint=_HINTS[ch.kind],
            )
        )
    if len(changes) > MAX_FINDINGS:
        kinds = Counter(c.kind for c in changes[MAX_FINDINGS:])
        out.append(
            Finding(
                "fabric.plan",
                Severity.FAIL,
                "fabric",
                f"and {len(changes) - MAX_FINDINGS} more changes against {plan.source} ("
                + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                + "): -o json lists every one",
                value=len(changes),
                hint="so many changes at once: is it the plan of this fabric, with its switch names?",
            )
        )
    return out
