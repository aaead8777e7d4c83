"""One field of a p2p option, request or peer message, checked: integers and times within bounds, ports,
host names, socket buffers, the RDMA port and GID index.

Each failure is a :class:`RequestError` (exit 2) naming the flag (``--iters``) and the value as given;
the request model (:mod:`.params`) and the checks of what a peer sent share them.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any

from ibdiag.errors import UsageError
from ibdiag.text import safe_value
from ibdiag.units import format_bytes, parse_size

#: Longest wait on a peer (``--timeout``), seconds.
MAX_TIMEOUT_S = 86400.0


#: ``--socket-buffer`` bounds: the kernel's SOCK_MIN_SNDBUF is about 4.6 KiB and setsockopt takes a C
#: int, which the kernel doubles (socket(7)); past net.core.[rw]mem_max it is capped anyway.
MIN_SOCKET_BUFFER = 4096


MAX_SOCKET_BUFFER = 2**30


#: RDMA port numbers are 8-bit (``ibv_port_attr``); GID tables have at most 256 entries on every adapter we know.
MAX_IB_PORT = 255


MAX_GID_INDEX = 255


#: DNS limits (RFC 1035 2.3.4): 253 characters in a name, 63 in a label.
MAX_HOST_CHARS = 253


_HOST_CHARS = re.compile(rb"[A-Za-z0-9_.-]+")


class RequestError(UsageError):
    """A request field outside its bounds; the message names the flag (``--iters``) and the value."""


def shown(value: Any) -> str:
    """A bad value as the message shows it: short, escaped (it may come from a peer), a string quoted."""
    return safe_value(value, 40)


def check_int(value: Any, name: str, lo: int, hi: int, *, hint: str | None = None) -> int:
    """``value`` if it is an integer (not a boolean) within ``lo..hi``; :class:`RequestError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be a whole number, not {shown(value)}", hint=hint)
    if not lo <= value <= hi:
        raise RequestError(f"{name} {shown(value)} must be between {lo} and {hi}", hint=hint)
    return value


def check_float(value: Any, name: str, lo: float, hi: float, *, hint: str | None = None) -> float:
    """``value`` if it is a finite number (not a boolean) within ``lo..hi``; :class:`RequestError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{name} must be a finite number, not {shown(value)}", hint=hint)
    if not lo <= value <= hi:
        raise RequestError(f"{name} {shown(value)} must be between {lo:g} and {hi:g}", hint=hint)
    return float(value)


def check_port(port: Any, flag: str = "--port", *, allow_zero: bool = False) -> int:
    """A TCP port (1..65535; 0 too where the kernel may pick one)."""
    lo = 0 if allow_zero else 1
    hint = (
        "use 1..65535" + (" (0 picks a free one)" if allow_zero else "") + "; the default is 18516"
    )
    return check_int(port, flag, lo, 65535, hint=hint)


def check_host(host: Any, what: str = "HOST") -> str:
    """A host name (RFC 1035 lengths, IDNA-encodable) or an IPv4/IPv6 address, ``[::1]`` included."""
    text = host if isinstance(host, str) else ""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(bare.split("%", 1)[0])
        return bare
    except ValueError:
        pass
    hint = "give a host name or an IP address, e.g. node-a or 10.0.0.2"
    if not bare or len(bare) > MAX_HOST_CHARS:
        raise RequestError(
            f"{what} {shown(host)} is not a host name: it has {len(bare)} characters (at most {MAX_HOST_CHARS})",
            hint=hint,
        )
    try:
        encoded = bare.encode("idna")
    except UnicodeError:
        raise RequestError(
            f"{what} {shown(host)} is not a host name (a label is empty, longer than 63 characters, or not encodable)",
            hint=hint,
        ) from None
    if not _HOST_CHARS.fullmatch(encoded) or any(len(label) > 63 for label in encoded.split(b".")):
        raise RequestError(
            f"{what} {shown(host)} is not a host name (letters, digits, '-', '_' and '.' only)",
            hint=hint,
        )
    return bare


def check_socket_buffer(size: int | None) -> int | None:
    """``--socket-buffer`` in bytes (None: kernel autotuning)."""
    if size is None:
        return None
    return check_int(
        size,
        "--socket-buffer",
        MIN_SOCKET_BUFFER,
        MAX_SOCKET_BUFFER,
        hint=f"use {format_bytes(MIN_SOCKET_BUFFER)} to {format_bytes(MAX_SOCKET_BUFFER)} (the kernel caps it at net.core.wmem_max/rmem_max anyway), or leave it out",
    )


def check_timeout(timeout_s: Any) -> float:
    """``--timeout``: more than 0 and at most a day, in seconds."""
    value = check_float(timeout_s, "--timeout", 0.0, MAX_TIMEOUT_S, hint="the default is 10 s")
    if value <= 0:
        raise RequestError(
            f"--timeout {value:g} must be more than 0 seconds", hint="the default is 10 s"
        )
    return value


def check_rdma_port(ib_port: Any, gid_index: Any) -> tuple[int, int | None]:
    """``--ib-port`` (1..255) and ``--gid-index`` (0..255 or None)."""
    port = check_int(ib_port, "--ib-port", 1, MAX_IB_PORT, hint="RDMA ports are numbered from 1")
    gid = (
        None
        if gid_index is None
        else check_int(
            gid_index,
            "--gid-index",
            0,
            MAX_GID_INDEX,
            hint="see the port's gids/ in sysfs, or leave it out",
        )
    )
    return port, gid


def size_option(text: str | None, flag: str) -> int | None:
    """A size option's bytes (``--max-size 1G``, ``--socket-buffer 4M``); None when not given; UsageError
    (exit 2) for what is not a size or is under 1 byte."""
    if text is None:
        return None
    value = parse_size(text, what=flag)
    if value < 1:
        raise UsageError(f"{flag} must be at least 1 byte", hint=f"e.g. {flag} 4M")
    return value
