"""A whole sweep in one process: plan, first pass, confirmation, second pass, analysis — through any
:class:`PairRunner`.

This is the order of work the multi-node runtime follows too (:mod:`~ibdiag.sweep.conduct` decides it
for both); here the rounds' tests run through the runner given, which is what the scale tests and the
benchmark need with the in-process synthetic fabric. A runner that also has ``run_round(tests, nodes,
spec)`` gets each round's tests at once (a fabric model in which the tests of a round share links).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from ibdiag.sweep.analysis import SweepConfig
from ibdiag.sweep.attribution import analyse
from ibdiag.sweep.conduct import Conductor, Passes, RoundDone
from ibdiag.sweep.layout import FabricLayout
from ibdiag.sweep.model import FabricUse, SweepResult, SweepSettings
from ibdiag.sweep.nodes import FleetNode, check_fleet
from ibdiag.sweep.runner import PairResult, PairRunner, PairSpec
from ibdiag.sweep.schedule import PairTest, Pattern, Phase, Round, pair_tests, round_count

__all__ = ["RoundDone", "RoundRunner", "build_result", "run_round", "run_sweep"]


@runtime_checkable
class RoundRunner(Protocol):
    """A runner that runs a round's tests together (they may share links)."""

    def run_round(
        self, tests: Sequence[PairTest], nodes: Sequence[FleetNode], spec: PairSpec
    ) -> list[PairResult]: ...


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
    tests = [
        t
        for t in pair_tests(round_index, phase, pairs, nodes)
        if t.a.rank not in dead and t.b.rank not in dead
    ]
    if isinstance(runner, RoundRunner):
        out = runner.run_round(tests, nodes, spec)
    else:
        out = [runner.run_pair(t, nodes[t.a.rank], nodes[t.b.rank], spec) for t in tests]
    for res in out:
        dead.update(r for r in res.unreachable if 0 <= r < len(nodes))
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
    layout: FabricLayout | None = None,
    on_round: Callable[[RoundDone], None] | None = None,
) -> SweepResult:
    """Plan (in leaf order and packed apart where ``layout`` is given), run the first pass, re-test
    alone what was slow beside other tests, re-test the suspects against known-good nodes, analyse."""
    fleet = check_fleet(nodes)
    pattern = Pattern(pattern)
    dead: set[int] = set()
    conductor = Conductor(
        fleet,
        config,
        layout,
        second_pass=second_pass,
        both_ways=spec.test == "collective",
        on_round=on_round,
        dead=lambda: dead,
    )

    def one(index: int, phase: Phase, pairs: Round) -> list[PairResult]:
        return run_round(runner, fleet, index, phase, pairs, spec, dead)

    passes = conductor.run(one, pattern, rounds=rounds, seed=seed)
    return build_result(
        fleet,
        passes,
        pattern=pattern,
        rounds=rounds,
        seed=seed,
        spec=spec,
        config=config,
        second_pass=second_pass,
        layout=layout,
    )


def build_result(
    fleet: Sequence[FleetNode],
    passes: Passes,
    *,
    pattern: Pattern,
    rounds: int | None,
    seed: int,
    spec: PairSpec,
    config: SweepConfig,
    second_pass: bool,
    layout: FabricLayout | None,
    results: Sequence[PairResult] | None = None,
) -> SweepResult:
    """The settings, nodes, results and their analysis, as one :class:`SweepResult` (every runtime's
    last step); ``results`` replaces the passes' own (the runtime's, once the silent are known)."""
    fleet = tuple(fleet)
    settings = SweepSettings(
        pattern=pattern,
        random_rounds=round_count(pattern, len(fleet), rounds)
        if pattern is Pattern.RANDOM
        else None,
        seed=seed,
        spec=spec,
        second_pass=second_pass,
        first_pass_rounds=passes.first_rounds,
        second_pass_rounds=passes.second_rounds,
        confirm_rounds=passes.confirm_rounds,
        pattern_rounds=passes.pattern_rounds,
        fabric=FabricUse.of(layout, passes.max_load),
    )
    pairs = tuple(passes.results if results is None else results)
    return SweepResult(settings, fleet, pairs, analyse(fleet, pairs, config))
