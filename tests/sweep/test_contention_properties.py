"""The sweep on a fabric whose links its own tests share, as properties (hypothesis): any fleet size up to
16384 nodes, leaves of 2 to 32 hosts (1:1), ranks in leaf order, interleaved over the leaves or
shuffled, ring or random rounds, routes static per destination or hashed per flow, slow nodes, slow
single rails and slow links planted — through the synthetic fabric's contention model
(tests.support.synthetic_fabric: a named in-process FAKE in which a test's share is 1 / the most tests
on any link of its path; the planning, packing, confirmation and analysis are the real ones).

* with the fabric described to the sweep (exact routes for the per-destination variant, a cabling plan
  for the per-flow one): no two tests of any round share a link (measured by the fake), nothing needs
  re-testing for a collision, and every planted fault is named, nothing else (precision 1.0 here, the
  bar 0.98; recall 1.0);
* without it, up to 64 nodes: tests do collide (the fake measures it), every slow result of a shared
  round is re-tested alone before anything is named, and again every fault is named and nothing else;
  the collided links are counted as cleared.

Faults are 0.2-0.45 of nominal with 2 % noise: clearly slow at any size (at 8 reference links or fewer
a rail judges by ratio alone, half its typical link). CI runs the same examples each time
(``derandomize``); ``IBDIAG_PROPERTY_EXAMPLES=500`` runs that many fresh ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibdiag.sweep.analysis import LinkVerdict, SweepConfig
from ibdiag.sweep.contention import ordered_first_pass
from ibdiag.sweep.layout import FabricLayout
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.nodes import FleetNode, make_fleet
from ibdiag.sweep.passes import run_sweep
from ibdiag.sweep.schedule import Pattern
from tests.support.synthetic_fabric import (
    PER_DESTINATION,
    PER_FLOW,
    PlantedFaults,
    SyntheticFabric,
    Tree,
    plant_faults,
    score,
    synthetic_tree,
)

EXAMPLES = os.environ.get("IBDIAG_PROPERTY_EXAMPLES")


def _settings(examples: int) -> settings:
    return settings(
        max_examples=int(EXAMPLES or examples),
        deadline=None,
        derandomize=EXAMPLES is None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


#: Re-tests alone may take as many rounds as they need here (the default caps them at 100).
UNCAPPED = SweepConfig(confirm_max_rounds=100_000)


@dataclass(frozen=True)
class Case:
    nodes: tuple[FleetNode, ...]
    tree: Tree
    layout: FabricLayout | None
    faults: PlantedFaults
    pattern: Pattern
    seed: int

    def run(self) -> tuple[SweepResult, SyntheticFabric]:
        fabric = SyntheticFabric(self.faults, noise=0.02, seed=self.seed, tree=self.tree)
        result = run_sweep(
            self.nodes,
            fabric,
            pattern=self.pattern,
            seed=self.seed,
            layout=self.layout,
            config=UNCAPPED,
        )
        return result, fabric


@st.composite
def cases(draw: st.DrawFn, *, sizes: st.SearchStrategy[int], known: bool) -> Case:
    n = draw(sizes)
    per_leaf = draw(st.sampled_from([2, 4, 8, 16, 32]))
    order = draw(st.sampled_from(["leaf", "interleaved", "shuffled"]))
    routing = draw(st.sampled_from([PER_DESTINATION, PER_FLOW]))
    pattern = draw(st.sampled_from([Pattern.RING, Pattern.RANDOM]))
    rails = draw(st.integers(1, 2)) if n <= 1024 else 1
    seed = draw(st.integers(0, 2**31 - 1))
    faults = [draw(st.integers(0, 2)) for _ in range(3)] if n >= 12 else [1, 0, 0]
    nodes = make_fleet([f"n{i:05d}" for i in range(n)], [f"mlx5_{k}" for k in range(rails)])
    tree = synthetic_tree(n, per_leaf, order=order, routing=routing, seed=seed)
    layout = tree.description(nodes).place(nodes) if known else None
    tested = [p for r in ordered_first_pass(pattern, nodes, layout, seed=seed) for p in r]
    scale = max(1, n // 256)
    try:
        planted = plant_faults(
            nodes,
            tested,
            slow_nodes=faults[0] * scale,
            slow_ends=faults[1] * scale,
            slow_links=faults[2] * scale,
            factor=(0.2, 0.45),
            seed=seed,
        )
    except ValueError:  # a small ring has no healthy pair left for a slow link
        planted = plant_faults(nodes, tested, slow_nodes=1, factor=(0.2, 0.45), seed=seed)
    return Case(nodes, tree, layout, planted, pattern, seed)


def _check(case: Case, *, known: bool) -> None:
    result, fabric = case.run()
    a = result.analysis
    s = score(case.faults, case.nodes, a)
    assert s.recall == 1.0, (s.missed, case.pattern, case.tree.routing)
    assert s.precision >= 0.98, (s.spurious, case.pattern, case.tree.routing)
    assert not a.links_with(LinkVerdict.CONFOUNDED)
    if known:
        assert fabric.worst_load <= 1  # no two tests of any round crossed one link
        assert result.settings.fabric is not None and result.settings.fabric.max_load in (0, 1)
        assert not any(p.shared for p in result.pairs)
    else:
        shared = [p for p in result.pairs if p.shared]
        assert shared or len(case.nodes) <= 3
        # what was named rests on tests no other test could have collided with
        for link in a.links_with(LinkVerdict.BAD):
            assert any(
                not p.shared and p.rail == link.rail and {p.a, p.b} == {link.a, link.b}
                for p in result.pairs
            )


@_settings(60)
@given(cases(sizes=st.one_of(st.integers(6, 64), st.sampled_from([256, 1024])), known=True))
def test_on_a_described_fabric_no_round_collides_and_every_fault_is_named(case: Case) -> None:
    _check(case, known=True)


@_settings(60)
@given(cases(sizes=st.integers(6, 64), known=False))
def test_without_the_fabric_collisions_are_re_tested_alone_and_never_named(case: Case) -> None:
    _check(case, known=False)


@pytest.mark.slow
@_settings(4)
@given(cases(sizes=st.just(16384), known=True))
def test_16384_nodes_on_a_described_fabric(case: Case) -> None:
    _check(case, known=True)
