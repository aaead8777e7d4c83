"""The ranks and processes the findings name, each placed once (:class:`~ibdiag.job.places.Place`) and
remembered with what was said of it: the table and CSV rows and the JSON ``ranks`` list."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ibdiag.job.model import RasComm, RasProcess, RasRank, RasStatus
from ibdiag.job.places import Join, Place

#: Ranks named one by one in a finding's message; the rest are counted (all are in the JSON ``ranks``).
MAX_NAMED = 8
#: Longest finding message: ``ibdiag report`` reads at most 2000 characters of one.
MAX_MESSAGE = 1800
#: Rank ranges written out in a message (``0-11, 14-31``); the rest are counted.
MAX_RANGES = 48


def fit(text: str) -> str:
    """``text`` cut to :data:`MAX_MESSAGE` characters, saying where the rest is."""
    if len(text) <= MAX_MESSAGE:
        return text
    return text[: MAX_MESSAGE - 40].rstrip() + " ... (the rest: -o json, ranks)"


@dataclass(frozen=True)
class RankRow:
    """A rank (or a process RAS named without a rank) and what the findings said of it."""

    comm: str | None
    rank: int | None
    place: Place
    roles: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "comm": self.comm,
            "rank": self.rank,
            "roles": list(self.roles),
            **self.place.to_json(),
        }


@dataclass
class Roster:
    join: Join
    status: RasStatus | None = None
    rows: dict[tuple[object, ...], RankRow] = field(default_factory=dict)

    def _row(
        self, key: tuple[object, ...], comm: str | None, rank: int | None, place: Place, role: str
    ) -> Place:
        row = self.rows.get(key) or RankRow(comm, rank, place)
        if role and role not in row.roles:
            row = replace(row, roles=(*row.roles, role))
        self.rows[key] = row
        return row.place

    def rank(self, comm: RasComm, number: int, role: str) -> Place:
        """Rank ``number`` of ``comm``: what RAS said of it, else the rank map for a world-sized one."""
        r = comm.rank(number)
        world = number if self._world_sized(comm) else None
        place = self.join.place(
            r.host if r else None,
            r.gpu if r else None,
            r.pid if r else None,
            comm=comm.hash,
            rank=number,
            world_rank=world,
        )
        if not place.known:
            return replace(place, label=f"{comm.hash[:8]}:r{number}")
        return self._row(("rank", comm.hash, number), comm.hash, number, place, role)

    def _world_sized(self, comm: RasComm) -> bool:
        n = len(self.join.rank_map)
        return bool(n) and comm.size == n

    def process(self, p: RasProcess, role: str) -> Place:
        gpu = (p.nvml_gpus or p.gpus or (None,))[0] if len(p.gpus) == 1 else None
        place = self.join.place(p.host, gpu, p.pid)
        return self._row(("process", p.host, p.pid), None, None, place, role)

    def inspector(self, comm: str, number: int, host: str, pid: int | None, role: str) -> Place:
        """A rank Inspector named: RAS's view of the same rank when there is one, else Inspector's."""
        c = self.status.comm(comm) if self.status else None
        r = c.rank(number) if c else None
        if c is not None and r is not None and r.host:
            return self.rank(c, number, role)
        place = self.join.place(None, r.gpu if r else None, pid, comm=comm, rank=number)
        if place.node is None:
            place = self.join.place(host, None, pid)
        return self._row(("rank", comm, number), comm, number, place, role)

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.rows.values()]


def ranks_text(numbers: list[int]) -> str:
    """``0-11, 14-31``: ranks as ranges."""
    out: list[str] = []
    ordered = sorted(set(numbers))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    if len(out) > MAX_RANGES:
        return ", ".join(out[:MAX_RANGES]) + f" and {len(out) - MAX_RANGES} more range(s)"
    return ", ".join(out)


def comm_name(c: RasComm) -> str:
    """``communicator #0-0 (fa93daea854b060b)`` or ``communicator fa93daea854b060b``."""
    return f"communicator {c.label} ({c.hash})" if c.label else f"communicator {c.hash}"


def places_text(places: list[tuple[int, Place]], total: int | None = None) -> str:
    """``rank 12: gpu03 GPU 4 -> mlx5_4; rank 13: …`` for the first :data:`MAX_NAMED`, then a count."""
    known = [(n, p) for n, p in places if p.known]
    shown = [f"rank {n}: {p.text}" for n, p in known[:MAX_NAMED]]
    if not shown:
        return "their nodes are not known (RAS did not name them; give a rank map)"
    more = (total if total is not None else len(places)) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def is_missing_rank(r: RasRank) -> bool:
    return r.missing and r.unresponsive is not False
