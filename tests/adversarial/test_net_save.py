"""A ``bench p2p --save`` that fails at the end keeps the measurement: the result is printed first,
then the save is attempted, and its failure is still reported with its exit status."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.adversarial.net_support import client_process, start_server

pytestmark = pytest.mark.slow


def test_a_failed_save_keeps_the_printed_result(ibdiag_exe, tmp_path):
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    target = out_dir / "run.json"
    s = start_server(ibdiag_exe)
    try:
        c = client_process(
            ibdiag_exe,
            s.port,
            "--sizes",
            "64K",
            "--duration",
            "2",
            "-o",
            "json",
            "--save",
            str(target),
        )
        s.log.wait_for(
            r"running tcp bw"
        )  # --save was checked before connecting; now its directory goes away
        shutil.rmtree(out_dir)
        out, err = c.communicate(timeout=60)
    finally:
        s.stop()
    assert c.returncode == 2, (
        err
    )  # the shared writer's status for a directory that is gone (cli/emit.py)
    doc = json.loads(out)  # the measurement is on stdout, whole
    assert doc["schema"] == "ibdiag.bench/1" and doc["results"][0]["bw_gbs"] > 0
    assert f"ibdiag: error: --save {target}: directory {out_dir} does not exist" in err
    assert "Traceback" not in err and not target.exists()


def test_png_and_save_are_written_after_the_result(cli, tmp_path):
    from tests.support.p2p import server_thread

    png, save = tmp_path / "bw.png", tmp_path / "run.json"
    with server_thread() as (port, _, _):
        r = cli(
            "bench",
            "p2p",
            "127.0.0.1",
            "--port",
            port,
            "--sizes",
            "4K,64K",
            "--iters",
            "10",
            "-o",
            "json",
            "--png",
            png,
            "--save",
            save,
        )
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert json.loads(save.read_text())["results"] == json.loads(r.stdout)["results"]
