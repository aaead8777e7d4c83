"""The multi-node sweep: one process per node placed by the cluster's launcher, coordinated through
the job's rendezvous store (:mod:`~ibdiag.sweep.coord`), each pair measured over ibdiag's p2p.

Every rank, in order:

1. connects to the rendezvous store the launcher describes (``bench collective``'s launch detection:
   torchrun, srun, mpirun, a Kubernetes indexed Job running torchrun); rank 0 serves it unless the
   launcher's agent does;
2. takes the sweep's token from the store (rank 0 draws it), starts one p2p server per rail on its
   address (the one that routes to rank 0), and publishes host, address, rails and server ports;
3. rank 0 waits ``start_timeout_s`` for every node and publishes the fleet's size and the ranks that
   never published (unreachable from the start); the others read a peer's own description when they
   first test against it, not every node's (16384 nodes x 8 rails are 9 MiB: more than the store
   takes in one value, and 150 GB if every rank read them);
4. per round, rank 0 writes each rank its tests; each rank measures the pairs where it is the
   measuring end (all its rails at once), reports, and waits for the next round; rank 0 waits for
   every report until the round's limit (:func:`round_limit_s`): a rank that did not report by then is
   unreachable and gets no more tests, the sweep goes on for the rest;
5. rank 0 (:mod:`~ibdiag.sweep.lead`) plans every round (:mod:`~ibdiag.sweep.conduct`: the pattern's, in leaf order and packed
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
from typing import Any

from ibdiag.errors import CannotRunError, InputError, UsageError
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import LaunchEnv
from ibdiag.sweep.collrunner import pair_allreduce
from ibdiag.sweep.conduct import RoundDone
from ibdiag.sweep.coord import Coordinator, connect_store, route_address
from ibdiag.sweep.job import SweepJob, round_limit_s
from ibdiag.sweep.lead import Leader
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.nodes import End, FleetNode, Rail, valid_host
from ibdiag.sweep.p2prunner import P2PPairRunner, RailServers, local_rails
from ibdiag.sweep.runner import PairResult
from ibdiag.sweep.schedule import PairTest, Phase
from ibdiag.sweep.wire import read_fleet_doc, read_node_doc, refusal, refused_error, result_rows


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
        self.nodes: tuple[FleetNode, ...] = ()
        """Rank 0: every node of the sweep (the others know only those they test against)."""
        self.known: dict[int, FleetNode] = {}
        """This node and the peers it read (:meth:`peer`)."""
        self.ports: dict[int, list[int]] = {}
        """Rank -> its p2p servers' ports, one per rail (what this rank's client connects to)."""
        self.size = self.world
        self.missing: set[int] = set()

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
        self.known[self.rank], self.ports[self.rank] = node, ports
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
        """Rank 0: every node's description (placeholders for the silent), and the fleet's size and
        its silent ranks published as ``fleet``; a node that refused (``--transport rdma`` without
        RDMA) stops the sweep on every rank."""
        keys = [f"node/{r}" for r in range(self.world)]
        silent = set(self.coord.wait_all(keys, deadline))
        here = [r for r in range(self.world) if keys[r] not in silent]
        docs = dict(zip(here, self.coord.read_many([keys[r] for r in here]), strict=True))
        nodes: list[FleetNode] = []
        missing: list[int] = []
        refused: list[str] = []
        collective = self.job.spec.test == "collective"
        for r in range(self.world):
            doc = docs.get(r)
            if isinstance(doc, InputError):  # not JSON, or beyond the budget: that rank is left out
                self.log(f"refused: rank {r}'s description: {doc.message}")
                doc = None
            if (why := refusal(doc)) is not None:
                refused += why
                continue
            got = read_node_doc(doc, r, collective=collective, log=self.log)
            if got is None:
                missing.append(r)
                nodes.append(FleetNode(r, f"rank{r}", "unknown", (Rail(0, None),)))
            else:
                nodes.append(got[0])
                self.ports[r] = got[1]
        if refused:
            self.stop_all(refused)
            raise refused_error(refused)
        self.nodes = tuple(nodes)
        self.coord.put("fleet", {"size": self.world, "missing": missing})
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
        self.size, missing = read_fleet_doc(doc)
        self.missing = missing
        self.runner = P2PPairRunner(
            self.ports,
            self.token_bytes,
            sysfs=self.job.sysfs,
            perftest_path=self.job.perftest_path,
        )
        return missing

    def peer(self, r: int) -> FleetNode | None:
        """A node this rank tests against: rank 0's list, or (the others) its own description in the
        store, read and checked the first time it is needed."""
        if r in self.known:
            return self.known[r]
        if self.nodes:
            return self.nodes[r] if 0 <= r < len(self.nodes) else None
        if not 0 <= r < self.size or r in self.missing:
            return None
        try:
            doc = self.coord.read(f"node/{r}")
        except InputError as e:
            self.log(f"refused: rank {r}'s description: {e.message}")
            return None
        got = read_node_doc(doc, r, collective=self.job.spec.test == "collective", log=self.log)
        if got is None:
            return None
        self.known[r], self.ports[r] = got
        return got[0]

    # --- a round, on every rank ---------------------------------------------------------------------

    def measure(
        self, tests: Sequence[Sequence[Any]], round_index: int, phase: Phase
    ) -> list[PairResult]:
        """This rank's measuring ends of a round (``[rail, serving rank]``), every rail at once."""
        assert self.runner is not None
        me = self.known[self.rank]
        out: list[PairResult | None] = [None] * len(tests)
        peers = {int(t[1]): self.peer(int(t[1])) for t in tests}

        def one(i: int, rail: int, peer: int) -> None:
            a = peers[peer]
            assert a is not None  # take_part keeps only tests against known peers
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
        me = self.known[self.rank]
        tests = [
            t
            for t in tests
            if t[1] != self.rank
            and (peer := self.peer(t[1])) is not None
            and 0 <= t[0] < min(len(peer.rails), len(me.rails))
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
        return Leader(job, coord, rank.nodes, rank, log).lead(dead, on_round)
    finally:
        if rank.servers is not None:
            rank.servers.close()
