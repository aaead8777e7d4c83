"""The switch graph's own passes (tiers by breadth first, connected parts, maximum flow) agree with
networkx's on random multigraphs, and a fat tree's bisection is worked out by hand."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from ibdiag.fabric.graph import Isl, SwitchGraph, max_flow
from ibdiag.fabric.model import FabricPort


def graph(n: int, edges: list[tuple[int, int, float]]) -> SwitchGraph:
    isls = tuple(
        Isl(f"s{a}", f"s{b}", c, (FabricPort(f"s{a}", i + 1), FabricPort(f"s{b}", i + 1)))
        for i, (a, b, c) in enumerate(edges)
    )
    return SwitchGraph(tuple(f"s{i}" for i in range(n)), isls)


@pytest.mark.parametrize("seed", range(40))
def test_distances_parts_and_max_flow_agree_with_networkx(seed):
    rnd = random.Random(seed)
    n = rnd.randint(2, 14)
    edges = [
        (a, b, float(rnd.choice((50, 100, 200, 400))))
        for _ in range(rnd.randint(0, 3 * n))
        if (a := rnd.randrange(n)) != (b := rnd.randrange(n))
    ]
    g = graph(n, edges)
    ref: nx.MultiGraph = nx.MultiGraph()
    ref.add_nodes_from(g.nodes)
    ref.add_edges_from((f"s{a}", f"s{b}") for a, b, _ in edges)
    sources = rnd.sample(list(g.nodes), rnd.randint(1, n))
    assert g.distances(sources) == dict(
        nx.multi_source_dijkstra_path_length(ref, sources, weight=None)
    )
    assert sorted(map(sorted, g.components())) == sorted(map(sorted, nx.connected_components(ref)))
    assert all(set(g.neighbors(s)) == set(ref.neighbors(s)) for s in g.nodes)
    assert all(g.degree(s) == ref.degree(s) for s in g.nodes)
    arcs: dict[str, dict[str, float]] = {}
    d: nx.DiGraph = nx.DiGraph()
    for a, b, c in edges:
        for x, y in ((f"s{a}", f"s{b}"), (f"s{b}", f"s{a}")):
            arcs.setdefault(x, {})[y] = arcs.get(x, {}).get(y, 0.0) + c
            d.add_edge(x, y, capacity=arcs[x][y])
    src, dst = rnd.sample(list(g.nodes), 2)
    d.add_nodes_from((src, dst))
    arcs.setdefault(src, {})
    assert max_flow(arcs, src, dst) == pytest.approx(nx.maximum_flow_value(d, src, dst))


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


def test_ibdiag_fabric_imports_no_networkx():
    """Issue 25: networkx's import cost 0.1-0.3 s of every `ibdiag fabric` run (the 1 s target at
    4096 ports, benchmarks/fabric_scale.py); the switch graph's own passes replace it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ibdiag", "fabric", "--from",
         str(repo / "fixtures/fabric/two-to-one.net"), "-o", "json"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(repo)}, timeout=60,
    )  # fmt: skip
    assert res.returncode in (0, 1), res.stderr[-800:]
    assert '"bisection_gbps": 1600.0' in res.stdout
    assert "ibdiag.fabric.shape" in res.stderr and "networkx" not in res.stderr
