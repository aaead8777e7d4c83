"""``ibdiag job`` on the command line: the RAS sources (file, stdin, live), the options' checks and exit
statuses, against the project's fixtures (fixtures/nccl) and a RAS service on 127.0.0.1."""

from __future__ import annotations

import json

from tests.support.env import REPO

NCCL = REPO / "fixtures" / "nccl"


def _ras_fixture(fragment: str) -> str:
    matches = sorted(p for p in NCCL.iterdir() if fragment in p.name)
    assert matches, f"no fixture with {fragment!r} in fixtures/nccl"
    return str(matches[0])


def test_a_saved_ras_report_read_from_a_file_and_from_stdin_agree(cli):
    path = _ras_fixture("mismatch")
    from_file = cli("job", "--ras", path, "-o", "json")
    assert from_file.exit_code in (0, 1), from_file.stderr
    doc = json.loads(from_file.stdout)
    assert doc["schema"] == "ibdiag.job/1"
    assert any(f["check"] == "job.ras_op_mismatch" for f in doc["findings"])
    with open(path, encoding="utf-8") as fh:
        from_stdin = cli("job", "--ras", "-", "-o", "json", input=fh.read())
    assert from_stdin.exit_code == from_file.exit_code, from_stdin.stderr
    assert [f["check"] for f in json.loads(from_stdin.stdout)["findings"]] == [
        f["check"] for f in doc["findings"]
    ]


def test_options_are_checked_before_anything_is_read(cli):
    res = cli("job")
    assert res.exit_code == 2 and "nothing to read" in res.stderr and "hint:" in res.stderr
    res = cli("job", "--ras", _ras_fixture("mismatch"), "--again", "5")
    assert res.exit_code == 2 and "--again" in res.stderr
    res = cli("job", "--ras", "live", "--ras-earlier", "live")
    assert res.exit_code == 2 and "--ras-earlier" in res.stderr
    res = cli("job", "--ras-earlier", _ras_fixture("mismatch"))
    assert res.exit_code == 2 and "--ras" in res.stderr
    res = cli("job", "--ras", "live:not an address")
    assert res.exit_code == 2 and "RAS address" in res.stderr


def test_a_live_service_that_is_gone_is_exit_3(cli):
    import socket

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        res = cli("job", "--ras", f"live:127.0.0.1:{port}", "--timeout", "3")
    assert res.exit_code == 3, res.stderr
    assert "hint:" in res.stderr


def test_live_through_the_command_line_with_the_address_from_nccl_ras_addr(cli):
    """A RAS service on 127.0.0.1 (the project's, speaking NCCL's client protocol): --ras live takes
    $NCCL_RAS_ADDR; --verbose-ras, --ras-collect-timeout and --ras-text reach the protocol."""
    from tests.support.ras_server import fake_ras

    text = (NCCL / "ras-2.26.2-allgather-ahead.txt").read_bytes()
    data = (NCCL / "ras-2.29.7-mismatch.json").read_bytes()
    with fake_ras(text=text, json=data) as server:
        res = cli(
            "job", "--ras", "live", "-o", "json", env={"NCCL_RAS_ADDR": f"127.0.0.1:{server.port}"}
        )
        assert res.exit_code in (0, 1), res.stderr
        assert json.loads(res.stdout)["ras"]["format"] == "json"
        assert server.commands[-2:] == ["SET FORMAT json", "STATUS"]
        res = cli(
            "job",
            "--ras",
            f"live:127.0.0.1:{server.port}",
            "--ras-text",
            "--verbose-ras",
            "--ras-collect-timeout",
            "7",
            "-o",
            "json",
        )
        assert res.exit_code in (0, 1), res.stderr
        assert "TIMEOUT 7" in server.commands and "VERBOSE STATUS" in server.commands
        assert "SET FORMAT json" not in server.commands[-3:]


def test_topo_takes_a_directory_of_topo_files(cli):
    path = _ras_fixture("mismatch")
    args = ("job", "--ras", path, "--hosts", str(NCCL / "hosts"), "-o", "json")
    with_dir = json.loads(cli(*args, "--topo", str(NCCL / "topo")).stdout)
    assert {r["rank"]: r["nics"] for r in with_dir["ranks"]}[20] == ["mlx5_2"]
    files = [a for f in sorted((NCCL / "topo").glob("*.json")) for a in ("--topo", str(f))]
    assert json.loads(cli(*args, *files).stdout)["ranks"] == with_dir["ranks"]
