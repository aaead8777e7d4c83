"""``ibdiag verdict --fabric DUMP|live --nodes LIST [--rank-order FILE|LIST] [--topo FILES]``: the job's
nodes on the fabric, judged by :mod:`ibdiag.verdict.placement`; hosts named as ``ibdiag fabric`` names
them (``--topo`` files, else node descriptions). Reads the fabric with :mod:`ibdiag.fabric`'s own
collector, dump reader and build (verdict sits above fabric in the layers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ibdiag.errors import UsageError
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.collect import Collector, Limits, collect
from ibdiag.fabric.hosts import HostEnd, Names, read_topo
from ibdiag.fabric.nodelist import expand, expand_all
from ibdiag.fabric.placement import Placement, place
from ibdiag.fabric.shape import shape
from ibdiag.findings.model import Finding
from ibdiag.infile import read_text_file
from ibdiag.text import safe_value
from ibdiag.verdict.placement import placement, placement_lines

MAX_RANK_FILE_BYTES = 16 * 2**20
HINT = "e.g. --fabric live --nodes 'gpu[01-64]' (inside a job, $SLURM_JOB_NODELIST is the default)"
#: The live fabric's tools' time limits (discovery, counters, subnet managers), seconds.
LIVE_LIMITS = Limits(60.0, 60.0, 10.0)


@dataclass(frozen=True)
class JobOnFabric:
    """Where the job landed, the verdict's finding on it and the table's lines."""

    placement: Placement
    findings: tuple[Finding, ...]
    lines: tuple[str, ...]


def read_order(text: str) -> list[str]:
    """A rank order: a file with one host a line (a host repeated per rank keeps its first place), or a
    Slurm host list in rank order."""
    path = Path(text)
    if not path.exists():  # a FIFO or device given is refused by read_text_file, never opened
        return expand(text)
    where = f"--rank-order {safe_value(text)}"
    data = read_text_file(path, MAX_RANK_FILE_BYTES, where, HINT, utf8_only=False, usage=True)
    lines = [ln.split("#", 1)[0].strip() for ln in data.splitlines()]
    # one budget of names for the whole file (a 16 MiB file of ranges is not 16 MiB of budgets)
    hosts = expand_all(ln for ln in lines if ln)
    if not hosts:
        raise UsageError(f"--rank-order {safe_value(text)}: no host in it", hint=HINT)
    return hosts


def job_order(nodes: str | None, rank_order: str | None, environ: Mapping[str, str]) -> list[str]:
    """The job's nodes in rank order: ``--rank-order``, else the node list (``--nodes``, else
    ``$SLURM_JOB_NODELIST``); both given must name the same nodes."""
    given = nodes or environ.get("SLURM_JOB_NODELIST")
    if not given and not rank_order:
        raise UsageError(
            "--fabric needs the job's nodes: --nodes, or $SLURM_JOB_NODELIST", hint=HINT
        )
    order = read_order(rank_order) if rank_order else expand(given or "")
    if given and rank_order:
        want = set(expand(given))
        if set(order) != want:
            extra = sorted(set(order) - want)[:4]
            lack = sorted(want - set(order))[:4]
            raise UsageError(
                "--rank-order and the node list name different nodes"
                + (f" (not in the list: {', '.join(extra)})" if extra else "")
                + (f" (not in the order: {', '.join(lack)})" if lack else ""),
                hint="the rank order lists each node of the job once, in rank order",
            )
    return order


def job_placement(
    fabric: str,
    nodes: str | None,
    rank_order: str | None,
    environ: Mapping[str, str],
    *,
    topo: Sequence[Path] = (),
    rails_used: int | None,
    payload_share: float,
) -> Placement:
    """The job's nodes on the fabric (``live``: read now with infiniband-diags; else a saved dump)."""
    order = job_order(nodes, rank_order, environ)
    hosts: dict[str, HostEnd] = {}
    for f in topo:
        hosts.update(read_topo(f))
    if fabric == "live":
        cap = collect(Collector(environ, limits=LIVE_LIMITS), interval_s=None)
    else:
        cap = dump.load(Path(fabric))
    fab = build_fabric(cap)
    return place(
        fab,
        Names(fab, hosts),
        shape(fab),
        order,
        rails_used=rails_used,
        payload_share=payload_share,
    )


def judge_placement(
    where: Placement, rail_ceiling_gbs: float | None, measured_gbs: float
) -> JobOnFabric:
    """The placement's finding and the table's lines, against verdict's rail ceiling where its rails
    are known (flags, ``--root``; else None: the fabric's host links)."""
    return JobOnFabric(
        where,
        tuple(placement(where, rail_ceiling_gbs, measured_gbs)),
        tuple(placement_lines(where, rail_ceiling_gbs)),
    )
