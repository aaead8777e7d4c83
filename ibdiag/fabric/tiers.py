"""A tree's tiers from the switch graph's structure. Pure.

A fat tree's switch graph is levelled: every ISL joins adjacent tiers. The leaves are the bottom
level; the switches that carry hosts mark where it is, but not every leaf carries one yet (a fabric
under bring-up), and a host may hang off a higher tier (an SM or UFM server on a spine). So:

1. The leaves are the switches with a host link, plus every switch without one whose neighbours are
   all spines of one pod (switches above populated leaves, joined by the leaves they share): an empty
   leaf cabled like its populated peers -- unless it is a chip of a director whose other chips are
   those spines (a spine chip is cabled like that too). A core reaches the spines of several pods; in
   a three-tier tree of a single pod a core and an empty leaf look alike, and it is read as a leaf.
2. Each switch's tier is its distance in ISL hops from the nearest leaf (1 spine, 2 core, ...).
3. Where an ISL joins two switches of one tier, a switch with hosts cabled to another switch with
   hosts, with fewer host links than ISLs, is a spine with a server on it (an SM, UFM or management
   node): the tiers are taken again without it, fewest hosts per ISL first, while the switches left
   with hosts are a majority. If ISLs inside a tier remain, the fabric is not a tree of tiers, and no
   tier is invented.

Cables from a switch to itself (loopbacks) are not ISLs (:func:`ibdiag.fabric.shape.switch_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.fabric.graph import SwitchGraph


@dataclass(frozen=True)
class Tiering:
    tiers: dict[str, int]
    """Switch GUID -> tier (0 leaf)."""
    odd: tuple[tuple[str, str], ...]
    """ISLs inside a tier (GUID pairs): not a tree when any."""
    stray: tuple[str, ...] = ()
    """Switches above the leaves with hosts of their own (a server on a spine)."""
    empty: tuple[str, ...] = ()
    """Leaves without a host, placed by their uplinks."""


def _levels(
    g: SwitchGraph, leaves: list[str]
) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    tiers = g.distances(sorted(leaves))
    odd = tuple(
        sorted({(min(e.a, e.b), max(e.a, e.b)) for e in g.isls if tiers[e.a] == tiers[e.b]})
    )
    return tiers, odd


def _pods(g: SwitchGraph, populated: set[str]) -> dict[str, str]:
    """The switches above populated leaves, grouped: two are in one pod when a leaf reaches both."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for leaf in populated:
        ups = [n for n in g.neighbors(leaf) if n not in populated]
        for n in ups:
            parent.setdefault(n, n)
        for n in ups[1:]:
            parent[root(n)] = root(ups[0])
    return {x: root(x) for x in parent}


def empty_leaves(g: SwitchGraph, populated: set[str], box_of: dict[str, Any]) -> list[str]:
    """Switches without hosts cabled like leaves: every neighbour is a switch above populated leaves,
    all in one pod (a core reaches several), and none in the switch's own chassis (a director's
    spine chip is cabled to its line chips)."""
    pod = _pods(g, populated)
    found = []
    for s in g.nodes:
        if s in populated:
            continue
        mine = list(g.neighbors(s))
        if not mine or any(n in populated or n not in pod for n in mine):
            continue
        box = box_of.get(s)
        if box is not None and any(box_of.get(n) is box for n in mine):
            continue
        if len({pod[n] for n in mine}) == 1:
            found.append(s)
    return found


#: At most this many switches with hosts are tried as spines with a server on them.
MAX_STRAYS = 16


def _strays(
    g: SwitchGraph, hosts: dict[str, Any], populated: set[str], box_of: dict[str, Any]
) -> Tiering | None:
    """Take the switches with hosts that sit next to another switch with hosts, fewest hosts per ISL
    first, as spines with a server of their own, one at a time, while the others stay a majority."""
    candidates = sorted(
        (
            s
            for s in populated
            if len(hosts[s]) < g.degree(s) and any(n in populated for n in g.neighbors(s))
        ),
        key=lambda s: (len(hosts[s]) / max(g.degree(s), 1), -g.degree(s), s),
    )
    removed: list[str] = []
    for s in candidates[:MAX_STRAYS]:
        if 2 * (len(removed) + 1) >= len(populated):
            break
        removed.append(s)
        rest = populated - set(removed)
        empty = empty_leaves(g, rest, box_of)
        tiers, odd = _levels(g, [*rest, *empty])
        if not odd:
            return Tiering(tiers, odd, tuple(sorted(removed)), tuple(sorted(empty)))
    return None


def tiering(g: SwitchGraph, hosts: dict[str, Any], box_of: dict[str, Any]) -> Tiering | None:
    """The tiers, or None when no switch has a host (nothing marks the bottom)."""
    populated = {s for s in g.nodes if s in hosts}
    if not populated:
        return None
    empty = empty_leaves(g, populated, box_of)
    tiers, odd = _levels(g, [*populated, *empty])
    if odd:
        # A switch above the leaves with a host or two of its own (an SM or UFM server on a spine).
        fixed = _strays(g, hosts, populated, box_of)
        if fixed is not None:
            return fixed
    return Tiering(tiers, odd, (), tuple(sorted(empty)))
