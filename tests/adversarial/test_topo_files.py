"""``--topo FILE`` (issue 42, item 5): every option that reads ``ibdiag topo -o json`` files goes
through the checked reader (``ibdiag/infile.py``, ``ibdiag/jsonread.py``). A FIFO is never opened
(it would hang the command), ``/dev/zero`` is refused unread (it would be read until memory runs
out), a file over the size budget or nested past the parse budget is refused: each exit 2, naming
the file, never a traceback. The same three commands, through the command line: ``fabric --topo``,
``verdict --fabric … --topo``, ``job --topo`` (a file, or a directory of ``*.json``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.adversarial.test_report_devices import _blocked_writer
from tests.support.cli import run_cli
from tests.support.env import REPO

FABRIC = str(REPO / "fixtures" / "fabric" / "two-to-one.net")
VERDICT = [
    "verdict",
    "--params",
    "8e9",
    "--dtype",
    "bf16",
    "--ranks",
    "16",
    "--ranks-per-node",
    "1",
]
VERDICT += ["--busbw", "24", "--compute-s", "2", "--fabric", FABRIC, "--nodes", "gpu[01-16]"]
RAS = str(REPO / "fixtures" / "nccl" / "ras-2.30.7-healthy.json")
COMMANDS = {
    "fabric --topo": ["fabric", "--from", FABRIC, "--topo", "{f}"],
    "verdict --topo": [*VERDICT, "--topo", "{f}"],
    "job --topo": ["job", "--ras", RAS, "--topo", "{f}"],
    "job --topo DIR": ["job", "--ras", RAS, "--topo", "{d}"],
}


def _run(argv: list[str], f: Path) -> object:
    """Run from the file's directory, so the message names it in full (long paths are cut)."""
    here = os.getcwd()
    os.chdir(f.parent)
    try:
        name = f.name if f.parent != Path("/dev") else str(f)
        return run_cli(*[a.format(f=name, d=".") for a in argv])
    finally:
        os.chdir(here)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_topo_fifo_is_never_opened(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "node.json"
    os.mkfifo(fifo)
    opened, t = _blocked_writer(fifo)
    try:
        res = _run(COMMANDS[command], fifo)
        assert not opened.wait(0.5), f"{command} opened the FIFO"
        assert res.exit_code == 2, (res.exit_code, res.stderr)
        assert "a FIFO, not a regular file" in res.stderr and "node.json" in res.stderr
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # release the writer
        t.join(5)
        os.close(fd)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    "what", ["/dev/zero", "a link to /dev/zero", "too large", "deep", "huge int"]
)
def test_a_topo_file_that_is_not_a_document_is_refused(
    tmp_path: Path, command: str, what: str
) -> None:
    f = tmp_path / "node.json"
    if what == "/dev/zero" and command != "job --topo DIR":
        f = Path("/dev/zero")
    elif what in ("/dev/zero", "a link to /dev/zero"):
        f.symlink_to("/dev/zero")
    elif what == "too large":
        with open(f, "wb") as out:
            out.truncate(64 * 2**20)  # sparse: 64 MiB of zero bytes, over the 16 MiB budget
    elif what == "deep":
        f.write_text("[" * 100_000 + "]" * 100_000)
    else:
        f.write_text(
            '{"schema": "ibdiag.topo/1", "host": "n1", "adapters": [{"name": "mlx5_0", "nic_index": '
            + "9" * 5000
            + "}]}"
        )
    res = _run(COMMANDS[command], f)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, (res.exit_code, res.stderr[-500:])
    assert "internal error" not in res.stderr
    expect = {
        "/dev/zero": "a character device, not a regular file",
        "a link to /dev/zero": "a character device, not a regular file",
        "too large": "allowed",
        "deep": "nested too deeply",
        "huge int": "digits",
    }[what]
    assert expect in res.stderr, res.stderr[-500:]


def test_a_long_path_keeps_the_file_name_in_the_message(tmp_path: Path) -> None:
    """The path is cut in its middle, never the file's own name (it was ``…/n… (8 more characters)``)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    f = deep / "node07.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    res = run_cli(*[a.format(f=str(f)) for a in COMMANDS["fabric --topo"]])
    assert res.exit_code == 2, res.stderr
    assert "…/node07.json': nested too deeply" in res.stderr, res.stderr
