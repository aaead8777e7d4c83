"""A fixture fleet: DGX H100-like nodes, most identical, a few with one planted configuration outlier each.

Not a committed fixture (no ``NAME``/``build``): tests write the trees into a temporary directory,
run ``ibdiag topo``/``ibdiag counters -o json`` on each, and hand the JSON to ``ibdiag report``.
Each variant is the healthy ``dgx_h100`` profile plus one change, made the way a real node differs:

* ``firmware`` — mlx5_3 runs firmware 28.39.2048 (the fleet: 28.39.1002);
* ``narrow`` — GPU5's adapter (mlx5_7) trained at PCIe x8 (``dgx_h100``'s ``narrow_link`` fault);
* ``slow-port`` — GPU6's adapter (mlx5_8) at 200 Gb/s HDR (``slow_port``);
* ``no-peermem`` — no ``nvidia_peermem`` (``no_peermem``): GPUDirect RDMA module absent;
* ``driver`` — NVIDIA driver 535.183.01 (the fleet: 550.90.07);
* ``kernel`` — kernel 5.15.0-1071-nvidia (the fleet: 5.15.0-1063-nvidia), everything else the same;
* ``ofed`` — DOCA-OFED's mlx5_core 24.10-1.1.4 on every adapter (the fleet: MLNX_OFED 24.07-0.6.1);
* ``wrong-socket`` — GPU2's adapter in a socket-1 slot (``wrong_socket``): NCCL_IB_HCA differs, and the
  adapters after it are named one later (mlx5 names follow PCI order);
* ``errors`` — mlx5_1:1 counted symbol errors and link-downs (a configuration-clean node with a bad cable);
* ``healthy`` — nothing.
"""

from __future__ import annotations

from pathlib import Path

from tests.sysfsgen.builder import Tree
from tests.sysfsgen.profiles import dgx_h100

#: variant -> (dgx_h100 faults, what ibdiag report must name: (config key, value)), or None for no outlier.
VARIANTS: dict[str, tuple[frozenset[str], tuple[str, str] | None]] = {
    "healthy": (frozenset(), None),
    "firmware": (frozenset(), ("mlx5_3 firmware", "28.39.2048")),
    "narrow": (frozenset({"narrow_link"}), ("mlx5_7 PCIe width", "x8")),
    "slow-port": (frozenset({"slow_port"}), ("mlx5_8:1 rate", "200 Gb/s")),
    "no-peermem": (frozenset({"no_peermem"}), ("GPUDirect RDMA module", "absent")),
    "driver": (frozenset(), ("NVIDIA driver", "535.183.01")),
    "kernel": (frozenset(), ("kernel", "5.15.0-1071-nvidia")),
    "ofed": (frozenset(), ("mlx5_0 driver", "mlx5_core 24.10-1.1.4")),
    "wrong-socket": (
        frozenset({"wrong_socket"}),
        ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1"),
    ),
    "errors": (frozenset(), None),
}


def build_variant(root: Path, variant: str, host: str) -> Path:
    """Write ``root/sys`` (and the snapshot manifest naming ``host``) for ``variant``; returns ``root``."""
    faults, _ = VARIANTS[variant]
    tree = Tree(root)
    dgx_h100.build(tree, faults, host=host)
    if variant == "firmware":
        tree.file("class/infiniband/mlx5_3/fw_ver", "28.39.2048")
    elif variant == "driver":
        tree.file("module/nvidia/version", "535.183.01")
        tree.file("module/nvidia_peermem/version", "535.183.01")
    elif variant == "kernel":
        tree.kernel("5.15.0-1071-nvidia")
    elif variant == "ofed":
        tree.module("mlx5_core", "24.10-1.1.4", "0B7D51E9A3C2F48E6D1A7C5")
    elif variant == "errors":
        tree.file("class/infiniband/mlx5_1/ports/1/counters/symbol_error", 57)
        tree.file("class/infiniband/mlx5_1/ports/1/counters/link_downed", 3)
    return root
