"""What NCCL does with ``NCCL_IB_HCA``, to test the value ibdiag prints against NCCL's reading of it.

A model of NCCL's own code, written from its behaviour (src/transport/net_ib.cc ``ncclIbInit`` and
src/misc/utils.cc ``parseStringList``/``matchIfList``), not a copy: a leading ``^`` excludes, then a
leading ``=`` asks for exact names; entries are split at ``,``; ``name:port`` keeps only that port
(``atoi`` of what follows the first ``:``), a bare name every port; without ``=`` a name is a prefix
(``mlx5_1`` also matches ``mlx5_10``); at most MAX_IB_DEVS (32) entries are read; only ACTIVE ports
of the devices that match are opened. NCCL cannot run on this machine (no GPU): this is the stand-in.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_IB_DEVS = 32


def _atoi(text: str) -> int:
    digits = ""
    for ch in text.lstrip():
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def parse(value: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """(exclude, exact, [(name, port or None)]) as NCCL reads the variable."""
    exclude = value.startswith("^")
    if exclude:
        value = value[1:]
    exact = value.startswith("=")
    if exact:
        value = value[1:]
    entries: list[tuple[str, int | None]] = []
    for item in value.split(","):
        name, colon, rest = item.partition(":")
        if not name:
            continue
        entries.append((name, _atoi(rest) if colon else None))
        if len(entries) == MAX_IB_DEVS:
            break
    return exclude, exact, entries


def selected(value: str | None, ports: Iterable[tuple[str, int, bool]]) -> list[tuple[str, int]]:
    """The (device, port) pairs NCCL opens, given the node's (device, port, active) triples."""
    exclude, exact, entries = parse(value) if value else (False, False, [])

    def listed(dev: str, port: int) -> bool:
        if not entries:
            return True
        return any(
            (dev == name if exact else dev.startswith(name)) and (want is None or want == port)
            for name, want in entries
        )

    return [(dev, port) for dev, port, active in ports if active and (listed(dev, port) != exclude)]
