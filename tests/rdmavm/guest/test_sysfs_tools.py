"""``ibdiag topo``, ``counters`` and ``snapshot`` on the guest's real /sys/class/infiniband (rxe0).

The snapshot taken after traffic is left in the run directory (``rxe-guest.tar.gz``): it is the
source of the committed fixture fixtures/sysfs/rxe-guest/.
"""

from __future__ import annotations

import json
import platform
import tarfile
from pathlib import Path

from tests.rdmavm.guest.conftest import DEVICE, OUT, PORT_DIR, client_env, p2p_args


def _hw(name: str) -> int:
    return int((PORT_DIR / "hw_counters" / name).read_text())


def test_topo_reads_the_real_rxe_port(cli):
    r = cli("topo", "-o", "json")
    assert r.exception is None, r.exception
    doc = json.loads(r.stdout)
    text = json.dumps(doc)
    assert DEVICE in text and "veth0" in text and "Ethernet" in text and "ACTIVE" in text
    # The software versions on a real kernel: the release from /proc, rxe's module from /sys/module.
    assert (doc["kernel_release"], doc["kernel_release_source"]) == (
        platform.release(),
        "/proc/sys/kernel/osrelease",
    )
    (rxe,) = [a for a in doc["adapters"] if a["name"] == DEVICE]
    module = Path("/sys/module/rdma_rxe")
    expected = next(
        (
            (f.read_text().strip(), f.name)
            for f in (module / "version", module / "srcversion")
            if f.is_file()
        ),
        (None, None),
    )
    assert (rxe["driver_module"], rxe["driver_version"], rxe["driver_version_kind"]) == (
        "rdma_rxe",
        *expected,
    )


def test_counters_after_traffic_then_snapshot(server, cli, token, tmp_path):
    sent_before = _hw("sent_pkts")
    s = server()
    r = cli(
        *p2p_args(s.port, "--sizes", "1M", "--iters", "16", "--warmup", "0", "-o", "json"),
        env=client_env(token),
    )
    assert r.exit_code in (0, 1), r.stderr
    sent = _hw("sent_pkts") - sent_before
    assert sent >= 16 * 2**20 // 4096, (
        f"{sent} packets for 16 x 1 MiB"
    )  # at least one packet per MTU
    c = cli("counters", "-o", "json")
    assert c.exception is None, c.exception
    doc = json.loads(c.stdout)
    text = json.dumps(doc)
    assert DEVICE in text and "sent_pkts" in text, text[:2000]
    out = OUT / "rxe-guest.tar.gz"
    snap = cli("snapshot", str(out), "--force")
    assert snap.exit_code == 0, snap.stderr
    with tarfile.open(out) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("ibdiag-snapshot.json"))
    assert manifest["kernel_release"] == platform.release()
    assert "sys/class/infiniband/rxe0" in names
    assert any(n.endswith(f"infiniband/{DEVICE}/ports/1/hw_counters/sent_pkts") for n in names), (
        names[:50]
    )
