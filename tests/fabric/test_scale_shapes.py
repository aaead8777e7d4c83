"""The scale benchmark's fabric (tests/support/fabric_topology.py ``rail_three_tier``): a three-tier
rail-optimised NDR fat tree, 1:1, every switch's 64 ports cabled, one subnet at every size the
benchmarks use, judged as such (issue 39). The generator is checked at the sizes the benchmarks
build; a small one is judged (the large ones are timed by benchmarks/fabric_large.py, not here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fabric_shapes import judged
from tests.support.fabric_topology import Topology, rail_three_tier


def _reached(t: Topology) -> int:
    """Nodes one discovery from the first adapter reaches (every link from both ends)."""
    adj: dict[str, set[str]] = {}
    for s in t.switches:
        for peer, _port, _spec in s.peers.values():
            adj.setdefault(s.node_id, set()).add(peer)
            adj.setdefault(peer, set()).add(s.node_id)
    start = t.cas[0].node_id
    seen, queue = {start}, [start]
    for u in queue:
        for v in adj.get(u, ()):
            if v not in seen:
                seen.add(v)
                queue.append(v)
    return len(seen)


@pytest.mark.parametrize(
    ("pods", "rails", "gpus", "switches"),
    [
        (1, 8, 2048, 160),
        (8, 8, 16384, 1280),
        (16, 8, 32768, 2560),
        (22, 8, 45056, 3520),
        (48, 1, 12288, 960),
    ],
)
def test_every_size_is_one_subnet_with_every_port_cabled(pods, rails, gpus, switches):
    t = rail_three_tier(pods=pods, rails=rails)
    assert len(t.cas) == gpus and len(t.switches) == switches
    assert all(len(s.peers) == s.nports == 64 for s in t.switches)
    assert _reached(t) == gpus + switches  # connected: 16 pods once came out as two halves
    assert gpus + switches <= 0xBFFF  # one subnet's unicast LIDs


def test_sizes_that_do_not_fill_the_cores_are_refused():
    with pytest.raises(ValueError, match="whole blocks"):
        rail_three_tier(pods=49, rails=1)


def test_a_small_one_is_judged_a_one_to_one_rail_optimised_three_tier_tree(tmp_path: Path):
    t = rail_three_tier(pods=2, units_per_pod=2, hosts_per_unit=8, radix=16)
    j = judged(t.text(), tmp_path)
    assert (
        j.shape is not None
        and j.shape.text == "three-tier fat tree: 32 leaves, 32 spines, 16 cores"
    )
    assert j.rails is not None and j.rails.optimised is True
    assert j.shape.bisection_gbps == j.shape.host_gbps / 2  # 1:1: half the host links
    assert [f.check for f in j.findings if f.severity.value != "ok"] == []
