"""Fabric shapes real dumps have and the plain fat trees of :mod:`tests.support.fabric_topology` do not,
written by the project in ``ibnetdiscover``'s format (ibsim reads every one of them).

- :func:`director_fabric`: edge leaves under two directors whose line and spine chips share their
  chassis's system image GUID and say ``MF0;<chassis>:MCS8500/L01/U1`` (``text("ibdiagnet")`` writes
  ibdiagnet's spelling of the same fabric);
- :func:`add_sharp`: a SHARP Aggregation Node on the extra port of every switch;
- :func:`bringup_tree`: a two-tier tree with most leaves not yet populated and test loops (a cable
  from a leaf port to another port of the same leaf) on some of them;
- :func:`mixed_speeds`: an HDR fabric with EDR storage servers (ConnectX-5) and an FDR leaf (SwitchX)
  joined to the HDR spines by FDR cables: slow by design, nothing degraded -- and one HDR host link at EDR;
- :func:`campus`: a QDR fabric whose adapters all carry the firmware's default description, a third
  of them DDR-only ConnectX (device 0x6732), with its site's node-name map;
- :func:`management_pod`: a three-tier tree with a management leaf hanging off one spine and a UFM
  server on another spine;
- :func:`selene_size`: 5,007 nodes and 12,852 links, the size of a 560-node DGX A100 machine's
  rail-optimised three-tier HDR fabric (the speed benchmark's shape);
- :func:`with_prompt`, :func:`with_stderr_line`, :func:`putty_log`: a dump as people save it (a BOM and
  the shell prompt before it, one stderr line of the tool inside it, a PuTTY session log: banner,
  tabs lost, CRLF);
- :func:`judged`: a text judged as ``ibdiag fabric --from`` judges it (library, no CLI).

Device IDs are the ones real dumps carry (pci.ids 2023.04.10): Quantum 0xd2f0 (HDR), SwitchX 0xc738
(FDR), InfiniScale IV 0xbd36 (QDR), ConnectX-6 0x101b (HDR), ConnectX-5 0x1017 (EDR), ConnectX
0x673c (QDR) and 0x6732 (DDR); the Aggregation Node 0xcf09.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.counters.config import CountersConfig
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.hosts import HostEnd
from ibdiag.fabric.judge import Judged, judge
from ibdiag.fabric.namemap import NodeNameMap
from tests.support.fabric_topology import CA_BASE, SWITCH_BASE, CaNode, SwitchNode, Topology

SWITCHX, INFINISCALE4, AN_DEVID = 0xC738, 0xBD36, 0xCF09
CONNECTX5, CONNECTX_QDR, CONNECTX_DDR = 0x1017, 0x673C, 0x6732
AN_DESC = "Mellanox Technologies Aggregation Node"
DEFAULT_QDR_DESC = "MT26428 ConnectX Mellanox Technologies"
DEFAULT_DDR_DESC = "MT25408 ConnectX Mellanox Technologies"


@dataclass
class Builder:
    """Switches and adapters with GUIDs handed out in order, cabled port by port."""

    speed: str = "HDR"
    switches: list[SwitchNode] = field(default_factory=list)
    cas: list[CaNode] = field(default_factory=list)
    _used: dict[str, int] = field(default_factory=dict)

    def switch(
        self, desc: str, nports: int = 41, devid: int = 0xD2F0, sysimg: int | None = None
    ) -> SwitchNode:
        sw = SwitchNode(
            SWITCH_BASE + 0x10000 + len(self.switches) + 1, desc, nports, devid=devid, sysimg=sysimg
        )
        self.switches.append(sw)
        return sw

    def ca(self, desc: str, host: str = "", rail: int = 0, devid: int = 0x101B) -> CaNode:
        ca = CaNode(CA_BASE + 0x100000 + (len(self.cas) + 1) * 0x10, desc, host, rail, devid=devid)
        self.cas.append(ca)
        return ca

    def port(self, sw: SwitchNode) -> int:
        p = self._used.get(sw.node_id, 0) + 1
        while p in sw.peers:
            p += 1
        if p > sw.nports:
            raise ValueError(f"{sw.desc} has no free port")
        self._used[sw.node_id] = p
        return p

    def isl(self, a: SwitchNode, b: SwitchNode, spec: str = "") -> None:
        spec = spec or f"4x{self.speed}"
        pa, pb = self.port(a), self.port(b)
        a.peers[pa] = (b.node_id, pb, spec)
        b.peers[pb] = (a.node_id, pa, spec)

    def host_link(self, sw: SwitchNode, ca: CaNode, spec: str = "", port: int | None = None) -> int:
        spec = spec or f"4x{self.speed}"
        p = port if port is not None else self.port(sw)
        sw.peers[p] = (ca.node_id, 1, spec)
        ca.peer = (sw.node_id, p, spec)
        return p

    def loop(self, sw: SwitchNode, a: int, b: int, spec: str = "") -> None:
        """A cable from port ``a`` to port ``b`` of the same switch (a test loop left in)."""
        spec = spec or f"4x{self.speed}"
        sw.peers[a] = (sw.node_id, b, spec)
        sw.peers[b] = (sw.node_id, a, spec)

    def topology(self) -> Topology:
        return Topology(self.switches, self.cas, self.speed)


def add_sharp(t: Topology) -> None:
    """A SHARP Aggregation Node (a one-port CA in the switch's system image) on each switch's last port."""
    n = len(t.cas)
    for i, sw in enumerate(t.switches):
        port = sw.nports
        if port in sw.peers:
            sw.nports += 1
            port = sw.nports
        an = CaNode(CA_BASE + 0x900000 + (n + i + 1) * 0x10, AN_DESC, "", 0, devid=AN_DEVID)
        spec = f"4x{t.speed}"
        sw.peers[port] = (an.node_id, 1, spec)
        an.peer = (sw.node_id, port, spec)
        t.cas.append(an)


def director_fabric(
    edge: int = 6, hosts: int = 4, lines: int = 4, spines: int = 2, sharp: bool = True
) -> Topology:
    """``edge`` QM8700 leaves of ``hosts`` hosts each under two CS8500-like directors (``lines`` line
    and ``spines`` spine chips each): every line chip cabled to every spine chip of its chassis, every
    edge leaf with one uplink to every line chip of both directors. Tiers: edge leaves, line chips
    (spines), spine chips (cores)."""
    b = Builder()
    chassis = []
    for d in (1, 2):
        img = 0xB8CEF6030090000 + d
        ls = [b.switch(f"MF0;dir{d}:MCS8500/L{k + 1:02d}/U1", sysimg=img) for k in range(lines)]
        ss = [b.switch(f"MF0;dir{d}:MCS8500/S{k + 1:02d}/U1", sysimg=img) for k in range(spines)]
        for line in ls:
            for s in ss:
                b.isl(line, s)
        chassis.append(ls)
    for e in range(edge):
        leaf = b.switch(f"MF0;edge-{e + 1:02d}:MQM8700/U1")
        for h in range(hosts):
            name = f"node{e * hosts + h + 1:03d}"
            b.host_link(leaf, b.ca(f"{name} HCA-1", name, 0))
        for ls in chassis:
            for line in ls:
                b.isl(leaf, line)
    t = b.topology()
    if sharp:
        add_sharp(t)
    return t


def bringup_tree(
    leaves: int = 8, spines: int = 4, populated: int = 2, hosts: int = 4, loops: int = 3
) -> Topology:
    """A two-tier tree under bring-up: ``populated`` of ``leaves`` leaves have hosts; ``loops``
    unpopulated leaves have a test loop (port 19 cabled to port 20 of the same leaf)."""
    b = Builder()
    ss = [b.switch(f"MF0;spine-{k + 1}:MQM8700/U1") for k in range(spines)]
    for i in range(leaves):
        leaf = b.switch(f"MF0;leaf-{i + 1:02d}:MQM8700/U1")
        if i < populated:
            for h in range(hosts):
                name = f"gpu{i * hosts + h + 1:02d}"
                b.host_link(leaf, b.ca(f"{name} mlx5_0", name, 0))
        for s in ss:
            b.isl(leaf, s)
        if populated <= i < populated + loops:
            b.loop(leaf, 19, 20)
    return b.topology()


def mixed_speeds(degraded: bool = True) -> Topology:
    """Two HDR leaves, two spines; 4 HDR hosts per leaf (ConnectX-6), 2 EDR storage servers per leaf
    (ConnectX-5, 4xEDR: their best), and an FDR leaf (SwitchX) joined to both spines by 4xFDR cables
    with 2 FDR hosts (ConnectX-3). With ``degraded``, gpu02's HDR link trains at EDR: the one real fault."""
    b = Builder()
    ss = [b.switch(f"MF0;spine-{k + 1}:MQM8700/U1") for k in range(2)]
    leaves = [b.switch(f"MF0;leaf-{k + 1}:MQM8700/U1") for k in range(2)]
    for i, leaf in enumerate(leaves):
        for h in range(4):
            n = i * 4 + h + 1
            spec = "4xEDR" if degraded and n == 2 else "4xHDR"
            b.host_link(leaf, b.ca(f"gpu{n:02d} mlx5_0", f"gpu{n:02d}", 0), spec)
        for k in range(2):
            n = i * 2 + k + 1
            b.host_link(leaf, b.ca(f"stor{n:02d} mlx5_0", f"stor{n:02d}", 0, CONNECTX5), "4xEDR")
        for s in ss:
            for _ in range(3):
                b.isl(leaf, s)
    fdr = b.switch("MF0;old-fdr-1:SX6036/U1", nports=36, devid=SWITCHX)
    for s in ss:
        b.isl(fdr, s, "4xFDR")
    for k in range(2):
        b.host_link(fdr, b.ca(f"old{k + 1:02d} mlx4_0", f"old{k + 1:02d}", 0, 0x1003), "4xFDR")
    return b.topology()


def campus(leaves: int = 3, hosts: int = 6, ddr: bool = True) -> tuple[Topology, str, str]:
    """A QDR fabric (InfiniScale IV) whose adapters all carry the firmware's default description;
    a third of them DDR-only ConnectX (0x6732) at 4xDDR. Returns the topology and its site's
    node-name maps in the two spellings real sites use: ``0x<guid> "name"`` (infiniband-diags'
    node-name-map) and ``H-<guid> name`` (node ids, as the site's own tools write them). ``ddr=False``:
    every adapter QDR (ibsim says every port supports QDR: a DDR-only adapter is a dump's shape only)."""
    b = Builder(speed="QDR")
    core = b.switch("Infiniscale-IV Mellanox Technologies", nports=36, devid=INFINISCALE4)
    quoted, node_ids = ["# site map, infiniband-diags format"], ["# site map, node ids"]
    n = 0
    for _leaf in range(leaves):
        leaf = b.switch("Infiniscale-IV Mellanox Technologies", nports=36, devid=INFINISCALE4)
        for h in range(hosts):
            n += 1
            ddr_only = ddr and h % 3 == 2
            ca = b.ca(
                DEFAULT_DDR_DESC if ddr_only else DEFAULT_QDR_DESC,
                "",
                0,
                CONNECTX_DDR if ddr_only else CONNECTX_QDR,
            )
            b.host_link(leaf, ca, "4xDDR" if ddr_only else "4xQDR")
            quoted.append(f'0x{ca.guid:016x} "node{n:02d}"')
            node_ids.append(f"H-{ca.guid:016x} node{n:02d}")
        for _ in range(5 if ddr else 6):  # 4 QDR and 2 DDR hosts (160 Gb/s) over 5 QDR uplinks: 1:1
            b.isl(leaf, core)
    return b.topology(), "\n".join(quoted) + "\n", "\n".join(node_ids) + "\n"


def management_pod() -> Topology:
    """Three tiers (2 pods x 2 leaves x 4 hosts, 2 spines a pod, 2 cores); a management leaf (2 hosts,
    2 cables) hanging off spine 1 of pod 1 alone, and a UFM server cabled to spine 2 of pod 2."""
    b = Builder()
    cores = [b.switch(f"MF0;core-{k + 1}:MQM8700/U1") for k in range(2)]
    spines: list[SwitchNode] = []
    n = 0
    for p in range(2):
        pod = [b.switch(f"MF0;spine-p{p + 1}-{k + 1}:MQM8700/U1") for k in range(2)]
        spines += pod
        for s in pod:
            for c in cores:
                for _ in range(2):
                    b.isl(s, c)
        for i in range(2):
            leaf = b.switch(f"MF0;leaf-p{p + 1}-{i + 1}:MQM8700/U1")
            for _ in range(4):
                n += 1
                b.host_link(leaf, b.ca(f"gpu{n:02d} mlx5_0", f"gpu{n:02d}", 0))
            for s in pod:
                for _ in range(2):
                    b.isl(leaf, s)
    mgmt = b.switch("MF0;mgmt-leaf:MQM8700/U1")
    for k in range(2):
        b.host_link(mgmt, b.ca(f"mgmt{k + 1:02d} HCA-1", f"mgmt{k + 1:02d}", 0))
    for _ in range(2):
        b.isl(mgmt, spines[0])
    b.host_link(spines[3], b.ca("ufm01 HCA-1", "ufm01", 0))
    return b.topology()


def two_spellings(hosts: int = 8, rails: int = 4) -> Topology:
    """A rail-optimised fat tree (one leaf per rail, 2 spines) whose first half of hosts name their
    adapters ``HCA-1`` … (``HCA-k`` is rail k-1) and the second half ``mlx5_0`` … (``mlx5_k`` is rail k)."""
    b = Builder()
    ss = [b.switch(f"MF0;spine-{k + 1}:MQM8700/U1") for k in range(2)]
    leaves = [b.switch(f"MF0;leaf-r{r}:MQM8700/U1") for r in range(rails)]
    for h in range(hosts):
        name = f"gpu{h + 1:02d}"
        for r, leaf in enumerate(leaves):
            dev = f"HCA-{r + 1}" if h < hosts // 2 else f"mlx5_{r}"
            b.host_link(leaf, b.ca(f"{name} {dev}", name, r), port=h + 1)
    for leaf in leaves:
        for s in ss:
            for _ in range(hosts // 2):
                b.isl(leaf, s)
    return b.topology()


def selene_size() -> Topology:
    """5,007 nodes, 12,852 links: 560 hosts x 8 rails (4,480 ConnectX-6) in 28 scalable units of 20,
    one leaf per unit and rail (224 leaves, 20 down, 20 up, 1:1), 8 rail groups of 20 spines (each 28
    down, 24 up), 96 cores of 40 ports; 5 storage leaves of 8-9 EDR storage adapters (42), 2 uplinks
    each. The size of the real 560-node DGX A100 dump issue 35 timed; the layout is this project's."""
    b = Builder()
    spines = [
        [b.switch(f"MF0;sp-r{r}-{k + 1:02d}:MQM8790/U1", nports=64) for k in range(20)]
        for r in range(8)
    ]
    cores = [b.switch(f"MF0;core-{k + 1:03d}:MQM8790/U1") for k in range(96)]
    for s, sp in enumerate(x for group in spines for x in group):
        for k in range(24):
            b.isl(sp, cores[(s * 24 + k) % 96])
    for su in range(28):
        for r in range(8):
            leaf = b.switch(f"MF0;lf-su{su + 1:02d}-r{r}:MQM8790/U1")
            for h in range(20):
                name = f"dgx{su * 20 + h + 1:04d}"
                b.host_link(leaf, b.ca(f"{name} mlx5_{r}", name, r))
            for sp in spines[r]:
                b.isl(leaf, sp)
    flat = [x for group in spines for x in group]
    n = 0
    for k in range(5):
        leaf = b.switch(f"MF0;storage-{k + 1}:MQM8790/U1")
        for _ in range(9 if k < 2 else 8):
            n += 1
            b.host_link(leaf, b.ca(f"stor{n:02d} mlx5_0", f"stor{n:02d}", 0, CONNECTX5), "4xEDR")
        for j in range(2):
            b.isl(leaf, flat[(k * 2 + j) * 16])
    return b.topology()


def with_prompt(text: str) -> str:
    """Saved from a Windows editor after a terminal session: a BOM, the prompt and command, CRLF."""
    body = "\ufeff[root@ufm01 fabric]# ibnetdiscover\r\n" + text.replace("\n", "\r\n")
    return body + "[root@ufm01 fabric]# \r\n"


def with_stderr_line(text: str) -> str:
    """One line ibnetdiscover wrote on stderr into the same terminal, between two nodes."""
    head, sep, rest = text.partition("\n\nvendid=")
    return (
        head
        + "\n\nibwarn: [4321] _do_madrpc: recv failed: Connection timed out\n"
        + sep.lstrip("\n")
        + rest
    )


def putty_log(text: str) -> str:
    """A PuTTY session log ("printable output"): its banner, the command echoed, tabs lost, CRLF."""
    banner = "=~=~=~=~=~=~=~=~=~=~=~= PuTTY log 2023.02.03 09:32:51 =~=~=~=~=~=~=~=~=~=~=~=\n"
    body = banner + "admin@login01:~$ ibnetdiscover\n" + text.replace("\t", "")
    return body.replace("\n", "\r\n")


def judged(
    text: str,
    tmp_path: Path,
    *,
    name_map: NodeNameMap | None = None,
    hosts: dict[str, HostEnd] | None = None,
    fcfg: FabricConfig | None = None,
) -> Judged:
    """``text`` saved as a file and judged as ``ibdiag fabric --from FILE`` does."""
    path = tmp_path / f"dump{len(list(tmp_path.iterdir()))}.txt"
    path.write_bytes(text.encode())
    fab = build_fabric(dump.load(path))
    return judge(
        fab, hosts=hosts or {}, cfg=CountersConfig(), fcfg=fcfg or FabricConfig(), name_map=name_map
    )
