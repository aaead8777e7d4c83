"""The RDMA test bed's host-side logic, without booting a guest (``make test-rdma`` boots one).

Module ordering from a real-format ``modules.dep``, the guest's scripts, the reading of the guest's
JUnit XML and pytest log, and what is collected where.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.rdmavm import vm
from tests.rdmavm.test_guests import listening, parse_junit, progress
from tests.support.env import REPO

MODULES_DEP = """kernel/fs/overlayfs/overlay.ko:
kernel/net/9p/9pnet.ko: kernel/fs/netfs/netfs.ko
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/netfs/netfs.ko kernel/fs/fscache/fscache.ko
kernel/fs/netfs/netfs.ko:
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
"""


def test_module_closure_puts_dependencies_first_and_skips_builtins():
    order = vm.module_closure(
        MODULES_DEP, ["virtio_pci", "9pnet_virtio", "9p", "overlay", "virtio-net"]
    )
    names = [p.rsplit("/", 1)[-1] for p in order]
    assert len(names) == len(set(names))  # each once
    for mod, dep in [
        ("virtio_pci.ko", "virtio_pci_modern_dev.ko"),
        ("9pnet_virtio.ko", "9pnet.ko"),
        ("9pnet.ko", "netfs.ko"),
        ("9p.ko", "fscache.ko"),
    ]:
        assert names.index(dep) < names.index(mod)
    assert "overlay.ko" in names and not any(
        "virtio_net" in n for n in names
    )  # virtio_net built in here
    assert vm.module_closure(MODULES_DEP, ["rdma-rxe"])[-1].endswith("rdma_rxe.ko.xz")


def test_guest_scripts_mount_the_host_read_only_and_create_rxe0():
    init = vm.init_script(["virtio.ko", "9p.ko"])
    assert init.startswith("#!/bin/busybox sh\n")
    assert "insmod /mods/virtio.ko" in init.split("insmod /mods/9p.ko")[0]
    assert (
        "hostroot /lower" in init and ",ro," in init and "lowerdir=/lower,upperdir=/rw/up" in init
    )
    assert "exec switch_root /newroot /bin/sh /mnt/out/stage.sh" in init
    kernel = vm.Kernel("6.1.0-57-amd64", REPO / "nonexistent")
    single = vm.stage_script(kernel, vm.Node.single(), "echo hi", {"X": "a b"})
    assert "mount -t tmpfs tmpfs /tmp" in single  # /tmp in the guest is its own
    assert (
        "ip link add veth0 type veth peer name veth1" in single
        and "rdma link add rxe0 type rxe netdev veth0" in single
    )
    assert (
        "export X='a b'" in single
        and "IBDIAG_TEST_STRICT=1" in single
        and "echo $? >/mnt/out/rc" in single
    )
    pair = vm.Node.pair(1, 12399)
    assert pair.netdev == "eth0" and pair.addr == vm.PAIR_ADDRS[1] and pair.peer == vm.PAIR_ADDRS[0]
    assert "socket,id=n0,connect=127.0.0.1:12399" in pair.qemu_net
    assert "listen=127.0.0.1:12399" in vm.Node.pair(0, 12399).qemu_net[1]


def test_junit_and_log_of_a_guest_run_are_read_back(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        '<testcase classname="tests.rdmavm.guest.test_rdma_p2p" name="test_a" time="1"/>'
        '<testcase classname="tests.rdmavm.guest.test_rdma_p2p" name="test_b"><failure message="boom">trace</failure></testcase>'
        '<testcase classname="tests.rdmavm.guest.test_serve_leak" name="test_c"><skipped message="no rxe"/></testcase>'
        "</testsuite></testsuites>"
    )
    cases = parse_junit(xml)
    assert [(c.file, c.name, c.outcome) for c in cases] == [
        ("test_rdma_p2p.py", "test_a", "passed"), ("test_rdma_p2p.py", "test_b", "failed"), ("test_serve_leak.py", "test_c", "skipped"),
    ]  # fmt: skip
    assert "boom" in cases[1].text
    log = (
        "tests/rdmavm/guest/test_a.py::test_x PASSED [ 10%]\ntests/rdmavm/guest/test_a.py::test_y "
    )
    assert (
        progress(log) == "1 finished; running when it stopped: tests/rdmavm/guest/test_a.py::test_y"
    )


def test_make_test_collects_no_guest_test():
    """Without IBDIAG_RDMAVM=1 nothing under tests/rdmavm is collected: the default suite boots no guest."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/rdmavm"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert "no tests collected" in r.stdout or r.returncode == 5, r.stdout
    env_boot = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/rdmavm"], capture_output=True, text=True, cwd=REPO, timeout=120,
        env={**os.environ, "IBDIAG_RDMAVM": "1"},
    )  # fmt: skip
    assert "test_guests.py::test_single_node_guest[test_rdma_p2p.py]" in env_boot.stdout
    assert "test_guests.py::test_pair_guests[test_pair_faults.py]" in env_boot.stdout
    assert "test_guests.py::test_pair_node0_agent_ended_cleanly" in env_boot.stdout
    rest = env_boot.stdout.replace("test_single_node_guest[", "").replace("test_pair_guests[", "")
    assert "guest/test_" not in rest and "pair/test_" not in rest


def test_node0_listening_is_read_from_the_tcp_table_not_probed():
    """qemu's socket netdev takes the first connection as its peer, so node 1 is started once
    /proc/net/tcp shows node 0's qemu listening; a connected socket on that port is not it."""
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:3039 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 0100007F:303A 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 00000000:303B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1\n"
    )
    assert listening(0x3039, table)
    assert not listening(0x303A, table)  # established, not listening
    assert not listening(0x303B, table)  # 0.0.0.0, not qemu's 127.0.0.1
    assert not listening(12399, "")


def test_pair_agent_answers_a_request_per_line_and_ends_on_done(tmp_path):
    """The test harness agent of node 0 (tests/rdmavm/pair/agent.py), on the host's loopback: an
    op it knows, an op it does not (an error back, the service goes on), and 'done' ends it with 0."""
    import json
    import socket
    import threading

    from tests.rdmavm.pair import agent

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc: list[int] = []
    t = threading.Thread(
        target=lambda: rc.append(agent.serve("127.0.0.1", port, tmp_path / "token")), daemon=True
    )
    t.start()
    for _ in range(100):
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            import time

            time.sleep(0.05)
    f = conn.makefile("rw", encoding="utf-8")

    def call(**req):
        f.write(json.dumps(req) + "\n")
        f.flush()
        return json.loads(f.readline())

    assert "addr" in call(op="ping")
    assert "unknown op 'nope'" in call(op="nope")["error"]
    assert call(op="output", id=99)["error"].startswith("KeyError")
    assert call(op="done") == {"ok": True}
    t.join(10)
    conn.close()
    assert rc == [0]
