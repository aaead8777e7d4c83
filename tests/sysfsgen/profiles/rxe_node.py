"""A VM-like node with two Soft-RoCE (rxe) devices, no GPUs, written in the shape a real kernel gives them.

The shape (files, links, values) follows ``/sys/class/infiniband/rxe0`` of Debian's kernel in the
project's qemu guest (2026-12-02, ``rdma link add rxe0 type rxe netdev veth0``): the device lives under
``devices/virtual/infiniband`` with no ``device`` link, ``parent`` names its netdev, ``fw_ver`` is empty,
``node_desc`` is ``rxe``, there is no ``counters/`` directory and ``hw_counters/`` holds the names of
drivers/infiniband/sw/rxe/rxe_hw_counters.c.

* ``rxe0`` over ``ens1f0`` (an E810 port at 25000 Mb/s): its port still says ``10 Gb/sec (1X FDR10)``
  (what the tried run saw); its counters are the ones a clean 2 s ``ib_write_bw`` left in the guest
  (62452 packets each way, 864 duplicate requests, 28 completer retries);
* ``rxe1`` over ``ens4`` (virtio, speed -1: unknown): retries ran out (``retry_exceeded_err`` 3),
  sequence errors and many retries, as a lossy path gives.
"""

from __future__ import annotations

from tests.sysfsgen.builder import IbDev, Link, Tree

NAME = "rxe-node"

INTEL, REDHAT = 0x8086, 0x1AF4
E810, VIRTIO_NET = 0x159B, 0x1041
CPUS = "0-3"

#: drivers/infiniband/sw/rxe/rxe_hw_counters.c (rxe_counter_descs), zero defaults.
RXE_HW_COUNTERS = (
    "sent_pkts",
    "rcvd_pkts",
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_rnr_err",
    "send_rnr_err",
    "rcvd_seq_err",
    "ack_deferred",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "completer_retry_err",
    "send_err",
    "link_downed",
    "rdma_sends",
    "rdma_recvs",
)


def rxe_counters(**values: int) -> dict[str, int]:
    out = {n: 0 for n in RXE_HW_COUNTERS}
    out["lifespan"] = 12  # the rdma core's default hw_stats cache interval (ms), not a counter
    out.update(values)
    return out


def rxe_device(
    tree: Tree, name: str, netdev: str, mac: tuple[int, ...], ipv4: str, hw: dict[str, int]
) -> None:
    rel = f"devices/virtual/infiniband/{name}"
    guid = f"{mac[0] ^ 2:02x}{mac[1]:02x}:{mac[2]:02x}ff:fe{mac[3]:02x}:{mac[4]:02x}{mac[5]:02x}"
    tree.file(f"{rel}/parent", netdev)
    tree.file(f"{rel}/fw_ver", "")  # rxe has no firmware: sysfs prints an empty line
    tree.file(f"{rel}/node_desc", "rxe")
    tree.file(f"{rel}/node_guid", guid)
    tree.file(f"{rel}/sys_image_guid", guid)
    tree.file(f"{rel}/node_type", "1: CA")
    tree.file(f"{rel}/uevent", f"NAME={name}")
    tree.link(f"class/infiniband/{name}", rel)
    a, b, c, d = (int(x) for x in ipv4.split("."))
    ll = "fe80:0000:0000:0000:" + guid
    mapped = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    ib = IbDev(tree, rel, name, None)  # type: ignore[arg-type]  # no PCI function
    ib.port(
        1,
        rate="10 Gb/sec (1X FDR10)",
        link_layer="Ethernet",
        lid="0x0",
        sm_lid="0x0",
        gids=[(ll, "RoCE v2", netdev), (mapped, "RoCE v2", netdev)],
        counters=None,
        hw_counters=hw,
    )
    tree.file(f"{rel}/ports/1/cap_mask", "0x00010000")


def build(tree: Tree) -> None:
    tree.numa(0, CPUS)
    tree.module("rdma_rxe")
    tree.module("ib_core")
    hb = tree.host_bridge("0000:00")
    hb.numa, hb.cpulist = 0, CPUS
    e810 = hb.bridge("0000:00:02.0").add(
        "0000:01:00.0",
        vendor=INTEL,
        device=E810,
        cls=0x020000,
        link=Link("16.0 GT/s PCIe", 8, "16.0 GT/s PCIe", 8),
    )
    e810.netdev("ens1f0", mtu=1500, address="b4:96:91:a2:10:40", speed=25000)
    virtio = hb.add("0000:00:04.0", vendor=REDHAT, device=VIRTIO_NET, cls=0x020000, link=None)
    virtio.netdev("ens4", mtu=1500, address="52:54:00:12:34:56", speed=-1)

    rxe_device(
        tree,
        "rxe0",
        "ens1f0",
        (0xB4, 0x96, 0x91, 0xA2, 0x10, 0x40),
        "10.9.0.1",
        rxe_counters(
            sent_pkts=62452, rcvd_pkts=62452, duplicate_request=864, completer_retry_err=28
        ),
    )
    rxe_device(
        tree,
        "rxe1",
        "ens4",
        (0x52, 0x54, 0x00, 0x12, 0x34, 0x56),
        "10.9.1.1",
        rxe_counters(
            sent_pkts=20311,
            rcvd_pkts=19877,
            completer_retry_err=950,
            retry_exceeded_err=3,
            rcvd_seq_err=40,
            out_of_seq_request=17,
            duplicate_request=212,
        ),
    )

    tree.manifest(
        "rxe-vm-01",
        "project fixture: two Soft-RoCE (rxe) devices, shaped like a real kernel's (see README)",
    )
