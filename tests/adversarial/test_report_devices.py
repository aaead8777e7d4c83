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
