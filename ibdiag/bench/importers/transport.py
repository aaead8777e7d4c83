"""The path NCCL's data took, from every signal a log gives: NCCL's INFO and WARN lines, the command
line and the environment, and the hosts named anywhere.

Pure functions of text. :class:`PathFacts` is fed the body of every ``NCCL INFO``/``WARN`` line (by
:class:`~ibdiag.bench.importers.context.Context`); :func:`nccl_path` turns the facts, the run's command
line and the environment lines into a :class:`~ibdiag.bench.results.provenance.NcclPath` whose
``transport_source`` and ``gdr_source`` say which line decided. The order, strongest first:

1. what NCCL says it used: ``Using network X``, ``via NET/X`` channel lines, ``NET/X : Using ...``
   (``IBext_v8``, ``IBext`` and other ``IB*`` names are the IB transport through a plugin: the name
   goes to ``net_plugin``; ``NET/OFI``/``Libfabric``/``AWS`` is ``OFI``);
2. what makes NCCL fall back to sockets: ``NET/IB : No device found``, ``Failed to open libibverbs``,
   ``NCCL_IB_DISABLE set by environment to 1``;
3. what the job asked for: ``NCCL_IB_DISABLE=1`` or ``NCCL_NET=Socket`` (Socket), ``NCCL_NET=IB`` or
   ``NCCL_IB_HCA`` (IB, requested: NCCL's lines do not confirm it), on the command line
   (``-x VAR=value``, ``VAR=value cmd``) or in the environment lines of the log (``export VAR=value``).

GPUDirect RDMA is on only where the IB/RoCE path says so (``via NET/IB/0/GDRDMA``, ``GDR 1`` on a
``NET/IB`` line, ``GPU Direct RDMA Enabled``); a socket transport is never GPUDirect; ``GDR 1`` on
another line is not read. ``NCCL_NET_GDR_LEVEL=LOC`` (or 0) turns it off.

Also read: the communicator's size (``nranks 64`` of the init lines), the RoCE GID index
(``NCCL_IB_GID_INDEX``, and the ``GID 3 (0/1064A8C0FFFF0000)`` of the connection lines, decoded:
``::ffff:192.168.100.16``, ``fe80::/64`` link-local), and the network's fatal errors: ``NET/IB : Got
completion with error 4, opcode 1, len 0, vendor err 81`` (NCCL before 2.12), ``… from peer
10.0.0.2<54862> with error 12, …`` and ``… with status=12 opcode=129 len=1048576 vendor err 129 (Recv)
… hca mlx5_10`` (2.19 on, ``transport/net_ib.cc`` ncclIbTest), and the CQE the verbs provider dumps
(``mlx5: host: got completion with error:`` and four lines of words, rdma-core providers/mlx5/cq.c).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ibdiag.bench.results.provenance import (
    MAX_NAMES,
    MAX_WARNINGS,
    CommandLine,
    CompletionError,
    NcclPath,
)

_USING_NETWORK = re.compile(r"\bUsing network (\S+(?: Libfabric)?)")
_NET_USING = re.compile(r"\bNET/(IB\w*|Socket)\s*:\s*Using\s+(.*)")
_DEVICE = re.compile(r"\[\d+\]([^\s;\[]+)")
_VIA_NET = re.compile(r"\bvia NET/([\w-]+(?: Libfabric)?)(?:/\d+)?(?:\(\d+\))?(/GDRDMA)?")
_GDR = re.compile(r"\bGDR (\d)\b")
_PLUGIN_NONE = re.compile(
    r"NET/Plugin.{0,256}?(?:No plugin found|using internal implementation|Using internal network plugin)",
    re.IGNORECASE,
)
_PLUGIN_LOADED = re.compile(
    r"NET/Plugin[ \t]{0,4}:?[ \t]{0,4}Loaded net plugin (.{1,128}?)(?: \(v\d{1,4}\))?[ \t]{0,8}$"
)
_CHANNELS = re.compile(r"\b(\d+) coll channels\b")
_COLLNET = re.compile(r"\b(\d+) collnet channels\b")
_NVLS = re.compile(r"\b(\d+) nvls channels\b")
_NNODES = re.compile(r"\bnNodes (\d+)\b")
_ALGO_ENV = re.compile(r"\bNCCL_ALGO set by environment to (\S+)")
_SET_BY_ENV = re.compile(r"\b(NCCL_[A-Z_]+) set by environment to (\S+?)\.?$")
_NO_IB = re.compile(r"NET/IB\w* ?: No (?:IB )?device found", re.IGNORECASE)
_NO_VERBS = re.compile(
    r"Failed to open libibverbs|libibverbs\S{0,64} {0,8}: {0,8}cannot open", re.IGNORECASE
)
_GDR_ENABLED = re.compile(r"GPU Direct RDMA (Enabled|Disabled)", re.IGNORECASE)
#: ``host:pid:tid [dev] `` before ``NCCL INFO``: the host that wrote the line.
PREFIX_HOST = re.compile(
    r"(?<![A-Za-z])([A-Za-z][\w.-]{0,253}):(\d{1,10}):(\d{1,10}) \[\d{1,4}\]\s{0,8}$"
)
#: The same as a whole word whose first label may start with a digit (a container's hex id
#: ``3767c65d25c4``); the labels after a dot start with a letter, so a row that ran into the line
#: (``35.4node02:…``) is not read as a host.
_WORD_HOST = re.compile(
    r"(?:^|(?<=\s))([A-Za-z0-9][\w-]{0,62}(?:\.[A-Za-z][\w-]{0,62}){0,8}):(\d+):(\d+) \[\d+\]\s*$"
)


#: The longest ``host:pid:tid [dev] `` prefix: only the end of a longer text is searched for it.
_PREFIX_TAIL = 320


def prefix_host(prefix: str) -> re.Match[str] | None:
    """The ``host:pid:tid [dev]`` at the end of the text before ``NCCL INFO`` (group 1: the host);
    only the text's last :data:`_PREFIX_TAIL` characters are searched (positions stay the text's)."""
    start = max(0, len(prefix) - _PREFIX_TAIL)
    return _WORD_HOST.search(prefix, start) or PREFIX_HOST.search(prefix, start)


#: The same at the start of a WARN line's prefix (``host:pid:tid [dev] transport/net_ib.cc:1295``).
_LEAD_HOST = re.compile(r"^\s{0,8}([A-Za-z0-9][\w.-]{0,80}):\d{1,10}:\d{1,10} \[\d{1,4}\]")
_NRANKS = re.compile(r"\bn[Rr]anks (\d{1,8})\b")
_GID = re.compile(r"\bGID (\d{1,5}) \(([0-9A-Fa-f]{1,16})/([0-9A-Fa-f]{1,16})\)")
_COMPLETION = re.compile(
    r"NET/IB\w{0,8} ?: ?Got completion (?:from peer (?P<peer>\S{1,120}) )?with (?:error |status=)"
    r"(?P<status>\d{1,3}),? opcode[ =]\d{1,10},? len[ =]\d{1,12},? vendor err (?P<vendor>\d{1,6})"
    r"(?: \((?P<dir>Send|Recv)\))?"
)
_HCA = re.compile(r" hca ([\w.:-]{1,40})")


def decode_gid(index: str, prefix_hex: str, iid_hex: str) -> str:
    """``GID 3 (0/1064A8C0FFFF0000)`` -> ``3 ::ffff:192.168.100.16``; ``(80FE/…)`` -> ``0 fe80::/64
    (link-local)``. NCCL prints the GID's two halves as 64-bit numbers in the host's (little-endian)
    order (net_ib.cc: ``%lX/%lX`` of subnet_prefix and interface_id)."""
    prefix = int(prefix_hex, 16).to_bytes(8, "little")
    iid = int(iid_hex, 16).to_bytes(8, "little")
    if prefix == bytes(8) and iid[:4] == b"\x00\x00\xff\xff":
        return f"{index} ::ffff:{'.'.join(str(b) for b in iid[4:])}"
    if prefix[:2] == b"\xfe\x80":
        return f"{index} fe80::/64 (link-local)"
    groups = [f"{int.from_bytes(prefix[i : i + 2], 'big'):x}" for i in range(0, 8, 2)]
    return f"{index} {':'.join(groups)}::/64"


def network_name(raw: str) -> tuple[str, str | None]:
    """(transport, plugin name or None): ``IBext_v8`` -> (``IB``, ``IBext_v8``), ``Socket`` -> (``Socket``, None)."""
    low = raw.lower()
    if low == "ib":
        return "IB", None
    if low.startswith("ib"):
        return "IB", raw
    if low == "socket":
        return "Socket", None
    if "ofi" in low or "libfabric" in low or low.startswith("aws"):
        return "OFI", raw if low != "ofi" else None
    return raw, None


@dataclass
class PathFacts:
    """What NCCL's lines said, each with the first line that said it (``line N: text``)."""

    using_network: tuple[str, str] | None = None
    net_using: tuple[str, str] | None = None
    channel_nets: dict[str, str] = field(default_factory=dict)
    devices: dict[str, None] = field(default_factory=dict)
    plugin: str | None = None
    gdr_ib: str | None = None
    gdr_off: str | None = None
    fallback: str | None = None
    """A line that makes NCCL fall back to sockets (no IB device, no libibverbs, IB disabled)."""
    env: dict[str, tuple[str, str]] = field(default_factory=dict)
    """``NCCL_X set by environment to V`` -> (V, where)."""
    sharp: bool = False
    collnet: int | None = None
    nvls: int | None = None
    algorithms: dict[str, None] = field(default_factory=dict)
    channels: int | None = None
    nodes: int | None = None
    hosts: dict[str, None] = field(default_factory=dict)
    info_lines: int = 0
    ranks: int | None = None
    gids: dict[str, str] = field(default_factory=dict)
    """Decoded GID (``3 ::ffff:10.0.0.1``) -> the first line that showed it."""
    completions: list[CompletionError] = field(default_factory=list)
    completion_count: int = 0

    def host(self, prefix: str) -> None:
        """The text before ``NCCL INFO``: keep the host its ``host:pid:tid [dev]`` prefix names."""
        m = prefix_host(prefix) or _LEAD_HOST.match(prefix)
        if m and len(self.hosts) < MAX_NAMES:
            self.hosts[m.group(1)[:80]] = None

    def warn(self, body: str, where: str, prefix: str = "") -> None:
        """A ``NCCL WARN`` line's body: the fallback signals and the network's completion errors."""
        if self.fallback is None and (_NO_VERBS.search(body) or _NO_IB.search(body)):
            self.fallback = f"{where}: NCCL WARN{body.rstrip()}"[:200]
        if "Got completion" in body:
            m = _COMPLETION.search(body)
            if m:
                lead = _LEAD_HOST.match(prefix)
                hca = _HCA.search(body[m.end() :])
                self.completion(
                    CompletionError(
                        status=int(m.group("status")),
                        vendor_err=int(m.group("vendor")),
                        host=lead.group(1) if lead else None,
                        peer=m.group("peer"),
                        hca=hca.group(1) if hca else None,
                        direction=m.group("dir"),
                        where=where,
                    )
                )

    def completion(self, err: CompletionError) -> None:
        """A completion error (NCCL's WARN line or the provider's CQE dump), kept and counted."""
        self.completion_count += 1
        if len(self.completions) < MAX_WARNINGS:
            self.completions.append(err)

    def info(self, body: str, where: str) -> None:
        """A ``NCCL INFO`` line's body (substring tests first: a regex per fact on every line is slow)."""
        self.info_lines += 1
        said = f"{where}:{body.rstrip()}"[:200]
        if "Using network" in body:
            m = _USING_NETWORK.search(body)
            if m:
                self.using_network = (m.group(1)[:40], said)
        if "NET/" in body:
            self._net(body, said)
        if "GDR " in body and "NET/IB" in body:
            m = _GDR.search(body)
            if m and m.group(1) == "1":
                self.gdr_ib = self.gdr_ib or said
            elif m:
                self.gdr_off = self.gdr_off or said
        if "RDMA" in body:
            m = _GDR_ENABLED.search(body)
            if m and m.group(1).lower() == "enabled":
                self.gdr_ib = self.gdr_ib or said
            elif m:
                self.gdr_off = self.gdr_off or said
        if "set by environment" in body:
            m = _SET_BY_ENV.search(body.strip())
            if m:
                self.env.setdefault(m.group(1), (m.group(2), said))
        if "anks " in body:
            m = _NRANKS.search(body)
            if m:
                self.ranks = max(self.ranks or 0, int(m.group(1))) or None
        if " GID " in body and "qpn" in body:
            m = _GID.search(body)
            if m and len(self.gids) < MAX_NAMES:
                self.gids.setdefault(decode_gid(*m.groups()), said)
        self._shape(body)

    def _net(self, body: str, said: str) -> None:
        if "Using" in body:
            m = _NET_USING.search(body)
            if m:
                self.net_using = (m.group(1), said)
                for dev in _DEVICE.findall(m.group(2).split(";", 1)[0]):
                    name = dev if m.group(1).startswith("IB") else dev.split(":", 1)[0]
                    if len(self.devices) < MAX_NAMES:
                        self.devices[name[:80]] = None
        if "via NET/" in body:
            for net, gdr in _VIA_NET.findall(body):
                self.channel_nets.setdefault(net, said)
                transport, _ = network_name(net)
                if gdr and transport != "Socket":
                    self.gdr_ib = self.gdr_ib or said
                elif transport == "IB":
                    self.gdr_off = self.gdr_off or said
        if "NET/OFI" in body:
            self.channel_nets.setdefault("OFI", said)
        if self.fallback is None and _NO_IB.search(body):
            self.fallback = said
        if "NET/Plugin" in body:
            if _PLUGIN_NONE.search(body):
                self.plugin = self.plugin or "internal"
            else:
                m = _PLUGIN_LOADED.search(body)
                if m:
                    self.plugin = m.group(1)[:80]

    def _shape(self, body: str) -> None:
        """SHARP, CollNet/NVLS, channels, nodes, algorithms."""
        if ("SHARP" in body or "sharp" in body) and re.search(r"\bSHARP\b|\bsharp\b", body):
            self.sharp = True
        if " channels" in body:
            for rx, attr in ((_CHANNELS, "channels"), (_COLLNET, "collnet"), (_NVLS, "nvls")):
                m = rx.search(body)
                if m:
                    setattr(self, attr, int(m.group(1)))
        if "nNodes" in body:
            m = _NNODES.search(body)
            if m:
                self.nodes = max(self.nodes or 0, int(m.group(1))) or None
        if "Connected all rings" in body:
            self.algorithms["ring"] = None
        if "Connected all trees" in body:
            self.algorithms["tree"] = None
        if "NCCL_ALGO" in body:
            m = _ALGO_ENV.search(body)
            if m:
                for a in m.group(1).lower().split(","):
                    if a and len(self.algorithms) < 8:
                        self.algorithms[a[:20]] = None


def _env(
    command: CommandLine | None, env_lines: Mapping[str, tuple[str, str]], facts: PathFacts
) -> dict[str, tuple[str, str]]:
    """NCCL variables -> (value, where), from NCCL's own report, the environment lines and the command."""
    out: dict[str, tuple[str, str]] = dict(env_lines)
    if command is not None:
        for k, v in command.env.items():
            out[k] = (v, f"command line: {k}={v}")
    for k, vw in facts.env.items():
        out.setdefault(k, vw)
    return out


def _observed(f: PathFacts) -> tuple[str, str | None, str] | None:
    """(transport, plugin, where) from what NCCL says it used."""
    if f.using_network is not None:
        t, plugin = network_name(f.using_network[0])
        return t, plugin, f.using_network[1]
    if f.channel_nets:
        names = {network_name(n)[0]: n for n in f.channel_nets}
        pick = "IB" if "IB" in names else ("OFI" if "OFI" in names else sorted(names)[0])
        raw = names[pick]
        return pick, network_name(raw)[1], f.channel_nets[raw]
    if f.net_using is not None:
        t, plugin = network_name(f.net_using[0])
        return t, plugin, f.net_using[1]
    return None


def _requested(env: Mapping[str, tuple[str, str]]) -> tuple[str, str] | None:
    """(transport, where) from the variables the job set."""
    v = env.get("NCCL_IB_DISABLE")
    if v is not None and v[0].strip() == "1":
        return "Socket", v[1]
    v = env.get("NCCL_NET")
    if v is not None:
        t, _ = network_name(v[0].strip("'\""))
        return t, v[1] + ("" if t == "Socket" else " (requested; NCCL's lines do not confirm it)")
    v = env.get("NCCL_IB_HCA")
    if v is not None and v[0].strip():
        return "IB", v[1] + " (requested; NCCL's lines do not confirm it)"
    return None


def _transport(
    f: PathFacts, env: Mapping[str, tuple[str, str]]
) -> tuple[str | None, str | None, str | None]:
    """(transport, plugin, where): what NCCL used, else what made it fall back, else what was asked."""
    seen = _observed(f)
    if seen is not None:
        return seen
    if f.fallback is not None:
        return "Socket", None, f.fallback
    req = _requested(env)
    if req is not None:
        return req[0], None, req[1]
    return None, None, None


def _gdr(
    transport: str | None, f: PathFacts, env: Mapping[str, tuple[str, str]]
) -> tuple[bool | None, str | None]:
    if transport == "Socket":
        return False, "the transport is Socket (TCP): no GPUDirect RDMA"
    level = env.get("NCCL_NET_GDR_LEVEL")
    if level is not None and level[0].strip().upper() in ("0", "LOC"):
        return False, level[1]
    if transport is not None and f.gdr_ib is not None:
        return True, f.gdr_ib
    if f.gdr_off is not None:
        return False, f.gdr_off
    return None, None


def nccl_path(
    f: PathFacts,
    command: CommandLine | None = None,
    env_lines: Mapping[str, tuple[str, str]] | None = None,
) -> NcclPath | None:
    """The path from every signal (see the module docstring); None when nothing says anything."""
    env = _env(command, env_lines or {}, f)
    transport, plugin, where = _transport(f, env)
    gdr, gdr_where = _gdr(transport, f, env)
    devices = tuple(f.devices)
    hca = env.get("NCCL_IB_HCA")
    if not devices and transport == "IB" and hca is not None:
        devices = tuple(d for d in hca[0].lstrip("^=").split(",") if d)[:MAX_NAMES]
    if not f.info_lines and transport is None and gdr is None and not f.completion_count:
        return None
    nodes = max(f.nodes or 0, len(f.hosts)) or None
    gid_index, gid_source = _gid_index(f, env)
    return NcclPath(
        transport=transport,
        net_plugin=f.plugin if f.plugin not in (None, "internal") or plugin is None else plugin,
        devices=devices,
        gdr=gdr,
        sharp=True if f.sharp else None,
        collnet=None if f.collnet is None else f.collnet > 0,
        nvls=None if f.nvls is None else f.nvls > 0,
        algorithms=tuple(f.algorithms),
        channels=f.channels,
        nodes=nodes,
        info_lines=f.info_lines,
        transport_source=where,
        gdr_source=gdr_where,
        hosts=tuple(f.hosts),
        ranks=f.ranks,
        gid_index=gid_index,
        gids=tuple(f.gids),
        gid_source=gid_source,
        completion_errors=tuple(f.completions),
        completion_error_count=f.completion_count,
    )


def _gid_index(f: PathFacts, env: Mapping[str, tuple[str, str]]) -> tuple[int | None, str | None]:
    """``NCCL_IB_GID_INDEX`` where the job set it, else the one index the connection lines show."""
    v = env.get("NCCL_IB_GID_INDEX")
    if v is not None and v[0].strip().lstrip("-").isdigit() and len(v[0].strip()) <= 5:
        index = int(v[0].strip())
        return (index, v[1]) if index >= 0 else (None, None)
    indexes = {g.split(" ", 1)[0] for g in f.gids}
    if len(indexes) == 1:
        first = next(iter(f.gids))
        return int(next(iter(indexes))), f.gids[first]
    return None, None
