"""A run whose bandwidth and latency two engines measure (``--engine iperf3,ibdiag``, ``auto`` over RDMA:
ibdiag's loops for bandwidth, perftest's for latency): both engines' sides side by side, each phase
handed to the side of its kind.

Each side sets up as it would alone (``ready`` holds both sides' fields: a tool's details first,
ibdiag's own over them where both name one, as the device ibdiag's engine describes in full); the
phases themselves are each engine's own messages, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ibdiag.bench.p2p.control.protocol import Channel, ProtocolError, peer_value
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.phase import ClientFactory, ClientSide, Engine, Local, Log, ServerSide
from ibdiag.bench.results.model import P2PResult
from ibdiag.bench.results.p2p_meta import BusyPoll, LineRate, RdmaPath, ToolRuns
from ibdiag.node.sysfs import SysfsRoot

#: (the kinds one engine measures, that engine); ibdiag's own engine, if one of them, last.
Parts = Sequence[tuple[tuple[str, ...], Engine]]


class MixedClient:
    """The client's half: one side per engine, each phase to the side of its kind."""

    def __init__(self, sides: Sequence[tuple[tuple[str, ...], ClientSide]]) -> None:
        self.sides = [s for _, s in sides]
        self.by_kind = {k: s for kinds, s in sides for k in kinds}

    def connect(self, ready: dict[str, Any]) -> RdmaPath | None:
        paths = [s.connect(ready) for s in self.sides]
        known = [p for p in paths if p is not None]
        # ibdiag's own RDMA side knows the path MTU; a tool's does not.
        return next((p for p in known if p.path_mtu is not None), known[0] if known else None)

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return self.sides[0].line_rate(sysfs)

    def measure(self, size: int, kind: str) -> P2PResult:
        return self.by_kind[kind].measure(size, kind)

    def tool_runs(self) -> tuple[ToolRuns, ...]:
        return tuple(t for s in self.sides for t in s.tool_runs())

    def busy_poll(self) -> BusyPoll | None:
        return next((b for s in self.sides if (b := s.busy_poll()) is not None), None)

    def close(self) -> None:
        for s in self.sides:
            s.close()


class MixedServer:
    """The server's half: one side per engine; ``ready`` holds every side's fields."""

    def __init__(self, ch: Channel, sides: Sequence[tuple[tuple[str, ...], ServerSide]]) -> None:
        self.ch = ch
        self.sides = [s for _, s in sides]
        self.by_kind = {k: s for kinds, s in sides for k in kinds}

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return self.sides[0].line_rate(sysfs)

    def prepare(self) -> dict[str, Any]:
        ready: dict[str, Any] = {}
        for side in self.sides:  # ibdiag's own side last (:func:`mixed`): its fields win
            ready.update(side.prepare())
        return ready

    def connect(self) -> None:
        for side in self.sides:
            side.connect()

    def phase(self, msg: dict[str, Any]) -> None:
        kind = msg.get("kind")
        side = self.by_kind.get(kind) if isinstance(kind, str) else None
        if side is None:
            raise ProtocolError(f"phase kind {peer_value(kind)} was not requested")
        side.phase(msg)

    def close(self) -> None:
        for side in self.sides:
            side.close()


def mixed(parts: Parts) -> Engine:
    """One engine of several, each measuring its kinds."""

    def client(req: RunRequest, local: Local) -> ClientFactory:
        factories = [(kinds, e.client(req, local)) for kinds, e in parts]  # every check first

        def make(ch: Channel) -> MixedClient:
            made: list[tuple[tuple[str, ...], ClientSide]] = []
            try:
                for kinds, factory in factories:
                    made.append((kinds, factory(ch)))
            except BaseException:
                for _, side in made:
                    side.close()
                raise
            return MixedClient(made)

        return make

    def server(ch: Channel, req: RunRequest, local: Local, log: Log) -> MixedServer:
        made: list[tuple[tuple[str, ...], ServerSide]] = []
        try:
            for kinds, e in parts:
                made.append((kinds, e.server(ch, req, local, log)))
        except BaseException:
            for _, side in made:
                side.close()
            raise
        return MixedServer(ch, made)

    return Engine(client, server)
