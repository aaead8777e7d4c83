"""A whole sweep in one process: plan, first pass, second pass, analysis — through any :class:`PairRunner`.

This is the order of work the multi-node runtime follows too (every rank computes the same plan from
the pattern and seed; rank 0 gathers the results, plans the second pass and analyses); here the
rounds' tests simply run one after the other through the runner given, which is what the scale
tests and the benchmark need with the in-process synthetic fabric.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ibdiag.sweep.analysis import SweepConfig
from ibdiag.sweep.attribution import analyse, second_pass_plan
from ibdiag.sweep.model import SweepResult, SweepSettings
from ibdiag.sweep.nodes import FleetNode, check_fleet
from ibdiag.sweep.runner import PairResult, PairRunner, PairSpec
from ibdiag.sweep.schedule import Pattern, Phase, Round, first_pass, pair_tests, round_count


@dataclass(frozen=True)
class RoundDone:
    """Progress after a round (the progress line on rank 0)."""

    round: int
    rounds_planned: int
    """Rounds known so far (the second pass's are known once the first pass is done)."""
    phase: Phase
    tests_done: int
    unreachable: tuple[int, ...]


def run_round(
    runner: PairRunner,
    nodes: Sequence[FleetNode],
    round_index: int,
    phase: Phase,
    pairs: Round,
    spec: PairSpec,
    dead: set[int],
) -> list[PairResult]:
    """Run a round's rail tests, skipping nodes already known unreachable.

    A rank a result names unreachable joins ``dead`` and takes no further part in the sweep.
    """
    out: list[PairResult] = []
    for test in pair_tests(round_index, phase, pairs, nodes):
        if test.a.rank in dead or test.b.rank in dead:
            continue
        res = runner.run_pair(test, nodes[test.a.rank], nodes[test.b.rank], spec)
        dead.update(r for r in res.unreachable if 0 <= r < len(nodes))
        out.append(res)
    return out


def run_sweep(
    nodes: Sequence[FleetNode],
    runner: PairRunner,
    *,
    pattern: Pattern = Pattern.RING,
    rounds: int | None = None,
    seed: int = 0,
    spec: PairSpec = PairSpec(),
    config: SweepConfig = SweepConfig(),
    second_pass: bool = True,
    on_round: Callable[[RoundDone], None] | None = None,
) -> SweepResult:
    """Plan, run the first pass, re-test the suspects against known-good nodes, analyse."""
    fleet = check_fleet(nodes)
    pattern = Pattern(pattern)
    planned = list(first_pass(pattern, len(fleet), rounds=rounds, seed=seed))
    results: list[PairResult] = []
    dead: set[int] = set()
    for i, pairs in enumerate(planned):
        results += run_round(runner, fleet, i, Phase.FIRST, pairs, spec, dead)
        if on_round:
            on_round(RoundDone(i, len(planned), Phase.FIRST, len(results), tuple(sorted(dead))))
    first = len(planned)
    extra: list[Round] = second_pass_plan(fleet, results, config) if second_pass else []
    for j, pairs in enumerate(extra):
        results += run_round(runner, fleet, first + j, Phase.SECOND, pairs, spec, dead)
        if on_round:
            on_round(
                RoundDone(
                    first + j, first + len(extra), Phase.SECOND, len(results), tuple(sorted(dead))
                )
            )
    return build_result(
        fleet,
        results,
        pattern=pattern,
        rounds=rounds,
        seed=seed,
        spec=spec,
        config=config,
        second_pass=second_pass,
        first_rounds=first,
        second_rounds=len(extra),
    )


def build_result(
    fleet: Sequence[FleetNode],
    results: Sequence[PairResult],
    *,
    pattern: Pattern,
    rounds: int | None,
    seed: int,
    spec: PairSpec,
    config: SweepConfig,
    second_pass: bool,
    first_rounds: int,
    second_rounds: int,
) -> SweepResult:
    """The settings, nodes, results and their analysis, as one :class:`SweepResult` (every runtime's last step)."""
    fleet = tuple(fleet)
    settings = SweepSettings(
        pattern=pattern,
        random_rounds=round_count(pattern, len(fleet), rounds)
        if pattern is Pattern.RANDOM
        else None,
        seed=seed,
        spec=spec,
        second_pass=second_pass,
        first_pass_rounds=first_rounds,
        second_pass_rounds=second_rounds,
    )
    return SweepResult(settings, fleet, tuple(results), analyse(fleet, results, config))
