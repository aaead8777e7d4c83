"""What ``ibdiag sweep --plan`` shows: the chosen schedule, its first rounds, and every pattern's cost."""

from __future__ import annotations

from itertools import islice
from typing import Any

from ibdiag.sweep.schedule import DEFAULT_RANDOM_ROUNDS, Pattern, estimate, first_pass, pair_count

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
    round_overhead_s: float = 0.5,
) -> dict[str, Any]:
    """JSON-ready plan: the chosen pattern's cost and rounds (when small enough), and all patterns' costs."""
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
    listed = pair_count(Pattern(pattern), n, rounds) <= MAX_LISTED_PAIRS
    data: dict[str, Any] = {
        "plan": {**chosen.to_json(), "seed": seed if Pattern(pattern) is Pattern.RANDOM else None},
        "patterns": costs,
        "rounds": [
            [list(p) for p in r] for r in first_pass(Pattern(pattern), n, rounds=rounds, seed=seed)
        ]
        if listed
        else None,
    }
    data["first_rounds"] = (
        data["rounds"][:3]
        if listed
        else [
            [list(p) for p in r]
            for r in islice(first_pass(Pattern(pattern), n, rounds=rounds, seed=seed), 3)
        ]
    )
    return data


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
