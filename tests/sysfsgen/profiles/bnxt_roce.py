"""A RoCE node with one dual-port Broadcom BCM57508 (bnxt_en + bnxt_re), 100 GbE, no GPUs.

hw_counters names from drivers/infiniband/hw/bnxt_re/hw_counters.c (bnxt_re_stat_descs, the extended
set of P5 chips); values in the kernel's format (``%llu``).

* ``bnxt_re0`` — healthy after traffic: packets, a little ECN/CNP;
* ``bnxt_re1`` — transport loss: timeout retransmits, NAK sequence errors, out-of-sequence drops,
  duplicate requests, and receive-buffer drops.
"""

from __future__ import annotations

from tests.sysfsgen.builder import Link, Tree, roce_gids, zero_counters

NAME = "bnxt-roce"

BROADCOM, BCM57508 = 0x14E4, 0x1750
CPUS = "0-31"

BNXT_HW_COUNTERS = (
    "active_pds",
    "active_ahs",
    "active_qps",
    "active_srqs",
    "active_cqs",
    "active_mrs",
    "active_mws",
    "rx_pkts",
    "rx_bytes",
    "tx_pkts",
    "tx_bytes",
    "recoverable_errors",
    "rx_roce_errors",
    "rx_roce_discards",
    "to_retransmits",
    "seq_err_naks_rcvd",
    "max_retry_exceeded",
    "rnr_naks_rcvd",
    "missing_resp",
    "unrecoverable_err",
    "bad_resp_err",
    "local_qp_op_err",
    "local_protection_err",
    "mem_mgmt_op_err",
    "remote_invalid_req_err",
    "remote_access_err",
    "remote_op_err",
    "dup_req",
    "res_exceed_max",
    "res_length_mismatch",
    "res_exceeds_wqe",
    "res_opcode_err",
    "res_rx_invalid_rkey",
    "res_rx_domain_err",
    "res_rx_no_perm",
    "res_rx_range_err",
    "res_tx_invalid_rkey",
    "res_tx_domain_err",
    "res_tx_no_perm",
    "res_tx_range_err",
    "res_irrq_oflow",
    "res_unsup_opcode",
    "res_unaligned_atomic",
    "res_rem_inv_err",
    "res_mem_err",
    "res_srq_err",
    "res_cmp_err",
    "res_invalid_dup_rkey",
    "res_wqe_format_err",
    "res_cq_load_err",
    "res_srq_load_err",
    "res_tx_pci_err",
    "res_rx_pci_err",
    "oos_drop_count",
    "tx_atomic_req",
    "tx_read_req",
    "tx_read_resp",
    "tx_write_req",
    "tx_send_req",
    "rx_atomic_req",
    "rx_read_req",
    "rx_read_resp",
    "rx_write_req",
    "rx_send_req",
    "rx_roce_good_pkts",
    "rx_roce_good_bytes",
    "rx_out_of_buffer",
    "tx_cnp_pkts",
    "rx_cnp_pkts",
    "rx_ecn_marked_pkts",
)


def bnxt_counters(**values: int) -> dict[str, int]:
    out = {n: 0 for n in BNXT_HW_COUNTERS}
    out["lifespan"] = 10
    out.update(values)
    return out


def build(tree: Tree) -> None:
    tree.numa(0, CPUS)
    tree.module("bnxt_en")
    tree.module("bnxt_re")
    tree.module("ib_core")
    # The PCI driver the RDMA device's parent is bound to (device/driver), as on a live node.
    tree.file("bus/pci/drivers/bnxt_en/uevent", "DRIVER=bnxt_en")
    # ... and the driver's module (drivers/base/module.c module_add_driver): the in-tree bnxt_en sets no
    # MODULE_VERSION and this profile's kernel no srcversion, so its version is unknown.
    tree.link("bus/pci/drivers/bnxt_en/module", "module/bnxt_en")
    hb = tree.host_bridge("0000:30")
    hb.numa, hb.cpulist = 0, CPUS
    rp = hb.bridge("0000:30:01.0", link=Link("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16))
    values = [
        bnxt_counters(
            tx_pkts=81234567,
            rx_pkts=80123456,
            tx_bytes=334455667788,
            rx_bytes=330011223344,
            active_qps=2,
            active_pds=1,
            rx_ecn_marked_pkts=120,
            tx_cnp_pkts=118,
            rx_cnp_pkts=97,
        ),
        bnxt_counters(
            tx_pkts=41234567,
            rx_pkts=40998877,
            tx_bytes=164455667788,
            rx_bytes=163011223344,
            to_retransmits=4211,
            seq_err_naks_rcvd=380,
            oos_drop_count=5120,
            dup_req=77,
            rx_out_of_buffer=1500,
            rx_ecn_marked_pkts=88101,
            tx_cnp_pkts=87990,
            rx_cnp_pkts=91002,
        ),
    ]
    for fn in (0, 1):
        addr = f"0000:31:00.{fn}"
        dev = rp.add(
            addr,
            vendor=BROADCOM,
            device=BCM57508,
            cls=0x020000,
            link=Link("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16),
            subsystem=(BROADCOM, 0x5208),
        )
        tree.link(f"{dev.rel}/driver", "bus/pci/drivers/bnxt_en")
        guid = f"5e00:00ff:fe3a:{0x7C00 + fn:04x}"
        ib = dev.rdma(
            f"bnxt_re{fn}",
            fw_ver="227.1.111.0/pkg 227.1.111000",
            board_id="BCM957508-P2100G",
            hca_type="Broadcom NetXtreme-E RoCE",
            node_guid=guid,
        )
        netdev = dev.netdev(
            f"ens2f{fn}np{fn}",
            dev_port=0,
            mtu=9000,
            address=f"5c:00:00:3a:7c:{fn:02x}",
            speed=100000,
        )
        ib.port(
            1,
            rate="100 Gb/sec (4X EDR)",
            link_layer="Ethernet",
            lid="0x0",
            sm_lid="0x0",
            gids=roce_gids(f"5e00:00ff:fe3a:7c{fn:02x}", f"10.30.0.{fn + 1}", netdev),
            counters=zero_counters(
                port_xmit_packets=values[fn]["tx_pkts"],
                port_rcv_packets=values[fn]["rx_pkts"],
                port_xmit_data=values[fn]["tx_bytes"] // 4,
                port_rcv_data=values[fn]["rx_bytes"] // 4,
            ),
            hw_counters=values[fn],
        )
    tree.manifest(
        "bnxt-node-02", "project fixture: dual-port Broadcom BCM57508 RoCE, bnxt_re hw_counters"
    )
