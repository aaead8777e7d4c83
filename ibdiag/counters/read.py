"""sysfs -> :class:`Sample`: every file in ``ports/N/counters/`` and ``ports/N/hw_counters/`` (and the
device's own ``hw_counters/``) of every RDMA adapter, like ``perfquery -x`` plus ``rdma statistic``.

Reading is split in two so a series costs only the reads: :func:`discover_layout` lists the ports and
their counter files once; :func:`read_sample` reads the values (and port state, which can change).
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ibdiag.counters.hw_spec import HW_LIFESPAN
from ibdiag.counters.model import PortCounters, Sample
from ibdiag.counters.spec import (
    BYTES_PER_DATA_WORD,
    NO_PMA,
    data_counter_bits,
    max_value,
    width_bits,
)
from ibdiag.errors import UsageError
from ibdiag.node.discover import list_adapters, list_ports, read_port
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.text import safe_value

_COUNTER_RE = re.compile(r"[0-9]{1,20}")
_DEVICE_RE = re.compile(r"[^:\s,]+(?::[0-9*?\[\]]+)?")


def parse_counter(text: str, bits: int = 64) -> int:
    """``"1234"`` -> 1234 (what sysfs prints for a counter: ``%u``/``%llu``).

    Raises ``ValueError`` for anything else: ``N/A (no PMA)``, negative numbers, non-ASCII digits, and
    a value the counter's width cannot hold (a 16-bit symbol_error at 70000: the kernel masks every
    value to its width, drivers/infiniband/core/sysfs.c show_pma_counter)."""
    t = text.strip()
    if not _COUNTER_RE.fullmatch(t):
        raise ValueError(f"not a counter value: {safe_value(text)}")
    value = int(t)
    if value > max_value(bits):
        raise ValueError(f"{value} does not fit a {bits}-bit counter")
    return value


@dataclass(frozen=True)
class PortLayout:
    """Where one port's (or one device's) counters live and which files there are."""

    adapter: str
    port: int | None
    base: str
    """``class/infiniband/mlx5_0/ports/1`` (or ``class/infiniband/mlx5_0`` for device-level)."""
    counters: tuple[str, ...] | None
    """File names in ``counters/``; None when the directory is missing."""
    hw_counters: tuple[str, ...] | None
    """File names in ``hw_counters/`` (lifespan included); None when missing."""

    @property
    def subject(self) -> str:
        return self.adapter if self.port is None else f"{self.adapter}:{self.port}"


def parse_device_filter(specs: Sequence[str]) -> list[str]:
    """``["mlx5_0:1,mlx5_2", "mlx5_1*"]`` -> individual patterns; an empty item is a usage error."""
    out: list[str] = []
    for spec in specs:
        for item in str(spec).split(","):
            item = item.strip()
            if not item:
                raise UsageError(
                    f"--device {spec!r} has an empty item",
                    hint="give DEV or DEV:PORT, e.g. --device mlx5_0:1,mlx5_3",
                )
            if not _DEVICE_RE.fullmatch(item):
                raise UsageError(
                    f"--device {item!r} is not DEV or DEV:PORT",
                    hint="e.g. --device mlx5_3:1 (port numbers start at 1), or a pattern such as mlx5_*",
                )
            out.append(item)
    return out


def selected(adapter: str, port: int | None, patterns: Sequence[str]) -> bool:
    """Does ``--device`` select this port? A device-level record (port None) goes with its adapter."""
    if not patterns:
        return True
    for pat in patterns:
        dev_pat, sep, port_pat = pat.partition(":")
        if not fnmatch.fnmatchcase(adapter, dev_pat):
            continue
        if port is None or not sep or fnmatch.fnmatchcase(str(port), port_pat):
            return True
    return False


def discover_layout(sysfs: SysfsRoot, devices: Sequence[str] = ()) -> tuple[PortLayout, ...]:
    """Every port of every adapter under ``/sys/class/infiniband`` (natural order), then the device-level
    ``hw_counters/`` of adapters that have one. ``devices`` (``mlx5_0``, ``mlx5_0:1``, shell patterns)
    narrows the set; a pattern that matches nothing is a usage error naming what exists."""
    ports: list[PortLayout] = []
    devices_level: list[PortLayout] = []
    adapters = list_adapters(sysfs)
    for adapter in adapters:
        for port in list_ports(sysfs, adapter):
            if not selected(adapter, port, devices):
                continue
            base = f"class/infiniband/{adapter}/ports/{port}"
            ports.append(
                PortLayout(
                    adapter,
                    port,
                    base,
                    _files(sysfs, f"{base}/counters"),
                    _files(sysfs, f"{base}/hw_counters"),
                )
            )
        base = f"class/infiniband/{adapter}"
        # Device-level hw_counters (rdma core: ib_setup_device_attrs) belong to the adapter as a whole.
        if selected(adapter, None, devices) and sysfs.is_dir(f"{base}/hw_counters"):
            hw = _files(sysfs, f"{base}/hw_counters")
            if hw and any(n != HW_LIFESPAN for n in hw):
                devices_level.append(PortLayout(adapter, None, base, None, hw))
    if devices:
        for pat in devices:
            if not any(selected(p.adapter, p.port, [pat]) for p in ports):
                known = (
                    ", ".join(f"{a}:{p}" for a in adapters for p in list_ports(sysfs, a)) or "none"
                )
                raise UsageError(
                    f"--device {pat}: no such RDMA port", hint=f"ports on this node: {known}"
                )
    return tuple(ports + devices_level)


def _files(sysfs: SysfsRoot, rel: str) -> tuple[str, ...] | None:
    if not sysfs.is_dir(rel):
        return None
    return tuple(sysfs.listdir(rel))


def _read_values(
    sysfs: SysfsRoot,
    rel: str,
    names: Sequence[str],
    unavailable: dict[str, str],
    *,
    known_widths: bool,
) -> dict[str, int | None]:
    """Values of ``rel/<name>``; ``known_widths``: IB counters, each checked against its width (the
    variable-width data counters and every hw_counter, a u64 in the kernel, against 64 bits)."""
    values: dict[str, int | None] = {}
    for name in names:
        before = len(sysfs.problems)
        text = sysfs.read(f"{rel}/{name}")
        if text is None:
            values[name] = None
            if len(sysfs.problems) > before:
                p = sysfs.problems[-1]
                # EINVAL/EIO: the driver refused this read (PMA on some firmware); sysfs.py records why.
                unavailable[name] = f"{p.kind}: {p.detail}" if p.kind != "empty" else "empty file"
            else:
                unavailable[name] = "missing"
            continue
        if text == NO_PMA:
            # Old kernels print this when the device has no PMA (drivers/infiniband/core/sysfs.c).
            values[name] = None
            unavailable[name] = NO_PMA
            continue
        try:
            values[name] = parse_counter(
                text, (width_bits(name, data_bits=64) or 64) if known_widths else 64
            )
        except ValueError as e:
            values[name] = None
            unavailable[name] = f"malformed: {e}"
    return values


def read_port_counters(
    sysfs: SysfsRoot, layout: PortLayout, *, data_bits: int | None = None
) -> PortCounters:
    unavailable: dict[str, str] = {}
    counters = None
    if layout.counters is not None:
        counters = _read_values(
            sysfs, f"{layout.base}/counters", layout.counters, unavailable, known_widths=True
        )
    hw = None
    lifespan = None
    if layout.hw_counters is not None:
        names = [n for n in layout.hw_counters if n != HW_LIFESPAN]
        hw = _read_values(
            sysfs, f"{layout.base}/hw_counters", names, unavailable, known_widths=False
        )
        if HW_LIFESPAN in layout.hw_counters:
            text = sysfs.read(f"{layout.base}/hw_counters/{HW_LIFESPAN}")
            try:
                lifespan = parse_counter(text) if text is not None else None
            except ValueError:
                lifespan = None
    bits = data_counter_bits(counters or {}, data_bits)
    saturated = set()
    for name, value in (counters or {}).items():
        width = width_bits(name, data_bits=bits)
        if value is not None and width is not None and value == max_value(width):
            saturated.add(name)
    xmit = (counters or {}).get("port_xmit_data")
    rcv = (counters or {}).get("port_rcv_data")
    info = (
        read_port(sysfs, layout.adapter, layout.port, with_gids=False)
        if layout.port is not None
        else None
    )
    return PortCounters(
        adapter=layout.adapter,
        port=layout.port,
        info=info,
        counters=counters,
        hw_counters=hw,
        unavailable=unavailable,
        saturated=frozenset(saturated),
        data_bits=bits,
        # The one place data counters become bytes: they count 4-octet words (IBA PortXmitData).
        xmit_bytes=None if xmit is None else xmit * BYTES_PER_DATA_WORD,
        rcv_bytes=None if rcv is None else rcv * BYTES_PER_DATA_WORD,
        hw_lifespan_ms=lifespan,
    )


def read_sample(
    sysfs: SysfsRoot,
    layout: Sequence[PortLayout],
    *,
    data_bits: int | None = None,
    wall: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> Sample:
    """Read every port in ``layout`` once. Problems are kept in the sample (``unavailable``), not in
    ``sysfs.problems``, so a long series does not grow that list."""
    start = len(sysfs.problems)
    try:
        ports = tuple(read_port_counters(sysfs, item, data_bits=data_bits) for item in layout)
    finally:
        del sysfs.problems[start:]
    return Sample(taken_at_s=wall(), monotonic_s=monotonic(), ports=ports)
