"""Sweep schedules: every round disjoint, every pattern covering what it promises, rails k against k."""

from __future__ import annotations

import itertools

import pytest

from ibdiag.errors import UsageError
from ibdiag.sweep.nodes import FleetNode, Rail, make_fleet
from ibdiag.sweep.schedule import (
    Pattern,
    Phase,
    estimate,
    first_pass,
    pair_count,
    pair_tests,
    pairwise_partner,
    pairwise_rounds,
    random_rounds,
    ring_rounds,
    round_count,
    second_pass_rounds,
)


def _disjoint(rnd) -> bool:
    ranks = [r for pair in rnd for r in pair]
    return len(ranks) == len(set(ranks))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 16, 17, 64, 101])
def test_ring_meets_exactly_the_neighbours_in_disjoint_rounds(n):
    rounds = list(ring_rounds(n))
    assert all(_disjoint(r) for r in rounds)
    assert len(rounds) == round_count(Pattern.RING, n) == (1 if n == 2 else 2 if n % 2 == 0 else 3)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)) == pair_count(Pattern.RING, n)
    expected = {tuple(sorted((i, (i + 1) % n))) for i in range(n)}
    assert set(pairs) == expected
    assert all(a < b for a, b in pairs)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 31, 64])
def test_pairwise_is_every_pair_once_by_the_circle_method(n):
    rounds = list(pairwise_rounds(n))
    assert len(rounds) == round_count(Pattern.PAIRWISE, n) == (n - 1 if n % 2 == 0 else n)
    assert all(_disjoint(r) for r in rounds)
    assert all(len(r) == n // 2 for r in rounds)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == sorted(itertools.combinations(range(n), 2))
    if n % 2:  # odd: each node sits out exactly one round (its bye)
        byes = [set(range(n)) - {x for p in r for x in p} for r in rounds]
        assert sorted(b.pop() for b in byes) == list(range(n))


@pytest.mark.parametrize("n", [2, 5, 8, 9, 64])
def test_each_rank_finds_its_own_pairwise_partner_without_the_round(n):
    for r, rnd in enumerate(pairwise_rounds(n)):
        partner = {a: b for a, b in rnd} | {b: a for a, b in rnd}
        assert [pairwise_partner(n, r, x) for x in range(n)] == [partner.get(x) for x in range(n)]
    with pytest.raises(UsageError):
        pairwise_partner(n, round_count(Pattern.PAIRWISE, n), 0)


def test_random_rounds_are_seeded_disjoint_matchings():
    a = list(random_rounds(65, 5, seed=7))
    b = list(random_rounds(65, 5, seed=7))
    c = list(random_rounds(65, 5, seed=8))
    assert a == b and a != c
    assert len(a) == 5 and all(len(r) == 32 and _disjoint(r) for r in a)
    assert pair_count(Pattern.RANDOM, 65, 5) == 5 * 32
    assert len(list(first_pass(Pattern.RANDOM, 10))) == round_count(Pattern.RANDOM, 10) == 8


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: list(ring_rounds(1)), "at least 2 nodes"),
        (lambda: list(random_rounds(8, 0, seed=0)), "--rounds"),
        (lambda: list(first_pass(Pattern.RING, 8, rounds=3)), "--rounds is for --pattern random"),
        (lambda: list(pairwise_rounds(True)), "at least 2 nodes"),
    ],
)
def test_bad_schedule_requests_are_usage_errors(call, match):
    with pytest.raises(UsageError, match=match):
        call()


def test_second_pass_gives_each_suspect_two_distinct_good_partners_disjoint_per_round():
    suspects = [3, 4, 5, 40, 41]
    good = [0, 1, 2, 10, 11, 12, 13]
    met = {3: {2, 4}, 4: {3, 5}, 5: {4, 6}, 40: {39, 41}, 41: {40, 42}}
    rounds = second_pass_rounds(suspects, good, met, partners=2)
    assert all(_disjoint(r) for r in rounds)
    partners = {s: set() for s in suspects}
    for rnd in rounds:
        for a, b in rnd:
            s, g = (a, b) if a in suspects else (b, a)
            assert s in suspects and g in good  # never suspect with suspect, never good with good
            partners[s].add(g)
    assert all(len(p) == 2 for p in partners.values())
    assert 2 not in partners[3]  # a fresh good node is preferred over one already met
    assert len(rounds) == 2  # 5 suspects, 7 good: 2 rounds suffice


def test_second_pass_with_few_good_nodes_takes_more_rounds_and_what_there_is():
    rounds = second_pass_rounds([0, 1, 2, 3, 4, 5], [10, 11], partners=2)
    assert all(_disjoint(r) for r in rounds)
    assert len(rounds) == 6  # 12 suspect-partner slots, 2 good nodes per round
    assert second_pass_rounds([0, 1], [5], partners=2) == [((0, 5),), ((1, 5),)]
    assert second_pass_rounds([0, 1], [], partners=2) == []
    assert second_pass_rounds([], [1, 2], partners=2) == []


def test_pair_tests_are_rail_k_against_rail_k_naming_both_adapters():
    nodes = (
        FleetNode(0, "a", "10.0.0.1", (Rail(0, "mlx5_0"), Rail(1, "mlx5_1"), Rail(2, "mlx5_2"))),
        FleetNode(1, "b", "10.0.0.2", (Rail(0, "mlx5_4"), Rail(1, "mlx5_5"))),
    )
    tests = pair_tests(3, Phase.SECOND, [(0, 1)], nodes)
    assert [(t.rail, t.a.adapter, t.b.adapter) for t in tests] == [
        (0, "mlx5_0", "mlx5_4"),
        (1, "mlx5_1", "mlx5_5"),
    ]
    assert all(
        t.round == 3 and t.phase is Phase.SECOND and (t.a.rank, t.b.rank) == (0, 1) for t in tests
    )


def test_fleet_checks():
    nodes = make_fleet(["h", "h", "h"], ["mlx5_0", "mlx5_1"], rate_gbps=400)
    assert [n.label for n in nodes] == [
        "h (rank 0)",
        "h (rank 1)",
        "h (rank 2)",
    ]  # shared hostname, ranks tell apart
    assert nodes[1].rails[1] == Rail(1, "mlx5_1", 1, 400)
    with pytest.raises(UsageError, match="at least 2 nodes"):
        make_fleet(["h"])
    with pytest.raises(UsageError, match="not a device name"):
        make_fleet(["a", "b"], ["mlx5 0"])
    with pytest.raises(UsageError, match="not a plain name"):
        make_fleet(["a", "b\nc"])
    with pytest.raises(UsageError, match="no rail"):
        make_fleet(["a", "b"], [["mlx5_0"], []])


def test_cost_is_rounds_times_pair_time():
    ring = estimate(Pattern.RING, 1024, rails=8, pair_s=2.0, round_overhead_s=0.5)
    assert (ring.rounds, ring.pairs, ring.rail_tests, ring.wall_s) == (2, 1024, 8192, (2 + 2) * 2.5)
    pw = estimate(Pattern.PAIRWISE, 16384, pair_s=2.0, round_overhead_s=0.0)
    assert pw.rounds == 16383 and pw.pairs == 16384 * 16383 // 2 and pw.wall_s == (16383 + 2) * 2.0
    with pytest.raises(UsageError):
        estimate(Pattern.RING, 8, pair_s=0)
