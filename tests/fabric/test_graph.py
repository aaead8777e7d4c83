"""The switch graph (ibdiag/fabric/graph.py) on small fabrics worked out by hand, and against networkx."""

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


# The graph walks and the flow are written here, not taken from networkx (issue 39: building a
# networkx graph of a 50k-link fabric and importing networkx cost more than the judgement): on random
# switch graphs they give what networkx gives, in networkx's orders, and the same maximum flow.

import networkx as nx  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CABLES = st.lists(
    st.tuples(
        st.integers(0, 7), st.integers(0, 7), st.sampled_from([0.0, 50.0, 100.0, 200.0, 400.0])
    ),
    max_size=30,
)


def _both(n: int, cables: list[tuple[int, int, float]]) -> tuple[SwitchGraph, nx.MultiGraph]:
    edges = [(a, b, c) for a, b, c in cables if a != b]  # a loopback is no ISL (shape.switch_graph)
    g = graph(n, edges)
    ref: nx.MultiGraph = nx.MultiGraph()
    ref.add_nodes_from(g.nodes)
    for e in g.isls:
        ref.add_edge(e.a, e.b, isl=e)
    return g, ref


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), CABLES, st.lists(st.integers(0, 7), max_size=4))
def test_walks_match_networkx_in_its_orders(n, cables, sources):
    g, ref = _both(n, cables)
    names = [f"s{i}" for i in sources if i < n]
    want = dict(nx.multi_source_dijkstra_path_length(ref, names, weight=None)) if names else {}
    assert list(g.distances(names).items()) == list(want.items())
    for s in g.nodes:
        assert list(g.distances_from(s).items()) == list(
            nx.single_source_shortest_path_length(ref, s).items()
        )
        assert list(g.neighbors(s)) == list(ref.neighbors(s)) and g.degree(s) == ref.degree(s)
        assert g.edges_of(s) == [d["isl"] for _a, _b, d in ref.edges(s, data=True)]
    assert g.components() == [set(c) for c in nx.connected_components(ref)]


def _reference_flow(g: SwitchGraph, supply: dict[str, float], demand: dict[str, float]) -> float:
    d: nx.DiGraph = nx.DiGraph()
    d.add_nodes_from(("<src>", "<sink>"))
    for x, ys in g._arcs(supply, demand).items():
        for y, c in ys.items():
            d.add_edge(x, y, capacity=c)
    return float(nx.maximum_flow_value(d, "<src>", "<sink>"))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 8),
    CABLES,
    st.dictionaries(st.integers(0, 7), st.sampled_from([0.0, 200.0, 800.0, 1600.0]), max_size=8),
    st.floats(0, 1),
)
def test_maximum_flow_is_networkxs(n, cables, hosts, cut):
    # Dinic's blocking flows on whole numbers against networkx's preflow-push on the same arcs;
    # the graph's network is built once and reused, so each graph is asked twice.
    g, _ = _both(n, cables)
    leaves = [f"s{i}" for i in sorted(hosts) if i < n]
    half = leaves[: round(cut * len(leaves))]
    supply = {s: hosts[int(s[1:])] for s in half}
    demand = {s: hosts[int(s[1:])] for s in leaves if s not in half}
    assert g.max_flow(supply, demand) == _reference_flow(g, supply, demand)
    assert g.max_flow(demand, supply) == _reference_flow(g, demand, supply)


def test_a_fractional_rate_takes_networkxs_flow_and_its_sums():
    # FDR's 4 x 13.64 Gb/s is no whole number: networkx's preflow-push decides, as it always did.
    g = graph(3, [(0, 2, 4 * 13.64), (1, 2, 4 * 13.64), (0, 2, 4 * 13.64)])
    supply, demand = {"s0": 800.0}, {"s1": 800.0}
    assert g.max_flow(supply, demand) == _reference_flow(g, supply, demand) == 4 * 13.64


def test_the_quick_isl_is_the_named_tuple_itself():
    from ibdiag.fabric.graph import new_isl

    ends = (FabricPort("s0", 1), FabricPort("s1", 2))
    a, b = Isl("s0", "s1", 200.0, ends), new_isl("s0", "s1", 200.0, ends)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b) and type(b) is Isl
    assert b._fields == ("a", "b", "gbps", "ports") and b.other("s0") == "s1"
    assert b.mine("s1") is ends[1] and b._replace(gbps=400.0).gbps == 400.0


# The flow is worked on the network folded by its twins (graph.fold: switches cabled alike, with the
# same hosts on the same side, are one node). Random graphs rarely have twins; fat trees have little
# else. On fat trees of random sizes, with random cables removed or doubled and random host counts,
# the folded network's flow is networkx's on the whole one, and a regular tree folds to its levels.


@st.composite
def _fat_trees(draw: st.DrawFn) -> tuple[SwitchGraph, dict[str, float], dict[str, float], int]:
    pods, leaves, spines, cores = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 3)),
        draw(st.integers(0, 4)),
    )
    names: list[str] = []
    cables: list[tuple[str, str, float]] = []
    for p in range(pods):
        for s in range(spines):
            sp = f"sp{p}-{s}"
            names.append(sp)
            for c in range(cores):
                if (c + s) % max(spines, 1) == 0 or spines == 1:  # core groups, as rails share them
                    cables.append((sp, f"core{c}", 200.0))
            for lf in range(leaves):
                cables.append((f"lf{p}-{lf}", sp, 200.0))
        names += [f"lf{p}-{lf}" for lf in range(leaves)]
    names += [f"core{c}" for c in range(cores)]
    for _ in range(draw(st.integers(0, 3))):  # damage: a cable lost, or one cabled twice
        i = draw(st.integers(0, max(len(cables) - 1, 0)))
        if cables and draw(st.booleans()):
            del cables[i]
        elif cables:
            cables.append(cables[i])
    cables = [(a, b, c) for a, b, c in cables if a in names and b in names]
    isls = tuple(
        Isl(a, b, c, (FabricPort(a, k + 1), FabricPort(b, k + 1)))
        for k, (a, b, c) in enumerate(cables)
    )
    g = SwitchGraph(tuple(names), isls)
    leaf_names = [n for n in names if n.startswith("lf")]
    hosts = {n: draw(st.sampled_from([0.0, 800.0, 1600.0])) for n in leaf_names}
    cut = draw(st.integers(0, len(leaf_names)))
    supply = {n: hosts[n] for n in leaf_names[:cut]}
    demand = {n: hosts[n] for n in leaf_names[cut:]}
    return g, supply, demand, len(names)


@settings(max_examples=300, deadline=None)
@given(_fat_trees())
def test_the_folded_flow_of_a_fat_tree_is_networkxs(tree):
    g, supply, demand, _n = tree
    assert g.max_flow(supply, demand) == _reference_flow(g, supply, demand)


def test_a_regular_three_tier_tree_folds_to_its_levels():
    # 2 pods x 2 leaves x 2 spines, 2 cores each spine to both: with the cut between the pods, the
    # folded network is one node per (level, side): leaves and spines of each pod, the cores.
    from ibdiag.fabric.graph import fold

    names = ["c0", "c1"]
    cables = []
    for p in range(2):
        for s in range(2):
            cables += [(f"s{p}{s}", "c0"), (f"s{p}{s}", "c1")]
            cables += [(f"l{p}{x}", f"s{p}{s}") for x in range(2)]
            names.append(f"s{p}{s}")
        names += [f"l{p}0", f"l{p}1"]
    g = SwitchGraph(
        tuple(names),
        tuple(Isl(a, b, 200.0, (FabricPort(a, 1), FabricPort(b, 1))) for a, b in cables),
    )
    caps = dict(g._caps() or {})
    ends = {s: (800 if s.startswith("l0") else 0, 800 if s.startswith("l1") else 0) for s in caps}
    levels = 0
    while True:
        folded, folded_ends = fold(caps, ends)  # type: ignore[arg-type]
        if len(folded) == len(caps):
            break
        caps, ends, levels = folded, folded_ends, levels + 1
    assert len(caps) == 5 and levels >= 1  # pod 0's leaves and spines, the cores, pod 1's
    # Each leaf has 800 Gb/s of hosts and 2 x 200 up: pod 0's leaves send 800 in all.
    supply, demand = {"l00": 800.0, "l01": 800.0}, {"l10": 800.0, "l11": 800.0}
    assert g.max_flow(supply, demand) == _reference_flow(g, supply, demand) == 800.0
