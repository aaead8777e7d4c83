"""What each driver counter under ``hw_counters/`` means (retransmission, receiver not ready, ECN, ...),
how it is judged (its group) and what an operator does about it; which drivers have it.

Unlike the IBA counters (:mod:`ibdiag.counters.spec`), every driver names its own: one meaning may
have several names, one name has one meaning in every driver that has it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

#: ``hw_counters/lifespan`` is the cache interval of the driver's hw_counters in ms, not a counter
#: (kernel drivers/infiniband/core/sysfs.c, hw_stat_lifespan): never read as one, never judged.
HW_LIFESPAN = "lifespan"


class HwGroup(str, Enum):
    LOSS = "loss"
    """Transport retransmissions, timeouts and sequence errors: packets are being lost."""
    HOST = "host"
    """Drops caused by the receiving host (no posted receive buffer)."""
    CONGESTION = "congestion"
    """ECN marks and congestion notification packets: congestion control at work."""
    TRAFFIC = "traffic"
    """Packets sent and received: never judged; the denominator of a loss share."""


class Meaning(str, Enum):
    """What a driver's hw_counter counts, whatever the driver calls it."""

    RETRANSMIT = "retransmit"
    RETRY_EXCEEDED = "retry_exceeded"
    SEQUENCE = "sequence"
    DUPLICATE = "duplicate"
    RX_DROP = "rx_drop"
    LINK_DOWN = "link_down"
    RNR = "rnr"
    RNR_EXCEEDED = "rnr_exceeded"
    OUT_OF_BUFFER = "out_of_buffer"
    ECN = "ecn"
    CNP = "cnp"
    TX_PACKETS = "tx_packets"
    RX_PACKETS = "rx_packets"


_LOSS_HINT = (
    "on a lossless fabric this means packets are dropped somewhere on the path: on RoCE check PFC and ECN "
    "on the NIC (mlnx_qos -i <netdev>) and on every switch hop, and the switch drop counters; on InfiniBand "
    "look for the port with symbol/receive errors along the path"
)


_RNR_HINT = (
    "the receiving side had no receive buffer posted until the retries ran out: an application/NCCL "
    "problem on the peer, or a peer that stopped; check the job's logs on both nodes"
)


_OOB_HINT = "the receiving application does not post receive buffers fast enough (host side, not the fabric)"


@dataclass(frozen=True)
class MeaningSpec:
    group: HwGroup
    label: str
    """What the meaning is, in the table legend and the finding's note."""
    hint: str


#: One entry per meaning: how it is judged (group) and what an operator does about it (hint).
MEANINGS: dict[Meaning, MeaningSpec] = {
    Meaning.RETRANSMIT: MeaningSpec(HwGroup.LOSS, "retransmit/timeout", _LOSS_HINT),
    Meaning.RETRY_EXCEEDED: MeaningSpec(
        HwGroup.LOSS, "retries exhausted (QP in error)", _LOSS_HINT
    ),
    Meaning.SEQUENCE: MeaningSpec(HwGroup.LOSS, "sequence error", _LOSS_HINT),
    Meaning.DUPLICATE: MeaningSpec(
        HwGroup.LOSS, "duplicate request (a retransmission arrived)", _LOSS_HINT
    ),
    Meaning.RX_DROP: MeaningSpec(HwGroup.LOSS, "received packets dropped", _LOSS_HINT),
    Meaning.LINK_DOWN: MeaningSpec(
        HwGroup.LOSS,
        "link went down",
        "the netdev under the RDMA device lost its link: check `ip link`, the cable and the switch port",
    ),
    Meaning.RNR: MeaningSpec(HwGroup.HOST, "receiver not ready (RNR NAK)", _RNR_HINT),
    Meaning.RNR_EXCEEDED: MeaningSpec(
        HwGroup.HOST, "RNR retries exhausted (QP in error)", _RNR_HINT
    ),
    Meaning.OUT_OF_BUFFER: MeaningSpec(HwGroup.HOST, "out of receive buffers", _OOB_HINT),
    Meaning.ECN: MeaningSpec(HwGroup.CONGESTION, "ECN-marked packets", ""),
    Meaning.CNP: MeaningSpec(HwGroup.CONGESTION, "congestion notification packets", ""),
    Meaning.TX_PACKETS: MeaningSpec(HwGroup.TRAFFIC, "packets sent", ""),
    Meaning.RX_PACKETS: MeaningSpec(HwGroup.TRAFFIC, "packets received", ""),
}


@dataclass(frozen=True)
class HwSpec:
    """One driver counter: its sysfs name under ``hw_counters/``, its meaning, the drivers that have it."""

    name: str
    meaning: Meaning
    drivers: tuple[str, ...]
    desc: str
    """What this driver's counter counts, in words."""
    short: str | None = None
    """A short column label (defaults to the name)."""

    @property
    def group(self) -> HwGroup:
        return MEANINGS[self.meaning].group

    @property
    def hint(self) -> str:
        return MEANINGS[self.meaning].hint

    @property
    def label(self) -> str:
        return self.short or self.name


_H = HwSpec


_M = Meaning


MLX5, RXE, BNXT, IRDMA, EFA = ("mlx5",), ("rxe",), ("bnxt_re",), ("irdma",), ("efa",)


#: Every driver counter ibdiag knows the meaning of, by sysfs name. Sources: mlx5 —
#: drivers/infiniband/hw/mlx5/counters.c and NVIDIA's "Understanding mlx5 Linux Counters"; rxe —
#: drivers/infiniband/sw/rxe/rxe_hw_counters.c; bnxt_re — drivers/infiniband/hw/bnxt_re/hw_counters.c;
#: irdma — drivers/infiniband/hw/irdma/verbs.c (irdma_hw_stat_names); efa —
#: drivers/infiniband/hw/efa/efa_verbs.c (EFA_DEFINE_PORT_STATS). One name has one meaning in every
#: driver that has it (a test checks); other hw_counters are read, shown in JSON/CSV/prom, not judged.
HW_COUNTERS: dict[str, HwSpec] = {
    h.name: h
    for h in (
        # mlx5
        _H(
            "local_ack_timeout_err",
            _M.RETRANSMIT,
            MLX5,
            "the sender's ACK timer expired and it retransmitted",
            "ack_timeout",
        ),
        _H(
            "packet_seq_err",
            _M.SEQUENCE,
            MLX5,
            "NAK sequence errors received (the peer saw a gap and asked for a retransmission)",
            "seq_err",
        ),
        _H(
            "out_of_sequence",
            _M.SEQUENCE,
            MLX5,
            "packets received out of sequence (a packet before them was lost)",
            "out_of_seq",
        ),
        _H(
            "implied_nak_seq_err",
            _M.SEQUENCE,
            MLX5,
            "responses with a later PSN than expected (implied loss of a READ response or ACK)",
            "implied_nak",
        ),
        _H(
            "rnr_nak_retry_err",
            _M.RNR_EXCEEDED,
            MLX5,
            "receiver-not-ready retries exhausted (the QP went to the error state)",
            "rnr_retry",
        ),
        _H(
            "out_of_buffer",
            _M.OUT_OF_BUFFER,
            MLX5,
            "packets dropped because no receive buffer was posted",
            "out_of_buf",
        ),
        _H("np_ecn_marked_roce_packets", _M.ECN, MLX5, "ECN-marked RoCE packets received", "ecn"),
        _H(
            "np_cnp_sent",
            _M.CNP,
            MLX5,
            "congestion notification packets sent to senders",
            "cnp_sent",
        ),
        _H(
            "rp_cnp_handled",
            _M.CNP,
            MLX5,
            "congestion notification packets handled (this sender slowed down)",
            "cnp_handled",
        ),
        # mlx5, rxe
        _H(
            "duplicate_request",
            _M.DUPLICATE,
            MLX5 + RXE,
            "duplicate requests received (the sender retransmitted a request this side had seen)",
            "dup_req",
        ),
        # rxe (Soft-RoCE)
        _H("sent_pkts", _M.TX_PACKETS, RXE, "packets sent"),
        _H("rcvd_pkts", _M.RX_PACKETS, RXE, "packets received"),
        _H(
            "completer_retry_err",
            _M.RETRANSMIT,
            RXE,
            "the requester's retry timer or a NAK made it resend (rxe_comp.c)",
            "retry",
        ),
        _H(
            "retry_exceeded_err",
            _M.RETRY_EXCEEDED,
            RXE,
            "transport retries exhausted: the QP went to the error state",
            "retry_exceeded",
        ),
        _H(
            "rcvd_seq_err",
            _M.SEQUENCE,
            RXE,
            "NAK sequence errors received by the requester",
            "seq_err",
        ),
        _H(
            "out_of_seq_request",
            _M.SEQUENCE,
            RXE,
            "requests received out of sequence by the responder",
            "out_of_seq",
        ),
        _H(
            "rcvd_rnr_err",
            _M.RNR,
            RXE,
            "RNR NAKs received (the peer had no receive posted)",
            "rnr_rcvd",
        ),
        _H(
            "send_rnr_err",
            _M.RNR,
            RXE,
            "RNR NAKs sent (this side had no receive posted)",
            "rnr_sent",
        ),
        _H(
            "retry_rnr_exceeded_err",
            _M.RNR_EXCEEDED,
            RXE,
            "RNR retries exhausted: the QP went to the error state",
            "rnr_exceeded",
        ),
        _H("link_downed", _M.LINK_DOWN, RXE, "the netdev under the rxe device went down"),
        # bnxt_re (Broadcom)
        _H("tx_pkts", _M.TX_PACKETS, BNXT + EFA, "packets sent"),
        _H("rx_pkts", _M.RX_PACKETS, BNXT + EFA, "packets received"),
        _H("to_retransmits", _M.RETRANSMIT, BNXT, "retransmissions after a timeout", "to_retrans"),
        _H(
            "max_retry_exceeded",
            _M.RETRY_EXCEEDED,
            BNXT,
            "transport retries exhausted",
            "retry_exceeded",
        ),
        _H("seq_err_naks_rcvd", _M.SEQUENCE, BNXT, "NAK sequence errors received", "seq_nak"),
        _H("oos_drop_count", _M.SEQUENCE, BNXT, "out-of-sequence packets dropped", "oos_drop"),
        _H(
            "missing_resp",
            _M.SEQUENCE,
            BNXT,
            "responses that never arrived (implied loss)",
            "missing_resp",
        ),
        _H("dup_req", _M.DUPLICATE, BNXT, "duplicate requests received", "dup_req"),
        _H("rx_roce_discards", _M.RX_DROP, BNXT, "received RoCE packets discarded", "rx_discard"),
        _H("rnr_naks_rcvd", _M.RNR, BNXT, "RNR NAKs received", "rnr_rcvd"),
        _H(
            "rx_out_of_buffer",
            _M.OUT_OF_BUFFER,
            BNXT,
            "packets dropped for lack of a receive buffer",
            "out_of_buf",
        ),
        _H("rx_ecn_marked_pkts", _M.ECN, BNXT, "ECN-marked packets received", "ecn"),
        _H("tx_cnp_pkts", _M.CNP, BNXT, "CNPs sent", "cnp_sent"),
        _H("rx_cnp_pkts", _M.CNP, BNXT, "CNPs received (this sender slowed down)", "cnp_rcvd"),
        # irdma (Intel E810/X722; iWARP counts TCP segments)
        _H("ip4OutPkts", _M.TX_PACKETS, IRDMA, "IPv4 packets sent"),
        _H("ip4InPkts", _M.RX_PACKETS, IRDMA, "IPv4 packets received"),
        _H(
            "tcpRetransSegs",
            _M.RETRANSMIT,
            IRDMA,
            "iWARP TCP segments retransmitted",
            "tcp_retrans",
        ),
        _H("ip4InDiscards", _M.RX_DROP, IRDMA, "received IPv4 packets discarded", "ip4_discard"),
        _H("ip6InDiscards", _M.RX_DROP, IRDMA, "received IPv6 packets discarded", "ip6_discard"),
        _H("RxECNMrkd", _M.ECN, IRDMA, "ECN-marked packets received", "ecn"),
        _H("cnpSent", _M.CNP, IRDMA, "CNPs sent", "cnp_sent"),
        _H("cnpHandled", _M.CNP, IRDMA, "CNPs handled (this sender slowed down)", "cnp_handled"),
        # efa (AWS; SRD retransmits in the device)
        _H(
            "retrans_pkts", _M.RETRANSMIT, EFA, "packets the SRD transport retransmitted", "retrans"
        ),
        _H(
            "retrans_timeout_events",
            _M.RETRANSMIT,
            EFA,
            "SRD retransmission timeouts (the path was changed)",
            "retrans_to",
        ),
        _H("rx_drops", _M.RX_DROP, EFA, "received packets dropped", "rx_drops"),
    )
}


#: The judged hw_counters: every known one but the packet counts.
HW_JUDGED: dict[str, HwSpec] = {
    n: h for n, h in HW_COUNTERS.items() if h.group is not HwGroup.TRAFFIC
}


def packet_counters(names: Iterable[str]) -> tuple[str | None, str | None]:
    """(sent, received) hw_counter names among ``names`` (an iterable of the port's hw_counters)."""
    present = set(names)
    tx = next(
        (n for n, h in HW_COUNTERS.items() if h.meaning is Meaning.TX_PACKETS and n in present),
        None,
    )
    rx = next(
        (n for n, h in HW_COUNTERS.items() if h.meaning is Meaning.RX_PACKETS and n in present),
        None,
    )
    return tx, rx


CONGESTION_HINT = (
    "ECN marks and CNPs mean switch queues filled and DCQCN slowed the senders: congestion (incast, "
    "oversubscribed uplinks, unbalanced routing), not an error; compare with the other rails and the job's placement"
)
