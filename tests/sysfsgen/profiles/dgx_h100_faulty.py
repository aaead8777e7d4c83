"""The DGX H100-like node with five planted faults, one finding each:

* ``wrong_socket`` — GPU2's rail adapter sits in a socket-1 slot (GPU2: nearest adapter is NODE);
* ``narrow_link`` — GPU5's rail adapter trained at PCIe x8 of x16;
* ``port_down`` — the second storage port is DOWN / Polling (cable out);
* ``slow_port`` — GPU6's rail port came up at 200 Gb/s HDR instead of 400 Gb/s NDR;
* ``no_peermem`` — the NVIDIA driver is loaded but ``nvidia_peermem`` is not.
"""

from __future__ import annotations

from tests.sysfsgen.builder import Tree
from tests.sysfsgen.profiles import dgx_h100

NAME = "dgx-h100-faulty"


def build(tree: Tree) -> None:
    dgx_h100.build(tree, frozenset(dgx_h100.FAULTS), host="dgx-h100-07")
