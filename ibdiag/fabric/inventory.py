"""What the dump lists, checked for what would mislead every other check: two nodes with one GUID,
adapters nobody named, cables looped back into their own switch. Pure.
"""

from __future__ import annotations

from ibdiag.fabric.checks import CHECKS, listed
from ibdiag.fabric.devices import is_aggregation_node
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import CA, Fabric
from ibdiag.fabric.naming import is_default_desc
from ibdiag.fabric.shape import loopbacks
from ibdiag.findings.model import Finding, Severity


@CHECKS.check(
    "fabric.duplicate_guid",
    "two or more nodes of the dump say the same GUID (kept apart, never merged): fail",
)
def duplicate_guid(fab: Fabric, names: Names) -> list[Finding]:
    out = []
    for guid, keys in fab.duplicates:
        said = [f"{names.node(k)} ({fab.node(k).node_id if fab.node(k) else k})" for k in keys]  # type: ignore[union-attr]
        out.append(
            Finding(
                "fabric.duplicate_guid",
                Severity.FAIL,
                guid,
                f"{len(keys)} nodes say GUID {guid}: {listed(said, 4)}; they are kept apart "
                f"({', '.join(keys)}) and every finding names which",
                value=len(keys),
                limit=1,
                hint="a GUID is unique in a subnet: two nodes with one confuse the SM and every tool; if the dump "
                "was edited or merged from two fabrics, take it again (`ibnetdiscover`), else find the node with a "
                "cloned GUID (`ibstat`, the adapter's or switch's firmware)",
            )
        )
    return out


def unnamed(fab: Fabric, names: Names) -> list[str]:
    """Adapters (not SHARP nodes) that no source names: a default description, no node-name map, no --topo."""
    return [
        n.guid
        for n in fab.nodes
        if n.kind == CA
        and not is_aggregation_node(n)
        and names.host(n.guid) is None
        and is_default_desc(n.desc)
    ]


@CHECKS.check(
    "fabric.names",
    "how many adapters carry no host name (their firmware's default description) and were not named by a node-name map or --topo: ok",
)
def names_check(fab: Fabric, names: Names) -> Finding | None:
    adapters = [n for n in fab.nodes if n.kind == CA and not is_aggregation_node(n)]
    missing = unnamed(fab, names)
    if not missing:
        return None
    return Finding(
        "fabric.names",
        Severity.OK,
        "fabric",
        f"{len(missing)} of {len(adapters)} adapters carry their firmware's default description, no host name "
        f"({listed([names.node(g) for g in missing], 3)}): they are shown by GUID and their rails not "
        "judged; Slurm's topology.conf places them only where a node-name map names their GUID",
        value=len(missing),
        limit=len(adapters),
        hint="name them: rdma-ndd on each host sets `<hostname> <device>`; or give the site's map with "
        '--node-name-map FILE (`0x<GUID> "name"`, as ibnetdiscover --node-name-map reads it)',
    )


@CHECKS.check(
    "fabric.loopback",
    "a cable from one port of a switch to another port of the same switch (a test loop left in, or a miscabled ISL): warn",
)
def loopback(fab: Fabric, names: Names) -> list[Finding]:
    loops = loopbacks(fab)
    by_switch: dict[str, list[str]] = {}
    for a, b in loops:
        by_switch.setdefault(a.guid, []).append(f"port {a.port} to port {b.port}")
    out = []
    for guid, pairs in sorted(by_switch.items()):
        out.append(
            Finding(
                "fabric.loopback",
                Severity.WARN,
                names.switch_token(guid),
                f"{names.node(guid)} is cabled to itself: {listed(pairs, 4)} (not an ISL: it carries no traffic "
                "between switches)",
                value=len(pairs),
                hint="a loop left from a cable test, or a cable meant for another switch: unplug it, or cable it where the plan says",
            )
        )
    return out
