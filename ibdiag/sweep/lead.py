"""Rank 0's part of a multi-node sweep: every round planned (:mod:`~ibdiag.sweep.conduct`), handed out
through the store, the reports gathered and checked, the end written, the result built.

Split from :mod:`~ibdiag.sweep.distributed` (every rank's set-up and the worker's loop). Per round
rank 0 writes one key per live rank (``multi_set``), takes part itself, waits for every live rank's
report (a check of many keys per request) until the round's limit, and reads them in batches
(``multi_get``): a rank that did not report by then is unreachable and gets no more tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ibdiag.errors import CannotRunError, InputError
from ibdiag.sweep.conduct import Conductor, RoundDone
from ibdiag.sweep.coord import Coordinator
from ibdiag.sweep.job import SweepJob, round_limit_s
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.passes import build_result
from ibdiag.sweep.runner import PairResult, PairSpec, unanswered
from ibdiag.sweep.schedule import PairTest, Phase, Round, pair_tests
from ibdiag.sweep.wire import leave_out_silent, read_results


class TakesPart(Protocol):
    """Rank 0 as one of the ranks: it measures its own tests of a round like every other."""

    def take_part(self, task: dict[str, Any], round_index: int) -> None: ...


class Leader:
    """Rank 0 leading the sweep over ``nodes`` (every node, placeholders for the silent)."""

    def __init__(
        self,
        job: SweepJob,
        coord: Coordinator,
        nodes: tuple[FleetNode, ...],
        rank0: TakesPart,
        log: Callable[[str], None],
    ) -> None:
        self.job, self.coord, self.nodes, self.rank0, self.log = job, coord, nodes, rank0, log
        self.world = len(nodes)
        self.waited_s = 0.0
        """How long the last round's reports were waited for (what "did not report within" says)."""

    def lead(self, dead: set[int], on_round: Callable[[RoundDone], None] | None) -> SweepResult:
        job, fleet = self.job, self.nodes
        named: set[int] = set()
        layout = job.fabric.place(fleet) if job.fabric is not None else None
        conductor = Conductor(
            fleet,
            job.config,
            layout,
            second_pass=job.second_pass,
            both_ways=job.spec.test == "collective",
            on_round=on_round,
            dead=lambda: dead,
        )

        def one(index: int, phase: Phase, pairs: Round) -> list[PairResult]:
            return self.run_round(index, phase, pairs, dead, named)

        # A rank that went silent after it reported a round (it served, then died) is known only when a
        # later round misses it: the conductor counts the tests it failed earlier as its silence too.
        passes = conductor.run(one, job.pattern, rounds=job.rounds, seed=job.seed)
        end = conductor.index
        alive = [r for r in range(self.world) if r not in dead]
        self.coord.put_many([(f"round/{end}/{r}", {"end": True}) for r in alive])
        self.coord.put("end", True)
        self.coord.wait_all(
            [f"bye/{r}" for r in alive if r != 0],
            time.monotonic() + min(10.0, job.spec.timeout_s),
        )
        return build_result(
            fleet,
            passes,
            pattern=job.pattern,
            rounds=job.rounds,
            seed=job.seed,
            spec=self.used_spec(),
            config=job.config,
            second_pass=job.second_pass,
            layout=layout,
            results=[unanswered(p, dead) for p in passes.results],
        )

    def used_spec(self) -> PairSpec:
        """The spec as run: ``tcp`` for collective tests and when no node had an RDMA rail (``auto``'s
        TCP fallback), else ``rdma``; ``transport_requested`` says what was asked when it differs."""
        spec = self.job.spec
        if spec.transport == "tcp":
            return spec
        if spec.test == "collective":
            return replace(spec, transport="tcp")
        no_rdma = all(r.adapter is None for n in self.nodes for r in n.rails)
        ran = "tcp" if no_rdma else "rdma"
        return (
            spec
            if ran == spec.transport
            else replace(spec, transport=ran, transport_requested=spec.transport)
        )

    def run_round(
        self,
        i: int,
        phase: Phase,
        pairs: Sequence[tuple[int, int]],
        dead: set[int],
        named: set[int],
    ) -> list[PairResult]:
        collective = self.job.spec.test == "collective"
        tests = [
            t for t in pair_tests(i, phase, pairs, self.nodes) if not collective or t.rail == 0
        ]  # one all_reduce per node pair
        out, live = leave_out_silent(tests, dead, named)
        by_rank: dict[int, list[list[int]]] = {r: [] for r in range(self.world) if r not in dead}
        for t in live:
            by_rank[t.b.rank].append([t.rail, t.a.rank])
            if collective:  # both ends of an all_reduce take part; the higher rank reports
                by_rank[t.a.rank].append([t.rail, t.b.rank])
        reported, refused = self._run_tests(i, phase, by_rank, dead)
        out += [self._outcome(t, reported, refused) for t in live]
        # A test that failed because its server went silent this round is that node's silence: so
        # the passes planned from these results do not count it as a suspect link.
        out = [unanswered(p, dead) for p in out]
        named.update(r for p in out for r in p.unreachable)
        return out

    def _run_tests(
        self, i: int, phase: Phase, by_rank: dict[int, list[list[int]]], dead: set[int]
    ) -> tuple[dict[int, list[PairResult]], dict[int, str]]:
        """Hand every live rank its tests, take part as rank 0, wait for the round's reports until its
        limit: the results by rank, the refused reports' reasons; a rank that did not report is dead."""
        expect = len(by_rank)
        kind = phase.value
        self.coord.put_many(
            [
                (f"round/{i}/{r}", {"phase": kind, "expect": expect, "tests": tl})
                for r, tl in by_rank.items()
                if r != 0
            ]
        )
        started = time.monotonic()
        self.rank0.take_part({"phase": kind, "expect": expect, "tests": by_rank.get(0, [])}, i)
        # Complete when every live rank's own report is there: counted here, from the keys read.
        keys = {r: f"done/{i}/{r}" for r in by_rank}
        silent = set(
            self.coord.wait_all(list(keys.values()), started + round_limit_s(self.job.spec))
        )
        self.waited_s = time.monotonic() - started
        here = [r for r in by_rank if keys[r] not in silent]
        dead.update(r for r in by_rank if keys[r] in silent)
        reported: dict[int, list[PairResult]] = {}
        refused: dict[int, str] = {}
        for r, value in zip(here, self.coord.read_many([keys[r] for r in here]), strict=True):
            try:
                if isinstance(value, InputError):
                    raise value
                reported[r] = read_results(
                    value, i, phase, r, self.world, source=f"rank {r}'s results of round {i + 1}"
                )
            except (InputError, CannotRunError) as e:  # one rank's bad report fails its tests only
                refused[r] = e.message
                self.log(f"refused: {e.message}")
        return reported, refused

    def _outcome(
        self, t: PairTest, reported: dict[int, list[PairResult]], refused: dict[int, str]
    ) -> PairResult:
        """A live test's result: as its measuring rank reported it, else why there is none."""
        i, phase = t.round, t.phase
        got = [p for p in reported.get(t.b.rank, []) if p.rail == t.rail and p.a == t.a.rank]
        if got:
            return got[0]
        if t.b.rank in refused:
            return PairResult(
                i,
                phase,
                t.rail,
                t.a.rank,
                t.b.rank,
                None,
                error=f"report refused: {refused[t.b.rank]}"[:500],
            )
        if t.b.rank in reported:  # it reported the round, without this test
            why = f"rank {t.b.rank}'s report of round {i + 1} has no result for this test"
            return PairResult(i, phase, t.rail, t.a.rank, t.b.rank, None, error=why)
        why = f"rank {t.b.rank} did not report within {self.waited_s:.1f} s"
        return PairResult(
            i, phase, t.rail, t.a.rank, t.b.rank, None, error=why, unreachable=(t.b.rank,)
        )
