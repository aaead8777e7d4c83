"""Attribution: bad node vs bad link vs unreachable node, on small fleets through the synthetic fabric.

The fabric is tests.support.synthetic_fabric.SyntheticFabric — a named in-process fake (no RDMA adapters or
cluster here); what is under test is the planning and the analysis, which never see the difference.
"""

from __future__ import annotations

import pytest

from ibdiag.findings.model import Severity
from ibdiag.sweep.analysis import EndVerdict, LinkVerdict, NodeStatus, SweepConfig
from ibdiag.sweep.attribution import analyse
from ibdiag.sweep.checks import sweep_findings
from ibdiag.sweep.followup import second_pass_plan
from ibdiag.sweep.nodes import make_fleet
from ibdiag.sweep.passes import run_sweep
from ibdiag.sweep.runner import PairResult
from ibdiag.sweep.schedule import Pattern, Phase, first_pass
from ibdiag.sweep.stats import robust_scale
from tests.support.synthetic_fabric import PlantedFaults, SyntheticFabric, score

RAILS = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def fleet(n, rails=RAILS, host="gpu"):
    return make_fleet([f"{host}-{i:02d}" for i in range(n)], rails, rate_gbps=400)


def problems(result):
    return sorted(
        (f.check, f.severity.value, f.subject)
        for f in sweep_findings(result)
        if f.severity is not Severity.OK
    )


def test_robust_scale_has_a_floor_so_a_uniform_fleet_flags_nothing():
    s = robust_scale([48.0] * 20, floor_share=0.02)
    assert s.mad == 0 and s.scale == pytest.approx(0.96)
    assert s.z(47.9) == pytest.approx(-0.104, abs=1e-3)
    noisy = robust_scale([10.0, 10.2, 9.8, 10.1, 9.9, 3.0], floor_share=0.0)
    assert noisy.median == pytest.approx(9.95)
    assert noisy.z(3.0) < -20  # the outlier barely moves the median and MAD
    nodes = fleet(16)
    result = run_sweep(nodes, SyntheticFabric(noise=0.0))
    assert problems(result) == []
    assert all(v.status is NodeStatus.OK for v in result.analysis.nodes)


def test_the_scale_is_taken_on_the_healthy_side_so_two_slow_links_of_five_cannot_hide():
    # The first pass of a six-node ring with a slow node, a slow link and a dead node, as one CI run
    # measured it through netns (GB/s): healthy links 0.019-0.024, the two slow ones at a quarter.
    ring = [0.024, 0.019, 0.0194, 0.006, 0.006]
    both = robust_scale(ring, floor_share=0.05)
    assert both.z(0.006) > -2  # over both sides the slow links widen the MAD: they would pass
    bw = robust_scale(ring, floor_share=0.05, healthy_side=+1)
    assert bw.median == both.median and bw.z(0.006) < -10 and bw.z(0.024) > 0
    lat = robust_scale([10.0, 10.4, 9.8, 40.0, 40.0], floor_share=0.05, healthy_side=-1)
    assert lat.z(40.0) > 10  # latency: faults lie above, the scale comes from below
    assert robust_scale(
        [1.0, 1.1, 0.9, 0.2, 1.05], floor_share=0.0, healthy_side=+1
    ).mad == pytest.approx(0.05)


def test_a_small_noisy_ring_names_its_slow_node_slow_link_and_dead_node():
    """The netns sweep's fleet in-process: 6 nodes, one rail, 5 % noise, faults at a quarter, the dead
    node gone from round 1; the netns test's thresholds. Over 30 seeds every answer is exact (with the
    MAD over both sides of the median, 3 of them missed a planted fault; 18 with the old thresholds)."""
    nodes = fleet(6, rails=["mlx5_0"], host="n")
    faults = PlantedFaults(slow_nodes={2: 0.25}, slow_links={(0, 4, 5): 0.25}, dead={1: 1})
    config = SweepConfig(floor_share=0.25 / 3, z_limit=3.0)
    want = [
        ("sweep.link", "fail", "n-04 (rank 4) mlx5_0 <-> n-05 (rank 5) mlx5_0"),
        ("sweep.node", "fail", "n-02 (rank 2)"),
        ("sweep.unreachable", "fail", "n-01 (rank 1)"),
    ]
    for seed in range(30):
        result = run_sweep(nodes, SyntheticFabric(faults, noise=0.05, seed=seed), config=config)
        assert problems(result) == want, seed


def test_the_rail_reference_is_the_first_pass_not_the_biased_second():
    """The second pass pairs suspects with good nodes, so a bad node adds slow links: they are judged
    against the first pass's median and scale and do not move them."""
    nodes = fleet(6, rails=["mlx5_0"])
    first = [
        PairResult(0, Phase.FIRST, 0, a, b, bw)
        for a, b, bw in [
            (0, 1, 48.0),
            (2, 3, 12.0),
            (4, 5, 47.5),
            (1, 2, 12.1),
            (3, 4, 48.5),
            (0, 5, 48.2),
        ]
    ]
    # a second pass as dense in slow links as the one a misjudged first pass produced in CI: over all
    # nine links (five of them slow) the median would be a slow one
    second = [
        PairResult(2, Phase.SECOND, 0, a, b, bw)
        for a, b, bw in [(0, 2, 12.2), (2, 4, 11.9), (2, 5, 12.0)]
    ]
    (rail,) = analyse(nodes, first + second).rails
    (alone,) = analyse(nodes, first).rails
    # the reference: the first pass's 6 links less its 2 at a quarter of the others
    assert rail.bw == alone.bw and rail.bw.count == 4
    verdicts = analyse(nodes, first + second)
    assert verdicts.nodes[2].status is NodeStatus.BAD
    assert [n.status for n in verdicts.nodes if n.rank != 2] == [NodeStatus.OK] * 5


@pytest.mark.parametrize("pattern", [Pattern.RING, Pattern.PAIRWISE, Pattern.RANDOM])
def test_names_the_slow_node_the_slow_link_and_the_dead_node_and_nothing_else(pattern):
    nodes = fleet(20)
    tested = [p for r in first_pass(pattern, 20, seed=3) for p in r]
    link = next(
        p
        for p in tested
        if not {5, 11} & set(p) and not {p[0] - 1, p[0] + 1, p[1] - 1, p[1] + 1} & {5, 11}
    )
    faults = PlantedFaults(slow_nodes={5: 0.5}, slow_links={(2, *link): 0.45}, dead={11: 1})
    result = run_sweep(nodes, SyntheticFabric(faults, noise=0.01, seed=1), pattern=pattern, seed=3)
    a, b = link
    assert problems(result) == sorted(
        [
            ("sweep.node", "fail", "gpu-05 (rank 5)"),
            (
                "sweep.link",
                "fail",
                f"gpu-{a:02d} (rank {a}) mlx5_2 <-> gpu-{b:02d} (rank {b}) mlx5_2",
            ),
            ("sweep.unreachable", "fail", "gpu-11 (rank 11)"),
        ]
    )
    s = score(faults, nodes, result.analysis)
    assert (s.precision, s.recall) == (1.0, 1.0), (s.missed, s.spurious)
    node5 = result.analysis.nodes[5]
    assert node5.whole_node and node5.bad_rails == (0, 1, 2, 3)
    assert all(
        link.verdict is LinkVerdict.NODE for link in result.analysis.links if 5 in (link.a, link.b)
    )


def test_two_adjacent_bad_nodes_need_the_second_pass_to_be_confirmed():
    nodes = fleet(16)
    faults = PlantedFaults(slow_nodes={6: 0.5, 7: 0.5})
    without = run_sweep(nodes, SyntheticFabric(faults, noise=0.01), second_pass=False)
    # Ring alone: 6 and 7 are slow with each other and one fine-elsewhere neighbour each: one confirmation, not two.
    assert [without.analysis.nodes[r].status for r in (6, 7)] == [
        NodeStatus.SUSPECT,
        NodeStatus.SUSPECT,
    ]
    assert ("sweep.node", "warn", "gpu-06 (rank 6)") in problems(without)
    with_second = run_sweep(nodes, SyntheticFabric(faults, noise=0.01))
    assert with_second.settings.second_pass_rounds == 2
    assert problems(with_second) == [
        ("sweep.node", "fail", "gpu-06 (rank 6)"),
        ("sweep.node", "fail", "gpu-07 (rank 7)"),
    ]
    for r in (6, 7):  # each met two known-good nodes in the second pass, and was slow with both
        ends = with_second.analysis.nodes[r].ends
        assert all(
            e.verdict is EndVerdict.BAD and e.partners == 4 and e.confirming >= 3 for e in ends
        )


def test_one_slow_rail_is_named_by_rail_and_adapter_not_as_the_whole_node():
    nodes = fleet(12)
    result = run_sweep(nodes, SyntheticFabric(PlantedFaults(slow_ends={(4, 3): 0.4}), noise=0.01))
    (finding,) = [f for f in sweep_findings(result) if f.severity is Severity.FAIL]
    assert finding.check == "sweep.node" and finding.subject == "gpu-04 (rank 4)"
    assert finding.message.startswith("rail 3 (mlx5_3): median ") and "mlx5_3" in finding.hint
    assert finding.value == pytest.approx(48 * 0.4, rel=0.05) and finding.unit == "GB/s"
    assert result.analysis.nodes[4].bad_rails == (3,) and not result.analysis.nodes[4].whole_node


def test_a_failing_pair_with_both_ends_answering_is_a_bad_link():
    nodes = fleet(10, rails=["mlx5_0"])
    result = run_sweep(
        nodes, SyntheticFabric(PlantedFaults(broken_links=frozenset({(0, 2, 3)})), noise=0.01)
    )
    assert problems(result) == [
        ("sweep.link", "fail", "gpu-02 (rank 2) mlx5_0 <-> gpu-03 (rank 3) mlx5_0")
    ]
    (link,) = result.analysis.links_with(LinkVerdict.BAD)
    assert link.failed == 1 and link.bw_gbs is None


def test_the_dead_node_is_left_out_and_its_partners_are_not_blamed():
    nodes = fleet(8, rails=["mlx5_0"])
    result = run_sweep(nodes, SyntheticFabric(PlantedFaults(dead={3: 0}), noise=0.01))
    assert problems(result) == [("sweep.unreachable", "fail", "gpu-03 (rank 3)")]
    f = next(f for f in sweep_findings(result) if f.check == "sweep.unreachable")
    assert "did not answer within 10 s from round 1" in f.message and "gpu-03" in f.message
    assert all(
        3 not in (p.a, p.b) for p in result.pairs if p.round > 0
    )  # not asked again once silent


def test_latency_outlier_makes_a_link_slow():
    nodes = fleet(10, rails=["mlx5_0"])
    results = [PairResult(0, Phase.FIRST, 0, i, i + 1, 48.0, lat_us=2.0) for i in range(0, 9)]
    results.append(PairResult(0, Phase.FIRST, 0, 0, 9, 48.0, lat_us=2.0))
    results[4] = PairResult(0, Phase.FIRST, 0, 4, 5, 48.0, lat_us=9.0)
    analysis = analyse(nodes, results)
    (slow,) = [link for link in analysis.links if link.slow]
    assert (slow.a, slow.b, slow.verdict) == (4, 5, LinkVerdict.BAD) and slow.lat_z > 5


def test_two_nodes_cannot_tell_a_slow_link_from_a_slow_node():
    nodes = fleet(2, rails=["mlx5_0"])
    result = run_sweep(nodes, SyntheticFabric(PlantedFaults(slow_nodes={1: 0.5}), noise=0.0))
    # One link is its own median: nothing to compare it with, so no node or link is called bad; only
    # the line rate says something is off.
    assert result.analysis.links[0].slow is False
    assert problems(result) == [("sweep.fleet", "warn", "rail 0")]


def test_a_slow_fleet_is_a_fleet_warning_not_a_bad_node():
    nodes = fleet(12, rails=["mlx5_0"])
    result = run_sweep(nodes, SyntheticFabric(bw_gbs=30.0, noise=0.01))
    assert problems(result) == [("sweep.fleet", "warn", "rail 0")]
    f = next(f for f in sweep_findings(result) if f.check == "sweep.fleet")
    assert (
        "of the 400 Gb/s line rate" in f.message
        and f.value == pytest.approx(0.6, abs=0.02)
        and f.limit == 0.8
    )


def test_a_node_with_fewer_rails_is_warned_and_tested_on_the_rails_it_has():
    nodes = make_fleet([f"n{i}" for i in range(6)], [RAILS] * 5 + [RAILS[:3]], rate_gbps=400)
    result = run_sweep(nodes, SyntheticFabric(noise=0.0))
    assert problems(result) == [("sweep.rails", "warn", "n5 (rank 5)")]
    assert {p.rail for p in result.pairs if 5 in (p.a, p.b)} == {0, 1, 2}


def test_unconfirmed_majority_is_a_suspect_and_its_links_unresolved():
    nodes = fleet(6, rails=["mlx5_0"])
    results = [
        PairResult(0, Phase.FIRST, 0, 0, 1, 20.0),
        PairResult(0, Phase.FIRST, 0, 2, 3, 48.0),
        PairResult(0, Phase.FIRST, 0, 4, 5, 48.0),
        PairResult(1, Phase.FIRST, 0, 1, 2, 48.0),
        PairResult(1, Phase.FIRST, 0, 3, 4, 48.0),
    ]
    analysis = analyse(nodes, results)
    # rank 0 met only rank 1 and was slow: one confirming partner, not two
    assert analysis.nodes[0].status is NodeStatus.SUSPECT
    assert [link.verdict for link in analysis.links if link.slow] == [LinkVerdict.UNRESOLVED]
    assert analysis.nodes[1].status is NodeStatus.OK


def test_config_thresholds_change_the_verdicts():
    nodes = fleet(10, rails=["mlx5_0"])
    faults = PlantedFaults(
        slow_links={(0, 2, 3): 0.85}
    )  # 15 % slower: beyond 5 x 2 % of the median
    strict = run_sweep(nodes, SyntheticFabric(faults, noise=0.0))
    lenient = run_sweep(nodes, SyntheticFabric(faults, noise=0.0), config=SweepConfig(z_limit=10))
    assert [f[0] for f in problems(strict)] == ["sweep.link"]
    assert problems(lenient) == []


def test_a_27x_slow_node_in_a_4_node_ring_is_named_and_the_limit_is_positive():
    """The issue's netns sweep: 4 nodes in a ring over veths (10 Gb/s), node 2 shaped to 200 Mbit/s
    (0.024 GB/s), the others 0.66-1.3 GB/s on a loaded 2-core machine. Half the ring's links touch
    node 2: over all four the median was 0.35 GB/s, the scale 1.0 and the limit -4.4 GB/s, and
    nothing was flagged. Each node's best link tells the healthy level (1.3 and 0.66 GB/s)."""
    nodes = make_fleet([f"vm{i}" for i in range(4)], rate_gbps=10)
    first = [
        PairResult(r, Phase.FIRST, 0, a, b, bw)
        for r, a, b, bw in [(0, 0, 1, 1.3), (0, 2, 3, 0.024), (1, 1, 2, 0.0238), (1, 0, 3, 0.66)]
    ]
    analysis = analyse(nodes, first)
    (rail,) = analysis.rails
    assert rail.bw.median == pytest.approx(0.98) and rail.bw.count == 2
    assert rail.bw_limit_gbs == pytest.approx(0.49)  # half the typical link: the z test needs 16
    assert [n.status for n in analysis.nodes] == [
        NodeStatus.OK,
        NodeStatus.OK,
        NodeStatus.BAD,
        NodeStatus.OK,
    ]
    assert {(link.a, link.b): link.verdict for link in analysis.links if link.slow} == {
        (1, 2): LinkVerdict.NODE,
        (2, 3): LinkVerdict.NODE,
    }
    # the second pass retests node 2 alone: 1 and 3 are slow only with it, so they are good partners
    # (0 first, the one it has not met)
    plan = second_pass_plan(nodes, first)
    assert [sorted(r) for r in plan] == [[(0, 2)], [(1, 2)]]


def test_two_adjacent_slow_nodes_of_a_4_node_ring_are_confirmed_and_their_partners_cleared():
    """Nodes 1 and 2 slow in a ring of 4: three of the four links are slow and every node has one. The
    partners whose slow links go to a suspect (0 and 3) are the good partners of the second pass;
    once 1 and 2 are confirmed bad, 0's and 3's slow links are explained and they are not suspects."""
    nodes = fleet(4, rails=["mlx5_0"])
    result = run_sweep(nodes, SyntheticFabric(PlantedFaults(slow_nodes={1: 0.1, 2: 0.1})))
    assert problems(result) == [
        ("sweep.node", "fail", "gpu-01 (rank 1)"),
        ("sweep.node", "fail", "gpu-02 (rank 2)"),
    ]
