"""fabric/views/json_data.py: the links and adapters, held by column (issue 39), are the records the
document always had."""

from __future__ import annotations

from ibdiag.fabric.model import FabricNode
from ibdiag.fabric.views.json_data import _adapters


def test_an_adapters_record_is_its_nodes_json_its_host_and_whether_it_is_sharp():
    node = FabricNode("0x1", "ca", "gpu01 mlx5_0", 1, 3, "H-1", 0x2C9, 4123, "0x9")
    host = {"host": "gpu01", "adapter": "mlx5_0", "nic_index": None, "gpus": []}
    (record,) = _adapters([node], {"0x1": host})
    assert list(record.items()) == [
        *node.to_json().items(),
        ("host", host),
        ("sharp_aggregation_node", False),
    ]
