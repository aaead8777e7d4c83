"""The order of a sweep's work, the same in one process and across ranks: the pattern's rounds (in
leaf order and packed apart where the fabric is known), the confirmation of what was slow beside other
tests, the second pass, its confirmation.

The caller gives the way a round runs (:class:`RunRound`: in-process through a runner, or across ranks
through the store); this module decides which pairs meet in which round and which tests of a round
may have shared a link (``PairResult.shared``), and counts the rounds of each pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ibdiag.sweep.analysis import SweepConfig
from ibdiag.sweep.attribution import analyse
from ibdiag.sweep.contention import Packer, ordered_first_pass
from ibdiag.sweep.followup import confirmation_rounds, second_pass_plan
from ibdiag.sweep.layout import FabricLayout
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.runner import PairResult, unanswered
from ibdiag.sweep.schedule import NodePair, Pattern, Phase, Round, round_count

#: Times the confirmation is planned again after its re-tests (the rail's limits move as collided
#: results are replaced, so a link near them may turn confounded).
CONFIRM_ITERATIONS = 4


@dataclass(frozen=True)
class RoundDone:
    """Progress after a round (the progress line on rank 0)."""

    round: int
    rounds_planned: int
    """Rounds known so far (a later pass's are known once the one before is done)."""
    phase: Phase
    tests_done: int
    unreachable: tuple[int, ...]


class RunRound(Protocol):
    """Runs one round's pairs (every common rail) and returns their results."""

    def __call__(self, index: int, phase: Phase, pairs: Round) -> list[PairResult]: ...


@dataclass(frozen=True)
class Passes:
    """What a sweep ran: every result, and the rounds of each pass."""

    results: tuple[PairResult, ...]
    pattern_rounds: int
    """The pattern's own rounds (before packing them apart on the fabric)."""
    first_rounds: int
    second_rounds: int
    confirm_rounds: int
    max_load: int | None
    """The most flows on one link (or one leaf's uplinks one way) in any round, as the fabric's
    description sees it; None without one."""


class Conductor:
    """Plans and runs every pass through ``run_round`` (module docstring)."""

    def __init__(
        self,
        nodes: Sequence[FleetNode],
        config: SweepConfig,
        layout: FabricLayout | None,
        *,
        second_pass: bool = True,
        both_ways: bool = False,
        on_round: Callable[[RoundDone], None] | None = None,
        dead: Callable[[], set[int]] = set,
    ) -> None:
        self.nodes, self.config, self.second_pass = nodes, config, second_pass
        self.packer = Packer(nodes, layout, both_ways=both_ways)
        self.on_round, self.dead = on_round, dead
        self.results: list[PairResult] = []
        self.index = 0
        self.max_load: int | None = None

    def first_pass(self, pattern: Pattern, *, rounds: int | None, seed: int) -> list[Round]:
        planned = ordered_first_pass(
            pattern, self.nodes, self.packer.layout, rounds=rounds, seed=seed
        )
        return list(self.packer.rounds(planned))

    def _run(self, run_round: RunRound, phase: Phase, rounds: Sequence[Round]) -> None:
        end = self.index + len(rounds)
        for rnd in rounds:
            shared = self.packer.shared(rnd)
            load = self.packer.load(rnd)
            if load is not None:
                self.max_load = max(self.max_load or 0, load)
            got = run_round(self.index, phase, rnd)
            self.results += [_mark(p, shared) for p in got]
            if self.on_round:
                self.on_round(
                    RoundDone(self.index, end, phase, len(self.results), tuple(sorted(self.dead())))
                )
            self.index += 1

    def silenced(self) -> list[PairResult]:
        """The results so far, a failed test against a node now known silent counted as its silence
        (a node that died after it reported a round is known only once a later round misses it)."""
        dead = self.dead()
        self.results = [unanswered(p, dead) for p in self.results] if dead else self.results
        return self.results

    def confirm(self, run_round: RunRound, budget: int) -> int:
        """Re-test the confounded links until none is left, ``budget`` rounds at most; rounds run."""
        done = 0
        for _ in range(CONFIRM_ITERATIONS):
            if done >= budget:
                break
            analysis = analyse(self.nodes, self.silenced(), self.config)
            rounds = confirmation_rounds(analysis, self.packer)
            rounds = rounds[: budget - done]
            if not rounds:
                break
            self._run(run_round, Phase.CONFIRM, rounds)
            done += len(rounds)
        return done

    def run(
        self,
        run_round: RunRound,
        pattern: Pattern,
        *,
        rounds: int | None = None,
        seed: int = 0,
    ) -> Passes:
        """The whole sweep: first pass, confirmation, second pass, confirmation."""
        planned = self.first_pass(pattern, rounds=rounds, seed=seed)
        self._run(run_round, Phase.FIRST, planned)
        budget = self.config.confirm_max_rounds
        confirmed = self.confirm(run_round, budget)
        extra = (
            second_pass_plan(self.nodes, self.silenced(), self.config, self.packer)
            if self.second_pass
            else []
        )
        self._run(run_round, Phase.SECOND, extra)
        confirmed += self.confirm(run_round, budget - confirmed)
        return Passes(
            tuple(self.silenced()),
            round_count(pattern, len(self.nodes), rounds),
            len(planned),
            len(extra),
            confirmed,
            self.max_load,
        )


def _mark(p: PairResult, shared: set[NodePair]) -> PairResult:
    pair = (p.a, p.b) if p.a < p.b else (p.b, p.a)
    return replace(p, shared=True) if pair in shared and not p.shared else p
