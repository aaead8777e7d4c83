"""The DGX H100-like node after a failed mlx5 driver load: the eight compute and four storage
ConnectX-7 functions are on the PCI bus, but mlx5_core/mlx5_ib are not loaded, so there is no
``/sys/class/infiniband``, no IPoIB or Ethernet netdev, no driver link. ``ibdiag topo`` must not pass
this silently: a warning by default, a failure with ``--expect-adapters``.
"""

from __future__ import annotations

from tests.sysfsgen.builder import Tree
from tests.sysfsgen.profiles import dgx_h100

NAME = "gpu-no-mlx5"


def build(tree: Tree) -> None:
    dgx_h100.build(
        tree,
        host="dgx-h100-12",
        mlx5_loaded=False,
        note="project fixture: DGX H100-like node, mlx5 driver not loaded",
    )
