"""``ibdiag fabric --from`` / ``--save`` without the simulator: the bundled dump, a bare ibnetdiscover
file, and dumps and paths that must be refused (exit 2, never a traceback, nothing written)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.env import FIXTURES, unavailable


def need_tool_or_sbin(name: str) -> None:
    if not any(os.path.exists(f"{d}/{name}") for d in ("/usr/sbin", "/sbin", "/usr/bin")):
        unavailable(f"{name} is not installed (make system-deps)")


FAULTY = FIXTURES / "fabric" / "rail-fat-tree-faulty"


def test_the_bundled_faulty_fabric_names_its_two_planted_faults():
    r = run_cli("fabric", "--from", str(FAULTY), "-o", "json")
    doc = json.loads(r.stdout)
    bad = sorted((f["check"], f["subject"]) for f in doc["findings"] if f["severity"] != "ok")
    assert r.exit_code == 1
    assert bad == [
        ("fabric.errors", "leaf-r2-1:3"),
        ("fabric.link_rate", "leaf-r3-1:11<>spine-1:14"),
        # the 1x uplink's consequence for its leaf (a warning: the link is link_rate's failure)
        ("fabric.oversubscription", "leaf-r3-1"),
    ]


def test_every_format_renders_the_bundled_fabric(tmp_path):
    for fmt, probe in (
        ("table", "Switches"),
        ("csv", "remote_guid"),
        ("prom", "ibdiag_fabric_switch_port_symbol_error_total"),
        ("junit", "<testsuites"),
        ("line", "FAIL fabric.link_rate"),
    ):
        r = run_cli("fabric", "--from", str(FAULTY), "-o", fmt, columns=200)
        assert r.exit_code == 1 and probe in r.stdout, (fmt, r.stderr)
    prom = run_cli("fabric", "--from", str(FAULTY), "-o", "prom").stdout
    assert (
        'switch="leaf-r2-1",guid="0xb8cef60300000003",port="3",remote_node="gpu03 mlx5_2",remote_port="1"} 57'
        in prom
    )


def test_a_bare_ibnetdiscover_file_is_judged_as_topology_alone(tmp_path):
    bare = tmp_path / "net.txt"
    bare.write_text((FAULTY / "ibnetdiscover.out").read_text())
    r = run_cli("fabric", "--from", str(bare), "-o", "json")
    doc = json.loads(r.stdout)
    assert doc["subnet_managers"] is None and doc["port_counters"] == []
    assert [f["check"] for f in doc["findings"] if f["severity"] != "ok"] == [
        "fabric.link_rate",
        "fabric.oversubscription",
    ]


def test_a_malformed_dump_is_exit_2_with_the_line(tmp_path):
    bad = tmp_path / "net.txt"
    bad.write_text((FAULTY / "ibnetdiscover.out").read_text().replace("Switch\t", "Swatch\t", 1))
    r = run_cli("fabric", "--from", str(bad))
    assert r.exit_code == 2 and "line " in r.stderr and "Traceback" not in r.stderr


def _tar(path: Path, members: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(data[m.name]) if m.name in data else None)


def test_archives_with_links_or_strangers_are_refused(tmp_path):
    link = tarfile.TarInfo("ibnetdiscover.out")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    evil = tarfile.TarInfo("../../x.out")
    evil.size = 1
    for i, members in enumerate(([link], [evil])):
        p = tmp_path / f"e{i}.tar.gz"
        _tar(p, members, {"../../x.out": b"x"})
        r = run_cli("fabric", "--from", str(p))
        assert r.exit_code == 2 and "not an ibdiag fabric dump" in r.stderr
    assert not (tmp_path.parent.parent / "x.out").exists()


def test_save_into_a_full_directory_or_through_a_link_is_refused(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep").write_text("mine")
    r = run_cli("fabric", "--from", str(FAULTY), "--save", str(full))
    assert r.exit_code == 2 and (full / "keep").read_text() == "mine" and len(os.listdir(full)) == 1
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / "link")
    r = run_cli("fabric", "--from", str(FAULTY), "--save", str(tmp_path / "link"))
    assert r.exit_code == 2 and os.listdir(target) == []


def test_a_saved_dump_round_trips(tmp_path):
    for out in (tmp_path / "d", tmp_path / "d.tar.gz"):
        assert (
            run_cli("fabric", "--from", str(FAULTY), "--save", str(out), "-o", "line").exit_code
            == 1
        )
        a = json.loads(run_cli("fabric", "--from", str(FAULTY), "-o", "json").stdout)
        b = json.loads(run_cli("fabric", "--from", str(out), "-o", "json").stdout)
        assert a["findings"] == b["findings"] and a["links"] == b["links"]


def test_since_a_dump_with_more_counts_gives_deltas_and_no_lost_link():
    r = run_cli("fabric", "--from", str(FAULTY), "--since", str(FAULTY), "-o", "json")
    doc = json.loads(r.stdout)
    # The same read twice: no time passed, no span; the counts are judged as a snapshot, nothing is lost.
    assert not [f for f in doc["findings"] if f["check"] == "fabric.link_lost"]


def test_a_counters_tool_that_crashed_is_said_not_taken_for_a_clean_fabric(tmp_path):
    import shutil

    dump = tmp_path / "dump"
    shutil.copytree(FAULTY, dump)
    meta = json.loads((dump / "capture.json").read_text())
    for run in meta["runs"]:
        if run["name"] == "ibqueryerrors":
            run["rc"] = -11  # ibqueryerrors once died by SIGSEGV on the 4096-port simulated fabric
    (dump / "capture.json").write_text(json.dumps(meta))
    (dump / "ibqueryerrors.out").write_text("")
    doc = json.loads(run_cli("fabric", "--from", str(dump), "-o", "json").stdout)
    (disc,) = [f for f in doc["findings"] if f["check"] == "fabric.discovery"]
    assert disc["severity"] == "warn" and "ibqueryerrors exited with status -11" in disc["message"]
    assert not [f for f in doc["findings"] if f["check"] == "fabric.errors"]


def test_live_on_a_node_without_infiniband_is_exit_3_with_what_the_tool_said():
    # This machine has no RDMA in its kernel: the real ibnetdiscover fails, and ibdiag says why.
    if os.path.exists("/sys/class/infiniband_mad/abi_version"):
        pytest.skip("this node has the umad module: ibnetdiscover may find a subnet")
    need_tool_or_sbin("ibnetdiscover")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "IBSIM_SOCKNAME")}
    r = run_cli("fabric", env=env)
    assert (
        r.exit_code == 3 and "ibnetdiscover discovered nothing" in r.stderr and "umad" in r.stderr
    )
    assert "Traceback" not in r.stderr


def _with_sms(tmp_path: Path, second: str | None) -> Path:
    """The bundled dump with a second IsSM port (LID 38, gpu08 mlx5_3) whose sminfo says ``second``
    (None: it did not answer). The simulator's opensm always stands by, so two masters are written
    here in sminfo's own format."""
    import shutil

    dump = tmp_path / "sms"
    shutil.copytree(FAULTY, dump)
    sa = (dump / "saquery.out").read_text()
    record = "PortInfoRecord dump:\n\t\tEndPortLid..............38\n\t\tPortNum.................1\n"
    (dump / "saquery.out").write_text(
        sa.replace("\nIsSMdisabled ports", record + "\nIsSMdisabled ports")
    )
    meta = json.loads((dump / "capture.json").read_text())
    meta["runs"].append({"name": "sminfo-38", "command": "sminfo 38", "rc": 0 if second else 255})
    (dump / "capture.json").write_text(json.dumps(meta))
    state = {"master": "3 SMINFO_MASTER", "standby": "2 SMINFO_STANDBY"}.get(second or "", "")
    (dump / "sminfo-38.out").write_text(
        f"sminfo: sm lid 38 sm guid 0x2c90300000831, activity count 12 priority 0 state {state}\n"
        if second
        else ""
    )
    (dump / "sminfo-38.err").write_text("" if second else "sminfo: iberror: failed: query\n")
    return dump


def test_two_master_sms_fail_a_standby_passes_and_a_silent_one_fails(tmp_path):
    for second, severity, words in (
        ("master", "fail", "2 master subnet managers: LID 1"),
        ("standby", "ok", "LID 38 (gpu08 mlx5_3) standby"),
        (None, "fail", "1 SM port(s) do not answer SMInfo"),
    ):
        doc = json.loads(
            run_cli(
                "fabric", "--from", str(_with_sms(tmp_path / str(second), second)), "-o", "json"
            ).stdout
        )
        (sm,) = [f for f in doc["findings"] if f["check"] == "fabric.sm"]
        assert sm["severity"] == severity and words in sm["message"], sm
