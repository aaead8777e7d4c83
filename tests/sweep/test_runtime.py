"""The sweep's runtime without namespaces (no root needed): real ``ibdiag sweep`` processes on this host
as a Slurm-style job over loopback, rank 0 serving the rendezvous store itself; what travels between
ranks checked as untrusted; the progress line. The multi-"node" job with planted faults is
tests/sweep/test_netns.py.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from ibdiag.errors import InputError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.sweep.distributed import round_limit_s
from ibdiag.sweep.passes import RoundDone
from ibdiag.sweep.progress import eta_s, progress_line
from ibdiag.sweep.runner import PairResult, PairSpec
from ibdiag.sweep.schedule import Phase
from ibdiag.sweep.wire import read_results, result_rows, unanswered
from tests.support.sweep import free_port, slurm_env


@pytest.mark.slow
def test_a_three_rank_slurm_job_on_loopback_sweeps_every_ring_pair(ibdiag_exe, tmp_path):
    port = free_port()
    args = [
        ibdiag_exe,
        "sweep",
        "--transport",
        "tcp",
        "--sizes",
        "64K",
        "--duration",
        "0.2",
        "--timeout",
        "5",
        "-o",
        "json",
    ]
    # --save is rank 0's: on the other nodes the directory need not exist (here it does not)
    saves = [
        tmp_path / "sweep.json",
        tmp_path / "only-on-the-head-node" / "sweep.json",
        tmp_path / "only-on-the-head-node" / "sweep.json",
    ]
    procs = [
        subprocess.Popen(
            [*args, "--save", str(saves[r])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=slurm_env(r, 3, port),
        )
        for r in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    # Rank 0 exits 1 only for its judgement (a loopback link starved on a loaded 2-core machine can
    # be judged slow; judgement has its own tests): this test is the plumbing, every pair swept.
    assert codes[1:] == [0, 0] and codes[0] in (0, 1), [o[1] for o in outs]
    assert outs[1] == ("", "") and outs[2] == ("", "")  # only rank 0 prints
    # stderr is no terminal here (plain srun, a batch log): rank 0 says each round on a line of its own
    rounds = [ln for ln in outs[0][1].splitlines() if ln.startswith("ibdiag: sweep: round ")]
    assert rounds and rounds[0].startswith("ibdiag: sweep: round 1/3"), outs[0][1]
    assert "\x1b" not in outs[0][1] and "\r" not in outs[0][1]
    doc = json.loads(outs[0][0])
    assert doc["schema"] == "ibdiag.sweep/1"
    assert [n["rank"] for n in doc["nodes"]] == [0, 1, 2] and all(
        n["address"] == "127.0.0.1" for n in doc["nodes"]
    )
    assert (
        doc["sweep"]["transport"] == "tcp" and doc["sweep"]["first_pass_rounds"] == 3
    )  # an odd ring: 3 rounds
    # the ring's own rounds; a pair that loopback noise made look slow is re-tested in a second pass
    pairs = sorted((r[3], r[5]) for r in doc["pairs"]["rows"] if r[1] == "first")
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    assert all(
        r[7] is not None and r[7] > 0 and r[9] is None for r in doc["pairs"]["rows"]
    )  # measured, no error
    assert (
        all(r[11] == "ibdiag" for r in doc["pairs"]["rows"]) and doc["sweep"]["engine"] == "ibdiag"
    )  # TCP: ibdiag's own engine
    assert doc["sweep"]["engine_requested"] == "auto"
    if codes[0] == 0:
        assert {n["status"] for n in doc["nodes"]} == {"ok"}
    else:
        failing = [f["check"] for f in doc["findings"] if f["severity"] == "fail"]
        assert failing and all(c.startswith("sweep.") for c in failing), failing
    saved = json.loads(saves[0].read_text())
    assert saved["pairs"] == doc["pairs"] and not saves[1].parent.exists()


def test_a_rank_without_its_rank_0_gives_up_with_exit_3(ibdiag_exe, tmp_path):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[sweep]\nstart_timeout_s = 1\n")
    port = free_port()
    r = subprocess.run(
        [ibdiag_exe, "sweep", "--transport", "tcp", "--timeout", "1", "--config", str(cfg)],
        capture_output=True,
        text=True,
        env=slurm_env(1, 2, port),
        timeout=60,
    )
    assert r.returncode == 3, r.stderr
    assert "rank 1: cannot reach the rendezvous store at 127.0.0.1" in r.stderr
    assert "Traceback" not in r.stderr


def test_reported_results_are_checked_before_rank_0_uses_them():
    good = [
        PairResult(4, Phase.FIRST, 0, 1, 3, 12.5),
        PairResult(4, Phase.FIRST, 1, 1, 3, None, error="nothing is listening"),
    ]
    rows = result_rows(good)
    assert read_results(json.loads(json.dumps(rows)), 4, Phase.FIRST, 3, 6, source="rank 3") == good
    for bad, message in (
        (
            [[0, 1, 2, 12.5, None, None, None]],
            "rows[0][2]: 2 is outside 3..3",
        ),  # a result for a test another rank measured
        ([[0, 3, 3, 12.5, None, None, None]], "cannot be tested against itself"),
        ([[0, 9, 3, 12.5, None, None, None]], "rows[0][1]: 9 is outside 0..5"),
        ([[0, 1, 3, -1, None, None, None]], "rows[0][3]"),
        ([[0, 1, 3, 1.0, None, "two\nlines", None]], "non-printable"),
        ([[0, 1, 3]], "must be [rail, a, b, bw_gbs, lat_us, error, engine]"),
        ({"rows": []}, "must be a list"),
        ([[0, 1, 3, 1.0, None, None, None]] * 65, "more than the 64 allowed"),
    ):
        with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
            read_results(bad, 4, Phase.FIRST, 3, 6, source="rank 3")


def test_a_failed_test_with_a_silent_end_is_that_ends_silence():
    failed = PairResult(1, Phase.FIRST, 0, 1, 5, None, error="connection reset")
    assert unanswered(failed, {1}).unreachable == (1,)
    assert unanswered(failed, {2}) is failed  # both ends answered: the link's failure
    measured = PairResult(1, Phase.FIRST, 0, 1, 5, 3.0)
    assert unanswered(measured, {1}) is measured  # a measurement made before it died stands


def test_round_limit_and_progress_line():
    assert round_limit_s(PairSpec(duration_s=1.0, timeout_s=3.0)) == 6.0
    assert round_limit_s(PairSpec(mode="both", duration_s=1.0, timeout_s=3.0)) == 9.0
    done = RoundDone(1, 4, Phase.FIRST, 6, (3,))
    assert eta_s(done, 10.0) == 10.0
    assert (
        progress_line(done, 10.0)
        == "sweep: round 2/4 (first pass), 6 tests done, 1 unreachable, 10.0 s elapsed, ETA 10 s + second pass"
    )
    last = RoundDone(5, 6, Phase.SECOND, 11, ())
    assert (
        progress_line(last, 12.0)
        == "sweep: round 6/6 (second pass), 11 tests done, 12.0 s elapsed, ETA 0 s"
    )


def test_coordinator_waits_are_bounded_and_values_are_json():
    import datetime
    import time

    dist = pytest.importorskip("torch.distributed")

    from ibdiag.sweep.coord import Coordinator, poll_interval_s

    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=5), wait_for_workers=False
    )
    c = Coordinator(dist.PrefixStore("t", store), 4)
    t0 = time.monotonic()
    assert c.wait_value("absent", time.monotonic() + 0.3) is None
    assert 0.25 <= time.monotonic() - t0 < 2.0
    c.put_many([("a", {"x": 1}), ("b", [1, 2])])
    assert c.read("a") == {"x": 1} and c.missing(["a", "b", "c"]) == ["c"]
    for r in range(2):
        c.report(0, r, [])
    assert c.wait_all([f"done/0/{r}" for r in range(3)], time.monotonic() + 0.1) == ["done/0/2"]
    store.set("t/junk", b"\xff\xfe")  # PrefixStore("t") writes t/<key>
    with pytest.raises(InputError, match="does not hold JSON"):
        c.read("junk")
    assert poll_interval_s(6) == 0.02 and poll_interval_s(16384) == 1.0


DGX_DEVICES = [f"mlx5_{i}" for i in range(12)]


def test_rails_are_the_gpus_ports_in_nic_order_and_fall_back_to_tcp(fixture_root):
    """The RDMA device list is the one boundary given here (no RDMA stack on this machine)."""
    from ibdiag.errors import CannotRunError, UsageError
    from ibdiag.sweep.p2prunner import local_rails

    root = SysfsRoot(fixture_root("dgx-h100"))
    rails, note = local_rails("rdma", "127.0.0.1", None, root, rdma_devices=lambda: DGX_DEVICES)
    # topo's GPU-nearest ports: the eight compute NICs, not the two storage NICs (mlx5_4, mlx5_5)
    assert [r.adapter for r in rails] == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_2",
        "mlx5_3",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
        "mlx5_9",
    ]
    assert (
        [r.index for r in rails] == list(range(8))
        and {r.rate_gbps for r in rails} == {400.0}
        and note is None
    )
    given, _ = local_rails(
        "rdma", "127.0.0.1", ["mlx5_3", "mlx5_0"], root, rdma_devices=lambda: DGX_DEVICES
    )
    assert [(r.index, r.adapter) for r in given] == [(0, "mlx5_3"), (1, "mlx5_0")]

    def no_stack() -> list[str]:
        raise CannotRunError("pyverbs is not installed")

    tcp, note = local_rails("auto", "127.0.0.1", None, root, rdma_devices=no_stack)
    assert [r.adapter for r in tcp] == [
        None
    ] and note == "RDMA is not usable (pyverbs is not installed): testing over TCP"
    # asked for rdma and cannot have it: exit 3 with the reason, never TCP
    with pytest.raises(CannotRunError, match=r"--transport rdma: RDMA is not usable \(pyverbs"):
        local_rails("rdma", "127.0.0.1", None, root, rdma_devices=no_stack)
    with pytest.raises(CannotRunError, match="--transport rdma: no RDMA adapter on this node"):
        local_rails("rdma", "127.0.0.1", None, SysfsRoot(fixture_root("vm-no-rdma")))
    with pytest.raises(UsageError, match="--rails: no adapter mlx5_77 on this node"):
        local_rails("rdma", "127.0.0.1", ["mlx5_77"], root, rdma_devices=lambda: DGX_DEVICES)
    with pytest.raises(CannotRunError, match="libibverbs cannot open mlx5_9"):
        local_rails("rdma", "127.0.0.1", ["mlx5_9"], root, rdma_devices=lambda: DGX_DEVICES[:4])
    assert (
        local_rails("auto", "127.0.0.1", None, SysfsRoot(fixture_root("vm-no-rdma")))[1]
        == "no RDMA adapter: testing over TCP"
    )
    assert local_rails("tcp", "127.0.0.1", None, root) == ((tcp[0],), None)


def test_a_pair_against_a_closed_port_is_a_failed_result_not_an_exception():
    import socket

    from ibdiag.sweep.nodes import End, make_fleet
    from ibdiag.sweep.p2prunner import P2PPairRunner
    from ibdiag.sweep.schedule import PairTest

    with socket.socket() as s:  # a port nothing listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        nodes = make_fleet(["a", "b"], [None], addresses=["127.0.0.1", "127.0.0.1"])
        runner = P2PPairRunner({0: [port], 1: [port]}, b"t" * 32)
        res = runner.run_pair(
            PairTest(3, Phase.SECOND, End(0, 0, None), End(1, 0, None)),
            nodes[0],
            nodes[1],
            PairSpec(transport="tcp", bytes=4096, duration_s=0.1, timeout_s=2),
        )
    assert (res.round, res.phase, res.a, res.b, res.bw_gbs) == (3, Phase.SECOND, 0, 1, None)
    assert res.error and "127.0.0.1" in res.error and res.unreachable == ()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (dict(engine="nccl"), "--engine 'nccl': give auto, ibdiag or perftest"),
        (dict(engine="perftest", duration_s=0.5), "whole seconds"),
        (dict(engine="perftest", test="collective"), "applies to --test p2p"),
    ],
)
def test_an_engine_the_pair_tests_cannot_run_is_a_usage_error(spec, message):
    from ibdiag.errors import UsageError

    with pytest.raises(UsageError) as e:
        PairSpec(**spec)
    assert message in e.value.message


def _pair_without_rxe0(tmp_path):
    """A two-node RDMA pair on loopback whose sysfs tree has no rxe0 (perftest installed): the runner,
    the pair's test and the nodes."""
    import shutil

    from ibdiag.sweep.nodes import End, make_fleet
    from ibdiag.sweep.p2prunner import P2PPairRunner
    from ibdiag.sweep.schedule import PairTest

    if shutil.which("ib_write_bw") is None:
        pytest.fail("perftest is not installed (make system-deps)")
    (tmp_path / "sys" / "class" / "infiniband").mkdir(parents=True)
    nodes = make_fleet(["a", "b"], ["rxe0"], addresses=["127.0.0.1", "127.0.0.1"])
    runner = P2PPairRunner(
        {0: [free_port()], 1: [free_port()]}, b"t" * 32, sysfs=SysfsRoot(tmp_path)
    )
    test = PairTest(0, Phase.FIRST, End(0, 0, "rxe0"), End(1, 0, "rxe0"))
    return runner, test, nodes


def test_an_rdma_pair_on_perftest_goes_through_perftest_and_fails_as_one_result(tmp_path):
    """This host has perftest but no RDMA device: the pair's request goes to the perftest engine (no
    warm-up: perftest warms up itself), which finds no port — one failed result, not an exception."""
    from ibdiag.sweep.p2prunner import P2PPairRunner

    runner, test, nodes = _pair_without_rxe0(tmp_path)
    res = runner.run_pair(
        test,
        nodes[0],
        nodes[1],
        PairSpec(transport="rdma", bytes=4096, duration_s=1, timeout_s=2, engine="perftest"),
    )
    assert res.bw_gbs is None and res.error == "no RDMA device named rxe0 with that port", (
        res.error
    )  # sysfs, not pyverbs: the perftest path
    assert res.engine == "perftest"  # the engine that tried, recorded with its failure
    empty = P2PPairRunner(
        {0: [1]}, b"t" * 32, perftest_path=str(tmp_path)
    )  # a PATH without perftest
    res = empty.run_pair(
        test,
        nodes[0],
        nodes[1],
        PairSpec(transport="rdma", bytes=4096, duration_s=1, timeout_s=2, engine="perftest"),
    )
    assert res.error and "ib_write_bw is not installed" in res.error, res.error
    assert res.engine == "perftest"


def test_auto_records_what_this_node_chose_per_pair(tmp_path):
    """``--engine auto`` is decided by the measuring node: the pair records that node's choice (here:
    ibdiag's engine where pyverbs loads, else perftest, which is installed), never "auto"."""
    from ibdiag.bench.p2p.perftest.engine import pyverbs_available

    runner, test, nodes = _pair_without_rxe0(tmp_path)
    res = runner.run_pair(
        test,
        nodes[0],
        nodes[1],
        PairSpec(transport="rdma", bytes=4096, duration_s=1, timeout_s=2, engine="auto"),
    )
    assert res.error and res.engine == ("ibdiag" if pyverbs_available() else "perftest"), (
        res.error,
        res.engine,
    )


def test_the_engine_of_each_pair_travels_to_rank_0_checked():
    rows = result_rows(
        [
            PairResult(0, Phase.FIRST, 0, 0, 1, 5.0, engine="perftest"),
            PairResult(0, Phase.FIRST, 1, 0, 1, None, error="x"),
        ]
    )
    assert [r[6] for r in rows] == ["perftest", None]
    assert [p.engine for p in read_results(rows, 0, Phase.FIRST, 1, 2, source="rank 1")] == [
        "perftest",
        None,
    ]
    with pytest.raises(InputError, match=r"rows\[0\]\[6\]: must be one of ibdiag, perftest"):
        read_results([[0, 0, 1, 5.0, None, None, "auto"]], 0, Phase.FIRST, 1, 2, source="rank 1")
    with pytest.raises(InputError, match="must be \\[rail, a, b, bw_gbs, lat_us, error, engine\\]"):
        read_results([[0, 0, 1, 5.0, None, None]], 0, Phase.FIRST, 1, 2, source="rank 1")


def test_error_text_travels_as_one_printable_line():
    rows = result_rows(
        [
            PairResult(
                0, Phase.FIRST, 0, 0, 1, None, error="gloo: reset\nby peer \x1b[31m" + "x" * 600
            )
        ]
    )
    text = rows[0][5]
    assert text.isprintable() and text.startswith("gloo: reset by peer  [31m") and len(text) == 500
    assert read_results(rows, 0, Phase.FIRST, 1, 2, source="rank 1")[0].error == text


def test_a_latency_pair_with_only_an_average_keeps_it(monkeypatch):
    """perftest's latency in duration mode (what a sweep's --duration asks) prints only the average:
    the pair's latency is that average, not a failed test. run_p2p is replaced by a fake returning
    such a result (the perftest path itself runs in the guest, tests/rdmavm/guest/)."""
    from types import SimpleNamespace

    from ibdiag.bench.p2p import client
    from ibdiag.bench.results.model import P2PResult
    from ibdiag.sweep.nodes import End, make_fleet
    from ibdiag.sweep.p2prunner import P2PPairRunner
    from ibdiag.sweep.schedule import PairTest

    averaged = P2PResult(bytes=8, iters=100, lat_avg_us=14.5)
    monkeypatch.setattr(client, "run_p2p", lambda req, opts: SimpleNamespace(results=(averaged,)))
    nodes = make_fleet(["a", "b"], [None], addresses=["127.0.0.1", "127.0.0.1"])
    res = P2PPairRunner({0: [1], 1: [1]}, b"t" * 32).run_pair(
        PairTest(0, Phase.FIRST, End(0, 0, None), End(1, 0, None)),
        nodes[0],
        nodes[1],
        PairSpec(transport="tcp", mode="lat", bytes=8),
    )
    assert (
        res.error is None and res.lat_us == 14.5 and res.bw_gbs is None and res.engine == "ibdiag"
    )  # TCP: ibdiag's engine
    monkeypatch.setattr(
        client,
        "run_p2p",
        lambda req, opts: SimpleNamespace(results=(P2PResult(bytes=8, iters=100),)),
    )
    res = P2PPairRunner({0: [1], 1: [1]}, b"t" * 32).run_pair(
        PairTest(0, Phase.FIRST, End(0, 0, None), End(1, 0, None)),
        nodes[0],
        nodes[1],
        PairSpec(transport="tcp", mode="lat", bytes=8),
    )
    assert res.error == "the test returned no measurement"
