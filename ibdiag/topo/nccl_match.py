"""How NCCL reads a device or interface list (``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``): pure functions.

NCCL's documented rules (env.html, ``NCCL_IB_HCA`` and ``NCCL_SOCKET_IFNAME``), as its code applies them
(src/misc/utils.cc ``parseStringList``/``matchIfList``, src/transport/net_ib.cc ``ncclIbInit``):

* a leading ``^`` excludes what the list matches (``^mlx5_4`` = every device but those);
* then a leading ``=`` asks for exact names; without it each entry is a **prefix**: ``mlx5_1`` also
  selects ``mlx5_10`` .. ``mlx5_19``;
* entries are split at ``,``; ``name:port`` keeps only that port (what follows the ``:`` is read as a
  number, ``atoi``), a bare name every port; at most 32 entries are read (MAX_IB_DEVS / MAX_IFS);
* only ACTIVE ports of matching devices are opened; an empty or unset list selects everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MAX_ENTRIES = 32


def _atoi(text: str) -> int:
    """C's ``atoi``: leading blanks, digits; anything else ends the number (``"1x"`` is 1, ``"x"`` 0)."""
    digits = ""
    for ch in text.lstrip():
        if not ("0" <= ch <= "9"):
            break
        digits += ch
    return int(digits) if digits else 0


@dataclass(frozen=True)
class Entry:
    name: str
    port: int | None
    """``mlx5_0:1`` -> 1; None for a bare name (every port)."""

    def __str__(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"


@dataclass(frozen=True)
class NameList:
    """A parsed ``NCCL_IB_HCA`` / ``NCCL_SOCKET_IFNAME`` value."""

    exclude: bool
    exact: bool
    entries: tuple[Entry, ...]

    def matches_name(self, entry: Entry, name: str) -> bool:
        return name == entry.name if self.exact else name.startswith(entry.name)

    def listed(self, name: str, port: int | None = None) -> bool:
        """Whether (``name``, ``port``) matches some entry (port None: any port, as for an interface)."""
        if not self.entries:
            return True
        return any(
            self.matches_name(e, name) and (e.port is None or port is None or e.port == port)
            for e in self.entries
        )

    def selects(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL keeps (``name``, ``port``): listed, or not listed under ``^``."""
        if not self.entries:
            return True
        return self.listed(name, port) != self.exclude


def parse_list(value: str) -> NameList:
    """``^=mlx5_0:1,mlx5_1`` -> NameList(exclude, exact, entries) as NCCL reads it."""
    exclude = value.startswith("^")
    if exclude:
        value = value[1:]
    exact = value.startswith("=")
    if exact:
        value = value[1:]
    entries: list[Entry] = []
    for item in value.split(","):
        name, colon, rest = item.partition(":")
        if not name:
            continue
        entries.append(Entry(name, _atoi(rest) if colon else None))
        if len(entries) == MAX_ENTRIES:
            break
    return NameList(exclude, exact, tuple(entries))


def selected_ports(
    value: str | None, ports: Iterable[tuple[str, int, bool]]
) -> list[tuple[str, int]]:
    """The (device, port) pairs NCCL opens for ``NCCL_IB_HCA=value``, of the node's (device, port, active)."""
    names = parse_list(value) if value else NameList(False, False, ())
    return [(dev, port) for dev, port, active in ports if active and names.selects(dev, port)]
