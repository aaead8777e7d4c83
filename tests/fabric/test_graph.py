"""The switch graph (ibdiag/fabric/graph.py, over networkx) on small fabrics worked out by hand."""

from __future__ import annotations

from ibdiag.fabric.graph import Isl, SwitchGraph, max_flow
from ibdiag.fabric.model import FabricPort


def graph(n: int, edges: list[tuple[int, int, float]]) -> SwitchGraph:
    isls = tuple(
        Isl(f"s{a}", f"s{b}", c, (FabricPort(f"s{a}", i + 1), FabricPort(f"s{b}", i + 1)))
        for i, (a, b, c) in enumerate(edges)
    )
    return SwitchGraph(tuple(f"s{i}" for i in range(n)), isls)


def test_a_small_tree_by_hand():
    # leaves s0, s1 each cabled twice to spine s2; s3 alone (another part); s2 - s4 (a core)
    g = graph(5, [(0, 2, 100.0), (0, 2, 100.0), (1, 2, 200.0), (2, 4, 400.0)])
    assert g.distances(["s0", "s1"]) == {"s0": 0, "s1": 0, "s2": 1, "s4": 2}
    assert g.distances_from("s0") == {"s0": 0, "s2": 1, "s1": 2, "s4": 2}
    assert g.distances_from("nowhere") == {"nowhere": 0}
    assert sorted(map(sorted, g.components())) == [["s0", "s1", "s2", "s4"], ["s3"]]
    assert sorted(map(sorted, g.components(within=["s0", "s1", "s4"]))) == [["s0"], ["s1"], ["s4"]]
    assert [e.gbps for e in g.between("s0", "s2")] == [100.0, 100.0]  # two cables, two ISLs
    assert g.between("s0", "s1") == []
    assert g.degree("s2") == 4 and sorted(g.neighbors("s2")) == ["s0", "s1", "s4"]
    assert [e.mine("s2").port for e in g.edges_of("s2")] == [1, 2, 3, 4]
    assert "s3" in g and "s9" not in g


def test_a_2to1_fat_tree_bisection_by_hand():
    # 4 leaves (s0..s3) each with 2 uplinks of 100 to each of 2 spines (s4, s5): 400 up per leaf.
    # Leaves s0, s1 against s2, s3, each leaf's hosts 800: the uplinks bind: 2 x 400 = 800.
    edges = [(leaf, spine, 100.0) for leaf in range(4) for spine in (4, 5) for _ in range(2)]
    arcs: dict[str, dict[str, float]] = {"src": {"s0": 800.0, "s1": 800.0}}
    for a, b, c in edges:
        for x, y in ((f"s{a}", f"s{b}"), (f"s{b}", f"s{a}")):
            arcs.setdefault(x, {})[y] = arcs.get(x, {}).get(y, 0.0) + c
    arcs["s2"]["dst"] = arcs["s3"]["dst"] = 800.0
    assert max_flow(arcs, "src", "dst") == 800.0
