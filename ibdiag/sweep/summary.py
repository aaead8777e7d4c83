"""The head lines of a sweep's table: what ran (pattern, nodes, rails, rounds of each pass, tests),
what the collisions cost and what the re-tests alone cleared, the fabric the rounds were kept apart
on, and each rail's typical link and limit. A pure function of the result (:mod:`~ibdiag.sweep.render`
shows it first)."""

from __future__ import annotations

from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.stats import gbs_text
from ibdiag.units import format_bytes


def _engine_text(result: SweepResult) -> str:
    """``, perftest`` / ``, ibdiag+perftest`` when perftest measured pairs (ibdiag's own engine, the usual one, goes unsaid)."""
    engine = result.engine
    return f", {engine}" if engine is not None and "perftest" in engine else ""


def summary_lines(result: SweepResult) -> list[str]:
    s, a = result.settings, result.analysis
    rounds = f"{s.first_pass_rounds} round{'s' if s.first_pass_rounds != 1 else ''}"
    if s.pattern_rounds is not None and s.pattern_rounds != s.first_pass_rounds:
        rounds += f" (the pattern's {s.pattern_rounds}, kept apart on the fabric)"
    second = f" + {s.second_pass_rounds} second-pass" if s.second_pass else " (no second pass)"
    second += f" + {s.confirm_rounds} re-test" if s.confirm_rounds else ""
    lines = [
        f"sweep: {s.pattern.value}, {len(result.nodes)} nodes, {result.rails} rail{'s' if result.rails != 1 else ''}, "
        f"{rounds}{second}, {len(result.pairs)} tests of {format_bytes(s.spec.bytes)} ({s.spec.test}, {s.spec.transport}{_engine_text(result)})",
    ]
    c = result.confirmation()
    if c["shared_tests"] or c["retests"]:
        lines.append(
            f"collisions: {c['shared_tests']} tests beside others that may share their links; "
            f"{c['retests']} re-tests alone: {c['links_cleared']} links, {c['nodes_cleared']} nodes cleared"
            + (f", {c['links_confounded']} links left confounded" if c["links_confounded"] else "")
        )
    if s.fabric is not None:
        load = (
            ""
            if s.fabric.max_load is None
            else f", at most {s.fabric.max_load} test(s) per link a round"
        )
        lines.append(f"fabric: {s.fabric.source} ({s.fabric.routing}){load}")
    for rail in a.rails:
        share = (
            f" = {rail.share:.0%} of {rail.line_rate_gbps:g} Gb/s" if rail.share is not None else ""
        )
        limit = (
            f", slow below {gbs_text(rail.bw_limit_gbs)}" if rail.bw_limit_gbs is not None else ""
        )
        median = gbs_text(rail.bw.median)
        lines.append(f"rail {rail.rail}: median {median}{share} over {rail.bw.count} links{limit}")
    return lines
