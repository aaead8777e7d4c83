"""``ibdiag counters --far-end``: the far ends read for a counters snapshot, and their findings added."""

from __future__ import annotations

from typing import Any

from ibdiag.cli.common import env


def far_ends(sysfs: Any, sample: Any) -> list[Any]:
    from ibdiag.errors import CannotRunError
    from ibdiag.fabric.farend import FarEndReader, ib_ports
    from ibdiag.fabric.hosts import guid_from_sysfs
    from ibdiag.jsonread import JsonFieldError

    ports = ib_ports(sample.ports)
    if not ports:
        raise CannotRunError(
            "--far-end: no Active InfiniBand port on this node",
            hint="the far end of a RoCE port is an Ethernet switch: read it with the switch's own tools",
        )
    reader = FarEndReader(env().environ)
    out = []
    for adapter, port in ports:
        try:
            guid = guid_from_sysfs(sysfs.read(f"class/infiniband/{adapter}/node_guid") or "")
        except JsonFieldError:
            guid = None
        out.append(reader.read(adapter, port, guid))
    return out


def with_far_ends(report: Any, ends: list[Any], cfg: Any) -> Any:
    from ibdiag.fabric.checks import far_end
    from ibdiag.findings.model import Report

    return Report(
        report.command,
        {**report.data, "far_end": [e.to_json() for e in ends]},
        (*report.findings, *far_end(ends, cfg)),
    )
