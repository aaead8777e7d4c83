"""The one module that imports pyverbs (rdma-core's Python bindings, Debian ``python3-pyverbs``).

Everything RDMA-specific that needs the library goes through here, and every pyverbs error is
turned into an ibdiag error with a hint here, nowhere else: "pyverbs is not installed", "no RDMA
device", "port not active" are exit 3 (:class:`~ibdiag.errors.CannotRunError`).

What the calls correspond to in C (``ib_write_bw`` does the same): ``ibv_get_device_list``,
``ibv_open_device``, ``ibv_query_port``, ``ibv_alloc_pd``, ``ibv_create_cq``, ``ibv_create_qp``
(RC), ``ibv_reg_mr`` over the buffer from :mod:`ibdiag.bench.buffers`, ``ibv_modify_qp`` to
INIT/RTR/RTS, ``ibv_post_send`` (RDMA WRITE) and ``ibv_poll_cq``.

The pure decisions (which device, which GID, the QP attributes) live in
:mod:`ibdiag.bench.p2p.rdma`; this module only translates them into pyverbs objects.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ibdiag.errors import CannotRunError
from ibdiag.parse import PHYS_STATES, PORT_STATES

if TYPE_CHECKING:
    from ibdiag.bench.buffers import Buffer
    from ibdiag.bench.p2p.rdma import ConnectPlan, QpInfo

#: Where Debian/Ubuntu's ``python3-pyverbs`` installs the package. A virtual environment does not
#: see it, so the import is retried with this directory appended to the END of ``sys.path``
#: (packages of the venv keep precedence over Debian's).
DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"

PYVERBS_HINT = "install rdma-core's Python bindings: apt-get install python3-pyverbs (Debian/Ubuntu) or dnf install python3-pyverbs"
NO_DEVICE_HINT = (
    "this host has no RDMA adapter visible to the kernel (ls /sys/class/infiniband, ibv_devices); "
    "load the driver (mlx5_ib), or use --transport tcp"
)

#: ``enum ibv_mtu`` <-> bytes.
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
MTU_ENUM = {v: k for k, v in MTU_BYTES.items()}

_PV: SimpleNamespace | None = None


def import_pyverbs() -> SimpleNamespace:
    """Import pyverbs (retrying with Debian's dist-packages appended) and return its modules.

    Raises :class:`CannotRunError` "pyverbs is not installed" (exit 3) when neither works.
    """
    global _PV
    if _PV is not None:
        return _PV
    try:
        import pyverbs  # noqa: F401
    except ImportError as first:
        # A venv (or pyenv) Python does not look in Debian's dist-packages; add it last, not first,
        # so nothing the venv provides is shadowed by a Debian package.
        if os.path.isdir(DEBIAN_DIST_PACKAGES) and DEBIAN_DIST_PACKAGES not in sys.path:
            sys.path.append(DEBIAN_DIST_PACKAGES)
        try:
            import pyverbs  # noqa: F401,F811
        except ImportError as second:
            detail = second if str(second) != str(first) else first
            raise CannotRunError(f"pyverbs is not installed ({detail})", hint=PYVERBS_HINT) from None
    try:
        import pyverbs.addr as addr
        import pyverbs.cq as cq
        import pyverbs.device as device
        import pyverbs.mr as mr
        import pyverbs.pd as pd
        import pyverbs.pyverbs_error as pyverbs_error
        import pyverbs.qp as qp
        import pyverbs.wr as wr

        enums = _import_enums()
    except ImportError as e:
        # e.g. bindings built for another Python version than the one running ibdiag
        raise CannotRunError(f"pyverbs is installed but cannot be loaded: {e}", hint=PYVERBS_HINT) from None
    _PV = SimpleNamespace(addr=addr, cq=cq, device=device, enums=enums, mr=mr, pd=pd, error=pyverbs_error, qp=qp, wr=wr)
    return _PV


def _import_enums() -> Any:
    """The ``IBV_*`` constants: ``pyverbs.enums`` (rdma-core < 59) or, where that module is gone,
    the enum classes of ``pyverbs.libibverbs_enums`` flattened into one namespace."""
    try:
        import pyverbs.enums as enums

        return enums
    except ImportError:
        # rdma-core 59 removed pyverbs/enums.pyx; the constants live in libibverbs_enums, whose named
        # enums (Cython 3 cpdef enum) are classes: ibv_qp_type.IBV_QPT_RC.
        import pyverbs.libibverbs_enums as lib

        return flatten_enums(lib)


def flatten_enums(module: Any) -> SimpleNamespace:
    """Every ``IBV_*`` integer of ``module``: module-level ones and the members of its enum classes."""
    import enum

    names: dict[str, int] = {}
    for attr, value in vars(module).items():
        if isinstance(value, type) and issubclass(value, enum.Enum):
            for name, member in value.__members__.items():  # aliases too (equal values)
                names.setdefault(name, int(member.value))
        elif attr.startswith("IBV_") and isinstance(value, int):
            names[attr] = int(value)
    return SimpleNamespace(**names)


def _errors(pv: SimpleNamespace) -> tuple[type[BaseException], ...]:
    return (pv.error.PyverbsError,)


def list_devices() -> list[str]:
    """Names of the RDMA devices (``ibv_devices``); CannotRunError "no RDMA device" when there are none."""
    pv = import_pyverbs()
    try:
        devices = pv.device.get_device_list()
    except _errors(pv) as e:
        # libibverbs fails ibv_get_device_list with ENOSYS/ENODEV when no device is registered.
        raise CannotRunError(f"no RDMA device ({e})", hint=NO_DEVICE_HINT) from None
    names = [_text(d.name) for d in devices]
    if not names:
        raise CannotRunError("no RDMA device", hint=NO_DEVICE_HINT)
    return names


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


@dataclass(frozen=True)
class PortState:
    """What ``ibv_query_port`` says about a port (``ibv_devinfo -v``'s per-port block)."""

    state: str
    phys_state: str | None
    link_layer: str
    """``InfiniBand`` or ``Ethernet``."""
    lid: int
    active_mtu_bytes: int


def port_state_from_attr(attr: Any) -> PortState:
    """A pyverbs ``PortAttr`` -> :class:`PortState` (state names as sysfs prints them)."""
    link = {2: "Ethernet"}.get(int(attr.link_layer), "InfiniBand")  # IBV_LINK_LAYER_ETHERNET = 2; 0/1 are IB
    return PortState(
        state=PORT_STATES.get(int(attr.state), str(attr.state)),
        phys_state=PHYS_STATES.get(int(attr.phys_state)),
        link_layer=link,
        lid=int(attr.lid),
        active_mtu_bytes=MTU_BYTES.get(int(attr.active_mtu), 1024),
    )


def build_qp_attr(plan: ConnectPlan) -> Any:
    """The pyverbs ``QPAttr`` carrying every attribute of INIT, RTR and RTS for an RC QP (like perftest).

    Needs no device: tests check the object field by field.
    """
    pv = import_pyverbs()
    e = pv.enums
    attr = pv.qp.QPAttr(qp_state=e.IBV_QPS_INIT)
    attr.pkey_index = plan.pkey_index
    attr.port_num = plan.port_num
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    attr.path_mtu = MTU_ENUM[plan.path_mtu_bytes]
    attr.dest_qp_num = plan.dest_qp_num
    attr.rq_psn = plan.rq_psn
    attr.max_dest_rd_atomic = plan.max_dest_rd_atomic
    attr.min_rnr_timer = plan.min_rnr_timer
    if plan.is_global:
        gr = pv.addr.GlobalRoute(dgid=pv.addr.GID(plan.dgid), sgid_index=plan.sgid_index, hop_limit=plan.hop_limit, traffic_class=plan.traffic_class)
        attr.ah_attr = pv.addr.AHAttr(gr=gr, is_global=1, port_num=plan.port_num, dlid=plan.dlid, sl=plan.sl)
    else:
        attr.ah_attr = pv.addr.AHAttr(is_global=0, port_num=plan.port_num, dlid=plan.dlid, sl=plan.sl)
    attr.timeout = plan.timeout
    attr.retry_cnt = plan.retry_cnt
    attr.rnr_retry = plan.rnr_retry
    attr.sq_psn = plan.sq_psn
    attr.max_rd_atomic = plan.max_rd_atomic
    return attr


def build_qp_init_attr(pv: SimpleNamespace, cq: Any, tx_depth: int) -> Any:
    """``ibv_qp_init_attr`` of the RC QP: ``tx_depth`` send WRs and ``sq_sig_all = 0``.

    pyverbs defaults ``sq_sig_all`` to 1, which makes every WRITE complete and defeats the
    selective signalling of the bandwidth loop (perftest sets it to 0 too). Needs no device
    (``cq`` may be None in tests).
    """
    cap = pv.qp.QPCap(max_send_wr=tx_depth, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    return pv.qp.QPInitAttr(qp_type=pv.enums.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, sq_sig_all=0)


def port_max_msg_bytes(device: str, port: int) -> int:
    """The port's ``max_msg_sz`` (``ibv_devinfo -v``), the largest message one work request may carry."""
    pv = import_pyverbs()
    errs = _errors(pv)
    try:
        ctx = pv.device.Context(name=device)
    except errs as e:
        raise CannotRunError(f"cannot open RDMA device {device}: {e}", hint="check the name with ibv_devices or ibdiag topo; opening needs access to /dev/infiniband/uverbs*") from None
    try:
        return int(ctx.query_port(port).max_msg_sz)
    except errs as e:
        raise CannotRunError(f"{device} has no port {port}: {e}", hint="pick the port with --ib-port (ibv_devinfo lists them)") from None
    finally:
        ctx.close()


def build_write_wr(pv: SimpleNamespace, *, addr: int, length: int, lkey: int, remote_addr: int, rkey: int, signaled: bool) -> Any:
    """One RDMA WRITE work request (``IBV_WR_RDMA_WRITE``), signaled or not (selective signalling)."""
    e = pv.enums
    sge = pv.wr.SGE(addr, length, lkey)
    wr = pv.wr.SendWR(wr_id=0, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED if signaled else 0)
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


class RdmaEndpoint:
    """One RC queue pair on ``device``/``port`` with ``buffer`` registered for local and remote write.

    Not run on hardware by the project's tests (no RDMA device there); see docs/readme/bench-p2p.md.
    """

    def __init__(self, device: str, port: int, buffer: Buffer, *, send_offset: int, tx_depth: int, gid: str | None, gid_index: int | None) -> None:
        pv = import_pyverbs()
        self._pv = pv
        self.device = device
        self.port = port
        self.buffer = buffer
        self.view = buffer.view
        self.send_offset = send_offset
        self.gid = gid
        self.gid_index = gid_index
        errs = _errors(pv)
        try:
            self.ctx = pv.device.Context(name=device)
        except errs as e:
            raise CannotRunError(f"cannot open RDMA device {device}: {e}", hint="check the name with ibv_devices or ibdiag topo; opening needs access to /dev/infiniband/uverbs*") from None
        try:
            try:
                self.port_state = port_state_from_attr(self.ctx.query_port(port))
            except errs as e:
                raise CannotRunError(f"{device} has no port {port}: {e}", hint="pick the port with --ib-port (ibv_devinfo lists them)") from None
            from ibdiag.bench.p2p.rdma import ensure_port_active

            ensure_port_active(device, port, self.port_state.state, self.port_state.phys_state)
            e = pv.enums
            self.pd = pv.pd.PD(self.ctx)
            self.cq = pv.cq.CQ(self.ctx, max(16, tx_depth), None, None, 0)
            self.max_msg_bytes = int(self.ctx.query_port(port).max_msg_sz)
            self.qp = pv.qp.QP(self.pd, build_qp_init_attr(pv, self.cq, tx_depth))
            access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
            self.mr = pv.mr.MR(self.pd, buffer.size, access, address=buffer.address)
        except errs as err:
            self.close()
            raise CannotRunError(f"cannot set up an RDMA queue pair on {device} port {port}: {err}", hint="check ulimit -l (locked memory) and the device with ibv_devinfo") from None
        except BaseException:
            self.close()
            raise
        self._remote: tuple[int, int] | None = None

    def local_info(self, psn: int) -> QpInfo:
        from ibdiag.bench.p2p.rdma import QpInfo

        return QpInfo(
            lid=self.port_state.lid,
            qpn=int(self.qp.qp_num),
            psn=psn,
            gid=self.gid,
            link_layer=self.port_state.link_layer,
            rkey=int(self.mr.rkey),
            addr=int(self.buffer.address),
            length=self.send_offset,
            mtu_bytes=self.port_state.active_mtu_bytes,
        )

    def connect(self, plan: ConnectPlan, remote: QpInfo) -> None:
        """Move the QP to INIT, RTR and RTS towards ``remote`` (``ibv_modify_qp`` three times)."""
        attr = build_qp_attr(plan)
        try:
            self.qp.to_init(attr)
            self.qp.to_rtr(attr)
            self.qp.to_rts(attr)
        except _errors(self._pv) as e:
            raise CannotRunError(
                f"cannot connect the queue pair on {self.device} to the peer: {e}",
                hint="both ends must use the same link layer and a routable GID (try --gid-index); see dmesg",
            ) from None
        self._remote = (remote.addr, remote.rkey)

    def prepare_write(self, length: int, *, signaled: bool) -> Any:
        """A reusable WRITE of ``length`` bytes from the local send half to the start of the peer's buffer."""
        if self._remote is None:
            raise RuntimeError("connect() first")
        return build_write_wr(
            self._pv, addr=self.buffer.address + self.send_offset, length=length, lkey=int(self.mr.lkey),
            remote_addr=self._remote[0], rkey=self._remote[1], signaled=signaled,
        )

    def post(self, wr: Any, wr_id: int) -> None:
        """``ibv_post_send`` of a prepared WRITE, tagged with ``wr_id``."""
        wr.wr_id = wr_id
        try:
            self.qp.post_send(wr)
        except _errors(self._pv) as e:
            raise CannotRunError(f"posting an RDMA WRITE on {self.device} failed: {e}", hint="the send queue overflowed or the QP is in error; rerun with --debug") from None

    def poll(self, max_entries: int = 16) -> list[int]:
        """Work-request ids of completed WRITEs (``ibv_poll_cq``); a failed completion raises."""
        try:
            n, wcs = self.cq.poll(max_entries)
        except _errors(self._pv) as e:
            raise CannotRunError(f"polling the completion queue on {self.device} failed: {e}") from None
        out = []
        ok = int(self._pv.enums.IBV_WC_SUCCESS)
        for wc in wcs[:n] if n else ():
            if int(wc.status) != ok:
                raise CannotRunError(
                    f"RDMA WRITE completed with error status {int(wc.status)} ({_wc_status_text(int(wc.status))}) on {self.device}",
                    hint="the peer went away or the path is broken (retry exceeded); check both ports with ibdiag counters",
                )
            out.append(int(wc.wr_id))
        return out

    def close(self) -> None:
        """Destroy QP, MR, CQ, PD and close the device, in that order."""
        for obj in (getattr(self, "qp", None), getattr(self, "mr", None), getattr(self, "cq", None), getattr(self, "pd", None), getattr(self, "ctx", None)):
            if obj is None:
                continue
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - best effort on the way out; the kernel frees the rest at exit
                pass

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
