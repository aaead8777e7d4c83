"""``ibdiag fabric --slurm-topology FILE``: ``topology.conf`` for Slurm's topology/tree plugin.

Slurm's tree wants each node under one leaf switch and each switch under one parent; a fat tree
gives neither as cabled (a rail-optimised host hangs off one leaf per rail, every leaf off every spine).
So switches are grouped: leaves that serve the same hosts are one Slurm switch (a scalable unit,
``su1``), and switches of a higher tier that reach the same groups below are one (``spines1``). What
Slurm needs, "which nodes are close", survives; a comment line says what each group holds. Host
names come from the adapters' node descriptions (``gpu03 mlx5_2``) or ``--topo``, renamed by a
``--hosts`` map where Slurm knows the node by another name; a name Slurm could not read is left out
and said in a comment.
"""

from __future__ import annotations

import re

from ibdiag.errors import InputError
from ibdiag.fabric.graph import SwitchGraph
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import Fabric
from ibdiag.fabric.nodelist import compress
from ibdiag.fabric.shape import SINGLE, TREE, Shape, host_links, tier_plural
from ibdiag.text import safe_excerpt

_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _switch_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:64] or "switch"


MAX_MAP_BYTES = 4 * 2**20
MAP_HINT = "one mapping a line: <host as the node descriptions name it, or an adapter's node GUID> <Slurm node name>"


def parse_hosts_map(text: str, source: str) -> dict[str, str]:
    """``--hosts FILE``: ``gpu03 node-a17`` (a host as node descriptions or --topo name it) or
    ``0x0002c90300000300 node-a17`` (an adapter's node GUID: its host); ``#`` comments."""
    out: dict[str, str] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not _HOST.fullmatch(parts[1]) or not parts[0].isprintable():
            raise InputError(f"{source} line {no}: {safe_excerpt(line, 60)}", hint=MAP_HINT)
        key = parts[0].lower() if parts[0].lower().startswith("0x") else parts[0]
        if key in out:
            raise InputError(
                f"{source} line {no}: {safe_excerpt(parts[0], 40)} mapped twice", hint=MAP_HINT
            )
        out[key] = parts[1]
    return out


def _leaf_hosts(
    fab: Fabric, names: Names, sh: Shape, rename: dict[str, str]
) -> tuple[dict[str, frozenset[str]], set[str]]:
    """Leaf GUID -> the Slurm names of its hosts; and the names left out (not readable by Slurm)."""
    # An adapter's GUID names its whole host (every adapter of it), a host name itself.
    by_host = {k: v for k, v in rename.items() if not k.startswith("0x")}
    for key, value in rename.items():
        h = names.host(key) if key.startswith("0x") else None
        if h is not None:
            by_host[h.host] = value
    skipped: set[str] = set()
    leaf_hosts: dict[str, frozenset[str]] = {}
    for leaf, ports in host_links(fab).items():
        if sh.tiers.get(leaf, 0) != 0:
            continue  # a host on a spine (an SM server) is not a compute node's place
        got = set()
        for p in ports:
            assert p.peer is not None
            h = names.host(p.peer.guid)
            if h is None:
                continue
            host = by_host.get(h.host, h.host)
            if _HOST.fullmatch(host):
                got.add(host)
            else:
                skipped.add(safe_excerpt(host, 40))
        if got:
            leaf_hosts[leaf] = frozenset(got)
    return leaf_hosts, skipped


def topology_conf(
    fab: Fabric, names: Names, sh: Shape | None, rename: dict[str, str] | None = None
) -> str:
    if sh is None or sh.kind not in (TREE, SINGLE):
        raise InputError(
            f"--slurm-topology: the fabric is not a tree of tiers ({sh.text if sh else 'no shape'})",
            hint="Slurm's topology/tree needs leaves under spines; see the fabric.tiers finding",
        )
    leaf_hosts, skipped = _leaf_hosts(fab, names, sh, rename or {})
    if not leaf_hosts:
        raise InputError(
            "--slurm-topology: no host is named on this fabric",
            hint="adapters' node descriptions name their host (`gpu03 mlx5_2`, rdma-ndd); or give --topo files",
        )
    lines = [
        f"# topology.conf for Slurm's topology/tree, written by `ibdiag fabric` from {safe_excerpt(fab.source, 80)}",
        f"# {sh.text}",
    ]
    # Tier 0: leaves with the same hosts are one Slurm switch.
    groups: dict[frozenset[str], list[str]] = {}
    for leaf, hs in leaf_hosts.items():
        groups.setdefault(hs, []).append(leaf)
    member: dict[str, str] = {}
    body: list[str] = []
    ordered = sorted(groups.items(), key=lambda kv: (min(kv[0]), sorted(kv[1])))
    for i, (hs, leaves) in enumerate(ordered, 1):
        name = _switch_name(names.node(leaves[0])) if len(leaves) == 1 else f"su{i}"
        if len(leaves) > 1:
            body.append(f"# {name}: {' '.join(sorted(names.node(x) for x in leaves))}")
        body.append(f"SwitchName={name} Nodes={compress(sorted(hs))}")
        member.update(dict.fromkeys(leaves, name))
    # Higher tiers: switches reaching the same groups below are one.
    g = sh.graph if sh.graph is not None else SwitchGraph(())
    for t in range(1, sh.depth):
        above: dict[frozenset[str], list[str]] = {}
        for s, tier in sh.tiers.items():
            if tier != t:
                continue
            below = frozenset(
                member[n] for n in g.neighbors(s) if sh.tiers[n] == t - 1 and n in member
            )
            if below:
                above.setdefault(below, []).append(s)
        for i, (below, switches) in enumerate(
            sorted(above.items(), key=lambda kv: sorted(kv[0])), 1
        ):
            name = (
                _switch_name(names.node(switches[0]))
                if len(switches) == 1
                else f"{tier_plural(t, 2).split()[0]}{i}"
            )
            if len(switches) > 1:
                body.append(f"# {name}: {' '.join(sorted(names.node(x) for x in switches))}")
            body.append(f"SwitchName={name} Switches={','.join(sorted(below))}")
            member.update(dict.fromkeys(switches, name))
    if skipped:
        lines.append(
            f"# left out, not host names Slurm reads: {', '.join(sorted(skipped)[:8])}"
            + (f" and {len(skipped) - 8} more" if len(skipped) > 8 else "")
        )
    return "\n".join(lines + body) + "\n"
