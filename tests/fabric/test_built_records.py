"""The records the judgement makes once per adapter by model.built (issue 39: every field set in one
go, not the frozen dataclass's guarded __init__) are the dataclasses themselves: equal, hashed, shown
and replaced alike, their fields those of the class, in order."""

from __future__ import annotations

from dataclasses import fields, replace

from ibdiag.fabric.hosts import HostEnd, Names, from_desc
from ibdiag.fabric.model import CA, Fabric, FabricNode, FabricPort, PortRef
from ibdiag.fabric.rails import RailEnd, rail_ends


def _same(record: object, cls: type) -> None:
    again = cls(*(getattr(record, f.name) for f in fields(cls)))
    assert record == again and hash(record) == hash(again) and repr(record) == repr(again)
    assert [f.name for f in fields(cls)] == list(vars(record))
    assert replace(record) == record  # type: ignore[type-var]


def test_a_host_read_from_a_description_is_a_host_end():
    end = from_desc(FabricNode("0x1", CA, "gpu03 mlx5_2", 1))
    assert end == HostEnd("gpu03", "mlx5_2")
    _same(end, HostEnd)


def test_a_rail_end_is_the_dataclass_itself():
    leaf = FabricNode("0xa", "switch", "leaf-r2", 40)
    ca = FabricNode("0x1", CA, "gpu03 mlx5_2", 1)
    ports = (
        FabricPort("0xa", 7, "Active", peer=PortRef("0x1", 1)),
        FabricPort("0x1", 1, "Active", peer=PortRef("0xa", 7)),
    )
    fab = Fabric(source="t", taken_at_s=None, nodes=(leaf, ca), ports=ports)
    (end,), _skipped = rail_ends(fab, Names(fab, {}))
    assert end == RailEnd("0x1", "gpu03", "mlx5_2", 2, "0xa", 7)
    _same(end, RailEnd)
