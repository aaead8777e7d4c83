"""fabric/views/json_data.py: the links and adapters, held by column (issue 39), are the records the
document always had."""

from __future__ import annotations

from ibdiag.fabric.model import FabricNode
from ibdiag.fabric.views.json_data import ADAPTER_KEYS


def test_the_adapters_columns_are_the_nodes_json_keys_in_order():
    node = FabricNode("0x1", "ca", "gpu01 mlx5_0", 1, 3, "H-1", 0x2C9, 4123)
    assert tuple(node.to_json()) == ADAPTER_KEYS
