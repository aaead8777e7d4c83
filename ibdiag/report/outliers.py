"""Configuration outliers: each setting's majority value over the fleet (:func:`config_outliers`, with
pandas), the nodes that differ from it, and those differences grouped for people (:func:`group_outliers`).

A fleet mid-upgrade differs on many nodes in many settings at once: 4 of 9 nodes on a newer driver
differ in every adapter's ``driver`` (12 adapters: 48 node x setting pairs). One row per *difference*:
the same value against the same majority on several nodes is one row naming the nodes as a Slurm host
list (``gpu[06-09]``, :mod:`ibdiag.report.hostlists`), and the same difference on several adapters (or
GPUs, or ports) of those nodes is one setting naming the devices the same way (``mlx5_[0-11] driver``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.errors import missing_extra
from ibdiag.report.hostlists import host_list
from ibdiag.report.inputs import AdapterFacts, InputDoc, TopoFacts


@dataclass(frozen=True)
class Outlier:
    key: str
    """``mlx5_3 firmware``, ``NCCL_IB_HCA`` ..."""
    host: str
    value: str
    majority: str
    majority_hosts: int
    hosts: int
    """Nodes whose topo says anything about the key."""


@dataclass(frozen=True)
class Split:
    """A key without a majority value: the fleet is divided, nobody is the odd one out."""

    key: str
    values: tuple[tuple[str, int], ...]
    nodes: tuple[tuple[str, ...], ...] = ()
    """Per value (in the order of ``values``), the nodes that have it."""


@dataclass(frozen=True)
class OutlierGroup:
    """One difference from the majority, shared: the nodes with it, the settings it is in."""

    key: str
    """The setting, its devices as a host list where several (``mlx5_[0-11] driver``, ``kernel``)."""
    keys: tuple[str, ...]
    """The settings merged into it (``mlx5_0 driver``, ``mlx5_1 driver`` ...)."""
    hosts: tuple[str, ...]
    host_list: str
    """``gpu[06-09]``: the nodes as one Slurm host list."""
    value: str
    majority: str
    majority_hosts: int
    compared: int
    """Nodes whose topo says anything about the setting (:attr:`Outlier.hosts`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "keys": list(self.keys),
            "nodes": list(self.hosts),
            "node_list": self.host_list,
            "value": self.value,
            "majority": self.majority,
            "majority_hosts": self.majority_hosts,
            "hosts": self.compared,
        }


@dataclass(frozen=True)
class SplitGroup:
    """Settings without a majority, divided the same way (the same values on the same nodes)."""

    key: str
    keys: tuple[str, ...]
    values: tuple[tuple[str, int, str], ...]
    """(value, nodes, the nodes as a host list), most nodes first."""

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "keys": list(self.keys),
            "values": [{"value": v, "hosts": n, "node_list": h} for v, n, h in self.values],
        }


def pandas() -> Any:
    """pandas, or the error naming the extra that installs it (``ibdiag report`` builds its tables with it)."""
    try:
        import pandas as pd
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("pandas", "numpy"):
            raise
        raise missing_extra("pandas", "ibdiag report") from None
    return pd


def driver_text(a: AdapterFacts) -> str | None:
    """``mlx5_core 24.10-1.1.4``, ``mlx5_core srcversion 0716E1...``, ``mlx5_core (version unknown)``;
    None when topo named no module (or a topo file of an older version): a node that says nothing is
    not compared, as for firmware."""
    if a.driver_module is None:
        return None
    if a.driver_version is None or a.driver_version_kind is None:
        return f"{a.driver_module} (version unknown)"
    if a.driver_version_kind == "srcversion":
        return f"{a.driver_module} srcversion {a.driver_version}"
    return f"{a.driver_module} {a.driver_version}"


def topo_facts(facts: TopoFacts) -> list[tuple[str, str]]:
    """(key, value) pairs of a node's configuration that should be the same across a fleet."""
    out = [("GPUs", str(facts.gpus)), ("RDMA adapters", str(len(facts.adapters)))]
    out.append(("GPUDirect RDMA module", facts.gdr_module or "unknown"))
    if facts.kernel_release is not None:
        out.append(("kernel", facts.kernel_release))
    if facts.gpus:
        out.append(("NVIDIA driver", facts.nvidia_driver or "not loaded"))
    if facts.nccl_ib_hca is not None:
        out.append(("NCCL_IB_HCA", facts.nccl_ib_hca))
    if facts.nccl_gid_index is not None:
        out.append(("NCCL_IB_GID_INDEX", facts.nccl_gid_index))
    for i, w in enumerate(facts.gpu_pcie_widths):
        if w is not None:
            out.append((f"GPU{i} PCIe width", f"x{w}"))
    for a in facts.adapters:
        if a.fw_ver is not None:
            out.append((f"{a.name} firmware", a.fw_ver))
        driver = driver_text(a)
        if driver is not None:
            out.append((f"{a.name} driver", driver))
        if a.board_id is not None:
            out.append((f"{a.name} board", a.board_id))
        if a.pcie_width is not None:
            out.append((f"{a.name} PCIe width", f"x{a.pcie_width}"))
        if a.pcie_speed_gts is not None:
            out.append((f"{a.name} PCIe speed", f"{a.pcie_speed_gts:g} GT/s"))
        for p in a.ports:
            if p.rate_gbps is not None:
                out.append((f"{a.name}:{p.port} rate", f"{p.rate_gbps:g} Gb/s"))
            if p.state is not None or p.phys_state is not None:
                out.append((f"{a.name}:{p.port} state", f"{p.state or '?'}/{p.phys_state or '?'}"))
            if p.link_layer is not None:
                out.append((f"{a.name}:{p.port} link layer", p.link_layer))
    return out


def config_outliers(topos: dict[str, InputDoc]) -> tuple[list[Outlier], list[Split]]:
    """Each key's majority value over the nodes that have it; nodes with another value are outliers."""
    pd = pandas()
    rows = [
        (host, key, value)
        for host, d in topos.items()
        if d.topo is not None
        for key, value in topo_facts(d.topo)
    ]
    if not rows:
        return [], []
    df = pd.DataFrame(rows, columns=["host", "key", "value"])
    counts = df.groupby(["key", "value"]).size().rename("n").reset_index()
    counts = counts.sort_values(["key", "n", "value"], ascending=[True, False, True])
    distinct = counts.groupby("key")["value"].size().rename("values")
    top = (
        counts.drop_duplicates("key")
        .set_index("key")
        .join(df.groupby("key")["host"].nunique().rename("hosts"))
        .join(distinct)
    )
    top = top[top["values"] > 1]
    has_majority = 2 * top["n"] > top["hosts"]
    majority = top[has_majority]
    odd = df.merge(majority, left_on="key", right_index=True, suffixes=("", "_top"))
    odd = odd[odd["value"] != odd["value_top"]].sort_values(["key", "host"])
    outliers = [
        Outlier(str(r.key), str(r.host), str(r.value), str(r.value_top), int(r.n), int(r.hosts))
        for r in odd.itertuples()
    ]
    split_keys = top[~has_majority].index
    held: dict[tuple[str, str], list[str]] = {}
    for r in df[df["key"].isin(split_keys)].itertuples():
        held.setdefault((str(r.key), str(r.value)), []).append(str(r.host))
    splits = []
    for key, group in counts[counts["key"].isin(split_keys)].groupby("key", sort=True):
        values = tuple((str(v), int(n)) for v, n in zip(group["value"], group["n"], strict=False))
        nodes = tuple(tuple(sorted(held[(str(key), v)])) for v, _n in values)
        splits.append(Split(str(key), values, nodes))
    return outliers, splits


def device_key(key: str) -> tuple[str, str, str] | None:
    """``mlx5_3:1 rate`` -> (``mlx5_3``, ``:1``, ``rate``); ``GPU2 PCIe width`` -> (``GPU2``, ``""``,
    ``PCIe width``); None for a setting of the whole node (``kernel``, ``NCCL_IB_HCA``)."""
    token, sep, setting = key.partition(" ")
    device, colon, port = token.partition(":")
    if not sep or not device[-1:].isdigit() or (colon and not port.isdigit()):
        return None
    return device, colon + port, setting


def _merged_key(keys: Sequence[str]) -> str:
    """The settings' common name with their devices as one host list (``mlx5_[0-11] driver``)."""
    if len(keys) == 1:
        return keys[0]
    parts = [p for p in (device_key(k) for k in keys) if p is not None]
    if len(parts) != len(keys):  # only settings of devices merge; kept whole otherwise
        return ", ".join(keys)
    return f"{host_list(p[0] for p in parts)}{parts[0][1]} {parts[0][2]}"


def _device_family(key: str) -> tuple[str, str, str] | tuple[str]:
    """What settings merge on: the device's name without its number, the port, the setting."""
    parts = device_key(key)
    if parts is None:
        return (key,)
    device, port, setting = parts
    return device.rstrip("0123456789"), port, setting


def group_outliers(outliers: Iterable[Outlier]) -> list[OutlierGroup]:
    """One group per difference (value, majority, counts) and the nodes that have it, the same
    difference on several devices of the same nodes merged; most nodes first."""
    by_diff: dict[tuple[str, str, str, int, int], list[str]] = {}
    for o in outliers:
        by_diff.setdefault((o.key, o.value, o.majority, o.majority_hosts, o.hosts), []).append(
            o.host
        )
    merged: dict[tuple[Any, ...], list[str]] = {}
    hosts_of: dict[tuple[Any, ...], tuple[str, ...]] = {}
    for (key, value, majority, n_major, n_all), hosts in by_diff.items():
        nodes = tuple(sorted(set(hosts)))
        group = (_device_family(key), value, majority, n_major, n_all, nodes)
        merged.setdefault(group, []).append(key)
        hosts_of[group] = nodes
    out = [
        OutlierGroup(
            _merged_key(keys),
            tuple(keys),
            hosts_of[group],
            host_list(hosts_of[group]),
            group[1],
            group[2],
            group[3],
            group[4],
        )
        for group, keys in merged.items()
    ]
    return sorted(out, key=lambda g: (-len(g.hosts), g.keys[0], g.host_list))


def group_splits(splits: Iterable[Split]) -> list[SplitGroup]:
    """Settings without a majority divided the same way (the same values on the same nodes) on
    devices of one kind: one group."""
    merged: dict[tuple[Any, ...], list[Split]] = {}
    for s in splits:
        nodes = s.nodes or tuple(() for _ in s.values)
        group = (_device_family(s.key), tuple(v for v, _n in s.values), nodes)
        merged.setdefault(group, []).append(s)
    out = []
    for items in merged.values():
        first = items[0]
        nodes = first.nodes or tuple(() for _ in first.values)
        out.append(
            SplitGroup(
                _merged_key([s.key for s in items]),
                tuple(s.key for s in items),
                tuple(
                    (v, n, host_list(hosts))
                    for (v, n), hosts in zip(first.values, nodes, strict=True)
                ),
            )
        )
    return out
