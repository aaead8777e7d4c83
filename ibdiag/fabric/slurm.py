"""``ibdiag fabric --slurm-topology FILE``: ``topology.conf`` for Slurm's topology/tree plugin.

Slurm's tree wants each node under one leaf switch and each switch under one parent; a fat tree
gives neither as cabled (a rail-optimised host hangs off one leaf per rail, every leaf off every spine).
So switches are grouped: leaves that serve the same hosts are one Slurm switch (a scalable unit,
``su1``: leaves sharing at least half their hosts), each node under the one unit that holds most of
its adapters -- a host with a cable on another unit's leaf is placed with the rest of its adapters
and said in a comment, never split or regrouped silently -- and switches of a higher tier that reach
the same groups below are one (``spines1``). What Slurm needs, "which nodes are close", survives; a
comment line says what each group holds. Host names come from the adapters' node descriptions
(``gpu03 mlx5_2``), a node-name map or ``--topo``, renamed by a ``--hosts`` map where Slurm knows the
node by another name (an adapter's GUID there names an adapter no description names); a name Slurm
could not read is left out and said in a comment.
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
MAP_HINT = "one mapping a line: <host as the node descriptions name it, or an adapter's node GUID (0x…, H-…)> <Slurm node name> (quoted as in a node-name map, or not)"


_MAP_LINE = re.compile(r'^(\S{1,128})\s+(?:"([^"]{1,128})"|(\S{1,128}))\s*$')
_NODE_ID = re.compile(r"^[SHR]-([0-9a-fA-F]{1,16})$")


def parse_hosts_map(text: str, source: str) -> dict[str, str]:
    """``--hosts FILE``: ``gpu03 node-a17`` (a host as node descriptions or --topo name it),
    ``0x0002c90300000300 node-a17`` (an adapter's node GUID: its host, named or not), or a line of a
    node-name map (``0x0002c90300000300 "node-a17"``, ``H-0002c90300000300 node-a17``); ``#`` comments."""
    out: dict[str, str] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip().lstrip("\ufeff")
        if not line:
            continue
        m = _MAP_LINE.match(line) if len(line) <= 512 else None
        name = (m.group(2) or m.group(3)).strip() if m else ""
        if m is None or not _HOST.fullmatch(name) or not m.group(1).isprintable():
            raise InputError(f"{source} line {no}: {safe_excerpt(line, 60)}", hint=MAP_HINT)
        key = m.group(1)
        node = _NODE_ID.match(key)
        if node:
            key = f"0x{int(node.group(1), 16):016x}"
        elif key.lower().startswith("0x"):
            try:
                key = f"0x{int(key, 16):016x}"
            except ValueError:
                raise InputError(
                    f"{source} line {no}: {safe_excerpt(key, 40)} is not a GUID", hint=MAP_HINT
                ) from None
        if key in out:
            raise InputError(
                f"{source} line {no}: {safe_excerpt(m.group(1), 40)} mapped twice", hint=MAP_HINT
            )
        out[key] = name
    return out


def _leaf_hosts(
    fab: Fabric, names: Names, sh: Shape, rename: dict[str, str]
) -> tuple[dict[str, dict[str, int]], set[str]]:
    """Leaf GUID -> the Slurm names of its hosts (and how many adapters each has there); and the
    names left out (not readable by Slurm). An adapter's GUID in ``rename`` names its host even when
    its description names nobody (a default description)."""
    by_host = {k: v for k, v in rename.items() if not k.startswith("0x")}
    for key, value in rename.items():
        h = names.host(key) if key.startswith("0x") else None
        if h is not None:
            by_host[h.host] = value
    skipped: set[str] = set()
    leaf_hosts: dict[str, dict[str, int]] = {}
    owner: dict[str, str] = {}
    for leaf, ports in host_links(fab).items():
        if sh.tiers.get(leaf, 0) != 0:
            continue  # a host on a spine (an SM server) is not a compute node's place
        got: dict[str, int] = {}
        for p in ports:
            assert p.peer is not None
            h = names.host(p.peer.guid)
            host = rename.get(p.peer.guid) or (
                by_host.get(h.host, h.host) if h is not None else None
            )
            if host is None:
                continue
            if h is not None and owner.setdefault(host, h.host) != h.host:
                raise _one_name_two_hosts(host, owner[host], h.host)
            if _HOST.fullmatch(host):
                got[host] = got.get(host, 0) + 1
            else:
                skipped.add(safe_excerpt(host, 40))
        if got:
            leaf_hosts[leaf] = got
    return leaf_hosts, skipped


def _one_name_two_hosts(name: str, a: str, b: str) -> InputError:
    """Two hosts the fabric tells apart would be one Slurm node: ``--hosts`` sends both to ``name``,
    or one to the other's own name. (Two adapters of one host under one name are that host.)"""
    first, second = sorted((a, b))
    shown = [safe_excerpt(x, 64) for x in (first, second, name)]
    if name in (first, second):
        other = shown[1] if name == first else shown[0]
        what = f"--hosts maps {other} to {shown[2]}, another host's own name"
    else:
        what = f"--hosts maps {shown[0]} and {shown[1]} both to {shown[2]}"
    return InputError(
        f"{what}: topology.conf would make two hosts one Slurm node",
        hint="give each host its own Slurm name (the adapters of one host may share one)",
    )


def units(
    leaf_hosts: dict[str, dict[str, int]],
) -> tuple[list[list[str]], dict[str, int], list[str]]:
    """Leaves grouped into scalable units (two leaves are one unit when they share at least half the
    hosts of the smaller), each host under the one unit that holds most of its adapters, and a
    comment for each host with adapters in another unit too (a cable on another unit's leaf)."""
    parent = {leaf: leaf for leaf in leaf_hosts}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_host: dict[str, list[str]] = {}
    for leaf, hs in leaf_hosts.items():
        for h in hs:
            by_host.setdefault(h, []).append(leaf)
    for leaves in by_host.values():
        for other in leaves[1:]:
            a, b = leaves[0], other
            common = len(leaf_hosts[a].keys() & leaf_hosts[b].keys())
            if 2 * common >= min(len(leaf_hosts[a]), len(leaf_hosts[b])):
                parent[root(b)] = root(a)
    groups: dict[str, list[str]] = {}
    for leaf in leaf_hosts:
        groups.setdefault(root(leaf), []).append(leaf)
    ordered = sorted(
        (sorted(g) for g in groups.values()), key=lambda g: (min(min(leaf_hosts[x]) for x in g), g)
    )
    unit_of = {leaf: i for i, g in enumerate(ordered) for leaf in g}
    home: dict[str, int] = {}
    notes: list[str] = []
    for host, leaves in sorted(by_host.items()):
        count: dict[int, int] = {}
        for leaf in leaves:
            count[unit_of[leaf]] = count.get(unit_of[leaf], 0) + leaf_hosts[leaf][host]
        best = min(count, key=lambda u: (-count[u], u))
        home[host] = best
        if len(count) > 1:
            notes.append(
                f"{host}: {sum(count.values()) - count[best]} of its {sum(count.values())} adapters on another unit's leaf (a moved cable?); placed with the unit holding the rest"
            )
    return ordered, home, notes


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
            hint="adapters' node descriptions name their host (`gpu03 mlx5_2`, rdma-ndd); or name them by GUID: a node-name map, --hosts (`0x<GUID> name`), or --topo files",
        )
    lines = [
        f"# topology.conf for Slurm's topology/tree, written by `ibdiag fabric` from {safe_excerpt(fab.source, 80)}",
        f"# {sh.text}",
    ]
    # Tier 0: leaves that serve the same hosts are one Slurm switch, each host under one of them.
    ordered, home, moved = units(leaf_hosts)
    member: dict[str, str] = {}
    body: list[str] = []
    for i, leaves in enumerate(ordered):
        hs = sorted(h for h, u in home.items() if u == i)
        name = _switch_name(names.switch_token(leaves[0])) if len(leaves) == 1 else f"su{i + 1}"
        if len(leaves) > 1:
            body.append(f"# {name}: {' '.join(sorted(names.node(x) for x in leaves))}")
        if hs:
            body.append(f"SwitchName={name} Nodes={compress(hs)}")
            member.update(dict.fromkeys(leaves, name))
    lines += [f"# {safe_excerpt(n, 160)}" for n in moved[:32]]
    if len(moved) > 32:
        lines.append(f"# and {len(moved) - 32} more hosts with an adapter on another unit's leaf")
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
                _switch_name(names.switch_token(switches[0]))
                if len(switches) == 1
                else f"{tier_plural(t, 2).split()[0]}{i}"
            )
            if len(switches) > 1:
                body.append(f"# {name}: {' '.join(sorted(names.node(x) for x in switches))}")
            body.append(f"SwitchName={name} Switches={','.join(sorted(below))}")
            member.update(dict.fromkeys(switches, name))
    nameless = sum(
        1
        for leaf, ports in host_links(fab).items()
        for p in ports
        if p.peer is not None
        and names.host(p.peer.guid) is None
        and p.peer.guid not in (rename or {})
    )
    if nameless:
        lines.append(
            f"# left out, {nameless} adapter(s) no description, node-name map or --hosts line names (their GUIDs: ibdiag fabric -o json)"
        )
    if skipped:
        lines.append(
            f"# left out, not host names Slurm reads: {', '.join(sorted(skipped)[:8])}"
            + (f" and {len(skipped) - 8} more" if len(skipped) > 8 else "")
        )
    return "\n".join(lines + body) + "\n"
