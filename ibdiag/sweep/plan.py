"""What ``ibdiag sweep --plan`` shows: the chosen schedule, its first rounds, and every pattern's cost;
with a fabric description, the rounds as the sweep would keep them apart, and the most tests it
expects on one link in a round (:func:`contention_data`).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from typing import Any

from ibdiag.sweep.contention import Packer, ordered_first_pass
from ibdiag.sweep.coord import poll_interval_s
from ibdiag.sweep.layout import HASHED, ROUTES, FabricDescription
from ibdiag.sweep.nodes import FleetNode, Rail, check_fleet
from ibdiag.sweep.schedule import (
    DEFAULT_RANDOM_ROUNDS,
    Pattern,
    estimate,
    first_pass,
    pair_count,
    round_count,
)

#: Pairs up to which ``-o json`` lists every round of the plan (a 1024-node pairwise plan has 523776).
MAX_LISTED_PAIRS = 100_000


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def plan_data(
    pattern: str,
    n: int,
    *,
    rounds: int | None,
    seed: int,
    rails: int,
    pair_s: float,
    round_overhead_s: float | None = None,
    fabric: FabricDescription | None = None,
) -> dict[str, Any]:
    """JSON-ready plan: the chosen pattern's cost and rounds (when small enough), all patterns' costs,
    and ``contention``: what the rounds know of the fabric (:func:`contention_data`); with ``fabric``
    the chosen pattern's rounds and cost are the rounds kept apart on it."""
    if fabric is not None:
        n = len(plan_fleet(fabric, n))
    if round_overhead_s is None:
        round_overhead_s = coordination_s(n, rails)
    chosen = estimate(
        Pattern(pattern),
        n,
        rails=rails,
        rounds=rounds,
        pair_s=pair_s,
        round_overhead_s=round_overhead_s,
    )
    costs = [
        estimate(
            p,
            n,
            rails=rails,
            rounds=(rounds or DEFAULT_RANDOM_ROUNDS) if p is Pattern.RANDOM else None,
            pair_s=pair_s,
            round_overhead_s=round_overhead_s,
        ).to_json()
        for p in Pattern
    ]
    contention = contention_data(Pattern(pattern), n, rounds=rounds, seed=seed, fabric=fabric)
    packed = contention.pop("listed")
    if fabric is not None:
        chosen = replace(chosen, rounds=contention["rounds"])
        listed: list[Any] | None = packed
    elif pair_count(Pattern(pattern), n, rounds) <= MAX_LISTED_PAIRS:
        listed = [
            [list(p) for p in r] for r in first_pass(Pattern(pattern), n, rounds=rounds, seed=seed)
        ]
    else:
        listed = None
    data: dict[str, Any] = {
        "plan": {**chosen.to_json(), "seed": seed if Pattern(pattern) is Pattern.RANDOM else None},
        "patterns": costs,
        "rounds": listed,
        "contention": contention,
    }
    data["first_rounds"] = (
        listed[:3]
        if listed is not None
        else [
            [list(p) for p in r]
            for r in islice(first_pass(Pattern(pattern), n, rounds=rounds, seed=seed), 3)
        ]
    )
    return data


#: Rank 0's work per round for each rank's report (read, parsed, checked), and per rail row of it:
#: measured by benchmarks/sweep_store.py on the 2-core development VM (1.7 s for 16384 one-rail
#: reports, 6.9 s for 16384 eight-rail ones; docs/fleet.md).
REPORT_S = 60e-6
ROW_S = 50e-6


def coordination_s(n: int, rails: int) -> float:
    """Seconds a round's coordination adds to its test, as measured on loopback (docs/fleet.md): the
    workers' poll interval (a rank sees its task within it) and rank 0 reading every report;
    0.5 s at the least."""
    return round(max(0.5, poll_interval_s(n) + n * (REPORT_S + ROW_S * max(1, rails))), 2)


def plan_fleet(fabric: FabricDescription, n: int | None = None) -> tuple[FleetNode, ...]:
    """The described hosts as a sweep's nodes (name order; each adapter a rail, in name order); the
    first ``n`` of them when given. What ``--plan --fabric`` plans for without a job."""
    hosts: dict[str, list[str]] = {}
    for host, adapter in sorted(fabric.seats):
        hosts.setdefault(host, []).append(adapter)
    names = sorted(hosts)[:n] if n is not None else sorted(hosts)
    return check_fleet(
        [
            FleetNode(r, h, h, tuple(Rail(k, a, 1) for k, a in enumerate(hosts[h])))
            for r, h in enumerate(names)
        ]
    )


def contention_data(
    pattern: Pattern,
    n: int,
    *,
    rounds: int | None,
    seed: int,
    fabric: FabricDescription | None,
) -> dict[str, Any]:
    """What the rounds know of the fabric: without one, nothing (every test beside another may share
    a link; a slow one is re-tested alone); with one, the pattern over the described hosts in leaf
    order, packed apart: the rounds, the rounds that adds, and the most tests on one link in a round."""
    pattern_rounds = round_count(pattern, n, rounds)
    if fabric is None:
        return {
            "fabric": None,
            "routing": None,
            "proven": False,
            "pattern_rounds": pattern_rounds,
            "rounds": pattern_rounds,
            "max_link_load": None,
            "listed": None,
        }
    nodes = plan_fleet(fabric, n)
    layout = fabric.place(nodes)
    packer = Packer(nodes, layout)
    packed = list(
        packer.rounds(ordered_first_pass(pattern, nodes, layout, rounds=rounds, seed=seed))
    )
    listed = sum(len(r) for r in packed) <= MAX_LISTED_PAIRS
    return {
        "fabric": fabric.source,
        "routing": fabric.routing,
        "proven": fabric.routing == ROUTES or (fabric.routing == HASHED and fabric.two_tier),
        "pattern_rounds": pattern_rounds,
        "rounds": len(packed),
        "max_link_load": max((packer.load(r) or 0 for r in packed), default=0),
        "listed": [[list(p) for p in r] for r in packed] if listed else None,
    }


def plan_lines(data: dict[str, Any], *, rails_given: bool) -> list[str]:
    """The plan as text lines for a terminal."""
    p = data["plan"]
    lines = [
        f"plan: {p['pattern']}, {p['nodes']} nodes x {p['rails']} rail{'s' if p['rails'] != 1 else ''}"
        + ("" if rails_given else " (give --rails to count yours)")
        + f": {p['rounds']} round{'s' if p['rounds'] != 1 else ''}, {p['pairs']} pair tests ({p['rail_tests']} rail tests)"
        + f", then a second pass of about {p['second_pass_rounds']} rounds for the suspects",
        f"wall time: ({p['rounds']} + {p['second_pass_rounds']}) rounds x ({p['pair_s']:g} s per pair test + {p['round_overhead_s']:g} s per round)"
        f" = {_duration(p['wall_s'])}; every pair of a round runs at once, every rail of a pair too",
        "",
    ]
    c = data.get("contention")
    if c is not None and c["fabric"] is None:
        lines.append(
            "collisions: no fabric given, so any two tests of a round may share a link; a slow result "
            "beside others is re-tested alone (one round each) before anything is named"
        )
    elif c is not None:
        lines.append(
            f"fabric: {c['fabric']} ({c['routing']}): the pattern's {c['pattern_rounds']} rounds run as "
            f"{c['rounds']} kept apart; at most {c['max_link_load']} test(s) on one link in a round"
            + (
                " (proven)"
                if c["proven"]
                else " (routes assumed: slow results beside others re-tested alone)"
            )
        )
    lines.append("")
    for i, rnd in enumerate(data["first_rounds"]):
        shown = " ".join(f"{a}-{b}" for a, b in rnd[:12])
        more = f" ... ({len(rnd)} pairs)" if len(rnd) > 12 else ""
        lines.append(f"round {i + 1}: {shown}{more}")
    lines += ["", f"{'pattern':<10} {'rounds':>8} {'pair tests':>12} {'wall time':>10}"]
    for c in data["patterns"]:
        lines.append(
            f"{c['pattern']:<10} {c['rounds'] + c['second_pass_rounds']:>8} {c['pairs']:>12} {_duration(c['wall_s']):>10}"
        )
    return lines
