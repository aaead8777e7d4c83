"""``report`` checks what a file is before it opens it (issue 28, case 6), as ``--root``'s reader does:
``x.json -> /dev/watchdog`` would arm a watchdog by being opened. Seen here with a FIFO: a writer
blocked in ``open(O_WRONLY)`` is released the moment anything opens the FIFO for reading — so whether
``report`` opened it is observable, and a real device is never touched."""

from __future__ import annotations

import os
import threading

import pytest

from tests.support.cli import run_cli


def _blocked_writer(fifo):
    opened = threading.Event()

    def writer():
        fd = os.open(fifo, os.O_WRONLY)  # blocks until someone opens the FIFO for reading
        opened.set()
        os.close(fd)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    return opened, t


@pytest.mark.parametrize("via_link", [False, True])
def test_report_never_opens_a_fifo_it_is_given(tmp_path, via_link):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    name = tmp_path / "x.json"
    if via_link:
        os.symlink(fifo, name)
    else:
        name = fifo.rename(name)
    opened, t = _blocked_writer(name)
    try:
        res = run_cli("report", str(name))
        assert res.exception is None, res.exception
        assert not opened.wait(0.5), "report opened the FIFO"
        assert "a FIFO, not a regular file" in res.stderr + res.stdout
    finally:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)  # release the writer
        t.join(5)
        os.close(fd)


FABRIC = "fixtures/fabric/two-to-one.net"


@pytest.mark.parametrize(
    ("option", "argv"),
    [
        ("--expect", ["fabric", "--from", FABRIC, "--expect", "{f}.csv"]),
        (
            "--hosts",
            ["fabric", "--from", FABRIC, "--slurm-topology", "{tmp}/t.conf", "--hosts", "{f}"],
        ),
        ("--nccl-env", ["topo", "--root", "fixtures/sysfs/dgx-h100", "--nccl-env", "{f}"]),
        ("--config", ["topo", "--root", "fixtures/sysfs/dgx-h100", "--config", "{f}"]),
        (
            "--rank-order",
            [
                "verdict",
                "--params",
                "8e9",
                "--dtype",
                "bf16",
                "--ranks",
                "16",
                "--ranks-per-node",
                "1",
                "--busbw",
                "24",
                "--compute-s",
                "2",
                "--fabric",
                FABRIC,
                "--nodes",
                "gpu[01-16]",
                "--rank-order",
                "{f}",
            ],
        ),
    ],
)
def test_an_input_file_option_never_opens_a_fifo(tmp_path, option, argv):
    """Every option that names an input file refuses a FIFO (or a device) before opening it: exit 2."""
    fifo = tmp_path / ("in.csv" if option == "--expect" else "in")
    os.mkfifo(fifo)
    f = str(fifo)[: -len(".csv")] if option == "--expect" else str(fifo)
    opened, t = _blocked_writer(fifo)
    try:
        res = run_cli(*[a.format(f=f, tmp=tmp_path) for a in argv])
        assert not opened.wait(0.5), f"{option} opened the FIFO"
        assert res.exit_code == 2, res.stderr
        assert "a FIFO, not a regular file" in res.stderr
        assert (option if option != "--config" else "config file") in res.stderr
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # release the writer
        t.join(5)
        os.close(fd)
