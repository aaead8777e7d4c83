"""One RDMA endpoint: RC queue pairs, their completion queues and a registered buffer, built from the
pyverbs objects :mod:`ibdiag.bench.p2p.rdma.verbs` hands out (that module alone imports pyverbs)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from ibdiag.bench.buffers import Buffer
from ibdiag.bench.p2p.rdma.device import ensure_port_active
from ibdiag.bench.p2p.rdma.plan import ConnectPlan, QpInfo
from ibdiag.bench.p2p.rdma.verbs import (
    PostList,
    build_qp_attr,
    build_qp_init_attr,
    build_send_wr,
    import_pyverbs,
    link,
    mr_access,
    open_device,
    port_state_from_attr,
    pyverbs_errors,
)
from ibdiag.errors import CannotRunError


class RdmaEndpoint:
    """``qps`` RC queue pairs on ``device``/``port`` over ``buffer`` (registered for local and remote
    access): one send CQ, and a receive CQ with ``rx_depth`` receives per QP when the run SENDs.

    Run on a real kernel stack (Soft-RoCE) by the guest tests (tests/rdmavm); never on hardware here.
    """

    def __init__(
        self,
        device: str,
        port: int,
        buffer: Buffer,
        *,
        send_offset: int,
        tx_depth: int,
        gid: str | None,
        gid_index: int | None,
        qps: int = 1,
        rx_depth: int = 0,
        max_inline: int = 0,
        inline_optional: bool = False,
    ) -> None:
        pv = import_pyverbs()
        self._pv = pv
        self.device = device
        self.port = port
        self.buffer = buffer
        self.view = buffer.view
        self.send_offset = send_offset
        self.gid = gid
        self.gid_index = gid_index
        #: Send-queue depth of each QP (the latency loops signal at most every ``tx_depth // 2``-th WR).
        self.tx_depth = tx_depth
        self.qps: list[Any] = []
        errs = pyverbs_errors(pv)
        self.ctx = open_device(pv, device)
        try:
            try:
                self.port_state = port_state_from_attr(self.ctx.query_port(port))
            except errs as e:
                raise CannotRunError(
                    f"{device} has no port {port}: {e}",
                    hint="pick the port with --ib-port (ibv_devinfo lists them)",
                ) from None

            ensure_port_active(device, port, self.port_state.state, self.port_state.phys_state)
            dev = self.ctx.query_device()
            #: Outstanding RDMA READs this device allows per QP, each way (ibv_devinfo max_qp_rd_atom).
            self.max_rd_atomic = max(1, min(int(dev.max_qp_rd_atom), int(dev.max_qp_init_rd_atom)))
            self.pd = pv.pd.PD(self.ctx)
            self.cq = pv.cq.CQ(self.ctx, max(16, tx_depth * qps), None, None, 0)
            self.rcq = (
                pv.cq.CQ(self.ctx, max(16, rx_depth * qps), None, None, 0) if rx_depth else None
            )
            self.max_msg_bytes = int(self.ctx.query_port(port).max_msg_sz)
            self.max_inline = max_inline
            self._create_qps(pv, errs, qps, tx_depth, rx_depth, max_inline, inline_optional)
            self.qp = self.qps[0]
            self._register(pv, errs, buffer)
        except errs as err:
            self.close()
            raise CannotRunError(
                f"cannot set up an RDMA queue pair on {device} port {port}: {err}",
                hint="check ulimit -l (locked memory), --inline and --qps against ibv_devinfo -v",
            ) from None
        except BaseException:
            self.close()
            raise
        self._remote: tuple[int, int, int] | None = None
        self._recv: dict[tuple[int, int], PostList] = {}
        self._ok = int(pv.enums.IBV_WC_SUCCESS)
        #: What the send queue carries, for messages (``--verb``; the session sets it).
        self.verb = "write"

    def _create_qps(
        self,
        pv: SimpleNamespace,
        errs: tuple[type[BaseException], ...],
        qps: int,
        tx_depth: int,
        rx_depth: int,
        max_inline: int,
        inline_optional: bool,
    ) -> None:
        """``qps`` RC QPs on the CQs; without inline when the automatic size is more than the device offers."""

        def new_qp(inline: int) -> Any:
            return pv.qp.QP(
                self.pd,
                build_qp_init_attr(
                    pv, self.cq, tx_depth, rcq=self.rcq, rx_depth=rx_depth, max_inline=inline
                ),
            )

        try:
            self.qps.append(new_qp(max_inline))
        except errs:
            if not (inline_optional and max_inline):
                raise
            self.max_inline = (
                0  # the automatic inline size is more than this device offers: post from the MR
            )
            self.qps.append(new_qp(0))
        for _ in range(qps - 1):
            self.qps.append(new_qp(self.max_inline))

    def _register(
        self, pv: SimpleNamespace, errs: tuple[type[BaseException], ...], buffer: Buffer
    ) -> None:
        """The MR over ``buffer``: relaxed ordering where this rdma-core knows it, else without."""
        try:
            self.mr = pv.mr.MR(
                self.pd, buffer.size, mr_access(pv, relaxed=True), address=buffer.address
            )
            self.relaxed_ordering = hasattr(pv.enums, "IBV_ACCESS_RELAXED_ORDERING")
        except errs:
            self.mr = pv.mr.MR(
                self.pd, buffer.size, mr_access(pv, relaxed=False), address=buffer.address
            )
            self.relaxed_ordering = False

    def local_info(self, psn: int) -> QpInfo:
        qpns = tuple(int(q.qp_num) for q in self.qps)
        return QpInfo(
            lid=self.port_state.lid,
            qpn=qpns[0],
            psn=psn,
            gid=self.gid,
            link_layer=self.port_state.link_layer,
            rkey=int(self.mr.rkey),
            addr=int(self.buffer.address),
            length=self.send_offset,
            mtu_bytes=self.port_state.active_mtu_bytes,
            qpns=qpns if len(qpns) > 1 else (),
        )

    def connect(self, plans: ConnectPlan | list[ConnectPlan], remote: QpInfo) -> None:
        """Move each QP to INIT, RTR and RTS towards the peer's (``ibv_modify_qp`` three times each)."""
        for qp, plan in zip(self.qps, plans if isinstance(plans, list) else [plans], strict=True):
            attr = build_qp_attr(plan)
            try:
                qp.to_init(attr)
                qp.to_rtr(attr)
                qp.to_rts(attr)
            except pyverbs_errors(self._pv) as e:
                raise CannotRunError(
                    f"cannot connect the queue pair on {self.device} to the peer: {e}",
                    hint="both ends must use the same link layer and a routable GID (try --gid-index); see dmesg",
                ) from None
        self._remote = (remote.addr, remote.rkey, remote.length)

    def prepare(
        self, verb: str, length: int, *, signaled: bool, lane: int = 0, inline: bool = False
    ) -> PostList:
        """A reusable work request on QP ``lane``: WRITE or SEND from the send half (to the start of the
        peer's buffer), or READ of the peer's send half into this side's receive half."""
        return self._post_list(verb, length, 1, signaled=signaled, lane=lane, inline=inline)

    def prepare_chain(
        self, verb: str, length: int, count: int, *, lane: int = 0, inline: bool = False
    ) -> PostList:
        """``count`` such work requests linked into one post list, only the last one signalled."""
        return self._post_list(verb, length, count, signaled=True, lane=lane, inline=inline)

    def _post_list(
        self, verb: str, length: int, count: int, *, signaled: bool, lane: int, inline: bool
    ) -> PostList:
        if self._remote is None:
            raise RuntimeError("connect() first")
        raddr, rkey, rlen = self._remote
        base = self.buffer.address
        local, remote = (base, raddr + rlen) if verb == "read" else (base + self.send_offset, raddr)
        lkey = int(self.mr.lkey)
        wrs = [
            build_send_wr(
                self._pv,
                verb,
                addr=local,
                length=length,
                lkey=lkey,
                remote_addr=remote,
                rkey=rkey,
                signaled=signaled and k == count - 1,
                inline=inline,
            )
            for k in range(count)
        ]
        link(wrs)
        return PostList(self.qps[lane], wrs[0], wrs[-1], tuple(wrs))

    def post(self, wr: PostList, wr_id: int) -> None:
        """One ``ibv_post_send`` of a prepared work request or post list, its last request tagged ``wr_id``."""
        wr.tail.wr_id = wr_id
        try:
            wr.qp.post_send(wr.head)
        except pyverbs_errors(self._pv) as e:
            raise CannotRunError(
                f"posting an RDMA work request on {self.device} failed: {e}",
                hint="the send queue overflowed or the QP is in error; rerun with --debug",
            ) from None

    def poster(self, wr: PostList) -> Callable[[], None]:
        """The bare ``ibv_post_send`` of ``wr`` as it is (ids unchanged), for the latency loops'
        unsignalled requests: one C call, no Python frame. It raises pyverbs' own error; the loops then
        post through :meth:`post`, which says what failed."""
        return functools.partial(wr.qp.post_send, wr.head)

    def post_recv(self, lane: int, wr_id: int, count: int = 1) -> None:
        """One ``ibv_post_recv`` of ``count`` linked receives into the receive half on QP ``lane`` (SEND
        runs), each tagged ``wr_id``."""
        key = (lane, count)
        chain = self._recv.get(key)
        if chain is None:
            sge = self._pv.wr.SGE(self.buffer.address, self.send_offset, int(self.mr.lkey))
            wrs = [self._pv.wr.RecvWR(0, 1, [sge]) for _ in range(count)]
            link(wrs)
            chain = self._recv[key] = PostList(self.qps[lane], wrs[0], wrs[-1], tuple(wrs))
        for wr in chain.wrs:
            wr.wr_id = wr_id
        try:
            chain.qp.post_recv(chain.head)
        except pyverbs_errors(self._pv) as e:
            raise CannotRunError(
                f"posting a receive on {self.device} failed: {e}",
                hint="the receive queue overflowed or the QP is in error",
            ) from None

    def _poll(self, cq: Any, max_entries: int, what: str) -> list[Any]:
        try:
            n, wcs = cq.poll(max_entries)
        except pyverbs_errors(self._pv) as e:
            raise CannotRunError(
                f"polling the completion queue on {self.device} failed: {e}"
            ) from None
        if not n:
            return []
        ok = self._ok
        for wc in wcs:
            if wc.status != ok:
                raise CannotRunError(
                    f"RDMA {what.upper() if what != 'receive' else what} completed with error status {int(wc.status)} ({_wc_status_text(int(wc.status))}) on {self.device}",
                    hint=_wc_status_hint(int(wc.status)),
                )
        return list(wcs)

    def poll(self, max_entries: int = 16) -> list[int]:
        """Work-request ids of completed sends/WRITEs/READs (``ibv_poll_cq``); a failed completion raises."""
        wcs = self._poll(self.cq, max_entries, self.verb)
        return [wc.wr_id for wc in wcs] if wcs else wcs

    def poll_recv(self, max_entries: int = 16) -> list[tuple[int, int]]:
        """``(wr_id, bytes)`` of completed receives."""
        if self.rcq is None:
            return []
        wcs = self._poll(self.rcq, max_entries, "receive")
        return [(wc.wr_id, wc.byte_len) for wc in wcs] if wcs else wcs

    def close(self) -> None:
        """Destroy the QPs, MR, CQs, PD and close the device, in that order."""
        for obj in (
            *self.qps,
            getattr(self, "mr", None),
            getattr(self, "rcq", None),
            getattr(self, "cq", None),
            getattr(self, "pd", None),
            getattr(self, "ctx", None),
        ):
            if obj is None:
                continue
            try:
                obj.close()
            except Exception:  # best effort on the way out; the kernel frees the rest at exit
                pass
        self.qps = []

    def __enter__(self) -> RdmaEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: ``enum ibv_wc_status`` names (libibverbs ``ibv_wc_status_str``) for the errors a benchmark meets.
_WC_STATUS = {
    1: "local length error",
    2: "local QP operation error",
    4: "local protection error",
    5: "work request flushed",
    9: "invalid request (remote)",
    10: "remote access error",
    11: "remote operation error",
    12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded",
}


def _wc_status_text(status: int) -> str:
    return _WC_STATUS.get(status, "see ibv_wc_status_str")


#: What a failed completion most often means, by status (the rest get the generic hint).
_WC_HINT = {
    2: "the local queue pair failed: its port or netdev went down (Soft-RoCE: the netdev), or a work request was invalid; check the port with ibdiag topo and ibdiag counters",
    5: "the queue pair had already failed (an earlier error flushed the rest); the first error above is the cause",
    10: "the peer refused the access (memory key or permissions): the peer's registration changed or it restarted; run again",
    12: "the peer did not acknowledge (transport retries exceeded): it went away or the path drops packets; check both ports with ibdiag counters",
    13: "the peer had no receive posted (RNR retries exceeded): the peer process stalled or died",
}


def _wc_status_hint(status: int) -> str:
    return _WC_HINT.get(
        status, "the peer went away or the path is broken; check both ports with ibdiag counters"
    )
