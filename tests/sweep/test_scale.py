"""Precision and recall of the attribution at 64 and 1024 nodes, on synthetic results with planted faults.

The results come from tests.support.synthetic_fabric.SyntheticFabric, a named in-process fake (a 1024-node
cluster does not exist here); the planning, the second pass and the analysis are the real ones.
Faults: slow nodes (every rail at 0.3-0.7 x), slow single rails, slow links between healthy nodes,
nodes that stop answering after the first round; noise: 2 % (sigma) on every measurement.

The bar, over all faults of all seeds of a case: precision >= 0.98 and recall >= 0.98 (at most one
fault in fifty missed or invented). ``benchmarks/sweep_scale.py`` runs the same at 16384 nodes.
"""

from __future__ import annotations

import pytest

from ibdiag.sweep.nodes import make_fleet
from ibdiag.sweep.passes import run_sweep
from ibdiag.sweep.schedule import Pattern, first_pass
from tests.support.synthetic_fabric import SyntheticFabric, plant_faults, score

BAR = 0.98


def _case(
    n: int,
    rails: int,
    pattern: Pattern,
    seed: int,
    *,
    slow_nodes: int,
    slow_ends: int,
    slow_links: int,
    dead: int,
):
    nodes = make_fleet(
        [f"node{i:05d}" for i in range(n)], [f"mlx5_{k}" for k in range(rails)], rate_gbps=400
    )
    tested = [p for r in first_pass(pattern, n, seed=seed) for p in r]
    faults = plant_faults(
        nodes,
        tested,
        slow_nodes=slow_nodes,
        slow_ends=slow_ends,
        slow_links=slow_links,
        dead=dead,
        seed=seed,
    )
    result = run_sweep(
        nodes, SyntheticFabric(faults, noise=0.02, seed=seed), pattern=pattern, seed=seed
    )
    return score(faults, nodes, result.analysis)


def _total(scores):
    tp = sum(s.true_positives for s in scores)
    fp = sum(s.false_positives for s in scores)
    fn = sum(s.false_negatives for s in scores)
    return (
        tp / (tp + fp),
        tp / (tp + fn),
        [m for s in scores for m in s.missed],
        [x for s in scores for x in s.spurious],
    )


@pytest.mark.parametrize(
    "pattern, rails", [(Pattern.RING, 8), (Pattern.PAIRWISE, 2), (Pattern.RANDOM, 8)]
)
def test_64_nodes(pattern, rails):
    scores = [
        _case(64, rails, pattern, seed, slow_nodes=2, slow_ends=2, slow_links=2, dead=1)
        for seed in range(5)
    ]
    precision, recall, missed, spurious = _total(scores)
    assert sum(s.true_positives + s.false_negatives for s in scores) >= 5 * (
        2 * rails + 5
    )  # every rail of a slow node counts
    assert precision >= BAR and recall >= BAR, (missed, spurious)


@pytest.mark.parametrize("pattern, rails", [(Pattern.RING, 8), (Pattern.RANDOM, 2)])
def test_1024_nodes(pattern, rails):
    scores = [
        _case(1024, rails, pattern, seed, slow_nodes=10, slow_ends=10, slow_links=10, dead=4)
        for seed in range(2)
    ]
    precision, recall, missed, spurious = _total(scores)
    assert precision >= BAR and recall >= BAR, (missed, spurious)
