"""``counters --far-end``'s hook (ibdiag.fabric.attach) where no subnet is needed: what it refuses."""

from __future__ import annotations

import pytest

from ibdiag.counters.command import CountersRequest, run
from ibdiag.errors import CannotRunError
from ibdiag.fabric.attach import counters_far_end
from tests.support.env import SYSFS_FIXTURES


def test_a_node_with_only_roce_ports_has_no_far_end_to_ask():
    # The tools are never started: a RoCE port's far end is an Ethernet switch.
    hook = counters_far_end({"PATH": "/nonexistent"})
    with pytest.raises(CannotRunError) as e:
        run(CountersRequest(root=SYSFS_FIXTURES / "roce-node", far_end=hook))
    assert "no Active InfiniBand port" in e.value.message and "Ethernet" in (e.value.hint or "")
