"""Output paths and fs.protected_symlinks (issue 28, case 1): in a sticky world-writable directory
(/tmp, a shared drop directory) another user's symlink is not followed — as the kernel refuses
``echo x > link`` there — so ``--textfile``/``--save``/``--chart``/``snapshot FILE`` through a planted
link leave its target alone and exit 2 with a hint. The links are real, owned by uid 65534 (lchown)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.env import REPO, SYSFS_FIXTURES

LOG = REPO / "fixtures" / "logs" / "nccl-tests-2021_all_reduce_perf.log"
STRANGER = 65534
VICTIM_TEXT = b"root's secret, mode 0600\n"

COMMANDS = {
    "topo --textfile": lambda out: [
        "topo",
        "--root",
        str(SYSFS_FIXTURES / "vm-no-rdma"),
        "--textfile",
        str(out),
    ],
    "bench import --save": lambda out: ["bench", "import", str(LOG), "--save", str(out)],
    "snapshot FILE": lambda out: [
        "snapshot",
        str(out),
        "--root",
        str(SYSFS_FIXTURES / "vm-no-rdma"),
        "--force",
    ],
}


def _drop_dir(tmp_path: Path) -> Path:
    """A sticky world-writable directory, as /tmp is."""
    drop = tmp_path / "drop"
    drop.mkdir()
    os.chmod(drop, 0o1777)
    return drop


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM_TEXT)
    os.chmod(victim, 0o600)
    return victim


@pytest.mark.skipif(os.geteuid() != 0, reason="lchown to another uid needs root")
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_strangers_link_in_a_sticky_directory_is_not_followed(tmp_path, name):
    drop, victim = _drop_dir(tmp_path), _victim(tmp_path)
    link = drop / "i.prom"
    os.symlink(victim, link)
    os.lchown(link, STRANGER, STRANGER)
    res = run_cli(*COMMANDS[name](link))
    assert res.exception is None, res.exception
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    assert "protected_symlinks" in res.stderr and "hint:" in res.stderr
    assert victim.read_bytes() == VICTIM_TEXT
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert os.path.islink(link)
    assert [p.name for p in drop.iterdir()] == ["i.prom"]  # no temporary file left


@pytest.mark.skipif(os.geteuid() != 0, reason="lchown to another uid needs root")
def test_a_strangers_link_to_a_directory_on_the_way_is_not_followed(tmp_path):
    drop = _drop_dir(tmp_path)
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    os.symlink(elsewhere, drop / "d")
    os.lchown(drop / "d", STRANGER, STRANGER)
    res = run_cli("bench", "import", str(LOG), "--save", str(drop / "d" / "run.json"))
    assert res.exit_code == 2, res.stderr
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="lchown to another uid needs root")
def test_a_link_the_kernel_would_follow_is_still_written_through(tmp_path):
    """The directory owner's own link in a sticky directory, and a stranger's link in a directory that
    is not sticky: followed, as the kernel follows them."""
    drop, victim = _drop_dir(tmp_path), _victim(tmp_path)
    os.symlink(victim, drop / "mine.json")  # owned by root, the follower
    res = run_cli("bench", "import", str(LOG), "--save", str(drop / "mine.json"))
    assert res.exit_code == 0, res.stderr
    assert victim.read_bytes().startswith(b"{")
    plain = tmp_path / "plain"
    plain.mkdir()
    target = tmp_path / "t.json"
    os.symlink(target, plain / "l.json")
    os.lchown(plain / "l.json", STRANGER, STRANGER)
    res = run_cli("bench", "import", str(LOG), "--save", str(plain / "l.json"))
    assert res.exit_code == 0, res.stderr
    assert target.read_bytes().startswith(b"{")
