"""perftest's options of ``bench p2p --transport rdma`` on a real kernel RDMA stack (Soft-RoCE, rxe0).

Real pyverbs, real ``rdma_rxe``, a real ``ibdiag bench serve`` process (forked); the client runs in
this process. Every bandwidth phase checks the bytes that arrived against the ones sent (a mismatch
is exit 3), so a run that exits 0 or 1 moved intact data: WRITE and SEND client -> server, READ
server -> client, ``--bidir`` both ways. Counts are checked against ``--iters``.
"""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("IBDIAG_RDMAVM_GUEST") != "1":
    pytest.skip("runs inside the Soft-RoCE guest (make test-rdma)", allow_module_level=True)

from tests.rdmavm.guest.conftest import DEVICE, client_env, p2p_args

SIZE = 65536
ITERS = 64


def _run(cli, token, port, *args):
    r = cli(*p2p_args(port, *args, "-o", "json"), env=client_env(token))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code in (0, 1), r.stderr  # 1 only for a line-rate finding
    return json.loads(r.stdout)


@pytest.mark.parametrize("verb", ["write", "read", "send"])
def test_verb_moves_checked_data_one_way_and_both_ways(server, cli, token, verb):
    s = server()
    doc = _run(
        cli,
        token,
        s.port,
        "--verb",
        verb,
        "--sizes",
        f"8,{SIZE}",
        "--mode",
        "both",
        "--iters",
        str(ITERS),
        "--warmup",
        "2",
    )
    assert (
        doc["verb"] == verb
        and doc["qps"] == 1
        and doc["bidir"] is False
        and doc["client"]["device"] == DEVICE
    )
    for row in doc["results"]:
        assert row["bw_gbs"] > 0 and 0 < row["lat_us"]["p50"] <= row["lat_us"]["max"], row
        assert (
            row["iters"] == ITERS and row["lat_iters"] == ITERS
        )  # every measured message completed
    if verb == "read":
        assert doc["client"]["max_inline"] == 0  # a READ carries no data from this side
    both = _run(
        cli,
        token,
        s.port,
        "--verb",
        verb,
        "--bidir",
        "--qps",
        "2",
        "--sizes",
        str(SIZE),
        "--iters",
        str(ITERS),
        "--warmup",
        "2",
    )
    (row,) = both["results"]
    assert both["bidir"] is True and both["qps"] == 2
    assert (
        row["iters"] == 2 * ITERS and row["bw_gbs"] > 0
    )  # each side sent --iters: the total is both directions
    s.log.wait_for("running rdma " + ("" if verb == "write" else f"{verb.upper()} ") + r"bw\+lat")
    s.log.wait_for(r"2 QPs bw, 64 KiB, bidirectional")
    assert "Traceback" not in s.log.text()


def test_queue_pairs_traffic_class_service_level_and_inline(server, cli, token):
    s = server()
    for verb in ("write", "send"):
        doc = _run(
            cli,
            token,
            s.port,
            "--verb",
            verb,
            "--qps",
            "4",
            "--sizes",
            str(SIZE),
            "--iters",
            str(ITERS),
            "--warmup",
            "4",
        )
        (row,) = doc["results"]
        assert doc["qps"] == 4 and row["bw_gbs"] > 0 and row["iters"] == ITERS, (
            row
        )  # the 4 QPs share --iters
    s.log.wait_for(r"running rdma SEND 4 QPs bw")
    doc = _run(
        cli,
        token,
        s.port,
        "--tclass",
        "106",
        "--sl",
        "3",
        "--inline",
        "64",
        "--sizes",
        "8,64,128",
        "--mode",
        "lat",
        "--iters",
        "50",
        "--warmup",
        "2",
    )
    assert (doc["tclass"], doc["sl"], doc["inline"]) == (106, 3, 64)
    assert doc["client"]["max_inline"] >= 64 and doc["server"]["max_inline"] >= 64
    assert [row["lat_iters"] for row in doc["results"]] == [50, 50, 50]
    assert isinstance(doc["client"]["relaxed_ordering"], bool)
    s.log.wait_for(r"running rdma tclass 106 sl 3 lat")
