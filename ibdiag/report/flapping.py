"""The fleet's most-flapping ports, from the nodes' ``counters --history`` documents."""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.report.inputs import InputDoc

#: Ports listed (the same bound as the fleet's largest counter errors).
TOP_FLAPPING = 20


@dataclass(frozen=True)
class FlappingPort:
    host: str
    port: str
    flaps: int
    """Flaps in the history window of the node's newest ``counters --history`` document."""
    last_flap: str | None


def most_flapping(counters: dict[str, InputDoc], limit: int = TOP_FLAPPING) -> list[FlappingPort]:
    """Ports that flapped in their history window, most flaps first, then the latest flap."""
    rows = [
        FlappingPort(host, f"{f.adapter}:{f.port}", f.flaps, f.last_flap)
        for host, d in counters.items()
        for f in d.flaps
    ]
    rows.sort(key=lambda r: (-r.flaps, r.last_flap or "", r.host, r.port))
    return rows[:limit]
