"""Which adapters an expectation means: ``--expect-on SET``, ``[topo] expect_on``, ``[ports] expect_on``.

A DGX-like node has eight InfiniBand adapters beside its GPUs and two dual-port Ethernet (RoCE) cards
for storage at 200 Gb/s: "8 adapters at 400 Gb/s" is about the first eight only. ``SET`` is one of

* ``all``                 every adapter (the default: what ``--expect-adapters``/``--expect-rate`` meant so far)
* ``gpu``                 the GPU-facing adapters: for each GPU, those of the GPUs' fabric at the best
                          path class (ties included), whatever their ports' state — the adapters the
                          node was built to give its GPUs (:func:`gpu_facing`)
* ``infiniband`` / ``ib``, ``ethernet`` / ``roce``   adapters with a port of that link layer
* ``mlx5_0,mlx5_1,...``   a comma list of adapter patterns (``mlx5_[0-3]``) or ports (``mlx5_4:1``)

The set itself is parsed with the settings (:func:`ibdiag.ports.config.parse_set`); :func:`select_adapters` and :func:`select_ports` apply a set to a node's model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ibdiag.node.model import Adapter, Port, Topology
from ibdiag.ports.config import AdapterSet, SetKind, matches


def _best(
    gpu: int, adapters: Iterable[Adapter], paths: dict[tuple[int, str], int]
) -> list[Adapter]:
    ranked = [(paths[(gpu, a.name)], a) for a in adapters if (gpu, a.name) in paths]
    if not ranked:
        return []
    best = min(r for r, _ in ranked)
    return [a for r, a in ranked if r == best]


def gpu_facing(topo: Topology) -> tuple[str, ...]:
    """The adapters the node gives its GPUs, in NIC order: for each GPU, the hardware adapters of the
    GPUs' fabric at the best path class from it (``nvidia-smi topo -m``'s nearest; ties all kept).

    Unlike the pairing (:attr:`Topology.pairings`: the *active* ports NCCL will use), the ports' state
    is not looked at: an adapter whose link is down is still the one its GPU was built to use, so a
    count over this set does not shrink when a cable is pulled (``port.state`` fails for that). The
    fabric is the link layer most common among the GPUs' nearest adapters: a storage Ethernet card
    that ties with an InfiniBand adapter for one GPU stays out.
    """
    hardware = [a for a in topo.adapters if not a.software and a.pci is not None]
    paths = {(p.gpu, p.adapter): p.path.rank for p in topo.paths}
    layers: Counter[str] = Counter()
    for gpu in topo.gpus:
        for a in _best(gpu.index, hardware, paths):
            layers.update({p.link_layer for p in a.ports if p.link_layer})
    layer = layers.most_common(1)[0][0] if layers else None
    fabric = [a for a in hardware if layer is None or any(p.link_layer == layer for p in a.ports)]
    chosen = {a.name for gpu in topo.gpus for a in _best(gpu.index, fabric, paths)}
    return tuple(a.name for a in topo.adapters if a.name in chosen)


def _port_in(selection: AdapterSet, port: Port, gpu_names: frozenset[str]) -> bool:
    if selection.kind is SetKind.ALL:
        return True
    if selection.kind is SetKind.GPU:
        return port.adapter in gpu_names
    if selection.kind is SetKind.LINK_LAYER:
        return port.link_layer == selection.link_layer
    return any(matches(pat, port.adapter, port.port) for pat in selection.patterns)


def select_adapters(selection: AdapterSet, topo: Topology) -> tuple[Adapter, ...]:
    """The adapters of ``topo`` in ``selection`` (an adapter with one port in it is in it), in NIC order."""
    if selection.kind is SetKind.ALL:
        return topo.adapters
    gpu_names = frozenset(gpu_facing(topo)) if selection.kind is SetKind.GPU else frozenset()
    return tuple(
        a
        for a in topo.adapters
        if (
            selection.kind is SetKind.NAMES
            and any(matches(p, a.name, None) for p in selection.patterns)
        )
        or any(_port_in(selection, p, gpu_names) for p in a.ports)
    )


def select_ports(
    selection: AdapterSet, ports: Sequence[Port], gpu_names: Iterable[str] = ()
) -> frozenset[tuple[str, int]] | None:
    """``(adapter, port)`` of the ports in ``selection``; None for ``all`` (every port).

    ``gpu_names``: the GPU-facing adapters (:func:`gpu_facing`), needed for ``gpu`` only — a command
    that reads no GPUs (``counters``) passes what ``topo``'s discovery found.
    """
    if selection.kind is SetKind.ALL:
        return None
    names = frozenset(gpu_names)
    return frozenset((p.adapter, p.port) for p in ports if _port_in(selection, p, names))
