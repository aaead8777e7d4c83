"""A GPU node whose port counters show every problem ``ibdiag counters`` must recognise, one per port.

Four InfiniBand NDR ports (compute rails) and two RoCE ports (storage), one ConnectX-7 per root port:

* ``mlx5_0`` — healthy, traffic, no errors;
* ``mlx5_1`` — saturated counters: port_xmit_wait 4294967295 (32-bit), link_downed 255 (8-bit),
  port_xmit_discards 65535 (16-bit), excessive_buffer_overrun_errors 15 (4-bit), plus symbol errors;
* ``mlx5_2`` — the port went down (DOWN / Polling) after flapping (link_downed 3, link_error_recovery 2);
* ``mlx5_3`` — no ``counters/`` directory (hw_counters only);
* ``mlx5_4`` — RoCE port with transport loss in hw_counters and ECN/CNP congestion;
* ``mlx5_5`` — every ``counters/`` file reads ``N/A (no PMA)``, what old kernels print for a device
  without a PMA; no hw_counters.

The mix on one node is for testing, not a claim that such a node exists.
"""

from __future__ import annotations

from tests.sysfsgen.builder import (
    IB_COUNTERS,
    Link,
    Tree,
    ib_gid,
    roce_gids,
    zero_counters,
    zero_hw_counters,
)

NAME = "counters-faulty"

MELLANOX, INTEL = 0x15B3, 0x8086
CX7 = 0x1021
CPUS = "0-31"

#: Counters of a port that has carried jobs: data in 4-octet words, 64-bit (extended) counters.
TRAFFIC = dict(
    port_xmit_data=93415662203,
    port_rcv_data=92886016427,
    port_xmit_packets=24311874,
    port_rcv_packets=24190512,
    unicast_xmit_packets=24310002,
    unicast_rcv_packets=24188771,
    port_xmit_wait=52817,
)


def build(tree: Tree) -> None:
    tree.numa(0, CPUS)
    tree.module("mlx5_core", "24.07-0.6.1")
    tree.module("ib_core")
    hb = tree.host_bridge("0000:40")
    hb.numa, hb.cpulist = 0, CPUS

    def adapter(i: int, *, eth: bool = False):  # type: ignore[no-untyped-def]
        rp = hb.bridge(f"0000:40:0{i + 1}.0", link=Link())
        addr = f"0000:{0x41 + i:02x}:00.0"
        dev = rp.add(
            addr,
            vendor=MELLANOX,
            device=CX7,
            cls=0x020000 if eth else 0x020700,
            subsystem=(MELLANOX, 0x0023),
        )
        guid = f"b83f:d203:00a1:{0x5E10 + i:04x}"
        ib = dev.rdma(
            f"mlx5_{i}",
            fw_ver="28.39.1002",
            board_id="MT_0000000838",
            hca_type="MT4129",
            node_guid=guid,
        )
        bus = 0x41 + i
        netdev = dev.netdev(
            f"enp{bus}s0np0" if eth else f"ibp{bus}s0",
            mtu=9000 if eth else 4092,
            address=f"b8:3f:d2:a1:5e:{0x10 + i:02x}",
        )
        return ib, guid, netdev

    # mlx5_0: healthy.
    ib, guid, _ = adapter(0)
    ib.port(
        1,
        lid="0x21",
        gids=[(ib_gid(guid), "IB/RoCE v1", None)],
        counters=zero_counters(**TRAFFIC),
        hw_counters=zero_hw_counters(),
    )

    # mlx5_1: saturated error and wait counters (IBA counters stick at all ones).
    ib, guid, _ = adapter(1)
    ib.port(
        1,
        lid="0x22",
        gids=[(ib_gid(guid), "IB/RoCE v1", None)],
        counters=zero_counters(
            **{**TRAFFIC, "port_xmit_wait": 4294967295},
            link_downed=255,
            port_xmit_discards=65535,
            excessive_buffer_overrun_errors=15,
            symbol_error=4811,
        ),
        hw_counters=zero_hw_counters(),
    )

    # mlx5_2: the link flapped and is now down (no light from the far end).
    ib, guid, _ = adapter(2)
    ib.port(
        1,
        state="1: DOWN",
        phys_state="2: Polling",
        lid="0xffff",
        gids=[(ib_gid(guid), "IB/RoCE v1", None)],
        counters=zero_counters(**TRAFFIC, link_downed=3, link_error_recovery=2),
        hw_counters=zero_hw_counters(),
    )

    # mlx5_3: no counters/ directory at all.
    ib, guid, _ = adapter(3)
    ib.port(
        1,
        lid="0x24",
        gids=[(ib_gid(guid), "IB/RoCE v1", None)],
        counters=None,
        hw_counters=zero_hw_counters(),
    )

    # mlx5_4: RoCE storage port losing packets (retransmissions) under congestion.
    ib, guid, netdev = adapter(4, eth=True)
    ib.port(
        1,
        rate="200 Gb/sec (4X HDR)",
        link_layer="Ethernet",
        lid="0x0",
        sm_lid="0x0",
        gids=roce_gids("ba3f:d2ff:fea1:5e14", "10.20.0.14", netdev),
        counters=zero_counters(
            port_xmit_data=40211773319,
            port_rcv_data=40017728810,
            port_xmit_packets=10455123,
            port_rcv_packets=10402287,
        ),
        hw_counters=zero_hw_counters(
            out_of_sequence=5821,
            packet_seq_err=1290,
            local_ack_timeout_err=37,
            implied_nak_seq_err=12,
            out_of_buffer=4411,
            duplicate_request=211,
            np_ecn_marked_roce_packets=884213,
            np_cnp_sent=880117,
            rp_cnp_handled=912554,
        ),
    )

    # mlx5_5: an old kernel without a PMA for this device: every counters/ file says so.
    ib, guid, netdev = adapter(5, eth=True)
    old_names = [n for n in IB_COUNTERS if not n.startswith(("unicast_", "multicast_"))]
    ib.port(
        1,
        rate="200 Gb/sec (4X HDR)",
        link_layer="Ethernet",
        lid="0x0",
        sm_lid="0x0",
        gids=roce_gids("ba3f:d2ff:fea1:5e15", "10.20.0.15", netdev),
        counters={n: "N/A (no PMA)" for n in old_names},
        hw_counters=None,
    )

    tree.manifest(
        "gpu-node-12",
        "project fixture: one port per counter problem (saturated, down, no counters/, RoCE loss, N/A (no PMA))",
    )
