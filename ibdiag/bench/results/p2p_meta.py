"""What a point-to-point run was, beside its rows: the ``kind: p2p`` fields of ``ibdiag.bench/1``.

:class:`P2PMeta` holds what every p2p run has (transport, mode, direction) and, depending on where the
numbers come from, either :class:`P2PSetup` (measured by ``ibdiag bench p2p``: peer, line rates,
devices) or :class:`PerftestLog` (read from a perftest log by ``ibdiag bench import``: its banner).
The JSON is flat (every field at the top level of the document); ``from_json`` checks every field,
because a saved file may come from another node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ibdiag.bench.results.jsonfields import put
from ibdiag.jsonread import Fields, JsonFieldError
from ibdiag.text import safe_excerpt

TRANSPORTS = ("tcp", "rdma")
MODES = ("bw", "lat", "both")
RDMA_VERBS = ("write", "read", "send")
#: Largest line rate accepted from a file or a peer (Gb/s): far above any link.
MAX_LINE_RATE_GBPS = 1e6


@dataclass(frozen=True)
class LineRate:
    gbps: float | None
    """Gb/s (1e9 bit/s), None when unknown."""
    source: str
    """Where it came from, e.g. ``enp1s0 speed 100000 Mb/s`` or ``loopback: no line rate``."""

    def to_json(self) -> dict[str, object]:
        return {"gbps": self.gbps, "source": self.source}

    @classmethod
    def from_json(cls, doc: object) -> LineRate:
        """A peer's line rate, leniently: an absent or absurd rate is unknown (the run goes on without it)."""
        if not isinstance(doc, dict):
            return cls(None, "peer sent no line rate")
        g: Any = doc.get("gbps")  # any JSON value; checked on the next line
        ok = isinstance(g, (int, float)) and not isinstance(g, bool) and 0 < g < MAX_LINE_RATE_GBPS
        return cls(float(g) if ok else None, safe_excerpt(doc.get("source", "?"), 200))

    @classmethod
    def read(cls, f: Fields | None) -> LineRate:
        """A line rate from a saved file, strictly."""
        if f is None:
            return cls(None, "unknown")
        return cls(f.number("gbps", 0.0, MAX_LINE_RATE_GBPS), f.text("source") or "unknown")


@dataclass(frozen=True)
class RdmaEnd:
    """One end of an RDMA run: the device and port it used and how its GID was chosen."""

    device: str | None
    ib_port: int | None
    gid_index: int | None
    gid: str | None
    gid_choice: str | None
    link_layer: str | None
    mtu: int | None
    """Active MTU of the port (bytes)."""
    relaxed_ordering: bool | None = None
    """The buffer was registered with ``IBV_ACCESS_RELAXED_ORDERING`` (perftest's default where supported)."""
    max_inline: int | None = None
    """Bytes the queue pairs accept inline (``max_inline_data``; 0: inline sends off)."""

    def to_json(self) -> dict[str, Any]:
        doc = {
            "device": self.device,
            "ib_port": self.ib_port,
            "gid_index": self.gid_index,
            "gid": self.gid,
            "gid_choice": self.gid_choice,
            "link_layer": self.link_layer,
            "mtu": self.mtu,
        }
        put(doc, "relaxed_ordering", self.relaxed_ordering)
        put(doc, "max_inline", self.max_inline)
        return doc

    @classmethod
    def read(cls, f: Fields | None) -> RdmaEnd:
        if f is None:
            f = Fields({}, "")
        return cls(
            device=f.text("device"),
            ib_port=f.integer("ib_port", 1, 255),
            gid_index=f.integer("gid_index", 0, 65535),
            gid=f.text("gid"),
            gid_choice=f.text("gid_choice"),
            link_layer=f.text("link_layer"),
            mtu=f.integer("mtu", 0, 1 << 20),
            relaxed_ordering=f.flag("relaxed_ordering"),
            max_inline=f.integer("max_inline", 0, 1 << 20),
        )


@dataclass(frozen=True)
class RdmaPath:
    """Both ends of an RDMA run and what they agreed on."""

    client: RdmaEnd
    server: RdmaEnd
    path_mtu: int | None
    """The smaller active MTU of the two ports (bytes)."""
    tx_depth: int | None
    verb: str | None = None
    """``write``, ``read`` or ``send`` (files written before these options: None, meaning write)."""
    qps: int | None = None
    inline: int | None = None
    """``--inline`` as asked (None: automatic)."""
    tclass: int | None = None
    sl: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client.to_json(),
            "server": self.server.to_json(),
            "path_mtu": self.path_mtu,
            "tx_depth": self.tx_depth,
            "verb": self.verb,
            "qps": self.qps,
            "inline": "auto" if self.inline is None else self.inline,
            "tclass": self.tclass,
            "sl": self.sl,
        }

    @classmethod
    def read(cls, f: Fields) -> RdmaPath:
        inline = None if f.doc.get("inline") in (None, "auto") else f.integer("inline", 0, 1 << 20)
        return cls(
            RdmaEnd.read(f.object("client")),
            RdmaEnd.read(f.object("server")),
            f.integer("path_mtu", 0, 1 << 20),
            f.integer("tx_depth", 1, 1 << 20),
            verb=f.text("verb", choices=RDMA_VERBS),
            qps=f.integer("qps", 1, 1 << 16),
            inline=inline,
            tclass=f.integer("tclass", 0, 255),
            sl=f.integer("sl", 0, 15),
        )


#: The C tools ``bench p2p`` drives (its engines besides ibdiag's own loops), in the order their
#: provenance is written.
TOOLS = ("perftest", "iperf3", "sockperf")
#: Who may have measured a kind of a run.
ENGINES = ("ibdiag", *TOOLS)
KINDS = ("bw", "lat")


@dataclass(frozen=True)
class ToolRuns:
    """A C tool that measured part of a ``bench p2p`` run (``--engine perftest|iperf3|sockperf``): its
    versions and the command lines each end ran (one per size and kind). JSON: ``<tool>_version``,
    ``<tool>_server_version``, ``<tool>_commands``, ``<tool>_server_commands`` at the top level."""

    tool: str
    """``perftest``, ``iperf3`` or ``sockperf``."""
    version: str | None = None
    """This host's (``ib_write_bw --version``: ``6.06``; ``iperf3 --version``: ``3.12``)."""
    server_version: str | None = None
    commands: tuple[str, ...] = ()
    """The client's command lines, in run order."""
    server_commands: tuple[str, ...] = ()
    """The server's, as it reported them."""

    def to_json(self) -> dict[str, Any]:
        t = self.tool
        return {
            f"{t}_version": self.version,
            f"{t}_server_version": self.server_version,
            f"{t}_commands": list(self.commands),
            f"{t}_server_commands": list(self.server_commands),
        }

    @classmethod
    def read(cls, f: Fields, tool: str) -> ToolRuns:
        return cls(
            tool,
            f.text(f"{tool}_version"),
            f.text(f"{tool}_server_version"),
            f.texts(f"{tool}_commands"),
            f.texts(f"{tool}_server_commands"),
        )


def read_engine(f: Fields) -> str | None:
    """``engine``: one of :data:`ENGINES`, or the bandwidth's and the latency's joined by ``+``."""
    text = f.text("engine")
    if text is None:
        return None
    parts = text.split("+")
    if len(parts) > 2 or any(p not in ENGINES for p in parts):
        raise JsonFieldError(
            "engine", f"must be one of {', '.join(ENGINES)} or two of them joined by +"
        )
    return text


@dataclass(frozen=True)
class BusyPoll:
    """TCP latency measured by ibdiag's loops: the busy-polling budget and whether the kernel took
    ``SO_BUSY_POLL`` on each end's latency connection."""

    budget_us: int
    """``--busy-poll``: µs a side polls for the peer's message before it blocks (0: blocks at once)."""
    so_busy_poll: Mapping[str, bool | None] = field(default_factory=dict)
    """``{"client": ..., "server": ...}``: the kernel accepted ``SO_BUSY_POLL`` (it needs
    CAP_NET_ADMIN above ``net.core.busy_read``); None: not asked (budget 0) or not said."""

    def to_json(self) -> dict[str, Any]:
        return {"busy_poll_us": self.budget_us, "so_busy_poll": dict(self.so_busy_poll)}

    @classmethod
    def read(cls, f: Fields) -> BusyPoll | None:
        budget = f.integer("busy_poll_us", 0, 10**7)
        if budget is None:
            return None
        so = f.object("so_busy_poll")
        sides = {} if so is None else {k: so.flag(k) for k in ("client", "server") if so.has(k)}
        return cls(budget, sides)


@dataclass(frozen=True)
class P2PSetup:
    """How ``ibdiag bench p2p`` ran: the peer, how long, and the line rate it was judged against."""

    peer: str
    """``host:port`` as given."""
    server_host: str | None = None
    server_version: str | None = None
    streams: int | None = None
    iters: int | None = None
    duration_s: float | None = None
    warmup: int | None = None
    """Warm-up iterations per size; None = automatic (``"auto"`` in the JSON)."""
    line_rate: LineRate = LineRate(None, "unknown")
    """What the bandwidth was judged against (:func:`ibdiag.bench.p2p.linerate.judged_line_rate`)."""
    client_line_rate: LineRate = LineRate(None, "unknown")
    server_line_rate: LineRate = LineRate(None, "unknown")
    socket_buffer: int | None = None
    """TCP: the fixed SO_SNDBUF/SO_RCVBUF (bytes); None = kernel autotuning."""
    rdma: RdmaPath | None = None
    engine: str | None = None
    """Who measured: ``ibdiag`` (its own loops), ``perftest``, ``iperf3`` or ``sockperf``; the bandwidth's
    and the latency's joined by ``+`` when they differ. None in files from before TCP runs said it
    (ibdiag)."""
    engines: Mapping[str, str] | None = None
    """Who measured each kind: ``{"bw": "iperf3", "lat": "ibdiag"}``; None in older files."""
    tools: tuple[ToolRuns, ...] = ()
    """The C tools that measured: their versions and command lines."""
    busy_poll: BusyPoll | None = None
    """TCP latency by ibdiag's loops: busy-polling budget and ``SO_BUSY_POLL``."""

    @property
    def perftest(self) -> ToolRuns | None:
        """perftest's versions and command lines (``--engine perftest``), else None."""
        return next((t for t in self.tools if t.tool == "perftest"), None)

    def to_json(self, transport: str | None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "peer": self.peer,
            "server_host": self.server_host,
            "server_version": self.server_version,
            "streams": self.streams,
            "iters": self.iters,
            "duration_s": self.duration_s,
            "warmup": "auto" if self.warmup is None else self.warmup,
            "line_rate_gbps": self.line_rate.gbps,
            "line_rate_source": self.line_rate.source,
            "client_line_rate": self.client_line_rate.to_json(),
            "server_line_rate": self.server_line_rate.to_json(),
        }
        if transport == "tcp":
            doc["socket_buffer"] = self.socket_buffer
        if self.rdma is not None:
            doc.update(self.rdma.to_json())
        put(doc, "engine", self.engine)
        put(doc, "engines", None if self.engines is None else dict(self.engines))
        for tool in self.tools:
            doc.update(tool.to_json())
        if self.busy_poll is not None:
            doc.update(self.busy_poll.to_json())
        return doc

    @classmethod
    def read(cls, f: Fields) -> P2PSetup:
        warmup = None if f.doc.get("warmup") == "auto" else f.integer("warmup", 0, 10**9)
        rdma = None
        if f.has("client") or f.has("server"):
            rdma = RdmaPath.read(f)
        kinds = f.object("engines")
        return cls(
            peer=f.text("peer") or "?",
            server_host=f.text("server_host"),
            server_version=f.text("server_version"),
            streams=f.integer("streams", 1, 1 << 16),
            iters=f.integer("iters", 1),
            duration_s=f.number("duration_s", 0.0, 1e7),
            warmup=warmup,
            line_rate=LineRate(
                f.number("line_rate_gbps", 0.0, MAX_LINE_RATE_GBPS),
                f.text("line_rate_source") or "unknown",
            ),
            client_line_rate=LineRate.read(f.object("client_line_rate")),
            server_line_rate=LineRate.read(f.object("server_line_rate")),
            socket_buffer=f.integer("socket_buffer", 1),
            rdma=rdma,
            engine=read_engine(f),
            engines=None
            if kinds is None
            else {k: str(kinds.text(k, choices=ENGINES)) for k in KINDS if kinds.has(k)},
            tools=tuple(ToolRuns.read(f, t) for t in TOOLS if f.has(f"{t}_commands")),
            busy_poll=BusyPoll.read(f),
        )


@dataclass(frozen=True)
class PerftestLog:
    """What a perftest log says about its run (the banner, the title, the table's units).

    Issue 10 extends this with the rest of the banner; fields a log does not print are None.
    """

    test: str
    """``ib_write_bw``, ``ib_read_lat`` ...: the binary as far as the title tells."""
    title: str | None = None
    """``RDMA_Write BW Test``."""
    verb: str | None = None
    """``write``, ``read``, ``send``, ``atomic``."""
    device: str | None = None
    link_layer: str | None = None
    mtu: str | None = None
    connection: str | None = None
    qps: str | None = None
    gid_index: str | None = None
    local_address: str | None = None
    remote_address: str | None = None
    bw_unit: str | None = None
    """The bandwidth columns' unit as printed (``MiB/sec``, ``MB/sec``, ``Gb/sec``)."""
    bw_unit_assumed: bool | None = None
    """An ``--out_json`` file whose unit could not be told: MiB/s assumed."""
    peak_measured: bool | None = None
    """False when perftest printed a peak of 0.00 (duration mode): ``bw_peak_gbs`` is None then."""
    latency: str | None = None
    """``one way (round trip / 2)`` (write, send) or ``round trip`` (read, atomic), as perftest prints it."""
    duration_mode: bool | None = None
    """Duration mode (``-D``): latency has only the average; bandwidth has no peak."""
    post_list: str | None = None
    """The banner's ``Post List`` (work requests posted per call, ``-l``)."""
    header: str | None = None
    """None for a whole table; ``cut: from the rows`` when the paste lacked the ``#bytes`` header."""

    _TEXT = (
        "test",
        "title",
        "verb",
        "device",
        "link_layer",
        "mtu",
        "connection",
        "qps",
        "gid_index",
        "local_address",
        "remote_address",
        "bw_unit",
        "latency",
        "post_list",
        "header",
    )
    _FLAGS = ("bw_unit_assumed", "peak_measured", "duration_mode")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {name: getattr(self, name) for name in self._TEXT}
        for name in self._FLAGS:
            put(doc, name, getattr(self, name))
        return doc

    @classmethod
    def read(cls, f: Fields) -> PerftestLog:
        kw: dict[str, Any] = {name: f.text(name) for name in cls._TEXT}
        kw.update({name: f.flag(name) for name in cls._FLAGS})
        kw["test"] = kw["test"] or "?"
        return cls(**kw)


@dataclass(frozen=True)
class P2PMeta:
    """The ``kind: p2p`` fields: transport, mode, direction, and how the run was measured or where it was read."""

    transport: str | None
    """``tcp`` or ``rdma``."""
    mode: str | None
    """``bw``, ``lat`` or ``both``."""
    bidir: bool = False
    """Both directions at once; bandwidth is the sum (``--bidir``, perftest ``-b``)."""
    measured: P2PSetup | None = None
    """How ``ibdiag bench p2p`` ran it (None for an imported log)."""
    perftest: PerftestLog | None = None
    """What the perftest log said (None for a measured run)."""

    @property
    def ceiling_gbps(self) -> float | None:
        """What the best bandwidth can reach: the judged line rate, twice it both ways (full duplex)."""
        rate = self.measured.line_rate.gbps if self.measured is not None else None
        return None if rate is None else rate * (2.0 if self.bidir else 1.0)

    @property
    def test(self) -> str | None:
        """What was run, named as perftest names its tests (the importer's :attr:`PerftestLog.test`):
        ``ib_write_bw``, ``ib_read_lat`` ...; TCP ``tcp_bw``/``tcp_lat`` (qperf's names); ``--mode both``
        both names joined with ``+`` (``ib_write_bw+ib_write_lat``). The same for either engine: who
        measured is ``engine``. None when nothing says (a measured run without transport or mode)."""
        if self.perftest is not None:
            return self.perftest.test
        if self.measured is None or self.transport not in TRANSPORTS or self.mode not in MODES:
            return None
        prefix = (
            "tcp_"
            if self.transport == "tcp"
            else f"ib_{(self.measured.rdma.verb if self.measured.rdma else None) or 'write'}_"
        )
        kinds = ("bw", "lat") if self.mode == "both" else (self.mode,)
        return "+".join(prefix + k for k in kinds)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"transport": self.transport, "mode": self.mode}
        if self.perftest is not None:
            doc["bidirectional"] = self.bidir  # perftest's word, kept for files written before
            doc.update(self.perftest.to_json())
        else:
            doc["bidir"] = self.bidir
        if self.measured is not None:
            doc.update(self.measured.to_json(self.transport))
        return doc

    @classmethod
    def read(cls, f: Fields, *, imported: bool) -> P2PMeta:
        bidir = f.flag("bidir")
        if bidir is None:
            bidir = f.flag("bidirectional")
        return cls(
            transport=f.text("transport", choices=TRANSPORTS),
            mode=f.text("mode", choices=MODES),
            bidir=bool(bidir),
            measured=P2PSetup.read(f) if f.has("peer") and not imported else None,
            perftest=PerftestLog.read(f) if imported else None,
        )
