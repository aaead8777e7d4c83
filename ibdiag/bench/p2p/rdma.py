"""The RDMA data path: RC queue pairs, RDMA WRITE bandwidth and RDMA WRITE ping-pong latency.

What ``ib_write_bw`` and ``ib_write_lat`` do, in the same shape:

* bandwidth: the client keeps up to ``tx_depth`` WRITEs outstanding and asks for a completion only
  every ``cq_mod``-th one (selective signalling); a completion for work request ``k`` means all
  earlier ones on the same RC send queue completed. The clock is looked at only at signalled
  boundaries, so the last WRITE of a duration run is always signalled. Bandwidth = bytes of the
  measured WRITEs / time from the end of the warm-up to the last completion.
* latency: each side WRITEs ``size`` bytes into the other's buffer, the last byte carrying an
  iteration marker (1..255); the other side spins on that byte, then answers. One-way = round
  trip / 2.

Pure decisions (device, GID, QP attributes, validation of what the peer sends) are functions here
and are tested on sysfs fixtures; the library calls are in :mod:`ibdiag.bench.verbs`. The loops take
any endpoint with ``prepare_write``/``post``/``poll``/``view`` so their logic is tested without a device.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ibdiag.errors import CannotRunError, PeerTimeoutError, UsageError
from ibdiag.topo.model import Gid, Port

#: ``ibv_qp_attr`` values perftest uses for RC: ACK timeout 4.096 µs * 2^14 ≈ 67 ms, 7 retries,
#: 7 RNR retries (infinite), RNR timer 12 (0.64 ms), one outstanding RDMA READ/atomic.
QP_TIMEOUT = 14
QP_RETRY_CNT = 7
QP_RNR_RETRY = 7
QP_MIN_RNR_TIMER = 12
#: Hop limit in the GRH (RoCE v2 maps it to the IP TTL).
HOP_LIMIT = 64

MTUS = (256, 512, 1024, 2048, 4096)
#: ``struct ibv_sge``'s ``length`` is a ``uint32_t``: one WRITE carries at most 4 GiB - 1 bytes
#: (larger sizes raise OverflowError inside pyverbs).
SGE_MAX_BYTES = 2**32 - 1
_GID_RE = re.compile(r"^[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){7}$")

ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"


# --- device, port and GID choice -----------------------------------------------------------------


def ensure_port_active(device: str, port: int, state: str | None, phys_state: str | None) -> None:
    """CannotRunError (exit 3) unless the port is ACTIVE (``ibstat``'s ``State: Active``)."""
    if state == "ACTIVE":
        return
    phys = f", physical state {phys_state}" if phys_state else ""
    raise CannotRunError(
        f"port {port} of {device} is not active (state {state or 'unknown'}{phys})",
        hint="check the cable and the switch port (ibdiag topo, ibstat); on InfiniBand a subnet manager must be running; or pick another --device/--ib-port",
    )


def choose_device(ports: Sequence[Port], device: str | None) -> Port:
    """The port to use: ``device``'s, or the first ACTIVE one among ``ports`` (in device order).

    ``ports`` holds one :class:`~ibdiag.topo.model.Port` per RDMA device (the ``--ib-port`` of each),
    read from sysfs like ``ibdiag topo`` does.
    """
    if device is not None:
        for p in ports:
            if p.adapter == device:
                ensure_port_active(p.adapter, p.port, p.state, p.phys_state)
                return p
        names = ", ".join(p.adapter for p in ports) or "none"
        raise CannotRunError(f"no RDMA device named {device} with that port", hint=f"devices here: {names} (ibv_devices)")
    for p in ports:
        if p.active:
            return p
    states = ", ".join(f"{p.adapter} port {p.port} {p.state or 'unknown'}" for p in ports) or "no RDMA devices"
    raise CannotRunError(f"no active RDMA port ({states})", hint="bring a link up, or name one with --device and --ib-port")


def _size_limit(max_msg_bytes: int | None) -> int:
    return SGE_MAX_BYTES if not max_msg_bytes else min(SGE_MAX_BYTES, max_msg_bytes)


def _limit_text(n: int) -> str:
    from ibdiag.units import format_bytes

    return format_bytes(n) if n & (n - 1) == 0 else f"{n} bytes"


def message_size_problem(sizes: Sequence[int], max_msg_bytes: int | None, device: str, port: int) -> str | None:
    """Why a size cannot be one RDMA WRITE on ``device``/``port``, or None when all can.

    The limit is the port's ``max_msg_sz`` (``ibv_devinfo -v``; 0 or None: unknown) and the
    32-bit SGE length, whichever is smaller.
    """
    limit = _size_limit(max_msg_bytes)
    too_big = [s for s in sizes if s > limit]
    if not too_big:
        return None
    source = "its max_msg_sz" if limit == max_msg_bytes else "the 32-bit SGE length"
    return f"a {_limit_text(max(too_big))} message is larger than one RDMA WRITE on {device} port {port} can carry ({_limit_text(limit)}, {source})"


def check_message_sizes(sizes: Sequence[int], max_msg_bytes: int | None, device: str, port: int) -> None:
    """UsageError (exit 2) when a size is larger than :func:`message_size_problem` allows."""
    problem = message_size_problem(sizes, max_msg_bytes, device, port)
    if problem:
        limit = _size_limit(max_msg_bytes)
        raise UsageError(problem, hint=f"use sizes up to {_limit_text(limit)} with --transport rdma, e.g. --sizes 8:{limit}")


@dataclass(frozen=True)
class GidChoice:
    index: int | None
    """GID table index; None on InfiniBand without a GRH (LID routing)."""
    gid: str | None
    type: str | None
    reason: str


def _gid_rank(g: Gid) -> tuple[int, int]:
    # perftest (get_best_gid_index): RoCE v2 over v1; among equals an IPv4-mapped GID, then a
    # global IPv6 one, link-local last; the lowest index breaks ties.
    v2 = 0 if g.type == ROCE_V2 else 1
    if g.is_ipv4_mapped:
        scope = 0
    elif not g.gid.lower().startswith("fe80"):
        scope = 1
    else:
        scope = 2
    return (v2, scope)


def choose_gid(port: Port, requested: int | None = None) -> GidChoice:
    """The source GID for ``port``: ``requested`` (``--gid-index``) if it is populated, else automatic.

    RoCE (link layer Ethernet) needs a GID: the IPv4-mapped RoCE v2 one when there is one, as
    perftest picks. InfiniBand routes by LID inside a subnet and uses no GRH unless an index is given.
    """
    by_index = {g.index: g for g in port.gids}
    where = f"{port.adapter} port {port.port}"
    if requested is not None:
        g = by_index.get(requested)
        if g is None:
            populated = ", ".join(str(i) for i in sorted(by_index)) or "none"
            raise UsageError(f"--gid-index {requested}: no such GID on {where}", hint=f"populated GID indices: {populated} (show_gids, /sys/class/infiniband/{port.adapter}/ports/{port.port}/gids)")
        return GidChoice(g.index, g.gid, g.type, f"--gid-index {requested}")
    if port.link_layer != "Ethernet":
        return GidChoice(None, None, None, "InfiniBand: LID routing, no GRH")
    if not port.gids:
        netdev = port.netdev or "the port's netdev"
        raise CannotRunError(f"{where} (RoCE) has no usable GID", hint=f"configure an IP address on {netdev}; RoCE v2 GIDs follow the netdev's addresses")
    best = min(port.gids, key=lambda g: (_gid_rank(g), g.index))
    kind = "IPv4-mapped" if best.is_ipv4_mapped else ("link-local" if best.gid.lower().startswith("fe80") else "IPv6")
    return GidChoice(best.index, best.gid, best.type, f"auto: {best.type or 'unknown type'} {kind}")


# --- what the peers exchange ---------------------------------------------------------------------


@dataclass(frozen=True)
class QpInfo:
    """One side's queue pair, as perftest prints ``local address: LID ... QPN ... PSN ... RKey ... VAddr``."""

    lid: int
    qpn: int
    psn: int
    gid: str | None
    link_layer: str
    rkey: int
    addr: int
    length: int
    """Bytes the peer may write at ``addr`` (the receive half of the registered buffer)."""
    mtu_bytes: int
    """The port's active MTU."""

    def to_json(self) -> dict[str, Any]:
        return {
            "lid": self.lid,
            "qpn": self.qpn,
            "psn": self.psn,
            "gid": self.gid,
            "link_layer": self.link_layer,
            "rkey": self.rkey,
            "addr": self.addr,
            "length": self.length,
            "mtu": self.mtu_bytes,
        }

    @classmethod
    def from_json(cls, doc: Any) -> QpInfo:
        """Validate what the peer sent; ValueError names the bad field."""
        if not isinstance(doc, dict):
            raise ValueError("queue pair details are not an object")

        def num(key: str, bits: int) -> int:
            v = doc.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**bits:
                raise ValueError(f"{key} must be an unsigned {bits}-bit integer, not {v!r}")
            return v

        gid = doc.get("gid")
        if gid is not None and (not isinstance(gid, str) or not _GID_RE.match(gid)):
            raise ValueError(f"gid {gid!r} is not a GID")
        link = doc.get("link_layer")
        if link not in ("InfiniBand", "Ethernet"):
            raise ValueError(f"link_layer {link!r} is not InfiniBand or Ethernet")
        mtu = doc.get("mtu")
        if mtu not in MTUS:
            raise ValueError(f"mtu {mtu!r} is not one of {MTUS}")
        return cls(
            lid=num("lid", 16),
            qpn=num("qpn", 24),
            psn=num("psn", 24),
            gid=gid,
            link_layer=link,
            rkey=num("rkey", 32),
            addr=num("addr", 64),
            length=num("length", 50),
            mtu_bytes=mtu,
        )


@dataclass(frozen=True)
class ConnectPlan:
    """Every attribute of the INIT -> RTR -> RTS transitions of one RC queue pair."""

    port_num: int
    pkey_index: int
    path_mtu_bytes: int
    dest_qp_num: int
    rq_psn: int
    sq_psn: int
    dlid: int
    is_global: bool
    dgid: str | None
    sgid_index: int | None
    hop_limit: int
    traffic_class: int
    sl: int
    timeout: int
    retry_cnt: int
    rnr_retry: int
    min_rnr_timer: int
    max_rd_atomic: int
    max_dest_rd_atomic: int


def plan_connection(local: QpInfo, remote: QpInfo, *, port_num: int, gid_index: int | None, needed_bytes: int) -> ConnectPlan:
    """The RC attributes towards ``remote``; CannotRunError when the two ends cannot talk.

    Path MTU = the smaller active MTU of the two ports (perftest does the same). A GRH is used
    on RoCE always, and on InfiniBand when a GID index was chosen.
    """
    if local.link_layer != remote.link_layer:
        raise CannotRunError(
            f"link layers differ: this side is {local.link_layer}, the server's port is {remote.link_layer}",
            hint="RDMA needs both ends on the same fabric: pick matching --device on both sides",
        )
    if remote.length < needed_bytes:
        raise CannotRunError(f"the peer registered {remote.length} bytes, fewer than the {needed_bytes} this run needs", hint="both sides must run the same ibdiag version")
    is_global = local.link_layer == "Ethernet" or gid_index is not None
    if is_global and (remote.gid is None or gid_index is None):
        raise CannotRunError(
            "RoCE needs a GID on both ends and one side has none" if local.link_layer == "Ethernet" else "--gid-index was given here but the peer sent no GID",
            hint="configure an IP address on the RoCE netdev, or give --gid-index on both sides",
        )
    if not is_global and remote.lid == 0:
        raise CannotRunError("the peer's InfiniBand port has LID 0 (no subnet manager has configured it)", hint="start a subnet manager (opensm) on the fabric; ibstat shows the LID")
    return ConnectPlan(
        port_num=port_num,
        pkey_index=0,
        path_mtu_bytes=min(local.mtu_bytes, remote.mtu_bytes),
        dest_qp_num=remote.qpn,
        rq_psn=remote.psn,
        sq_psn=local.psn,
        dlid=remote.lid,
        is_global=is_global,
        dgid=remote.gid if is_global else None,
        sgid_index=gid_index if is_global else None,
        hop_limit=HOP_LIMIT,
        traffic_class=0,
        sl=0,
        timeout=QP_TIMEOUT,
        retry_cnt=QP_RETRY_CNT,
        rnr_retry=QP_RNR_RETRY,
        min_rnr_timer=QP_MIN_RNR_TIMER,
        max_rd_atomic=1,
        max_dest_rd_atomic=1,
    )


def signal_interval(tx_depth: int) -> int:
    """Signal every ``cq_mod``-th WRITE: half the send queue, so one signalled batch is always in flight."""
    return max(1, tx_depth // 2)


# --- the loops -----------------------------------------------------------------------------------


class Endpoint(Protocol):
    view: memoryview
    """The registered buffer: receive half at 0, send half at ``send_offset``."""
    send_offset: int

    def prepare_write(self, length: int, *, signaled: bool) -> Any: ...

    def post(self, wr: Any, wr_id: int) -> None: ...

    def poll(self, max_entries: int = 16) -> list[int]: ...


@dataclass(frozen=True)
class WriteStats:
    messages: int
    bytes: int
    seconds: float


#: Empty CQ polls between two looks at the clock (a deadline check costs ~50 ns, a poll ~0.5 µs).
_POLLS_PER_CLOCK = 1024


def _post_and_complete(
    ep: Endpoint,
    wrs: tuple[Any, Any],
    *,
    total: int | None,
    deadline: float | None,
    tx_depth: int,
    cq_mod: int,
    timeout_s: float,
    heartbeat: Callable[[], None] | None,
    heartbeat_s: float,
) -> int:
    """Post WRITEs (``total`` of them, or until ``deadline``) keeping ``tx_depth`` in flight; wait for all."""
    plain, signaled = wrs
    clock = time.perf_counter
    posted = 0
    completed = 0
    stop = total if total is not None else None
    last_progress = clock()
    next_beat = last_progress + heartbeat_s
    empty = 0
    while True:
        while posted - completed < tx_depth and (stop is None or posted < stop):
            nxt = posted + 1
            boundary = nxt % cq_mod == 0 or (stop is not None and nxt == stop)
            ep.post(signaled if boundary else plain, posted)
            posted = nxt
            if boundary:
                now = clock()
                if stop is None and deadline is not None and now >= deadline:
                    stop = posted
                if heartbeat is not None and now >= next_beat:
                    heartbeat()
                    next_beat = now + heartbeat_s
        if stop is not None and completed >= stop:
            return completed
        done = ep.poll(16)
        if done:
            completed = max(completed, max(done) + 1)
            empty = 0
            last_progress = clock()
            continue
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0:
            now = clock()
            if now - last_progress > timeout_s:
                raise PeerTimeoutError(
                    f"no RDMA WRITE completion for {timeout_s:g} s ({completed} of {posted} completed)",
                    hint="the peer's port or the path is down, or the peer process died; check ibdiag counters on both ends",
                )
            if heartbeat is not None and now >= next_beat:
                heartbeat()
                next_beat = now + heartbeat_s


def write_bw(
    ep: Endpoint,
    size: int,
    *,
    warmup: int,
    iters: int | None,
    duration_s: float | None,
    tx_depth: int,
    timeout_s: float,
    on_measure_start: Callable[[], None] | None = None,
    heartbeat: Callable[[], None] | None = None,
    heartbeat_s: float | None = None,
) -> WriteStats:
    """RDMA WRITE bandwidth of ``size``-byte messages (``ib_write_bw -s size``).

    ``heartbeat`` is called every ``heartbeat_s`` (default: a third of the timeout, at least 1 s) so
    the passive side, which only waits on the control channel, knows the client is alive.
    """
    if iters is None and duration_s is None:
        raise ValueError("iters or duration_s")
    cq_mod = signal_interval(tx_depth)
    wrs = (ep.prepare_write(size, signaled=False), ep.prepare_write(size, signaled=True))
    beat = heartbeat_s if heartbeat_s is not None else max(1.0, timeout_s / 3)
    if warmup:
        _post_and_complete(ep, wrs, total=warmup, deadline=None, tx_depth=tx_depth, cq_mod=cq_mod, timeout_s=timeout_s, heartbeat=heartbeat, heartbeat_s=beat)
    if on_measure_start is not None:
        on_measure_start()
    t0 = time.perf_counter()
    deadline = None if duration_s is None else t0 + duration_s
    n = _post_and_complete(ep, wrs, total=iters, deadline=deadline, tx_depth=tx_depth, cq_mod=cq_mod, timeout_s=timeout_s, heartbeat=heartbeat, heartbeat_s=beat)
    t1 = time.perf_counter()
    return WriteStats(messages=n, bytes=n * size, seconds=t1 - t0)


def marker(i: int) -> int:
    """The value the last byte of the ``i``-th latency message carries: 1..255, never 0."""
    return i % 255 + 1


def _spin_until(view: memoryview, pos: int, value: int, timeout_s: float, what: str) -> None:
    clock = time.monotonic
    start = None
    spins = 0
    while view[pos] != value:
        spins += 1
        if spins & 0xFFFF == 0:
            now = clock()
            if start is None:
                start = now
            elif now - start > timeout_s:
                raise PeerTimeoutError(f"no RDMA WRITE from the peer for {timeout_s:g} s while waiting for {what}", hint="the peer process died or the path is down")


def _await_completion(ep: Endpoint, wr_id: int, timeout_s: float) -> None:
    clock = time.monotonic
    start = clock()
    empty = 0
    while True:
        done = ep.poll(16)
        if done and max(done) >= wr_id:
            return
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0 and clock() - start > timeout_s:
            raise PeerTimeoutError(f"no completion for an RDMA WRITE within {timeout_s:g} s", hint="the peer's port or the path is down; check ibdiag counters")


def write_lat_initiator(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float) -> list[int]:
    """``n`` WRITE ping-pongs starting at iteration ``first``; round trips in ns (the client's side)."""
    view = ep.view
    send_offset = ep.send_offset
    last = size - 1
    wr = ep.prepare_write(size, signaled=True)
    clock = time.perf_counter_ns
    samples = [0] * n
    for k in range(n):
        i = first + k
        m = marker(i)
        view[send_offset + last] = m
        t0 = clock()
        ep.post(wr, i)
        _spin_until(view, last, m, timeout_s, f"the answer to WRITE {i}")
        samples[k] = clock() - t0
        _await_completion(ep, i, timeout_s)
    return samples


def write_lat_responder(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float) -> None:
    """Answer ``n`` WRITE pings starting at iteration ``first`` (the server's side)."""
    view = ep.view
    send_offset = ep.send_offset
    last = size - 1
    wr = ep.prepare_write(size, signaled=True)
    for k in range(n):
        i = first + k
        m = marker(i)
        _spin_until(view, last, m, timeout_s, f"WRITE {i} from the client")
        view[send_offset + last] = m
        ep.post(wr, i)
        _await_completion(ep, i, timeout_s)


def reset_areas(view: memoryview, size: int, send_offset: int) -> None:
    """Zero the first ``size`` bytes of the receive and send halves before a latency phase."""
    zeros = bytes(size)
    view[0:size] = zeros
    view[send_offset : send_offset + size] = zeros
