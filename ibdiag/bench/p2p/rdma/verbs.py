"""The one module that imports pyverbs (rdma-core's Python bindings, Debian ``python3-pyverbs``).

Everything RDMA-specific that needs the library goes through here, and every pyverbs error is
turned into an ibdiag error with a hint here, nowhere else: "pyverbs is not installed", "no RDMA
device", "port not active" are exit 3 (:class:`~ibdiag.errors.CannotRunError`).

What the calls correspond to in C (``ib_write_bw`` does the same): ``ibv_get_device_list``,
``ibv_open_device``, ``ibv_query_port``, ``ibv_alloc_pd``, ``ibv_create_cq``, ``ibv_create_qp``
(RC), ``ibv_reg_mr`` over the buffer from :mod:`ibdiag.bench.buffers`, ``ibv_modify_qp`` to
INIT/RTR/RTS, ``ibv_post_send`` (WRITE, READ, SEND; post lists of linked work requests), ``ibv_post_recv`` and
``ibv_poll_cq``. The extended CQ (``ibv_create_cq_ex``, pyverbs ``CQEX``) is not used: reading it
takes Python calls per completion (``next_poll``, ``read_wr_id``, ``read_status``) and per batch
(``start_poll``, ``end_poll``) where ``CQ.poll`` is one call per batch, and with selective signalling
completions are few (one per chain of ``cq_mod`` requests).

The pure decisions live in :mod:`ibdiag.bench.p2p.rdma.device` (which device, port and GID) and
:mod:`ibdiag.bench.p2p.rdma.plan` (the QP attributes); this module only translates them into pyverbs objects.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ibdiag.bench.p2p.rdma.plan import ConnectPlan
from ibdiag.errors import CannotRunError
from ibdiag.parse import PHYS_STATES, PORT_STATES

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
        import pyverbs
    except ImportError as first:
        # A venv (or pyenv) Python does not look in Debian's dist-packages; add it last, not first,
        # so nothing the venv provides is shadowed by a Debian package.
        if os.path.isdir(DEBIAN_DIST_PACKAGES) and DEBIAN_DIST_PACKAGES not in sys.path:
            sys.path.append(DEBIAN_DIST_PACKAGES)
        try:
            import pyverbs  # noqa: F401 - imported only to see whether it loads
        except ImportError as second:
            detail = second if str(second) != str(first) else first
            raise CannotRunError(
                f"pyverbs is not installed ({detail})", hint=PYVERBS_HINT
            ) from None
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
        raise CannotRunError(
            f"pyverbs is installed but cannot be loaded: {e}", hint=PYVERBS_HINT
        ) from None
    _PV = SimpleNamespace(
        addr=addr,
        cq=cq,
        device=device,
        enums=enums,
        mr=mr,
        pd=pd,
        error=pyverbs_error,
        qp=qp,
        wr=wr,
    )
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


def pyverbs_errors(pv: SimpleNamespace) -> tuple[type[BaseException], ...]:
    return (pv.error.PyverbsError,)


def list_devices() -> list[str]:
    """Names of the RDMA devices (``ibv_devices``); CannotRunError "no RDMA device" when there are none."""
    pv = import_pyverbs()
    try:
        devices = pv.device.get_device_list()
    except pyverbs_errors(pv) as e:
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
    link = {2: "Ethernet"}.get(
        int(attr.link_layer), "InfiniBand"
    )  # IBV_LINK_LAYER_ETHERNET = 2; 0/1 are IB
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
    attr.qp_access_flags = (
        e.IBV_ACCESS_LOCAL_WRITE
        | e.IBV_ACCESS_REMOTE_WRITE
        | (e.IBV_ACCESS_REMOTE_READ if plan.remote_read else 0)
    )
    attr.path_mtu = MTU_ENUM[plan.path_mtu_bytes]
    attr.dest_qp_num = plan.dest_qp_num
    attr.rq_psn = plan.rq_psn
    attr.max_dest_rd_atomic = plan.max_dest_rd_atomic
    attr.min_rnr_timer = plan.min_rnr_timer
    if plan.is_global:
        gr = pv.addr.GlobalRoute(
            dgid=pv.addr.GID(plan.dgid),
            sgid_index=plan.sgid_index,
            hop_limit=plan.hop_limit,
            traffic_class=plan.traffic_class,
        )
        attr.ah_attr = pv.addr.AHAttr(
            gr=gr, is_global=1, port_num=plan.port_num, dlid=plan.dlid, sl=plan.sl
        )
    else:
        attr.ah_attr = pv.addr.AHAttr(
            is_global=0, port_num=plan.port_num, dlid=plan.dlid, sl=plan.sl
        )
    attr.timeout = plan.timeout
    attr.retry_cnt = plan.retry_cnt
    attr.rnr_retry = plan.rnr_retry
    attr.sq_psn = plan.sq_psn
    attr.max_rd_atomic = plan.max_rd_atomic
    return attr


def build_qp_init_attr(
    pv: SimpleNamespace,
    cq: Any,
    tx_depth: int,
    *,
    rcq: Any = None,
    rx_depth: int = 1,
    max_inline: int = 0,
) -> Any:
    """``ibv_qp_init_attr`` of the RC QP: ``tx_depth`` send WRs, ``rx_depth`` receives (SEND), up to
    ``max_inline`` bytes inline, and ``sq_sig_all = 0``.

    pyverbs defaults ``sq_sig_all`` to 1, which makes every WRITE complete and defeats the
    selective signalling of the bandwidth loop (perftest sets it to 0 too). Needs no device
    (``cq`` may be None in tests).
    """
    cap = pv.qp.QPCap(
        max_send_wr=tx_depth,
        max_recv_wr=max(1, rx_depth),
        max_send_sge=1,
        max_recv_sge=1,
        max_inline_data=max_inline,
    )
    return pv.qp.QPInitAttr(
        qp_type=pv.enums.IBV_QPT_RC, scq=cq, rcq=cq if rcq is None else rcq, cap=cap, sq_sig_all=0
    )


def mr_access(pv: SimpleNamespace, *, relaxed: bool) -> int:
    """MR access: local and remote write, remote read (``--verb read``), and relaxed ordering where
    this rdma-core knows it (``IBV_ACCESS_RELAXED_ORDERING``, an optional flag a device without it
    ignores, rdma-core verbs.h; perftest sets it by default)."""
    e = pv.enums
    flags = int(e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)
    ro = getattr(e, "IBV_ACCESS_RELAXED_ORDERING", None)
    return flags | (int(ro) if relaxed and ro is not None else 0)


def open_device(pv: SimpleNamespace, device: str) -> Any:
    """A verbs context on ``device``; a device that will not open is a :class:`CannotRunError` naming it."""
    try:
        return pv.device.Context(name=device)
    except pyverbs_errors(pv) as e:
        raise CannotRunError(
            f"cannot open RDMA device {device}: {e}",
            hint="check the name with ibv_devices or ibdiag topo; opening needs access to /dev/infiniband/uverbs*",
        ) from None


def port_max_msg_bytes(device: str, port: int) -> int:
    """The port's ``max_msg_sz`` (``ibv_devinfo -v``), the largest message one work request may carry."""
    pv = import_pyverbs()
    errs = pyverbs_errors(pv)
    ctx = open_device(pv, device)
    try:
        return int(ctx.query_port(port).max_msg_sz)
    except errs as e:
        raise CannotRunError(
            f"{device} has no port {port}: {e}",
            hint="pick the port with --ib-port (ibv_devinfo lists them)",
        ) from None
    finally:
        ctx.close()


def build_write_wr(
    pv: SimpleNamespace,
    *,
    addr: int,
    length: int,
    lkey: int,
    remote_addr: int,
    rkey: int,
    signaled: bool,
) -> Any:
    """One RDMA WRITE work request (``IBV_WR_RDMA_WRITE``), signaled or not (selective signalling)."""
    return build_send_wr(
        pv,
        "write",
        addr=addr,
        length=length,
        lkey=lkey,
        remote_addr=remote_addr,
        rkey=rkey,
        signaled=signaled,
    )


def build_send_wr(
    pv: SimpleNamespace,
    verb: str,
    *,
    addr: int,
    length: int,
    lkey: int,
    remote_addr: int = 0,
    rkey: int = 0,
    signaled: bool,
    inline: bool = False,
) -> Any:
    """One send-queue work request: ``write`` (``IBV_WR_RDMA_WRITE``), ``read`` (``IBV_WR_RDMA_READ``,
    into ``addr`` from the peer's ``remote_addr``) or ``send`` (``IBV_WR_SEND``); ``inline`` copies the
    data into the WR (``IBV_SEND_INLINE``, WRITE and SEND only)."""
    e = pv.enums
    opcode = {"write": e.IBV_WR_RDMA_WRITE, "read": e.IBV_WR_RDMA_READ, "send": e.IBV_WR_SEND}[verb]
    flags = (e.IBV_SEND_SIGNALED if signaled else 0) | (
        e.IBV_SEND_INLINE if inline and verb != "read" else 0
    )
    sge = pv.wr.SGE(addr, length, lkey)
    wr = pv.wr.SendWR(wr_id=0, opcode=opcode, num_sge=1, sg=[sge], send_flags=flags)
    if verb != "send":
        wr.set_wr_rdma(rkey, remote_addr)
    return wr


@dataclass(frozen=True)
class PostList:
    """Work requests of one queue pair linked head to tail (``next_wr``), posted with one
    ``ibv_post_send`` (perftest's post list); :meth:`RdmaEndpoint.post` tags the tail with the id.

    ``wrs`` keeps every work request alive: pyverbs links them by C pointer.
    """

    qp: Any
    head: Any
    tail: Any
    wrs: tuple[Any, ...]

    @property
    def count(self) -> int:
        return len(self.wrs)


def link(wrs: list[Any] | tuple[Any, ...]) -> None:
    """``wrs[i].next_wr = wrs[i + 1]``: one post list (pyverbs ``SendWR``/``RecvWR``)."""
    for a, b in zip(wrs, wrs[1:], strict=False):
        a.next_wr = b
