"""The line rate a point-to-point result is judged against.

RDMA: the port's rate from sysfs (``ports/N/rate``, what ``ibstat`` prints as Rate), read through
``ibdiag.node.discover.read_port``; for a software device (rxe, siw) its netdev's speed, or unknown. TCP: the speed of the interface that carries the connection
(``/sys/class/net/<if>/speed``, Mb/s). Loopback and many virtual interfaces have no speed (the
read fails with EINVAL, or says -1): the rate is then unknown and no bandwidth finding is made.
"""

from __future__ import annotations

from ibdiag.bench.p2p.control.protocol import is_loopback
from ibdiag.bench.results.p2p_meta import LineRate
from ibdiag.node.discover import read_port
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.parse import parse_int


def netdev_for_address(ip: str) -> str | None:
    """The interface that holds ``ip`` (``ip -br addr``), via psutil; None if none does."""
    import psutil

    want = ip.split("%", 1)[0]
    if want.startswith("::ffff:") and "." in want:
        want = want[7:]
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.address and a.address.split("%", 1)[0] == want:
                return str(name)
    return None


def tcp_line_rate(sysfs: SysfsRoot, local_ip: str) -> LineRate:
    """Speed of the interface owning ``local_ip`` (``ethtool``'s Speed, from ``class/net/<if>/speed``)."""
    if is_loopback(local_ip):
        return LineRate(None, "loopback: no line rate")
    netdev = netdev_for_address(local_ip)
    if netdev is None:
        return LineRate(None, f"no interface holds {local_ip}")
    return netdev_line_rate(sysfs, netdev)


def netdev_line_rate(sysfs: SysfsRoot, netdev: str) -> LineRate:
    """``class/net/<netdev>/speed`` (Mb/s) as a line rate in Gb/s."""
    # class/net/<if>/speed: Mb/s; EINVAL on loopback/virtual devices, -1 (SPEED_UNKNOWN) when the
    # link is down or the driver does not know (include/uapi/linux/ethtool.h).
    mbps = sysfs.read_as(f"class/net/{netdev}/speed", parse_int)
    if mbps is None or mbps <= 0:
        return LineRate(None, f"{netdev}: speed unknown")
    return LineRate(mbps / 1000.0, f"{netdev} speed {mbps} Mb/s")


def rdma_line_rate(sysfs: SysfsRoot, device: str, port: int) -> LineRate:
    """The port's rate (``ibstat`` Rate), e.g. 400 Gb/s for ``400 Gb/sec (4X NDR)``."""
    p = read_port(sysfs, device, port, with_gids=False)
    if p.software:
        # rxe/siw: the port's rate file is not the link's (read_port takes the netdev's speed instead).
        return LineRate(p.rate_gbps, f"{device} port {port}: {p.rate_source}")
    if p.rate_gbps is None:
        return LineRate(None, f"{device} port {port}: rate unknown")
    lanes = f" ({p.lanes}X {p.lane_speed})" if p.lanes and p.lane_speed else ""
    return LineRate(p.rate_gbps, f"{device} port {port} rate {p.rate_gbps:g} Gb/s{lanes}")


def judged_line_rate(
    local: LineRate,
    remote: LineRate | None,
    *,
    flag_gbps: float | None = None,
    config_gbps: float | None = None,
    config_source: str = "config [p2p] line_rate_gbps",
) -> LineRate:
    """The rate a run is judged against, in order of precedence: ``--line-rate-gbps``, the config's
    ``line_rate_gbps``, else the slower of the two ends' known rates (each end's rate is the fact its
    own port or interface gives: :func:`rdma_line_rate`, :func:`tcp_line_rate`)."""
    if flag_gbps is not None:
        return LineRate(float(flag_gbps), "--line-rate-gbps")
    if config_gbps is not None:
        return LineRate(float(config_gbps), config_source)
    known = [r for r in (local, remote) if r is not None and r.gbps is not None]
    if not known:
        parts = [local.source] + ([remote.source] if remote is not None else [])
        return LineRate(
            None,
            "; ".join(f"{side}: {s}" for side, s in zip(("client", "server"), parts, strict=False)),
        )
    slowest = min(known, key=lambda r: r.gbps or 0.0)
    side = "client" if slowest is local else "server"
    return LineRate(slowest.gbps, f"{side} {slowest.source}")
