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

What the server logs about strangers is bounded too (:class:`StrangerLog`): one line per address per
second, a few per second in all, the lines held back counted in the next one.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
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


#: Lines about strangers: at most one per source address in this many seconds ...
STRANGER_LOG_EVERY_S = 1.0
#: ... and at most this many in any second, all addresses together.
STRANGER_LINES_PER_S = 5
#: Addresses remembered for the limit (the quiet ones are forgotten first).
_REMEMBERED = 4096


class StrangerLog:
    """The log lines about connections that never authenticated (refused, dropped, gave up), bounded:
    one per address per :data:`STRANGER_LOG_EVERY_S` and :data:`STRANGER_LINES_PER_S` in all; the
    lines held back are counted, and the next line written says how many. Thread-safe."""

    def __init__(
        self,
        log: Callable[[str], None],
        *,
        every_s: float = STRANGER_LOG_EVERY_S,
        per_s: int = STRANGER_LINES_PER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.every_s, self.per_s, self.clock = log, every_s, per_s, clock
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}
        self._second, self._lines = -math.inf, 0
        self._held, self._held_from = 0, set[str]()

    def __call__(self, source: str, line: str) -> None:
        with self._lock:
            now = self.clock()
            last, hidden = self._last.get(source, (-math.inf, 0))
            if now - last < self.every_s:
                self._last[source] = (last, hidden + 1)
                return
            if now - self._second >= 1.0:
                self._second, self._lines = now, 0
            if self._lines >= self.per_s:
                self._held += 1
                if len(self._held_from) < _REMEMBERED:
                    self._held_from.add(source)
                return
            self._lines += 1
            notes = [f"{hidden} more from {source} since its last line"] if hidden else []
            if self._held:
                notes.append(f"{self._held} lines about {len(self._held_from)} addresses held back")
                self._held, self._held_from = 0, set()
            self._last[source] = (now, 0)
            if len(self._last) > _REMEMBERED:
                self._last = {k: v for k, v in self._last.items() if now - v[0] < self.every_s}
        self.log(line + (f" ({'; '.join(notes)})" if notes else ""))
