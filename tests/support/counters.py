"""Counter trees for the counters tests: ``node()`` builds a node with one mlx5 adapter per port spec
(through the fixture builder, ``tests.sysfsgen.builder.Tree``), ``write()`` changes one counter in
place, as the kernel would.
"""

from __future__ import annotations

from pathlib import Path

from tests.sysfsgen.builder import Tree, zero_counters, zero_hw_counters

MELLANOX = 0x15B3
HOST = "counters-test-01"


def node(root: Path, *ports: dict, host: str = HOST, device_hw: dict | None = None) -> Tree:
    """A node with one adapter per entry of ``ports``: ``mlx5_<i>`` port 1.

    Entry keys (all optional): ``state``, ``phys_state``, ``rate``, ``link_layer``, ``counters``
    (overrides over zero_counters(); ``None`` for no counters/ directory; ``extended=False`` drops the
    extended-only files), ``hw`` (overrides over zero_hw_counters(); ``None`` for none).
    """
    t = Tree(root)
    t.numa(0, "0-7")
    hb = t.host_bridge("0000:20")
    hb.numa, hb.cpulist = 0, "0-7"
    for i, spec in enumerate(ports):
        rp = hb.bridge(f"0000:20:0{i + 1}.0")
        eth = spec.get("link_layer", "InfiniBand") == "Ethernet"
        dev = rp.add(
            f"0000:{0x21 + i:02x}:00.0",
            vendor=MELLANOX,
            device=0x1021,
            cls=0x020000 if eth else 0x020700,
        )
        ib = dev.rdma(
            f"mlx5_{i}",
            fw_ver="28.39.1002",
            board_id="MT_0000000838",
            hca_type="MT4129",
            node_guid=f"0000:0000:0000:{i + 1:04x}",
            hw_counters=device_hw if i == 0 else None,
        )
        dev.netdev(f"ib{i}")
        if spec.get("counters", {}) is None:
            counters = None
        else:
            counters = zero_counters(**spec.get("counters", {}))
            if spec.get("extended", True) is False:
                for n in (
                    "unicast_xmit_packets",
                    "unicast_rcv_packets",
                    "multicast_xmit_packets",
                    "multicast_rcv_packets",
                ):
                    counters.pop(n)
        hw = None if spec.get("hw", {}) is None else zero_hw_counters(**spec.get("hw", {}))
        ib.port(
            1,
            state=spec.get("state", "4: ACTIVE"),
            phys_state=spec.get("phys_state", "5: LinkUp"),
            rate=spec.get("rate", "400 Gb/sec (4X NDR)"),
            link_layer=spec.get("link_layer", "InfiniBand"),
            counters=counters,
            hw_counters=hw,
        )
    t.manifest(host, "counters test node")
    return t


def write(
    root: Path,
    adapter: str,
    name: str,
    value: object,
    *,
    hw: bool = False,
    port: int = 1,
    attr: str | None = None,
) -> None:
    """Change one counter (or a port attribute with ``attr``) in place, as the kernel would."""
    base = Path(root) / "sys" / "class" / "infiniband" / adapter / "ports" / str(port)
    path = base / attr if attr else base / ("hw_counters" if hw else "counters") / name
    path.write_text(f"{value}\n")
