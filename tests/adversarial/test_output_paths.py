"""Output paths (``--save``, ``--png``, ``snapshot FILE``): only a regular file or nothing is ever
replaced, a symlink is written through, and no ``.NAME.PID.tmp`` survives an error, Ctrl-C, SIGTERM
or SIGHUP — the signals sent to a real ibdiag process at the moment its temporary file exists."""

from __future__ import annotations

import os
import select
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ibdiag.errors import CannotRunError, UsageError
from ibdiag.outfile import atomic_output, check_output_path, write_atomically
from tests.support.env import REPO, SYSFS_FIXTURES

LOG = REPO / "fixtures" / "logs" / "nccl-tests-2021_all_reduce_perf.log"


def commands(out: Path) -> dict[str, list[str]]:
    return {
        "bench import --save": ["bench", "import", str(LOG), "--save", str(out)],
        "snapshot --force": [
            "snapshot",
            str(out),
            "--root",
            str(SYSFS_FIXTURES / "vm-no-rdma"),
            "--force",
        ],
        "bench collective --save": [
            "bench",
            "collective",
            "--backend",
            "gloo",
            "--nproc",
            "2",
            "--sizes",
            "1K",
            "--save",
            str(out),
        ],
        "bench p2p --save": ["bench", "p2p", "127.0.0.1", "--port", "9", "--save", str(out)],
        "bench p2p --png": ["bench", "p2p", "127.0.0.1", "--port", "9", "--png", str(out)],
        "verdict --chart": [
            "verdict",
            "--params",
            "8e9",
            "--dtype",
            "bf16",
            "--ranks",
            "512",
            "--compute-s",
            "2",
            "--busbw",
            "360",
            "--chart",
            str(out),
        ],
    }


def make(kind: str, path: Path) -> object:
    """A non-regular file at ``path``: the device node is made with mknod, as /dev/null is."""
    if kind == "device":
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        return s
    elif kind == "directory":
        path.mkdir()
    return None


KIND_WORDS = {
    "device": "is a character device",
    "fifo": "is a FIFO",
    "socket": "is a socket",
    "directory": "is a directory",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["device", "fifo", "socket", "directory"])
@pytest.mark.parametrize(
    "command",
    [
        "bench import --save",
        "snapshot --force",
        "bench collective --save",
        "bench p2p --save",
        "bench p2p --png",
        "verdict --chart",
    ],
)
def test_non_regular_outputs_are_refused_before_the_run(cli, tmp_path, kind, command):
    out = tmp_path / "out"
    keep = make(kind, out)
    try:
        before = os.lstat(out)
        res = cli(*commands(out)[command])
        assert res.exit_code == 2, (res.stdout, res.stderr)
        assert KIND_WORDS[kind] in res.stderr and "hint:" in res.stderr
        after = os.lstat(out)
        assert (after.st_ino, stat.S_IFMT(after.st_mode), after.st_rdev) == (
            before.st_ino,
            stat.S_IFMT(before.st_mode),
            before.st_rdev,
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    finally:
        if keep is not None:
            keep.close()  # type: ignore[attr-defined]


def test_a_symlink_to_a_device_is_refused(tmp_path):
    dev = tmp_path / "null"
    make("device", dev)
    link = tmp_path / "link.json"
    os.symlink(dev, link)
    with pytest.raises(UsageError, match="is a character device .the link leads to"):
        check_output_path(link, "--save")
    with pytest.raises(UsageError):
        write_atomically(link, "{}")
    assert stat.S_ISCHR(os.stat(dev).st_mode) and os.path.islink(link)


def test_a_symlink_to_a_regular_file_is_written_through(cli, tmp_path):
    target_dir = tmp_path / "runs"
    target_dir.mkdir()
    target = target_dir / "run-1.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "latest.json"
    os.symlink(os.path.relpath(target, tmp_path), link)
    res = cli("bench", "import", LOG, "--save", link)
    assert res.exit_code == 0, res.stderr
    assert os.path.islink(link) and os.readlink(link) == "runs/run-1.json"
    assert target.read_text().startswith("{") and '"ibdiag.bench/1"' in target.read_text()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640  # the replaced file keeps its permissions
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "runs"]
    assert sorted(p.name for p in target_dir.iterdir()) == ["run-1.json"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "latest.json"
    os.symlink("new.json", link)
    write_atomically(link, "{}")
    assert os.path.islink(link) and (tmp_path / "new.json").read_text() == "{}"


def test_the_temporary_file_lives_beside_the_final_target(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "t.json").write_text("old")
    os.symlink(elsewhere / "t.json", tmp_path / "l.json")
    seen = []
    real_replace = os.replace

    def replace(a: str, b: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        # the rename happens inside the directory held open (its path cannot be swapped meanwhile)
        held = Path(os.readlink(f"/proc/self/fd/{src_dir_fd}"))
        seen.append((held / a, Path(os.readlink(f"/proc/self/fd/{dst_dir_fd}")) / b))
        real_replace(a, b, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", replace)
    write_atomically(tmp_path / "l.json", "new")
    ((src, dst),) = seen
    assert src.parent == dst.parent == elsewhere and src.name == f".t.json.{os.getpid()}.tmp"
    assert (elsewhere / "t.json").read_text() == "new"


def test_an_error_while_writing_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "x.json"
    out.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(out) as fh:
            fh.write(b"half")
            raise RuntimeError("the writer failed")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]
    ro = tmp_path / "ro"
    ro.mkdir()
    out2 = ro / "y.json"
    out2.write_text("old")
    os.chmod(ro, 0o500)
    try:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only directory")
        with pytest.raises((UsageError, CannotRunError)):
            write_atomically(out2, "new")
    finally:
        os.chmod(ro, 0o700)


def test_a_stale_temporary_file_of_a_killed_run_is_replaced(tmp_path):
    out = tmp_path / "x.json"
    stale = tmp_path / f".x.json.{os.getpid()}.tmp"
    stale.write_text("left by SIGKILL")
    write_atomically(out, "new")
    assert out.read_text() == "new" and not stale.exists()


# --- signals at the moment the temporary file exists, in a real process --------------------------------

CHILD = r"""
import os, sys, time
ready = int(sys.argv[1])
def hook(event, args):
    # os.replace raises the os.rename audit event just before the rename: the temporary file is
    # complete and fsynced. Say so, then wait for the parent's signal (bounded: a missed signal fails).
    if event == "os.rename" and str(args[0]).endswith(".tmp"):
        os.write(ready, b"r")
        # Short sleeps: a signal that lands before a sleep starts is handled at the loop's next turn
        # (one long sleep would not see it until it ends, and the parent's wait would run out first).
        for _ in range(600):
            time.sleep(0.1)
        os.write(2, b"no signal came\n")
sys.addaudithook(hook)
from ibdiag.cli.main import run
sys.argv = ["ibdiag", *sys.argv[2:]]
run()
"""


def _run_and_signal(argv: list[str], signum: int) -> subprocess.CompletedProcess:
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(w), *argv],
        pass_fds=(w,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 60)
        assert ready and os.read(r, 1) == b"r", "the child never reached the rename"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(r)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "signum, status",
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP), (signal.SIGINT, 130)],
)
@pytest.mark.parametrize("command", ["bench import --save", "snapshot --force", "verdict --chart"])
def test_a_signal_during_the_write_leaves_no_temporary_file(tmp_path, command, signum, status):
    out = tmp_path / "out"
    out.write_text("the previous result")
    res = _run_and_signal(commands(out)[command], signum)
    assert res.returncode == status, (res.returncode, res.stderr)
    assert b"no signal came" not in res.stderr and b"Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert out.read_text() == "the previous result"
