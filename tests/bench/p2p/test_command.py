"""``ibdiag bench serve`` and ``ibdiag bench p2p`` as libraries: ``serve_command.run(ServeRequest)`` in a
thread and ``command.run(P2PRequest)`` against it over loopback TCP, without the command line."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import pytest

from ibdiag.bench import views
from ibdiag.bench.p2p.command import P2PRequest, run
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.serve_command import ServeRequest, ServeResult
from ibdiag.bench.p2p.serve_command import run as serve
from ibdiag.config import load_config
from ibdiag.errors import CannotRunError, UsageError
from tests.support.p2p import LogLines, write_token

TCP = RunRequest(transport="tcp", mode="both", sizes=(4096, 65536), iters=20, warmup=1)


@dataclass
class Serving:
    port: int
    log: LogLines
    stop: threading.Event
    results: list[ServeResult] = field(default_factory=list)


@contextmanager
def serving(**fields: object) -> Iterator[Serving]:
    """``serve_command.run`` on 127.0.0.1 and a free port in a thread, until its stop event is set."""
    log, stop, listening = LogLines(), threading.Event(), threading.Event()
    where: list[tuple[str, int]] = []

    def on_listening(address: tuple[str, int]) -> None:
        where.append(address)
        listening.set()

    req = ServeRequest(
        bind="127.0.0.1", port=0, timeout_s=5.0, log=log, on_listening=on_listening, stop=stop
    )
    box = Serving(0, log, stop)
    t = threading.Thread(target=lambda: box.results.append(serve(replace(req, **fields))))  # type: ignore[arg-type]
    t.start()
    try:
        assert listening.wait(10), log.text()
        box.port = where[0][1]
        yield box
    finally:
        stop.set()
        t.join(10)
        assert not t.is_alive()


def test_a_served_run_measured_through_the_libraries():
    with serving() as s:
        events: list[tuple[int, int, str]] = []
        result = run(
            P2PRequest(
                host="127.0.0.1",
                run_request=TCP,
                port=s.port,
                timeout_s=5.0,
                on_progress=lambda done, total, label: events.append((done, total, label)),
            )
        )
        s.log.wait_for(r"done in")
    assert s.results == [ServeResult(0, ("127.0.0.1", s.port))]  # the stop event ended it
    assert s.log.lines[:3] == [
        f"listening on 127.0.0.1:{s.port} (tcp, rdma; up to 1 GiB per buffer; timeout 5 s)",
        "no token: accepting clients on this host (loopback) only; give --token-file or IBDIAG_TOKEN to serve other hosts",
        "serving one client at a time; Ctrl-C stops",
    ]
    (one,) = result.runs
    assert one.kind == "p2p" and [r.bytes for r in one.p2p_rows()] == [4096, 65536]
    assert all(r.bw_gbs is not None and r.bw_gbs > 0 and r.lat_us for r in one.p2p_rows())
    data = result.report.data
    assert (data["transport"], data["mode"], data["peer"]) == ("tcp", "both", f"127.0.0.1:{s.port}")
    assert result.report.findings == ()  # loopback has no line rate: nothing to judge against
    assert events[-1] == (4, 4, "done") and len(events) == 5
    out = views.outputs(result)
    assert out.png is not None and out.prom is None  # a chart; a benchmark is not a node metric


def test_the_line_rate_judges_the_best_bandwidth(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[p2p]\ntcp_severity = 'fail'\n")
    with serving() as s:
        result = run(
            P2PRequest(
                host="127.0.0.1",
                run_request=replace(TCP, mode="bw", sizes=(2**20,)),
                port=s.port,
                line_rate_gbps=999_999.0,
                config=load_config(cfg),
            )
        )
    (finding,) = result.report.findings
    assert finding.check == "bench.p2p_bandwidth" and finding.severity.value == "fail"
    assert finding.limit == pytest.approx(0.8 * 999_999.0) and "--line-rate-gbps" in finding.message


def test_once_serves_one_run_and_a_token_file_is_read(tmp_path):
    token = write_token(tmp_path / "tok", "abc-123")
    token.chmod(0o644)
    warnings: list[str] = []
    with serving(once=True, token_file=token, on_warning=warnings.append) as s:
        run(
            P2PRequest(
                host="127.0.0.1",
                run_request=replace(TCP, mode="bw"),
                port=s.port,
                environ={"IBDIAG_TOKEN": "abc-123"},
            )
        )
        s.log.wait_for(r"exiting after one run")
    assert s.results and s.results[0].exit_status == 0
    assert not any("no token" in line for line in s.log.lines)
    assert warnings == [
        f"token file {token} can be read by other users (mode 644); chmod 600 {token}"
    ]


def test_what_can_be_refused_is_refused_before_connecting(tmp_path):
    nobody = P2PRequest(host="127.0.0.1", run_request=TCP, port=9, timeout_s=1.0)
    for bad, text in (
        ({"device": "mlx5_0"}, "--device and --gid-index apply to --transport rdma"),
        ({"line_rate_gbps": 0.0}, "--line-rate-gbps 0 must be a positive rate"),
        ({"save": tmp_path / "missing" / "run.json"}, "does not exist"),
        ({"png": tmp_path / "missing" / "bw.png"}, "does not exist"),
    ):
        with pytest.raises(UsageError, match=text):
            run(replace(nobody, **bad))
    with pytest.raises(UsageError, match="--socket-buffer applies to --transport tcp"):
        run(replace(nobody, run_request=replace(TCP, transport="rdma"), socket_buffer=2**20))
    with pytest.raises(CannotRunError, match="nothing is listening"):
        run(nobody)


def test_serve_refuses_rdma_options_with_tcp_and_a_bad_transport():
    with pytest.raises(UsageError, match="apply to RDMA"):
        serve(ServeRequest(port=0, transport="tcp", device="mlx5_0"))
    with pytest.raises(UsageError, match="not one of any, tcp, rdma"):
        serve(ServeRequest(port=0, transport="udp"))


def test_the_perftest_engine_with_tcp_is_refused_before_connecting():
    nobody = P2PRequest(host="127.0.0.1", run_request=TCP, port=9, timeout_s=1.0)
    with pytest.raises(UsageError, match="--engine perftest applies to --transport rdma") as e:
        run(replace(nobody, engine="perftest"))
    assert e.value.hint == "add --transport rdma (perftest measures RDMA), or drop --engine"
    with pytest.raises(UsageError, match="--warmup has no perftest equivalent"):
        run(replace(nobody, run_request=replace(TCP, transport="rdma"), engine="perftest"))
