"""Rails: rail k is a host's adapter of NIC index k (from ``ibdiag topo -o json``), else the ``k`` of
its device name in the node description (``gpu03 mlx5_2`` is rail 2).

A rail-optimised fabric puts rail k of every host of a scalable unit on the same leaf: each leaf
carries one rail. A leaf's rail is the rail most of its host links carry; the fabric is said to be
rail-optimised when at least :data:`OPTIMISED_SHARE` of the host links sit on a leaf of their own
rail (else its leaves mix rails by design and nothing is misplaced). A misplaced adapter is told
where its rail belongs: the leaf of its rail that holds its scalable unit (the hosts that share its
other leaves), and the adapter that took its place when two cables are swapped.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ibdiag.fabric.hosts import HostEnd, Names
from ibdiag.fabric.model import Fabric, PortRef
from ibdiag.fabric.shape import host_links

OPTIMISED_SHARE = 0.75
_INDEX = re.compile(r"(\d+)$")


def rail_of(h: HostEnd) -> int | None:
    if h.nic_index is not None:
        return h.nic_index
    m = _INDEX.search(h.adapter)
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
class Rails:
    ends: tuple[RailEnd, ...]
    leaf_rail: dict[str, int]
    optimised: bool | None
    """None: one rail per host (nothing to judge)."""
    verdict: str | None
    misplaced: tuple[Misplaced, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "rail_optimised": self.optimised,
            "text": self.verdict,
            "leaf_rail": dict(sorted(self.leaf_rail.items())),
            "misplaced": [
                {"host": m.end.host, "adapter": m.end.adapter, "rail": m.rail, "leaf": m.end.leaf}
                for m in self.misplaced
            ],
        }


def rail_ends(fab: Fabric, names: Names) -> list[RailEnd]:
    out = []
    for leaf, ports in host_links(fab).items():
        for p in ports:
            assert p.peer is not None
            h = names.host(p.peer.guid)
            rail = rail_of(h) if h else None
            if h is not None and rail is not None:
                out.append(RailEnd(p.peer.guid, h.host, h.adapter, rail, leaf, p.port))
    return sorted(out, key=lambda e: (e.host, e.rail, e.adapter))


def rails(fab: Fabric, names: Names) -> Rails:
    ends = rail_ends(fab, names)
    if len({e.rail for e in ends}) < 2:
        return Rails(tuple(ends), {}, None, None)
    by_leaf: dict[str, Counter[int]] = {}
    for e in ends:
        by_leaf.setdefault(e.leaf, Counter())[e.rail] += 1
    leaf_rail = {
        leaf: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for leaf, c in by_leaf.items()
    }
    placed = sum(by_leaf[leaf][r] for leaf, r in leaf_rail.items())
    nrails = len({e.rail for e in ends})
    if placed < OPTIMISED_SHARE * len(ends):
        mixed = max(by_leaf, key=lambda leaf: (len(by_leaf[leaf]), leaf))
        return Rails(
            tuple(ends),
            leaf_rail,
            False,
            f"not rail-optimised: {len(by_leaf)} {'leaf carries' if len(by_leaf) == 1 else 'leaves carry'} {nrails} rails mixed "
            f"({names.node(mixed)}: rails {', '.join(str(r) for r in sorted(by_leaf[mixed]))})",
        )
    bad = [e for e in ends if e.rail != leaf_rail[e.leaf]]
    text = (
        f"rail-optimised: {nrails} rails on {len(by_leaf)} leaves, rail k of every host on a leaf of rail k"
        if not bad
        else f"rail-optimised with {len(bad)} adapter(s) on a leaf of another rail"
    )
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
    return Rails(tuple(ends), leaf_rail, True, text, tuple(out))


def _home(e: RailEnd, ends: list[RailEnd], leaf_rail: dict[str, int]) -> str | None:
    """The leaf of ``e``'s rail where most of its scalable unit's rail ``e.rail`` adapters are."""
    good = [o for o in ends if o.rail == leaf_rail[o.leaf]]
    mine = {o.leaf for o in good if o.host == e.host}
    mates = {o.host for o in good if o.leaf in mine and o.host != e.host}
    votes = Counter(
        o.leaf for o in good if o.host in mates and o.rail == e.rail and leaf_rail[o.leaf] == e.rail
    )
    if not votes:
        return None
    return min(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0]
