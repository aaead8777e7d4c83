"""The port history and the kernel log on a real kernel: rxe0's netdev (veth0) taken down and up twice.

What rxe logs there is the truth the kernel-log matcher must meet (``infiniband rxe0: set down`` /
``set active``, rxe_net.c); its ``link_downed`` hw_counter and the port state read by ``topo`` between the
bounces are what the history counts. AER is not available under qemu's virtio devices: not judged here.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.rdmavm.guest.conftest import DEVICE, PORT_DIR

NETDEV = "veth0"


def _wait_state(want_active: bool, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if ("ACTIVE" in (PORT_DIR / "state").read_text()) == want_active:
            return
        time.sleep(0.2)
    pytest.fail(
        f"{DEVICE} port 1 did not become {'ACTIVE' if want_active else 'not ACTIVE'}: {(PORT_DIR / 'state').read_text()}"
    )


def _link(state: str) -> None:
    subprocess.run(["ip", "link", "set", NETDEV, state], check=True)


def _findings(res) -> dict[tuple[str, str], dict]:
    doc = json.loads(res.stdout)
    return {(f["check"], f["subject"]): f for f in doc["findings"]}


def test_netdev_bounces_fail_then_recover(cli, tmp_path):
    store = tmp_path / "history"
    subject = f"{DEVICE}:1"
    first = cli("counters", "--history", store, "-o", "json")
    assert first.exception is None, first.exception
    try:
        for _ in range(2):
            _link("down")
            _wait_state(False)
            down = cli("topo", "--history", store, "-o", "json")  # the history sees it DOWN
            assert down.exception is None, down.exception
            _link("up")
            _wait_state(True)
            up = cli(
                "topo", "--history", store, "-o", "json"
            )  # and ACTIVE again: a 5-min cron would
            assert up.exception is None, up.exception  # see a bounce only if it lasts across a run
    finally:
        _link("up")
        _wait_state(True)
    res = cli("counters", "--history", store, "--kernel-log", "kmsg", "-o", "json")
    found = _findings(res)
    doc = json.loads(res.stdout)
    rxe = [e for e in doc["kernel_log"]["events"] if e["name"] == DEVICE]
    flaps = found[("history.flaps", subject)]
    assert flaps["severity"] == "fail" and flaps["value"] == 2, (flaps, doc["history"]["ports"])
    link = found.get(("kernel.link", subject))
    assert link is not None and link["severity"] == "fail" and link["value"] >= 2, (link, rxe)
    assert "infiniband rxe0: set down" in link["message"]
    assert res.exit_code == 1
    # Stable since, with a recovery window of 0 h: recovered, and the command passes on them.
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[history]\nrecovery_hours = 0\n")
    res = cli("counters", "--history", store, "--kernel-log", "kmsg", "--config", cfg, "-o", "json")
    found = _findings(res)
    assert found[("history.recovered", subject)]["severity"] == "ok"
    assert ("history.flaps", subject) not in found
    assert found[("kernel.link", subject)]["severity"] == "ok"
