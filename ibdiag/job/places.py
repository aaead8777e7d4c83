"""Where a rank runs: its node by name, its GPU, the NICs nearest that GPU and, with a fabric, the
leaf port each NIC's cable goes to and what the fabric's checks said of that path.

RAS names a node by the IP address of NCCL's bootstrap interface (``NCCL_SOCKET_IFNAME``), not by its
host name. The name is found, in this order, in: a hosts file (``/etc/hosts`` or ``getent hosts``
output: ``10.137.190.124 gpu03``), the RoCE IPv4 addresses of the nodes' topo files (when NCCL
bootstraps over a RoCE port), Inspector's records of the same communicator and rank (Inspector writes
``gethostname()``), or the address itself when a topo file has that host name. The GPU is RAS's
``nvml_dev`` (its physical index, ``nvidia-smi``'s and ``ibdiag topo``'s numbering); its nearest NICs
are topo's ``pairings``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ibdiag.errors import InputError
from ibdiag.fabric.hosts import TopoFile
from ibdiag.findings.model import Finding
from ibdiag.infile import read_text_file
from ibdiag.text import safe_value

MAX_MAP_BYTES = 64 * 2**20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_ADDRESS = re.compile(r"^[0-9A-Fa-f.:%]{2,64}$")
_RANK_LINE = re.compile(r"^(\d{1,9}):?\s+(\S{1,253})")


class NicPaths(Protocol):
    """The fabric side of the join (:class:`ibdiag.job.fabricpath.FabricView`)."""

    def leaf(self, host: str, adapter: str) -> tuple[str | None, tuple[Finding, ...]]: ...


@dataclass(frozen=True)
class Place:
    address: str | None
    """The node as RAS named it (an IP address) or Inspector (a host name)."""
    node: str | None
    """The node's name, when found."""
    gpu: int | None
    pid: int | None
    nics: tuple[str, ...] = ()
    leaves: tuple[str, ...] = ()
    """Per NIC with a cable on the fabric: ``leaf-r2-1 port 5 (cable to gpu03 mlx5_4)``."""
    path_findings: tuple[Finding, ...] = ()
    """The fabric's warn and fail findings on those cables' two ends."""
    unknown: tuple[str, ...] = ()
    """What could not be joined, and why."""
    label: str | None = None
    """What to call it when nothing of its node is known (``3c9f01d2:r21``: communicator and rank)."""

    @property
    def known(self) -> bool:
        return bool(self.node or self.address)

    @property
    def subject(self) -> str:
        """One token: ``gpu03:GPU4``, ``10.0.0.5:GPU4``, ``gpu03:pid4711``, ``3c9f01d2:r21``."""
        if not self.known and self.label:
            return self.label
        where = self.node or self.address or "?"
        if self.gpu is not None:
            return f"{where}:GPU{self.gpu}"
        return f"{where}:pid{self.pid}" if self.pid is not None else where

    @property
    def text(self) -> str:
        """``gpu03 (10.0.0.5) GPU 4, process 4711 -> mlx5_4 -> leaf-r2-1 port 5``."""
        node = self.node or self.address or "unknown node"
        if self.node and self.address and self.address != self.node:
            node += f" ({self.address})"
        parts = [node + (f" GPU {self.gpu}" if self.gpu is not None else "")]
        if self.pid is not None:
            parts[0] += f", process {self.pid}"
        if self.nics:
            parts.append("/".join(self.nics))
        if self.leaves:
            parts.append("; ".join(self.leaves))
        return " -> ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "node": self.node,
            "gpu": self.gpu,
            "pid": self.pid,
            "nics": list(self.nics),
            "leaf_ports": list(self.leaves),
            "path_findings": [f.to_json() for f in self.path_findings],
            "not_joined": list(self.unknown),
        }


def read_hosts_file(path: Path) -> dict[str, str]:
    """``/etc/hosts`` (or ``getent hosts``) -> address -> first name."""
    where = f"hosts file {safe_value(str(path))}"
    hint = "give a file of 'ADDRESS NAME' lines, e.g. /etc/hosts or `getent hosts` output"
    text = read_text_file(path, MAX_MAP_BYTES, where, hint, utf8_only=False)
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and _ADDRESS.match(words[0]) and _NAME.match(words[1]):
            out.setdefault(words[0], words[1])
    if not out:
        raise InputError(f"{where}: no 'ADDRESS NAME' line in it", hint=hint)
    return out


def read_rank_map(path: Path) -> dict[int, str]:
    """``srun -l hostname`` output (``12: gpu03``) or ``RANK HOST`` lines -> rank -> host."""
    where = f"rank map {safe_value(str(path))}"
    hint = "give 'RANK: HOST' lines, e.g. `srun -l hostname | sort -n` run with the job's layout"
    text = read_text_file(path, MAX_MAP_BYTES, where, hint, utf8_only=False)
    out: dict[int, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _RANK_LINE.match(line)
        if m is None or not _NAME.match(m.group(2)):
            raise InputError(f"{where}: line {n} is not 'RANK: HOST'", hint=hint)
        out[int(m.group(1))] = m.group(2)
    if not out:
        raise InputError(f"{where}: empty", hint=hint)
    return out


@dataclass
class Join:
    """Everything known about where the job runs; :meth:`place` answers for one rank or process."""

    topo: Sequence[TopoFile] = ()
    hosts: Mapping[str, str] = field(default_factory=dict)
    """Address -> name (hosts file)."""
    by_rank: Mapping[tuple[str, int], str] = field(default_factory=dict)
    """(communicator hash, rank) -> host name (Inspector)."""
    rank_map: Mapping[int, str] = field(default_factory=dict)
    """Rank -> host name of the job's world (a rank map file)."""
    fabric: NicPaths | None = None

    def __post_init__(self) -> None:
        self._topo = {t.host: t for t in self.topo}
        short: dict[str, list[TopoFile]] = {}
        for t in self.topo:
            short.setdefault(t.host.split(".")[0], []).append(t)
        self._short = {k: v[0] for k, v in short.items() if len(v) == 1}
        self._roce = {a: t.host for t in self.topo for a in t.addresses}

    def _topo_of(self, name: str) -> TopoFile | None:
        return self._topo.get(name) or self._short.get(name.split(".")[0])

    def node_name(self, address: str | None, comm: str | None, rank: int | None) -> str | None:
        if address is not None:
            for table in (self.hosts, self._roce):
                if address in table:
                    return table[address]
        if comm is not None and rank is not None and (comm, rank) in self.by_rank:
            return self.by_rank[(comm, rank)]
        if address is not None and self._topo_of(address) is not None:
            return address
        return None

    def place(
        self,
        address: str | None,
        gpu: int | None,
        pid: int | None,
        *,
        comm: str | None = None,
        rank: int | None = None,
        world_rank: int | None = None,
    ) -> Place:
        node = self.node_name(address, comm, rank)
        if node is None and world_rank is not None:
            node = self.rank_map.get(world_rank)
        unknown: list[str] = []
        if node is None:
            unknown.append(
                "node name not known (give a hosts file, the nodes' topo files or Inspector's logs)"
                if address
                else "node not known"
            )
            return Place(address, None, gpu, pid, unknown=tuple(unknown))
        t = self._topo_of(node)
        if t is None:
            unknown.append(f"no topo file of {node}")
            return Place(address, node, gpu, pid, unknown=tuple(unknown))
        nics = t.gpu_nics.get(gpu, ()) if gpu is not None else ()
        if gpu is None:
            unknown.append("GPU not known")
        elif not nics:
            unknown.append(f"topo of {node} pairs no NIC with GPU {gpu}")
        leaves: list[str] = []
        found: list[Finding] = []
        if self.fabric is not None:
            for nic in nics:
                leaf, on_path = self.fabric.leaf(t.host, nic)
                if leaf is None:
                    unknown.append(f"{t.host} {nic} has no active cable on the fabric")
                else:
                    leaves.append(leaf)
                found += [f for f in on_path if f not in found]
        return Place(address, t.host, gpu, pid, nics, tuple(leaves), tuple(found), tuple(unknown))
