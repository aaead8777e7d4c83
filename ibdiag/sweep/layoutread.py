"""A sweep's fabric description (:class:`~ibdiag.sweep.layout.FabricDescription`) from the files that
already describe a fabric — one reader each, nothing new to learn:

* a saved InfiniBand fabric (``ibdiag fabric --save``: a directory, a ``.tar.gz``, or an
  ``ibnetdiscover`` file), read by ``ibdiag fabric --from``'s reader: each host adapter's leaf port
  from the adapters' node descriptions (``gpu03 mlx5_2``, as rdma-ndd writes them), the uplinks from
  the fabric's tiers, and the routes when it was saved with ``--routes``;
* a cabling plan (``ibdiag fabric --expect``'s CSV ``node,adapter,switch,port`` / ``switch,port,switch,port``
  or TOML ``[[host]]``/``[[isl]]``): the form for a routed RoCE/IP fabric, which no tool discovers.
  A leaf is a switch with host cables; its uplink groups are the switches it has ISLs to. Routes
  are not in a plan: they are taken as hashed per flow.
"""

from __future__ import annotations

from pathlib import Path

from ibdiag.errors import InputError
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import Fabric, PortRef
from ibdiag.fabric.paths import Attachment, Router, attachments
from ibdiag.fabric.plan import HINT as PLAN_HINT
from ibdiag.fabric.plan import MAX_PLAN_BYTES, Plan, parse_csv, parse_toml
from ibdiag.fabric.shape import TREE, shape
from ibdiag.infile import read_text_file
from ibdiag.sweep.layout import DESTINATION, HASHED, ROUTES, FabricDescription, RouteFn, Seat
from ibdiag.text import safe_excerpt

HINT = (
    "give a fabric saved by `ibdiag fabric --save` (with --routes for exact paths), "
    "or a cabling plan as `ibdiag fabric --expect` reads it (CSV node,adapter,switch,port / "
    "switch,port,switch,port, or TOML)"
)


def load_description(path: Path) -> FabricDescription:
    """The description in ``path``: a plan by its suffix (``.csv``, ``.toml``), else a saved fabric.

    Raises :class:`~ibdiag.errors.InputError` for anything unreadable, or a fabric with no host on a leaf."""
    source = safe_excerpt(str(path), 200)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".toml"):
        text = read_text_file(path, MAX_PLAN_BYTES, f"sweep fabric {source}", PLAN_HINT)
        plan = parse_csv(text, source) if suffix == ".csv" else parse_toml(text, source)
        desc = from_plan(plan)
    else:
        try:
            fab = build_fabric(dump.load(path))
        except InputError as e:
            raise InputError(f"sweep fabric: {e.message}", hint=f"{HINT}; {e.hint or ''}") from None
        desc = from_fabric(fab, Names(fab, {}), source)
    if not desc.seats:
        raise InputError(f"sweep fabric {source}: no host adapter is cabled to a switch", hint=HINT)
    return desc


def _index(seats: dict[tuple[str, str], Seat]) -> dict[tuple[str, str], Seat]:
    """Each seat's position among its leaf's host ports (port order)."""
    ports: dict[str, list[int]] = {}
    for s in seats.values():
        ports.setdefault(s.leaf, []).append(s.port)
    order = {leaf: {p: i for i, p in enumerate(sorted(set(ps)))} for leaf, ps in ports.items()}
    return {
        k: Seat(s.leaf, s.port, order[s.leaf][s.port], s.ca, s.ca_port) for k, s in seats.items()
    }


def from_plan(plan: Plan) -> FabricDescription:
    """A cabling plan's hosts, leaves and uplinks; routing ``hashed``."""
    seats: dict[tuple[str, str], Seat] = {}
    peers: dict[str, set[str]] = {}
    for cable in plan.cables:
        ends = sorted(cable)
        if ends[0][0] == "H" and ends[1][0] == "S":
            (_, host, adapter), (_, switch, port) = ends
            seats[(host, adapter)] = Seat(switch, int(port), 0)
        elif ends[0][0] == "S" and ends[1][0] == "S":
            a, b = ends[0][1], ends[1][1]
            peers.setdefault(a, set()).add(b)
            peers.setdefault(b, set()).add(a)
    leaves = {s.leaf for s in seats.values()}
    uplinks = {leaf: len(peers.get(leaf, set()) - leaves) for leaf in leaves}
    above = set(peers) - leaves
    two_tier = all(peers[s] <= leaves for s in above) and not any(
        peers.get(leaf, set()) & leaves for leaf in leaves
    )
    return FabricDescription(plan.source, HASHED, _index(seats), uplinks, two_tier)


def from_fabric(fab: Fabric, names: Names, source: str | None = None) -> FabricDescription:
    """A saved InfiniBand fabric's host adapters and leaves; routing ``routes`` when it holds the
    subnet manager's forwarding tables, else ``destination``."""
    sh = shape(fab)
    seats: dict[tuple[str, str], Seat] = {}
    found: dict[tuple[str, str], Attachment] = {}
    for (host, adapter), atts in attachments(fab, names).items():
        for at in atts:
            key = (host, adapter if len(atts) == 1 else f"{adapter}:{at.ca_port}")
            seats[key] = Seat(at.switch, at.port, 0, at.ca, at.ca_port)
            found[key] = at
    leaves = {s.leaf for s in seats.values()}
    uplinks: dict[str, int] = {}
    g = sh.graph
    for leaf in leaves:
        above = [n for n in (g.neighbors(leaf) if g is not None else ()) if n not in leaves]
        uplinks[leaf] = len(above)
    routing = ROUTES if fab.routes else DESTINATION
    route = _route_fn(Router(sh, fab)) if routing == ROUTES else None
    return FabricDescription(
        source or fab.source,
        routing,
        _index(seats),
        uplinks,
        sh.kind == TREE and sh.depth == 2,
        route,
        {leaf: names.node(leaf) for leaf in leaves},
    )


def _route_fn(router: Router) -> RouteFn:
    def route(a: Seat, b: Seat) -> tuple[str, ...] | None:
        if a.ca is None or b.ca is None or a.ca_port is None or b.ca_port is None:
            return None
        there = router.route(
            Attachment("", "", a.ca, a.ca_port, a.leaf, a.port),
            Attachment("", "", b.ca, b.ca_port, b.leaf, b.port),
        )
        return None if isinstance(there, str) else tuple(_hop(out) for out, _in in there)

    return route


def _hop(out: PortRef) -> str:
    return f"{out.guid}:{out.port}"


def plan_hosts(desc: FabricDescription) -> list[tuple[str, list[str]]]:
    """The described hosts and their adapters, in name order (``--plan`` with a fabric and no job)."""
    out: dict[str, list[str]] = {}
    for host, adapter in sorted(desc.seats):
        out.setdefault(host, []).append(adapter)
    return sorted(out.items())
