"""The seam between the sweep's logic and its data path: :class:`PairRunner`, and a one-process driver.

A runner runs one pair test — rail k of node ``a`` against rail k of node ``b`` — and returns a
:class:`PairResult`: the bandwidth (and latency) measured, or the error and which rank did not answer.
The schedule (:mod:`ibdiag.sweep.schedule`) decides who meets whom; the analysis
(:mod:`ibdiag.sweep.analysis`) decides what the results mean; neither knows how a test runs;
:mod:`ibdiag.sweep.passes` drives a whole sweep through a runner in one process.

Runners:

* :class:`ibdiag.sweep.p2prunner.P2PPairRunner` — ibdiag's p2p per pair over RDMA or TCP, what the
  multi-node runtime (:mod:`ibdiag.sweep.distributed`) runs on each measuring rank;
* :class:`tests.support.synthetic_fabric.SyntheticFabric` — a named in-process fake with planted faults, for
  the scale tests and the benchmark only; it never stands in for a claim that a real fabric was measured.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Protocol

from ibdiag.errors import UsageError
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.schedule import PairTest, Phase

#: Message size of the bandwidth test: a job-sized bucket (DDP's default bucket is 25 MiB; 64 MiB
#: is where p2p bandwidth has long reached its plateau on 400G links, perftest/nccl-tests curves).
DEFAULT_BYTES = 64 * 2**20
#: ``--transport`` of a sweep: ``auto`` may fall back to TCP, ``rdma`` never does.
TRANSPORTS = ("rdma", "tcp", "auto")

#: Who can have measured a p2p pair test (:attr:`PairResult.engine`; ``bench p2p --engine``'s engines).
PAIR_ENGINES = ("ibdiag", "perftest")


@dataclass(frozen=True)
class PairSpec:
    """What each pair test measures (the same for every pair of a sweep)."""

    test: str = "p2p"
    """``p2p`` (ibdiag's bench p2p per pair) or ``collective`` (a 2-rank all_reduce per pair)."""
    transport: str = "rdma"
    """``rdma`` (per rail; a node without RDMA cannot run), ``tcp`` (the node's address) or ``auto``
    (RDMA where a node has it, else TCP: the fallback is a ``sweep.tcp_fallback`` finding). In a result:
    what ran (``rdma`` or ``tcp``)."""
    bytes: int = DEFAULT_BYTES
    mode: str = "bw"
    """``bw``, ``lat`` or ``both``."""
    duration_s: float = 1.0
    """Measured seconds per test (after the warm-up)."""
    timeout_s: float = 10.0
    """Longest wait on a peer: a node that does not answer within it is unreachable."""
    engine: str = "auto"
    """Who measures an RDMA pair (``bench p2p --engine``): ``ibdiag``, ``perftest`` (ib_write_bw/lat on
    both ends, started by the serving rank's server), or ``auto``: decided by the measuring node, as
    ``bench p2p`` decides (ibdiag where pyverbs loads, else perftest where it can run the test). What
    each test then used is its :attr:`PairResult.engine`."""

    transport_requested: str | None = None
    """``--transport`` as given when the result's :attr:`transport` differs from it (``auto``)."""

    def __post_init__(self) -> None:
        if self.test not in ("p2p", "collective"):
            raise UsageError(
                f"--test {self.test!r}: give p2p or collective",
                hint="p2p measures each link; collective runs a 2-rank all_reduce per pair",
            )
        if self.transport not in TRANSPORTS or self.transport_requested not in (None, *TRANSPORTS):
            raise UsageError(
                f"--transport {self.transport!r}: give rdma, tcp or auto",
                hint="rdma tests each rail; tcp the nodes' addresses; auto: rdma, else tcp",
            )
        if self.mode not in ("bw", "lat", "both"):
            raise UsageError(
                f"--mode {self.mode!r}: give bw, lat or both", hint="bw is what finds a slow link"
            )
        if self.engine not in ("auto", "ibdiag", "perftest"):
            raise UsageError(
                f"--engine {self.engine!r}: give auto, ibdiag or perftest",
                hint="auto: ibdiag's engine where pyverbs is installed, else perftest",
            )
        if self.engine == "perftest" and (
            self.test != "p2p" or self.duration_s != int(self.duration_s)
        ):
            raise UsageError(
                "--engine perftest runs p2p tests of whole seconds (perftest's -D)"
                if self.test == "p2p"
                else "--engine perftest applies to --test p2p",
                hint="give --duration in whole seconds (1 or more), or --engine ibdiag",
            )
        if not (isinstance(self.bytes, int) and 0 < self.bytes <= 2**34):
            raise UsageError(
                f"message size {self.bytes!r} B: give 1 B to 16 GiB", hint="the default is 64M"
            )
        for name, value in (("--duration", self.duration_s), ("--timeout", self.timeout_s)):
            if not (math.isfinite(value) and 0 < value <= 3600):
                raise UsageError(
                    f"{name} {value!r}: give seconds between 0 and 3600",
                    hint="e.g. --duration 1 --timeout 10",
                )

    def to_json(self) -> dict[str, object]:
        return {
            "test": self.test, "transport": self.transport, "bytes": self.bytes, "mode": self.mode,
            "duration_s": self.duration_s, "timeout_s": self.timeout_s, "engine": self.engine,
            "transport_requested": self.transport_requested or self.transport,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class PairResult:
    """What one pair test gave. Ranks, not objects: a 16384-node sweep holds hundreds of thousands."""

    round: int
    phase: Phase
    rail: int
    a: int
    """Rank that served."""
    b: int
    """Rank that connected and measured."""
    bw_gbs: float | None
    """Bandwidth in GB/s (1e9 B/s) at the sweep's message size; None when not measured or failed."""
    lat_us: float | None = None
    """One-way latency p50 in microseconds; None when not measured."""
    error: str | None = None
    """Why the test failed, when it did (both ends answered but the test did not work)."""
    unreachable: tuple[int, ...] = ()
    """Ranks that did not answer within the timeout (the test then says nothing about the link)."""
    engine: str | None = None
    """Who measured (or tried to) a p2p test on the measuring node: ``ibdiag`` (its own loops, RDMA or
    TCP) or ``perftest``; what ``--engine auto`` chose there. None for a test that never ran, a
    collective test, the synthetic fabric, and older files that cannot tell."""
    shared: bool = False
    """The test ran in a round with other tests that may have crossed a link of its path (the fabric
    not known, or not proven disjoint): a slow result is *confounded* — the collision may be what was
    measured — and is re-tested alone before anything is named (:mod:`~ibdiag.sweep.confirm`). False
    for a test alone in its round or in a round proven free of shared links."""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.unreachable


def unanswered(result: PairResult, dead: Collection[int]) -> PairResult:
    """A failed test with an end that went silent is that end's silence, not the link's failure."""
    if result.error is None or result.unreachable:
        return result
    silent = tuple(r for r in (result.a, result.b) if r in dead)
    return replace(result, unreachable=silent) if silent else result


class PairRunner(Protocol):
    """Runs one pair test between two nodes' rail ``test.rail`` and reports what happened.

    Implementations never raise for a failed or unanswered test: they return a :class:`PairResult`
    with ``error`` set, and ``unreachable`` naming the rank(s) that did not answer within
    ``spec.timeout_s``. An exception means the sweep itself cannot go on (exit 3).
    """

    def run_pair(
        self, test: PairTest, a: FleetNode, b: FleetNode, spec: PairSpec
    ) -> PairResult: ...
