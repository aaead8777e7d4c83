"""The multi-node sweep: one process per node placed by the cluster's launcher, coordinated through
the job's rendezvous store (:mod:`~ibdiag.sweep.coord`), each pair measured over ibdiag's p2p.

Every rank, in order:

1. connects to the rendezvous store the launcher describes (``bench collective``'s launch detection:
   torchrun, srun, mpirun, a Kubernetes indexed Job running torchrun); rank 0 serves it unless the
   launcher's agent does;
2. takes the sweep's token from the store (rank 0 draws it), starts one p2p server per rail on its
   address (the one that routes to rank 0), and publishes host, address, rails and server ports;
3. rank 0 waits ``start_timeout_s`` for every node, publishes the fleet (a rank that never published
   is unreachable from the start), and plans (:mod:`~ibdiag.sweep.schedule`);
4. per round, rank 0 writes each rank its tests; each rank measures the pairs where it is the
   measuring end (all its rails at once), reports, and waits for the next round; rank 0 waits for
   every report until the round's limit (:func:`round_limit_s`): a rank that did not report by then is
   unreachable and gets no more tests, the sweep goes on for the rest;
5. rank 0 plans every round (:mod:`~ibdiag.sweep.conduct`: the pattern's, in leaf order and packed
   apart when the job has a fabric description, then the confirmation of what was slow beside other
   tests, the second pass, its confirmation), writes the end, analyses and returns the
   :class:`~ibdiag.sweep.model.SweepResult` (the others return None).

Nothing here prints: ``log`` takes the servers' lines, ``on_round`` the progress.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ibdiag.errors import CannotRunError, InputError, UsageError
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import LaunchEnv
from ibdiag.sweep.collrunner import pair_allreduce
from ibdiag.sweep.conduct import Conductor, RoundDone
from ibdiag.sweep.coord import Coordinator, connect_store, route_address
from ibdiag.sweep.job import SweepJob, round_limit_s
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.nodes import End, FleetNode, Rail, valid_host
from ibdiag.sweep.p2prunner import P2PPairRunner, RailServers, local_rails
from ibdiag.sweep.passes import build_result
from ibdiag.sweep.runner import PairResult, PairSpec
from ibdiag.sweep.schedule import PairTest, Phase, Round, pair_tests
from ibdiag.sweep.wire import (
    leave_out_silent,
    node_doc_ok,
    read_fleet_doc,
    read_results,
    refusal,
    refused_error,
    result_rows,
    unanswered,
)


class _Rank:
    def __init__(
        self,
        job: SweepJob,
        launch: LaunchEnv,
        coord: Coordinator,
        log: Callable[[str], None],
        hooks: TestHooks,
    ) -> None:
        self.job, self.launch, self.coord, self.log, self.hooks = job, launch, coord, log, hooks
        self.rank, self.world = launch.rank, launch.world_size
        self.servers: RailServers | None = None
        self.runner: P2PPairRunner | None = None
        self.token_bytes = b""
        self.address = ""
        self.waited_s = 0.0
        """How long rank 0 waited for the last round's reports (what "did not report within" says)."""
        self.fleet: tuple[FleetNode, ...] = ()

    # --- set-up ------------------------------------------------------------------------------------

    def token(self, deadline: float) -> bytes:
        value: object  # rank 0's own token; the others' is what the store holds, checked below
        if self.rank == 0:
            value = secrets.token_hex(32)
            self.coord.put("token", value)
        else:
            value = self.coord.wait_value("token", deadline)
            if not isinstance(value, str) or not 32 <= len(value) <= 256:
                raise CannotRunError(
                    f"rank {self.rank}: no sweep token from rank 0 in the store within {self.job.start_timeout_s:g} s",
                    hint="did rank 0 start? is another job using the same rendezvous port?",
                )
        return value.encode()

    def publish(self, token: bytes) -> None:
        job = self.job
        address = route_address(self.launch.master_addr, self.launch.master_port)
        self.address, self.token_bytes = address, token
        ports: list[int] = []
        if (
            job.spec.test == "collective"
        ):  # gloo between the nodes' addresses: one TCP rail, no p2p servers
            rails, _ = local_rails("tcp", address, None, job.sysfs)
        else:
            try:
                rails, fallback = local_rails(job.spec.transport, address, job.adapters, job.sysfs)
            except CannotRunError as e:  # --transport rdma without RDMA: the whole sweep stops
                self.refuse(e)
                raise
            if fallback:
                self.log(fallback)
            self.servers = RailServers(
                address,
                rails,
                token,
                job.spec.bytes,
                job.spec.timeout_s,
                self.log,
                job.sysfs,
                job.perftest_path,
            )
            ports = self.servers.start()
        host = socket.gethostname().split(".")[0]
        node = FleetNode(
            self.rank, host if valid_host(host) else f"rank{self.rank}", address, rails
        )
        self.coord.put(f"node/{self.rank}", {**node.to_json(), "ports": ports})

    def refuse(self, e: CannotRunError) -> None:
        """This node cannot take part as asked: say so in the store, so rank 0 stops the sweep."""
        host = socket.gethostname().split(".")[0]
        why = f"{host if valid_host(host) else f'rank{self.rank}'}: {e.message}"
        self.coord.put(f"node/{self.rank}", {"rank": self.rank, "refused": why})
        if self.rank == 0:
            self.stop_all([why])
        else:
            self.coord.put(f"bye/{self.rank}", 1)

    def stop_all(self, why: list[str]) -> None:
        """Rank 0: publish the refusal as the fleet and wait (start_timeout_s at most) until every
        other rank has read it: rank 0 holds the store, and leaving at once would hide the reason."""
        self.coord.put("fleet", {"refused": why})
        deadline = time.monotonic() + self.job.start_timeout_s
        for r in range(1, self.world):
            self.coord.wait_for(f"bye/{r}", deadline)

    def gather_fleet(self, deadline: float) -> set[int]:
        """Rank 0: every node's description (placeholders for the silent), published as ``fleet``;
        a node that refused (``--transport rdma`` without RDMA) stops the sweep on every rank."""
        nodes: list[dict[str, Any]] = []
        ports: list[list[int]] = []
        missing: list[int] = []
        refused: list[str] = []
        for r in range(self.world):
            try:
                doc = self.coord.wait_value(f"node/{r}", deadline)
            except InputError as e:  # not JSON, or beyond the budget: that rank is left out
                self.log(f"refused: rank {r}'s description: {e.message}")
                doc = None
            if (why := refusal(doc)) is not None:
                refused += why
            elif node_doc_ok(doc, r, collective=self.job.spec.test == "collective", log=self.log):
                nodes.append({k: doc.get(k) for k in ("rank", "host", "address", "rails")})
                ports.append(doc["ports"])
            else:
                missing.append(r)
                nodes.append(FleetNode(r, f"rank{r}", "unknown", (Rail(0, None),)).to_json())
                ports.append([])
        if refused:
            self.stop_all(refused)
            raise refused_error(refused)
        self.coord.put("fleet", {"nodes": nodes, "ports": ports, "missing": missing})
        return set(missing)

    def read_fleet(self, deadline: float) -> set[int]:
        doc = self.coord.wait_value("fleet", deadline)
        if doc is None:
            raise CannotRunError(
                f"rank {self.rank}: rank 0 did not publish the fleet within {self.job.start_timeout_s:g} s",
                hint="check rank 0's output",
            )
        if (why := refusal(doc)) is not None:
            self.coord.put(f"bye/{self.rank}", 1)
            raise refused_error(why)
        self.fleet, table, missing = read_fleet_doc(doc)
        self.runner = P2PPairRunner(
            table,
            self.token_bytes,
            sysfs=self.job.sysfs,
            perftest_path=self.job.perftest_path,
        )
        return missing

    # --- a round, on every rank ---------------------------------------------------------------------

    def measure(
        self, tests: Sequence[Sequence[Any]], round_index: int, phase: Phase
    ) -> list[PairResult]:
        """This rank's measuring ends of a round (``[rail, serving rank]``), every rail at once."""
        assert self.runner is not None
        me = self.fleet[self.rank]
        out: list[PairResult | None] = [None] * len(tests)

        def one(i: int, rail: int, peer: int) -> None:
            a = self.fleet[peer]
            test = PairTest(
                round_index,
                phase,
                End(peer, rail, a.rails[rail].adapter),
                End(self.rank, rail, me.rails[rail].adapter),
            )
            out[i] = self.runner.run_pair(test, a, me, self.job.spec)  # type: ignore[union-attr]  # asserted above; not narrowed in a closure

        threads = [
            threading.Thread(target=one, args=(i, int(t[0]), int(t[1])), daemon=True)
            for i, t in enumerate(tests)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [r for r in out if r is not None]

    def take_part(self, task: dict[str, Any], round_index: int) -> None:
        self.hooks.before_step(self.rank, round_index + 1)
        phase = next((p for p in Phase if p.value == task.get("phase")), Phase.FIRST)
        tests = [
            t
            for t in task.get("tests", [])
            if isinstance(t, list) and len(t) == 2 and all(isinstance(x, int) for x in t)
        ]
        tests = [
            t
            for t in tests
            if 0 <= t[1] < len(self.fleet)
            and t[1] != self.rank
            and 0 <= t[0] < min(len(self.fleet[t[1]].rails), len(self.fleet[self.rank].rails))
        ]
        if self.job.spec.test == "collective":
            results = []
            for _, peer in tests:
                a, b = min(self.rank, peer), max(self.rank, peer)
                res = pair_allreduce(
                    self.coord.store,
                    self.address,
                    round_index,
                    phase,
                    a,
                    b,
                    self.rank,
                    self.job.spec,
                )
                results += [res] if res is not None else []
        else:
            results = self.measure(tests, round_index, phase)
        self.coord.report(round_index, self.rank, result_rows(results))

    def worker_loop(self) -> None:
        limit = 2 * round_limit_s(self.job.spec) + self.job.start_timeout_s
        i = 0
        while True:
            key = f"round/{i}/{self.rank}"
            # "end" too: a rank rank 0 stopped waiting for (it reported too late) gets no more rounds
            found = self.coord.wait_any([key, "end"], time.monotonic() + limit)
            if found is None:
                raise CannotRunError(
                    f"rank {self.rank}: rank 0 gave no work for round {i + 1} within {limit:g} s",
                    hint="rank 0 or the rendezvous store is gone; check rank 0's output",
                )
            try:
                task = self.coord.read(found)
            except InputError as e:  # not JSON: no tests to take part in, but this rank answers
                self.log(f"refused: {e.message}")
                task = {"tests": []}
            if found == "end" or not isinstance(task, dict) or task.get("end") is True:
                self.coord.put(f"bye/{self.rank}", 1)
                return
            self.take_part(task, i)
            i += 1

    # --- rank 0 ------------------------------------------------------------------------------------

    def lead(self, dead: set[int], on_round: Callable[[RoundDone], None] | None) -> SweepResult:
        job, fleet = self.job, self.fleet
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

        # A rank that went silent after it reported a round (it served, then died) is known only after
        # the first pass: the tests it failed earlier are its silence too, not failed links.
        passes = conductor.run(
            one,
            job.pattern,
            rounds=job.rounds,
            seed=job.seed,
            after_first=lambda results: [unanswered(p, dead) for p in results],
        )
        end = conductor.index
        alive = [r for r in range(self.world) if r not in dead]
        self.coord.put_many([(f"round/{end}/{r}", {"end": True}) for r in alive])
        self.coord.put("end", True)
        bye_deadline = time.monotonic() + min(10.0, job.spec.timeout_s)
        for r in alive:
            if r != 0:
                self.coord.wait_for(f"bye/{r}", bye_deadline)
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
        no_rdma = all(r.adapter is None for n in self.fleet for r in n.rails)
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
            t for t in pair_tests(i, phase, pairs, self.fleet) if not collective or t.rail == 0
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
        # the second pass, planned from these results, does not count it as a suspect link.
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
        self.take_part({"phase": kind, "expect": expect, "tests": by_rank.get(0, [])}, i)
        # Complete when every live rank's own report is there: counted here, from the keys read.
        silent = self.coord.wait_all(
            [f"done/{i}/{r}" for r in by_rank if r != 0], started + round_limit_s(self.job.spec)
        )
        self.waited_s = time.monotonic() - started
        reported: dict[int, list[PairResult]] = {}
        refused: dict[int, str] = {}
        for r in by_rank:
            key = f"done/{i}/{r}"
            if key not in silent:
                try:
                    reported[r] = read_results(
                        self.coord.read(key),
                        i,
                        phase,
                        r,
                        len(self.fleet),
                        source=f"rank {r}'s results of round {i + 1}",
                    )
                except (
                    InputError,
                    CannotRunError,
                ) as e:  # one rank's bad report fails its tests, not the sweep
                    refused[r] = e.message
                    self.log(f"refused: {e.message}")
            else:
                dead.add(r)
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


def run_distributed(
    job: SweepJob,
    launch: LaunchEnv,
    *,
    log: Callable[[str], None] = lambda line: None,
    on_round: Callable[[RoundDone], None] | None = None,
    hooks: TestHooks | None = None,
) -> SweepResult | None:
    """This rank's part of the sweep; rank 0 returns the result, every other rank None.

    Raises ibdiag errors: UsageError for a job that cannot be a sweep (one node), CannotRunError (exit 3)
    when the store cannot be reached or rank 0 went away.
    """
    if launch.world_size < 2:
        raise UsageError(
            f"a sweep needs at least 2 nodes; this job has {launch.world_size} rank",
            hint="start one ibdiag sweep per node: srun -N 2 ..., torchrun --nnodes 2 ...",
        )
    store = connect_store(launch, max(job.start_timeout_s, job.spec.timeout_s))
    coord = Coordinator(store, launch.world_size)
    rank = _Rank(job, launch, coord, log, hooks or TestHooks())
    deadline = time.monotonic() + job.start_timeout_s
    try:
        token = rank.token(deadline)
        rank.publish(token)
        if launch.rank == 0:
            dead = rank.gather_fleet(deadline)
        dead = rank.read_fleet(time.monotonic() + job.start_timeout_s + 5.0)
        if launch.rank != 0:
            rank.worker_loop()
            return None
        return rank.lead(dead, on_round)
    finally:
        if rank.servers is not None:
            rank.servers.close()
