"""Which engine measures each kind: ``--engine``'s forms, each tool's refusals in its own terms, and
``--engine auto``'s choice from what both ends have (pure: no sockets, no processes)."""

from __future__ import annotations

import pytest

from ibdiag.bench.p2p.command import with_engines
from ibdiag.bench.p2p.engines import AUTO_ORDER, choose, parse_engine
from ibdiag.bench.p2p.fields import RequestError
from ibdiag.bench.p2p.params import RunRequest


def tcp(**kw: object) -> RunRequest:
    base: dict[str, object] = {"transport": "tcp", "mode": "both", "sizes": (4096,)}
    base.update(kw)
    return RunRequest(**base)  # type: ignore[arg-type]


def rdma(**kw: object) -> RunRequest:
    return tcp(transport="rdma", **kw)


@pytest.mark.parametrize(
    "text,parsed",
    [
        ("auto", None),
        ("AUTO", None),
        ("ibdiag", ("ibdiag", None)),
        ("iperf3,sockperf", ("iperf3", "sockperf")),
        (" iperf3 , ibdiag ", ("iperf3", "ibdiag")),
    ],
)
def test_engine_flag_forms(text, parsed):
    assert parse_engine(text) == parsed


@pytest.mark.parametrize("text", ["nccl", "iperf3,", "a,b,c", "perftest;rm", ""])
def test_engine_flag_refuses_what_is_no_engine(text):
    with pytest.raises(ValueError, match="--engine"):
        parse_engine(text)


def test_two_engines_split_the_kinds_and_the_wire_carries_both():
    r = with_engines(tcp(), "iperf3,sockperf")
    assert (r.engine, r.lat_engine, r.engines) == (
        "iperf3",
        "sockperf",
        {"bw": "iperf3", "lat": "sockperf"},
    )
    assert RunRequest.from_json(r.to_json()) == r
    # one kind measured: the engine of that kind only, whatever else was named
    assert with_engines(tcp(mode="lat"), "iperf3,sockperf").engines == {"lat": "sockperf"}
    assert with_engines(tcp(mode="bw"), "iperf3,sockperf").engines == {"bw": "iperf3"}
    # a request without the new fields (an older client) reads as ibdiag for everything
    older = {k: v for k, v in tcp().to_json().items() if k not in ("lat_engine", "busy_poll_us")}
    assert RunRequest.from_json(older).engines == {"bw": "ibdiag", "lat": "ibdiag"}
    assert "lat_engine" not in tcp().to_json() and "busy_poll_us" not in tcp().to_json()


@pytest.mark.parametrize(
    "req_kw,engine,text",
    [
        ({}, "iperf3", "does not measure TCP latency: name the latency's engine after a comma"),
        ({}, "sockperf", "does not measure TCP bandwidth: name the bandwidth's engine first"),
        ({"transport": "rdma"}, "iperf3", "--engine iperf3 applies to --transport tcp"),
        ({}, "perftest", "--engine perftest applies to --transport rdma"),
        ({"mode": "bw", "sizes": (2**21,)}, "iperf3", "beyond iperf3's -l limit of 1 MiB"),
        ({"mode": "bw", "duration_s": 2.5}, "iperf3", "iperf3's -t takes whole seconds"),
        ({"mode": "bw", "warmup": 3}, "iperf3", "--warmup has no iperf3 equivalent"),
        ({"mode": "lat", "sizes": (8,)}, "sockperf", "sockperf sends 14 to 65507 bytes"),
        ({"mode": "lat", "sizes": (65536,)}, "sockperf", "not 65536"),
        ({"mode": "lat", "iters": 100}, "sockperf", "runs for a time (-t), not a count"),
        ({"mode": "lat", "busy_poll_us": 50}, "sockperf", "sockperf blocks in recv"),
    ],
)
def test_each_tool_refuses_what_it_cannot_run_in_its_own_terms(req_kw, engine, text):
    with pytest.raises(RequestError) as e:
        with_engines(tcp(**req_kw), engine)
    assert text in e.value.message and e.value.exit_status == 2
    assert "--engine ibdiag" in (e.value.hint or "")


def test_busy_poll_is_tcp_only_and_bounded():
    assert tcp().busy_poll_ns == 200_000 and tcp(busy_poll_us=0).busy_poll_ns == 0
    with pytest.raises(RequestError, match="--busy-poll applies to --transport tcp"):
        rdma(busy_poll_us=10)
    with pytest.raises(RequestError, match="--busy-poll"):
        tcp(busy_poll_us=-1)
    with pytest.raises(RequestError, match="a second --engine is the latency's"):
        tcp(mode="bw", lat_engine="sockperf")


def test_perftest_for_latency_alone_leaves_bandwidth_options_to_ibdiag():
    """``--bidir`` is perftest's -b for bandwidth only; with perftest measuring just the latency of a
    --mode both run, ibdiag's loops carry the bidirectional bandwidth and nothing is refused."""
    r = rdma(bidir=True, lat_engine="perftest")
    assert r.engines == {"bw": "ibdiag", "lat": "perftest"}
    with pytest.raises(RequestError, match="one queue pair"):
        rdma(qps=2, lat_engine="perftest")
    assert rdma(qps=2).engines == {"bw": "ibdiag", "lat": "ibdiag"}  # ibdiag's own lat: allowed


def _here(*have: str, pyverbs: bool = True):
    def here(engine: str, kind: str) -> bool:
        if engine == "ibdiag":
            return pyverbs
        return engine in have

    return here


ALL = ("ibdiag", "perftest", "iperf3", "sockperf")


@pytest.mark.parametrize(
    "req,here,there,ipv4,chosen",
    [
        # TCP: ibdiag's loops measured faster (AUTO_ORDER), whatever else is installed
        (tcp(), _here("iperf3", "sockperf"), ALL, True, ("ibdiag", None)),
        # RDMA: ibdiag's post lists for bandwidth, ib_write_lat for latency where both ends have it
        (rdma(), _here("perftest"), ALL, True, ("ibdiag", "perftest")),
        (rdma(mode="lat"), _here("perftest"), ALL, True, ("perftest", None)),
        (rdma(mode="bw"), _here("perftest"), ALL, True, ("ibdiag", None)),
        # the server has no perftest: ibdiag's for both
        (rdma(), _here("perftest"), ("ibdiag",), True, ("ibdiag", None)),
        # a server too old to say what it has: as before, perftest is allowed
        (rdma(), _here("perftest"), None, True, ("ibdiag", "perftest")),
        # no pyverbs here: perftest for both where it can run them
        (rdma(), _here("perftest", pyverbs=False), ALL, True, ("perftest", None)),
        # perftest cannot run the request (--warmup): ibdiag's, whose own error names pyverbs
        (rdma(warmup=3), _here("perftest", pyverbs=False), ALL, True, ("ibdiag", None)),
        # latency with --qps 2: not perftest's (one QP), so ibdiag's
        (rdma(qps=2), _here("perftest"), ALL, True, ("ibdiag", None)),
    ],
)
def test_auto_chooses_per_kind_from_both_ends(req, here, there, ipv4, chosen):
    assert choose(req, here=here, there=there, ipv4=ipv4) == chosen


def test_auto_order_names_an_engine_for_every_transport_and_kind():
    assert set(AUTO_ORDER) == {(t, k) for t in ("tcp", "rdma") for k in ("bw", "lat")}
    assert all("ibdiag" in order for order in AUTO_ORDER.values())
