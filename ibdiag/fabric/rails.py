"""Rails, learnt from each host's own adapter names and from where the fabric's hosts put them.

An adapter's index is its NIC index (``ibdiag topo -o json``), else the number in its device name as
its driver or the site spells it: ``mlx5_0`` is index 0, ``HCA-1`` (rdma-ndd's older spelling,
numbered from 1) is index 0 too. A host's indices need not be 0..n-1 (a DGX A100 names its eight
compute adapters ``mlx5_0``-``mlx5_3`` and ``mlx5_6``-``mlx5_9``; a node with four adapters and two
cabled says ``HCA-1`` and ``HCA-4``): a host whose adapters, in index order, sit on leaves of rising
rails is read in its own numbering.

A rail-optimised fabric puts rail k of every host of a scalable unit on the same leaf: each leaf
carries one rail, the index most of its hosts' adapters there have. The fabric is taken as
rail-optimised when at least :data:`OPTIMISED_SHARE` of the judged adapters sit on a leaf of their
index (else its leaves mix rails by design, and nothing is misplaced). A leaf whose adapters are not
mostly of one index mixes rails by design (storage servers, I/O nodes with two adapters on a leaf):
the hosts cabled to it are not judged, and said so. A host whose names are
shifted against the fabric's (all its adapters one rail off: another numbering) is read in its own
numbering. Only hosts with two or more named adapters on leaves are judged; the others are listed,
with why. An adapter on a leaf of another rail is misplaced (with where its rail belongs, and the
adapter that took its place when two cables are swapped); on its rail's leaf but another unit's, or
on another port than the one its other adapters use where the fabric keeps one port per host, it
moved (:class:`Moved`).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar

from ibdiag.fabric.hosts import HostEnd, Names
from ibdiag.fabric.model import Fabric, PortRef, built
from ibdiag.fabric.shape import host_links

_T = TypeVar("_T")
OPTIMISED_SHARE = 0.75
#: The fabric keeps one port per host on all its rail leaves when this share of hosts do.
PORT_PATTERN_SHARE = 0.75
_HCA = re.compile(r"^HCA-(\d{1,3})$")
_INDEX = re.compile(r"(\d{1,3})$")


def rail_of(h: HostEnd) -> int | None:
    """The adapter's index: its NIC index, else its device name's number (``HCA-k`` counts from 1)."""
    if h.nic_index is not None:
        return h.nic_index
    return _name_index(h.adapter)


@functools.lru_cache(maxsize=256)  # a fabric has thousands of adapters and a handful of names
def _name_index(adapter: str) -> int | None:
    m = _HCA.match(adapter)
    if m:
        return int(m.group(1)) - 1
    m = _INDEX.search(adapter)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class RailEnd:
    ca: str
    """The adapter's node GUID."""
    host: str
    adapter: str
    rail: int
    leaf: str
    """The GUID of the switch its cable goes to."""
    port: int
    """That switch's port."""


@dataclass(frozen=True)
class Misplaced:
    end: RailEnd
    subject: str
    text: str
    rail: int
    leaf_rail: int


@dataclass(frozen=True)
class Moved:
    """On its rail's leaf, but another scalable unit's, or another port than its host's pattern."""

    end: RailEnd
    subject: str
    text: str
    kind: str
    """``unit`` (another unit's leaf of its rail) or ``port``."""


@dataclass(frozen=True)
class Rails:
    ends: tuple[RailEnd, ...]
    leaf_rail: dict[str, int]
    optimised: bool | None
    """None: fewer than two rails (nothing to judge)."""
    verdict: str | None
    misplaced: tuple[Misplaced, ...] = ()
    moved: tuple[Moved, ...] = ()
    not_judged: tuple[tuple[str, str], ...] = ()
    """(host, why) of the hosts whose rails were not judged."""

    def to_json(self) -> dict[str, object]:
        return {
            "rail_optimised": self.optimised,
            "text": self.verdict,
            "leaf_rail": dict(sorted(self.leaf_rail.items())),
            "misplaced": [
                {"host": m.end.host, "adapter": m.end.adapter, "rail": m.rail, "leaf": m.end.leaf}
                for m in self.misplaced
            ],
            "moved": [
                {
                    "host": m.end.host,
                    "adapter": m.end.adapter,
                    "kind": m.kind,
                    "leaf": m.end.leaf,
                    "port": m.end.port,
                }
                for m in self.moved
            ],
            "not_judged": [{"host": h, "why": w} for h, w in self.not_judged],
        }


def rail_ends(
    fab: Fabric, names: Names, leaves: set[str] | None = None
) -> tuple[list[RailEnd], dict[str, str]]:
    """The named adapters on leaves (``leaves``: the tree's tier 0, else every switch with hosts),
    and the hosts left out with why."""
    out: list[RailEnd] = []
    skipped: dict[str, str] = {}
    for leaf, ports in host_links(fab).items():
        for p in ports:
            assert p.peer is not None
            h = names.host(p.peer.guid)
            if h is None:
                skipped.setdefault(
                    names.node(p.peer.guid), "no host name (a default node description)"
                )
                continue
            if leaves is not None and leaf not in leaves:
                skipped[h.host] = "cabled to a switch above the leaves"
                continue
            rail = rail_of(h)
            if rail is None:
                skipped.setdefault(
                    h.host, f"no index in its adapter's name ({h.adapter or 'none'})"
                )
                continue
            out.append(  # RailEnd(...), by model.built: one per adapter
                built(
                    RailEnd,
                    {
                        "ca": p.peer.guid,
                        "host": h.host,
                        "adapter": h.adapter,
                        "rail": rail,
                        "leaf": leaf,
                        "port": p.port,
                    },
                )
            )
    return sorted(out, key=lambda e: (e.host, e.rail, e.adapter)), skipped


def _majority(c: Counter[int]) -> int:
    return min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _renumber(ends: list[RailEnd], leaf_rail: dict[str, int]) -> list[RailEnd]:
    """A host whose adapters, in the order of their indices, sit on leaves of strictly rising rails is
    read in its own numbering (``HCA-1`` and ``HCA-4`` cabled, ``HCA-2``/``HCA-3`` not; names shifted
    by one): each adapter takes its leaf's rail. Any other host keeps its indices: an adapter on
    a leaf of another rail is then misplaced."""
    by_host: dict[str, list[RailEnd]] = {}
    for e in ends:
        by_host.setdefault(e.host, []).append(e)
    out = []
    for mine in by_host.values():
        mine = sorted(mine, key=lambda e: e.rail)
        known = [leaf_rail[e.leaf] for e in mine if e.leaf in leaf_rail]
        rising = len(known) == len(mine) and all(
            x < y for x, y in zip(known, known[1:], strict=False)
        )
        if rising and any(e.rail != r for e, r in zip(mine, known, strict=True)):
            mine = [
                RailEnd(e.ca, e.host, e.adapter, r, e.leaf, e.port)
                for e, r in zip(mine, known, strict=True)
            ]
        out += mine
    return out


def _paired(ends: list[RailEnd]) -> dict[str, str]:
    """Hosts that put two adapters on one leaf by design, and why: all of them on one leaf (a server
    cabled to one switch), two or more on each of two or more leaves (a dual-port server, an I/O
    node), or on one leaf the two indices other hosts also pair (a host with one of its four adapters
    down still pairs the other two the fabric's way)."""
    on: dict[tuple[str, str], list[int]] = {}
    for e in ends:
        on.setdefault((e.host, e.leaf), []).append(e.rail)
    shared: dict[str, list[tuple[int, ...]]] = {}
    leaves: Counter[str] = Counter(host for host, _leaf in on)
    for (host, _leaf), idx in on.items():
        if len(idx) >= 2:
            shared.setdefault(host, []).append(tuple(sorted(idx)))
    seen = Counter(pair for pairs in shared.values() for pair in set(pairs))
    out: dict[str, str] = {}
    for host, pairs in shared.items():
        if leaves[host] == 1:
            out[host] = (
                "all its adapters on one leaf (a server cabled to one switch, not rail by rail)"
            )
        elif len(pairs) >= 2 or any(seen[p] >= 3 for p in pairs):
            out[host] = "two or more adapters on each of its leaves (not one rail per leaf)"
    return out


def _leaf_rails(ends: list[RailEnd]) -> tuple[dict[str, int], set[str], dict[str, Counter[int]]]:
    """Each leaf's rail (the index most of its adapters have), the leaves that carry one rail (at
    least :data:`OPTIMISED_SHARE` of their adapters), and the counts."""
    by_leaf: dict[str, Counter[int]] = {}
    for e in ends:
        c = by_leaf.get(e.leaf)
        if c is None:
            c = by_leaf[e.leaf] = Counter()
        c[e.rail] += 1
    leaf_rail = {leaf: _majority(c) for leaf, c in by_leaf.items()}
    pure = {
        leaf
        for leaf, c in by_leaf.items()
        if c[leaf_rail[leaf]] >= OPTIMISED_SHARE * sum(c.values())
    }
    return leaf_rail, pure, by_leaf


def rails(fab: Fabric, names: Names, leaves: set[str] | None = None) -> Rails:
    ends, skipped = rail_ends(fab, names, leaves)
    per_host = Counter(e.host for e in ends)
    for host, n in per_host.items():
        if n < 2:
            skipped[host] = "one adapter on the fabric"
    ends = [e for e in ends if per_host[e.host] >= 2]
    paired = _paired(ends)
    skipped.update(paired)
    ends = [e for e in ends if e.host not in paired]
    leaf_rail, pure, _ = _leaf_rails(ends)
    ends = _renumber(ends, {k: v for k, v in leaf_rail.items() if k in pure})
    leaf_rail, pure, by_leaf = _leaf_rails(ends)
    mixed_hosts = {e.host: e.leaf for e in ends if e.leaf not in pure}
    for host, leaf in mixed_hosts.items():
        skipped[host] = f"an adapter on a leaf that mixes rails ({names.node(leaf)})"
    judged = [e for e in ends if e.host not in mixed_hosts]
    not_judged = tuple(sorted(skipped.items()))
    users = Counter(e.rail for e in judged)
    nrails = sum(1 for n in users.values() if n >= 2) or len(users)
    if paired and not ends:
        return Rails(
            (),
            {},
            False,
            f"not rail-optimised: {len(paired)} host(s) put two or more adapters on one leaf; rails not judged",
            not_judged=not_judged,
        )
    if len({e.rail for e in ends}) < 2:
        return Rails(tuple(ends), {}, None, None, not_judged=not_judged)
    placed = sum(1 for e in judged if e.rail == leaf_rail[e.leaf])
    if nrails < 2 or 2 * len(judged) < len(ends) or placed < OPTIMISED_SHARE * len(judged):
        mixed = max(by_leaf, key=lambda leaf: (len(by_leaf[leaf]), leaf))
        return Rails(
            tuple(ends),
            leaf_rail,
            False,
            f"not rail-optimised: {len(by_leaf) - len(pure)} of {len(by_leaf)} leaves carry several rails "
            f"({names.node(mixed)}: rails {', '.join(str(r) for r in sorted(by_leaf[mixed]))}); rails not judged",
            not_judged=not_judged,
        )
    bad = [e for e in judged if e.rail != leaf_rail[e.leaf]]
    moved = _moved(judged, leaf_rail, names)
    leaves_used = len({e.leaf for e in judged})
    if not bad:
        text = f"rail-optimised: {nrails} rails on {leaves_used} leaves, rail k of every host on a leaf of rail k"
        text += f"; {len(moved)} adapter(s) moved on their rail" if moved else ""
    else:
        text = f"rail-optimised with {len(bad)} adapter(s) on a leaf of another rail"
        text += f" and {len(moved)} moved on their rail" if moved else ""
    if not_judged:
        text += f"; {len(not_judged)} host(s) not judged"
    return Rails(
        tuple(ends),
        leaf_rail,
        True,
        text,
        _misplaced(bad, judged, leaf_rail, names),
        moved,
        not_judged,
    )


def _misplaced(
    bad: list[RailEnd], ends: list[RailEnd], leaf_rail: dict[str, int], names: Names
) -> tuple[Misplaced, ...]:
    expected = {e: _home(e, ends, leaf_rail) for e in bad}
    out = []
    for e in bad:
        home = expected[e]
        partner = next(
            (o for o in bad if o is not e and o.leaf == home and expected[o] == e.leaf), None
        )
        msg = (
            f"{e.host} {e.adapter} (rail {e.rail}) is cabled to {names.port(PortRef(e.leaf, e.port))}, "
            f"a leaf of rail {leaf_rail[e.leaf]}"
            + (
                f"; rail {e.rail} of its scalable unit is on {names.node(home)}"
                if home is not None
                else ""
            )
            + (
                f"; swapped with {partner.host} {partner.adapter} (rail {partner.rail}), "
                f"cabled to {names.port(PortRef(partner.leaf, partner.port))}"
                if partner is not None
                else ""
            )
        )
        out.append(Misplaced(e, names.subject(PortRef(e.ca, 1)), msg, e.rail, leaf_rail[e.leaf]))
    return tuple(out)


def _home(e: RailEnd, ends: list[RailEnd], leaf_rail: dict[str, int]) -> str | None:
    """The leaf of ``e``'s rail where most of its scalable unit's rail ``e.rail`` adapters are: its
    unit is the hosts that share its other leaves."""
    good = [o for o in ends if o.rail == leaf_rail[o.leaf]]
    mine = {o.leaf for o in good if o.host == e.host and o is not e}
    mates = {o.host for o in good if o.leaf in mine and o.host != e.host}
    votes = Counter(
        o.leaf for o in good if o.host in mates and o.rail == e.rail and leaf_rail[o.leaf] == e.rail
    )
    if not votes:
        return None
    return min(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _mode(values: list[_T]) -> tuple[_T, int, int]:
    """The most common of ``values`` (the first seen of equals, as ``Counter.most_common(1)``), how
    many times, and how many distinct values: a host's handful of adapters, counted without a
    Counter (560 hosts twice at Selene's size)."""
    counts: dict[_T, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    best, n = max(counts.items(), key=itemgetter(1))
    return best, n, len(counts)


def _unit_moves(good: list[RailEnd], names: Names) -> list[Moved]:
    """Adapters on their rail's leaf, but a leaf whose hosts are not the ones the host's other leaves
    share (another scalable unit's leaf of that rail)."""
    on_leaf: dict[str, set[str]] = {}
    for e in good:
        hosts = on_leaf.get(e.leaf)
        if hosts is None:
            hosts = on_leaf[e.leaf] = set()
        hosts.add(e.host)
    crowd = {leaf: frozenset(hs) for leaf, hs in on_leaf.items()}
    by_host: dict[str, list[RailEnd]] = {}
    for e in good:
        by_host.setdefault(e.host, []).append(e)
    out = []
    for host, mine in by_host.items():
        if len(mine) < 3:
            continue
        unit, n, _ = _mode([crowd[e.leaf] for e in mine])
        if n * 2 <= len(mine):
            continue
        for e in mine:
            other = crowd[e.leaf]
            if other == unit or len(other & unit) * 2 > len(unit):
                continue
            home = next(
                (x.leaf for x in good if x.rail == e.rail and x.host in unit and x.host != host),
                None,
            )
            where = f"; rail {e.rail} of its unit is on {names.node(home)}" if home else ""
            out.append(
                Moved(
                    e,
                    names.subject(PortRef(e.ca, 1)),
                    f"{e.host} {e.adapter} (rail {e.rail}) is cabled to {names.port(PortRef(e.leaf, e.port))}, a leaf of its rail but another unit's: its other adapters share leaves with other hosts{where}",
                    "unit",
                )
            )
    return out


def _moved(ends: list[RailEnd], leaf_rail: dict[str, int], names: Names) -> tuple[Moved, ...]:
    good = [e for e in ends if e.rail == leaf_rail[e.leaf]]
    out = _unit_moves(good, names)
    flagged = {m.end for m in out}
    by_host: dict[str, list[RailEnd]] = {}
    for e in good:
        by_host.setdefault(e.host, []).append(e)
    uniform = sum(1 for mine in by_host.values() if len({e.port for e in mine}) == 1)
    if not by_host or uniform < PORT_PATTERN_SHARE * len(by_host):
        return tuple(out)
    odd: list[tuple[RailEnd, int]] = []
    for mine in by_host.values():
        port, n, kinds = _mode([e.port for e in mine])
        if kinds == 1 or n * 2 <= len(mine):
            continue
        odd += [(e, port) for e in mine if e.port != port and e not in flagged]
    for e, port in odd:
        mate = next(
            (o for o, p in odd if o.leaf == e.leaf and o.port == port and p == e.port), None
        )
        swap = f"; swapped with {mate.host} {mate.adapter}, on port {mate.port}" if mate else ""
        out.append(
            Moved(
                e,
                names.subject(PortRef(e.ca, 1)),
                f"{e.host} {e.adapter} (rail {e.rail}) is cabled to {names.port(PortRef(e.leaf, e.port))}, where its "
                f"other adapters use port {port} of their rail's leaves ({uniform} of {len(by_host)} hosts keep one "
                f"port on every rail){swap}",
                "port",
            )
        )
    return tuple(out)
