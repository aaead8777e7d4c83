"""Who measures a p2p run, per kind: ibdiag's own loops, or a C tool driven through the control channel.

An engine measures some (transport, kind) pairs (:data:`MEASURES`): ibdiag's own loops all four,
perftest RDMA (``ib_*_bw``/``ib_*_lat``), iperf3 TCP bandwidth, sockperf TCP latency (``ping-pong``).
A request names the bandwidth's engine and, when it differs, the latency's
(:attr:`~ibdiag.bench.p2p.params.RunRequest.lat_engine`); each tool refuses what it cannot run, in its
own terms, when the request is built (:func:`engine_problem`, exit 2) — the bounds of the versions
tested (perftest 6.06, iperf3 3.12, sockperf 3.7).

``--engine auto`` (:func:`choose`) takes, per kind, the first engine of :data:`AUTO_ORDER` that both
ends have and that can run the request: the order is what measured faster in ``make bench``
(docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from ibdiag.units import format_bytes


class RunRequest(Protocol):
    """What is read here of :class:`ibdiag.bench.p2p.params.RunRequest` (which checks itself with
    :func:`engine_problem` when it is built, so this module sits below it)."""

    @property
    def transport(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def sizes(self) -> tuple[int, ...]: ...
    @property
    def iters(self) -> int | None: ...
    @property
    def duration_s(self) -> float | None: ...
    @property
    def warmup(self) -> int | None: ...
    @property
    def bidir(self) -> bool: ...
    @property
    def qps(self) -> int: ...
    @property
    def inline(self) -> int | None: ...
    @property
    def busy_poll_us(self) -> int | None: ...
    @property
    def kinds(self) -> tuple[str, ...]: ...
    @property
    def max_size(self) -> int: ...
    def engine_of(self, kind: str) -> str: ...


ENGINES = ("ibdiag", "perftest", "iperf3", "sockperf")

#: What each engine measures: (transport, kind) pairs.
MEASURES: dict[str, frozenset[tuple[str, str]]] = {
    "ibdiag": frozenset({("tcp", "bw"), ("tcp", "lat"), ("rdma", "bw"), ("rdma", "lat")}),
    "perftest": frozenset({("rdma", "bw"), ("rdma", "lat")}),
    "iperf3": frozenset({("tcp", "bw")}),
    "sockperf": frozenset({("tcp", "lat")}),
}

#: ``--engine auto``: per (transport, kind), the engines in the order they are tried. Measured in
#: ``make bench`` (docs/benchmarks.md): TCP bandwidth — ibdiag's receiver spends no more CPU per GB
#: than iperf3's and runs one thread per stream where iperf3 3.12 runs every stream in one; TCP
#: latency — ibdiag's ping-pong busy-polls where qperf and sockperf block (and sockperf cannot send
#: fewer than 14 bytes); RDMA bandwidth — ibdiag's post lists match ``ib_write_bw``; RDMA latency —
#: ``ib_write_lat``: ibdiag's loop carries the interpreter on its critical path (1.2-1.3 x
#: ``ib_write_lat`` in the Soft-RoCE guest, where the same loop in C is 1.02 x).
AUTO_ORDER: dict[tuple[str, str], tuple[str, ...]] = {
    ("tcp", "bw"): ("ibdiag", "iperf3"),
    ("tcp", "lat"): ("ibdiag", "sockperf"),
    ("rdma", "bw"): ("ibdiag", "perftest"),
    ("rdma", "lat"): ("perftest", "ibdiag"),
}

#: iperf3 3.12's largest ``-l`` ("block size too large (maximum = 1048576 bytes)").
IPERF3_MAX_SIZE = 2**20
#: sockperf 3.7's message sizes over TCP: at least its own header ("minimum default 14"), at most
#: what it sends in one datagram (65,507; larger sizes close the connection).
SOCKPERF_MIN_SIZE, SOCKPERF_MAX_SIZE = 14, 65507

#: perftest's own parser's bounds (perftest 6.06, ``perftest_parameters.c``): a request outside them
#: is refused here (exit 2) instead of by perftest after the connection. ``-s``: "Message Size should
#: be between 1 and 2147483647".
PERFTEST_MAX_SIZE = 2**31 - 1
#: ``-n``: "Iteration num should be between 5 and 100000000".
PERFTEST_MIN_ITERS, PERFTEST_MAX_ITERS = 5, 100_000_000
#: ``-I``: "Max inline should be between 0 and 912".
PERFTEST_MAX_INLINE = 912


def kinds_of(req: RunRequest, engine: str) -> tuple[str, ...]:
    """The kinds of ``req`` that ``engine`` measures."""
    return tuple(k for k in req.kinds if req.engine_of(k) == engine)


def measure_problem(req: RunRequest) -> str | None:
    """Why a kind of ``req`` has no engine that measures it (``--engine iperf3 --mode lat``), or None."""
    for kind in req.kinds:
        engine = req.engine_of(kind)
        if (req.transport, kind) in MEASURES[engine]:
            continue
        if not any(t == req.transport for t, _ in MEASURES[engine]):
            other = next(t for t, _ in sorted(MEASURES[engine]))
            return f"--engine {engine} applies to --transport {other}"
        if kind == "lat":
            return f"--engine {engine} does not measure {req.transport.upper()} latency: name the latency's engine after a comma (--engine {engine},ibdiag)"
        return f"--engine {engine} does not measure {req.transport.upper()} bandwidth: name the bandwidth's engine first (--engine ibdiag,{engine})"
    return None


def engine_problem(req: RunRequest) -> str | None:
    """Why ``req`` cannot run on the engines it names (no equivalent option, or outside a tool's bounds), or None.

    Checked when the request is built: by the client's command line (exit 2) and again by the
    server (an untrusted request).
    """
    problem = measure_problem(req)
    if problem:
        return problem
    for engine in ENGINES:
        kinds = kinds_of(req, engine)
        problem = tool_problem(req, engine, kinds) if kinds else None
        if problem:
            return problem
    return None


def tool_problem(req: RunRequest, engine: str, kinds: Sequence[str]) -> str | None:
    """Why ``engine`` cannot measure ``kinds`` of ``req`` within its own bounds, or None (ibdiag: None)."""
    if engine == "perftest":
        return perftest_problem(req, kinds)
    if engine == "iperf3":
        return iperf3_problem(req)
    if engine == "sockperf":
        return sockperf_problem(req)
    return None


def _whole_seconds(req: RunRequest, flag: str) -> str | None:
    d = req.duration_s
    if d is not None and (d != int(d) or d < 1):
        return f"--duration {d:g}: {flag} takes whole seconds (1 or more)"
    return None


def perftest_problem(req: RunRequest, kinds: Sequence[str] | None = None) -> str | None:
    """Why perftest cannot run ``kinds`` of ``req`` (all its kinds by default), or None."""
    kinds = req.kinds if kinds is None else tuple(kinds)
    if req.transport != "rdma":
        return "--engine perftest applies to --transport rdma"
    if req.warmup is not None:
        return "--warmup has no perftest equivalent (perftest warms up on its own); drop it with --engine perftest"
    problem = _whole_seconds(req, "perftest's -D")
    if problem:
        return problem
    if req.iters is not None and not PERFTEST_MIN_ITERS <= req.iters <= PERFTEST_MAX_ITERS:
        return (
            f"--iters {req.iters}: perftest's -n takes {PERFTEST_MIN_ITERS} to {PERFTEST_MAX_ITERS}"
        )
    if req.max_size > PERFTEST_MAX_SIZE:
        return f"a {format_bytes(req.max_size)} message is beyond perftest's -s limit of {PERFTEST_MAX_SIZE} bytes"
    if req.inline is not None and req.inline > PERFTEST_MAX_INLINE:
        return f"--inline {req.inline}: perftest's -I takes 0 to {PERFTEST_MAX_INLINE}"
    if "lat" in kinds and req.qps > 1:
        return '--qps above 1 with latency: perftest\'s latency tests use one queue pair ("Multiple QPs only available on bw tests")'
    if req.mode == "lat" and req.bidir:
        return "--bidir with --mode lat: perftest's -b is for bandwidth tests only"
    return None


def iperf3_problem(req: RunRequest) -> str | None:
    """Why iperf3 (3.12) cannot measure ``req``'s bandwidth, or None."""
    if req.warmup is not None:
        return "--warmup has no iperf3 equivalent (iperf3 measures from its first byte); drop it with --engine iperf3"
    problem = _whole_seconds(req, "iperf3's -t")
    if problem:
        return problem
    if req.max_size > IPERF3_MAX_SIZE:
        return f"a {format_bytes(req.max_size)} message is beyond iperf3's -l limit of 1 MiB"
    return None


def sockperf_problem(req: RunRequest) -> str | None:
    """Why sockperf (3.7) cannot measure ``req``'s latency, or None."""
    if req.warmup is not None:
        return "--warmup has no sockperf equivalent (sockperf warms up for 400 ms on its own); drop it with --engine sockperf"
    if req.iters is not None:
        return "--iters: sockperf's ping-pong runs for a time (-t), not a count; give --duration with --engine sockperf"
    problem = _whole_seconds(req, "sockperf's -t")
    if problem:
        return problem
    small = min(req.sizes)
    if small < SOCKPERF_MIN_SIZE or req.max_size > SOCKPERF_MAX_SIZE:
        return f"sockperf sends {SOCKPERF_MIN_SIZE} to {SOCKPERF_MAX_SIZE} bytes per message (its header is 14), not {small if small < SOCKPERF_MIN_SIZE else req.max_size}"
    if req.busy_poll_us:
        return "--busy-poll: sockperf blocks in recv (it has no busy-polling); give --busy-poll 0 or leave it out with --engine sockperf"
    return None


# --- --engine: what the flag says, and auto --------------------------------------------------------


def parse_engine(text: str) -> tuple[str, str | None] | None:
    """``--engine``: None for ``auto``; ``(engine, None)`` for one engine; ``(bandwidth's, latency's)``
    for two joined by a comma (``iperf3,sockperf``). ValueError naming the bad part."""
    parts = [p.strip().lower() for p in text.split(",")]
    if parts == ["auto"]:
        return None
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"--engine {text}: give one engine, or two joined by a comma")
    for p in parts:
        if p not in ENGINES:
            raise ValueError(
                f"--engine {text}: {p or '(empty)'} is not one of auto, {', '.join(ENGINES)}"
            )
    return parts[0], (parts[1] if len(parts) == 2 else None)


def choose(
    req: RunRequest,
    *,
    here: Callable[[str, str], bool],
    there: Collection[str] | None,
    ipv4: bool = True,
) -> tuple[str, str | None]:
    """``--engine auto`` for ``req``: (the bandwidth's engine, the latency's when it differs).

    ``here(engine, kind)``: can this host run ``engine`` for ``kind`` (its binaries, pyverbs);
    ``there``: the engines the server can run (its ``welcome``; None for a server too old to say:
    ibdiag's and perftest's only, as before). Per kind the first of :data:`AUTO_ORDER` both ends have
    and whose bounds the request fits; when none is, ibdiag's (whose own error then says what is
    missing). ``ipv4``: sockperf 3.7 takes IPv4 addresses only.
    """
    theirs = set(there) if there is not None else {"ibdiag", "perftest"}
    picked: dict[str, str] = {}
    for kind in req.kinds:
        picked[kind] = "ibdiag"
        for engine in AUTO_ORDER[(req.transport, kind)]:
            if engine not in theirs or not here(engine, kind):
                continue
            if engine == "sockperf" and not ipv4:
                continue
            if not tool_problem(req, engine, (kind,)):
                picked[kind] = engine
                break
    first = picked[req.kinds[0]]
    lat = picked.get("lat")
    return first, (lat if lat is not None and lat != first else None)
