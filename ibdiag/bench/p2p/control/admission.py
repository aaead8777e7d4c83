"""Who may hold one of the server's unauthenticated slots (the handshake phase of ``bench serve``).

Pure bookkeeping, no sockets: the server asks :meth:`Admission.admit` for every accepted connection
and calls :meth:`Admission.release` once the connection authenticated or ended. The rules bound
what a client without the token can hold:

* at most ``per_source`` connections per source address (a slowloris on one host holds only those);
* at most ``total`` overall; when that is reached, a newcomer from an address with fewer
  unauthenticated connections than the most crowded one displaces that address's oldest
  connection, so a client from an uncrowded address always gets its handshake, while an attacker
  spread over many addresses only ever pushes out its own oldest connections first;
* a newcomer whose address is at its cap, or as crowded as any when everything is full, is refused.

Each connection also has a deadline for its whole handshake (the server enforces it); together
these make a token holder's run independent of how many strangers trickle bytes at the port.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

#: Defaults (``ServeOptions``): unauthenticated connections per source address and overall.
PER_SOURCE = 8
TOTAL = 64


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    displaced: Hashable | None = None
    """The connection the newcomer pushed out (the caller closes it), or None."""
    reason: str = ""
    """Why a newcomer was refused (empty when admitted)."""


class Admission:
    """The unauthenticated connections by source address, oldest first. Not thread-safe: hold a lock."""

    def __init__(self, *, per_source: int = PER_SOURCE, total: int = TOTAL) -> None:
        if per_source < 1 or total < per_source:
            raise ValueError(f"need 1 <= per_source ({per_source}) <= total ({total})")
        self.per_source = per_source
        self.total = total
        self._by_source: dict[str, OrderedDict[Hashable, None]] = {}
        self._source_of: dict[Hashable, str] = {}

    def __len__(self) -> int:
        return len(self._source_of)

    def count(self, source: str) -> int:
        return len(self._by_source.get(source, ()))

    def admit(self, key: Hashable, source: str) -> Verdict:
        mine = self.count(source)
        if mine >= self.per_source:
            return Verdict(
                False,
                reason=f"{mine} unauthenticated connections from {source} already (the limit per address)",
            )
        displaced = None
        if len(self._source_of) >= self.total:
            crowded = max(self._by_source, key=lambda s: len(self._by_source[s]))
            if len(self._by_source[crowded]) <= mine:
                return Verdict(
                    False,
                    reason=f"{len(self._source_of)} unauthenticated connections open (the limit), none from a more crowded address",
                )
            displaced = next(iter(self._by_source[crowded]))
            self.release(displaced)
        self._by_source.setdefault(source, OrderedDict())[key] = None
        self._source_of[key] = source
        return Verdict(True, displaced)

    def release(self, key: Hashable) -> None:
        """Forget ``key`` (authenticated, closed or displaced); a key not held is ignored."""
        source = self._source_of.pop(key, None)
        if source is None:
            return
        conns = self._by_source[source]
        del conns[key]
        if not conns:
            del self._by_source[source]
