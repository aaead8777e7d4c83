"""Which network interface gloo's connections use (gloo carries the whole run, or NCCL runs' control group).

gloo picks its interface from ``GLOO_SOCKET_IFNAME`` when set (comma-separated exact names), else from
the address this host's name resolves to (falling back to loopback when that address cannot be bound).
Across hosts a name that resolves to loopback (Debian's ``127.0.1.1`` line in ``/etc/hosts``) leaves
peers unable to connect, so:

* ``GLOO_SOCKET_IFNAME`` is checked here: an interface that does not exist is a usage error (exit 2)
  instead of a low-level gloo failure;
* without it, ``NCCL_SOCKET_IFNAME`` (the variable NCCL users already set) is honoured for gloo too: its
  prefix list (``ib,eth``; ``^`` to exclude, ``=`` for exact names, as NCCL reads it) is matched against
  this host's interfaces and the first match with an IPv4 address is exported as ``GLOO_SOCKET_IFNAME``;
* without either, a job spanning hosts whose host name resolves to loopback is refused (exit 2, naming
  the variables to set).

The interface used is reported per rank (``per_rank[].interface`` in the results).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ibdiag.errors import UsageError


@dataclass(frozen=True)
class ControlInterface:
    name: str
    """Interface name(s) gloo uses, or ``?`` when only the address is known."""
    how: str
    """Where it came from, in words."""
    export: str | None = None
    """A value to export as GLOO_SOCKET_IFNAME before the process group is made (derived from NCCL_SOCKET_IFNAME)."""

    def describe(self) -> str:
        return f"{self.name} ({self.how})"


def _ipv4(addrs: Any) -> list[str]:
    return [a.address for a in addrs if getattr(a, "family", None) == socket.AF_INET]


def match_nccl_ifname(spec: str, names: list[str]) -> list[str]:
    """NCCL_SOCKET_IFNAME's matching: comma-separated prefixes; ``^`` excludes them; ``=`` means exact names."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    items = [s.strip() for s in spec.split(",") if s.strip()]

    def hit(name: str) -> bool:
        return any(name == it if exact else name.startswith(it) for it in items)

    return [n for n in names if hit(n) != exclude]


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def control_interface(
    env: Mapping[str, str],
    *,
    spans_hosts: bool,
    if_addrs: Mapping[str, Any] | None = None,
    host_addr: str | None = None,
) -> ControlInterface:
    """The interface gloo will use on this rank (see the module docstring); UsageError when it cannot work."""
    if if_addrs is None:
        import psutil

        if_addrs = psutil.net_if_addrs()
    names = sorted(if_addrs)
    gloo = env.get("GLOO_SOCKET_IFNAME", "").strip()
    if gloo:
        wanted = [n.strip() for n in gloo.split(",") if n.strip()]
        missing = [n for n in wanted if n not in if_addrs]
        if missing:
            raise UsageError(
                f"GLOO_SOCKET_IFNAME={gloo!r}: no interface {', '.join(missing)} on this host (it has {', '.join(names) or 'none'})",
                hint="set GLOO_SOCKET_IFNAME to an interface every host has on the network between them, e.g. the IPoIB or Ethernet one",
            )
        return ControlInterface(gloo, "GLOO_SOCKET_IFNAME")
    nccl = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if nccl:
        excluding = nccl.startswith("^")
        # an exclusion list never picks loopback (NCCL does not either); a name given outright is honoured
        matches = [
            n
            for n in match_nccl_ifname(nccl, names)
            if _ipv4(if_addrs[n])
            and not (excluding and all(_is_loopback(a) for a in _ipv4(if_addrs[n])))
        ]
        if not matches:
            raise UsageError(
                f"NCCL_SOCKET_IFNAME={nccl!r} matches no interface with an IPv4 address on this host (it has {', '.join(names) or 'none'})",
                hint="fix NCCL_SOCKET_IFNAME, or set GLOO_SOCKET_IFNAME for ibdiag's gloo connections",
            )
        return ControlInterface(
            matches[0], f"first match of NCCL_SOCKET_IFNAME={nccl}", export=matches[0]
        )
    host = socket.gethostname()
    if host_addr is None:
        try:
            host_addr = socket.gethostbyname(host)
        except OSError:
            host_addr = "127.0.0.1"  # gloo falls back to loopback when the name does not resolve
    owner = next((n for n in names if host_addr in _ipv4(if_addrs[n])), "?")
    if _is_loopback(host_addr) and spans_hosts:
        raise UsageError(
            f"this job spans hosts but host name {host} resolves to {host_addr} (loopback), which gloo would use: peers could not connect",
            hint="export GLOO_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) to the interface of the network between the hosts, e.g. GLOO_SOCKET_IFNAME=eth0",
        )
    return ControlInterface(owner, f"host name {host} -> {host_addr}")
