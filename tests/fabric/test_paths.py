"""Where two adapters meet: ``ibdiag.fabric.paths`` on project-made fabrics read through ``--from``'s reader.

The fabrics are ``ibnetdiscover`` text from tests/support/fabric_topology.py (the format ibsim reads and
ibnetdiscover prints; the round trip is exact), loaded by :func:`ibdiag.fabric.dump.load` as a saved
fabric is. Expected ports worked out from the generators: in ``three_tier()`` each leaf has hosts on
ports 1-4 and uplinks 5-6 to the pod's first spine, 7-8 to its second; each spine has leaves on 1-4 and
uplinks 5-6 to core-1, 7-8 to core-2.
"""

from __future__ import annotations

from pathlib import Path

from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.paths import Router, attachments
from ibdiag.fabric.shape import shape
from tests.support.fabric_topology import three_tier


def load(tmp_path: Path, text: str):
    (tmp_path / "fabric.net").write_text(text)
    fab = build_fabric(dump.load(tmp_path / "fabric.net"))
    names = Names(fab, {})
    by_desc = {n.desc: n.guid for n in fab.nodes}
    return fab, names, by_desc


def test_three_tiers_within_a_pod_cross_the_leaves_uplinks_and_between_pods_the_spines_too(
    tmp_path,
):
    t = three_tier()
    fab, names, guid = load(tmp_path, t.text())
    router = Router(shape(fab))
    assert router.names_isls
    atts = attachments(fab, names)
    (at,) = atts[("gpu06", "mlx5_0")]
    assert (names.node(at.switch), at.port, at.ca_port) == ("leaf-p1-2", 2, 1)

    def crossing(a: str, b: str):
        c = router.between(guid[a], guid[b])
        assert c is not None
        return c.hops, [(names.node(s), ports) for s, ports in c.uplinks]

    assert crossing("leaf-p1-1", "leaf-p1-1") == (0, [])
    assert crossing("leaf-p1-1", "leaf-p1-2") == (
        2,
        [("leaf-p1-1", (5, 6, 7, 8)), ("leaf-p1-2", (5, 6, 7, 8))],
    )
    # between pods: up through the leaf and both of its pod's spines, down through the other pod's
    assert crossing("leaf-p1-1", "leaf-p2-1") == (
        4,
        [
            ("leaf-p1-1", (5, 6, 7, 8)),
            ("spine-p1-1", (5, 6, 7, 8)),
            ("spine-p1-2", (5, 6, 7, 8)),
            ("spine-p2-1", (5, 6, 7, 8)),
            ("spine-p2-2", (5, 6, 7, 8)),
            ("leaf-p2-1", (5, 6, 7, 8)),
        ],
    )


def test_a_leaf_with_uplinks_to_one_spine_only_has_only_those_candidates(tmp_path):
    # leaf-p1-1's uplinks to spine-p1-2 (ports 7, 8) unplugged: its pairs go up through spine-p1-1
    # only, and reach leaf-p1-2 over leaf-p1-2's ports 5, 6 (its cables to spine-p1-1).
    t = three_tier()
    leaf = t.switch("leaf-p1-1")
    for port in (7, 8):
        peer_id, peer_port, _ = leaf.peers.pop(port)
        next(s for s in t.switches if s.node_id == peer_id).peers.pop(peer_port)
    fab, names, guid = load(tmp_path, t.text())
    c = Router(shape(fab)).between(guid["leaf-p1-1"], guid["leaf-p1-2"])
    assert c is not None and c.hops == 2
    assert [(names.node(s), ports) for s, ports in c.uplinks] == [
        ("leaf-p1-1", (5, 6)),
        ("leaf-p1-2", (5, 6)),
    ]
