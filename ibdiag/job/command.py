"""``ibdiag job`` as a library: :func:`run` (:class:`JobRequest`) -> :class:`JobResult`, whose views
are :func:`ibdiag.job.views.outputs`.

It reads what is given — a RAS status (live from the job's RAS port, from a file, from a stream) and
Inspector's files — judges it (:mod:`.checks`, :mod:`.job_checks`) and places every rank the findings
name on its node, GPU, NIC and leaf port (:mod:`.places`; with a saved fabric, :mod:`.fabricpath`).
Errors: :class:`~ibdiag.errors.UsageError` / :class:`~ibdiag.errors.InputError` (exit 2) for a bad
request or input file, :class:`~ibdiag.errors.CannotRunError` (exit 3) when the live RAS service is
gone, too old, silent or answers something that is not a status.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.counters.config import CountersConfig
from ibdiag.errors import CannotRunError, InputError, UsageError
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.hosts import HostEnd, TopoFile, read_topo_file
from ibdiag.findings.model import Finding, Report, RunMeta
from ibdiag.infile import RefusedFile, read_regular
from ibdiag.job.checks import CHECKS, ras_findings
from ibdiag.job.config import JobConfig
from ibdiag.job.inspector import InspectorRead, read_inspector
from ibdiag.job.job_checks import busbw, inspector, join, paths, stragglers
from ibdiag.job.model import RasStatus
from ibdiag.job.places import Join, NicPaths, read_hosts_file, read_rank_map
from ibdiag.job.progress import progress
from ibdiag.job.ras import HINT, parse_ras
from ibdiag.job.rasclient import RasAddress, query
from ibdiag.job.roster import RankRow, Roster, fit
from ibdiag.job.timing import CommTiming, largest_rows, timings
from ibdiag.text import safe_value

SCHEMA = "ibdiag.job/1"
#: Every ``job.*`` check (the registry of ibdiag.job.checks, with job_checks' and progress' registered).
__all__ = ["CHECKS", "JobRequest", "JobResult", "RasFile", "RasLive", "RasStream", "run"]


@dataclass(frozen=True)
class RasLive:
    """Ask the job's RAS service (``ncclras``; ``--ras live[:HOST:PORT]``)."""

    address: RasAddress = RasAddress()
    json: bool = True
    """Ask for the JSON status (NCCL 2.28.7+; older NCCL answer with text, noted)."""
    verbose: bool = False
    """``VERBOSE STATUS``: RAS names more of the ranks in each group."""
    collective_timeout_s: int | None = None
    """``TIMEOUT``: how long RAS waits for the other processes (``ncclras -t``); None: RAS's 5 s."""
    again_s: float | None = None
    """Ask twice, this many seconds apart, and judge whether the counts moved (``job.ras_progress``)."""


@dataclass(frozen=True)
class RasFile:
    path: Path


@dataclass(frozen=True)
class RasStream:
    """Standard input (``--ras -``), or any binary stream."""

    stream: IO[bytes]
    name: str = "stdin"


@dataclass(frozen=True)
class JobRequest:
    ras: RasLive | RasFile | RasStream | None = None
    ras_earlier: RasLive | RasFile | RasStream | None = None
    """An earlier RAS reading of the same job: ``job.ras_progress`` compares the two."""
    inspector: tuple[Path, ...] = ()
    """Inspector files, or directories holding them."""
    topo: tuple[Path, ...] = ()
    """``ibdiag topo -o json`` files of the job's nodes."""
    fabric: Path | None = None
    """A saved fabric (``ibdiag fabric --save``)."""
    hosts_file: Path | None = None
    """Address -> name (``/etc/hosts``, ``getent hosts``)."""
    rank_map: Path | None = None
    """``RANK: HOST`` lines of the job's world (``srun -l hostname``)."""
    config: JobConfig = field(default_factory=JobConfig)
    collective: CollectiveConfig = field(default_factory=CollectiveConfig)
    counters: CountersConfig | None = None
    fabric_config: FabricConfig | None = None


@dataclass(frozen=True)
class JobResult:
    meta: RunMeta
    """This node (where the job was asked about), this ibdiag, now."""
    ras: RasStatus | None
    inspector: InspectorRead | None
    timings: tuple[CommTiming, ...]
    ranks: tuple[RankRow, ...]
    """Every rank or process a finding names, placed (``ranks`` in the JSON)."""
    findings: tuple[Finding, ...]
    fabric: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ras": None if self.ras is None else self.ras.to_json(),
            "inspector": None if self.inspector is None else self.inspector.to_json(),
            "communicators": [t.to_json() for t in self.timings],
            "ranks": [r.to_json() for r in self.ranks],
            "fabric": self.fabric,
        }

    @property
    def report(self) -> Report:
        return Report("job", self.to_json(), self.findings)

    def busbw_gbs(self, coll: str = "AllReduce", min_bytes: int = 0) -> float | None:
        """The busbw of ``coll`` at the largest size of the largest communicator that ran it (GB/s):
        what ``ibdiag verdict --bench`` may take as the job's measured busbw."""
        for t in self.timings:
            for r in largest_rows(t):
                if r.coll == coll and r.bytes >= min_bytes and r.busbw_gbs is not None:
                    return r.busbw_gbs
        return None


def read_ras(source: RasLive | RasFile | RasStream, cfg: JobConfig) -> RasStatus:
    limit = cfg.max_ras_bytes
    if isinstance(source, RasLive):
        reply = query(
            source.address,
            timeout_s=cfg.ras_timeout_s,
            max_bytes=limit,
            json=source.json,
            verbose=source.verbose,
            collective_timeout_s=source.collective_timeout_s,
        )
        try:
            status = parse_ras(reply.data, source.address.text)
        except InputError as e:
            raise CannotRunError(
                f"the RAS service at {source.address.text} sent no status: {e.message}",
                hint="is it NCCL's RAS? ncclras -h HOST -p PORT asks the same service",
            ) from None
        return replace(status, notes=(*reply.notes, *status.notes))
    if isinstance(source, RasStream):
        data = source.stream.read(limit + 1)
        if len(data) > limit:
            raise InputError(f"{source.name}: more than {limit} bytes", hint=HINT)
        return parse_ras(data, source.name)
    name = safe_value(str(source.path), 200)
    try:
        data = read_regular(source.path, limit)
    except RefusedFile as e:
        raise InputError(f"{name}: {e.problem}", hint=HINT) from None
    except OSError as e:
        raise InputError(f"{name}: cannot read: {e.strerror or e}", hint=HINT) from None
    return parse_ras(data, name)


def _fabric(req: JobRequest, topo: list[TopoFile]) -> NicPaths | None:
    if req.fabric is None:
        return None
    # lazy: start-up time (the fabric's judgement loads networkx; only with --fabric)
    from ibdiag.job.fabricpath import load_fabric

    ends: dict[str, HostEnd] = {}
    for t in topo:
        ends.update(t.ends)
    return load_fabric(req.fabric, ends, req.counters, req.fabric_config)


def _by_rank(read: InspectorRead | None) -> Mapping[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    if read is not None:
        for r in read.records:
            out.setdefault((r.comm, r.rank), r.host)
    return out


def _elapsed(before: RasStatus, after: RasStatus) -> float | None:
    """Seconds between two JSON statuses' timestamps (RAS's local time, ``%F %T``)."""
    try:
        t0, t1 = (
            datetime.strptime(s.timestamp or "", "%Y-%m-%d %H:%M:%S") for s in (before, after)
        )
    except ValueError:
        return None
    return (t1 - t0).total_seconds() if t1 > t0 else None


def _readings(req: JobRequest) -> tuple[RasStatus | None, RasStatus | None, float | None]:
    """(earlier reading, the reading, seconds between) of the request's RAS sources."""
    if req.ras is None:
        return None, None, None
    if req.ras_earlier is not None:
        before = read_ras(req.ras_earlier, req.config)
        after = read_ras(req.ras, req.config)
        return before, after, _elapsed(before, after)
    status = read_ras(req.ras, req.config)
    if isinstance(req.ras, RasLive) and req.ras.again_s:
        time.sleep(req.ras.again_s)
        return status, read_ras(req.ras, req.config), req.ras.again_s
    return None, status, None


def _topo_files(paths: tuple[Path, ...]) -> list[Path]:
    """Each ``--topo`` path; a directory stands for its ``*.json`` files (``--topo topo/``)."""
    out: list[Path] = []
    for p in paths:
        out += sorted(p.glob("*.json")) if p.is_dir() else [p]
    return out


def run(req: JobRequest) -> JobResult:
    """Read, judge and place (module docstring)."""
    if req.ras_earlier is not None and req.ras is None:
        raise UsageError(
            "--ras-earlier is compared with a reading now: give --ras too",
            hint="e.g. ibdiag job --ras live --ras-earlier before.json",
        )
    if req.ras is None and not req.inspector:
        raise UsageError(
            "nothing to read: give a RAS status (live, a file or -) or Inspector files",
            hint="e.g. ibdiag job --ras live, or ibdiag job --inspector $NCCL_INSPECTOR_DUMP_DIR",
        )
    topo = [read_topo_file(p) for p in _topo_files(req.topo)]
    earlier, status, seconds = _readings(req)
    read = (
        read_inspector(
            req.inspector,
            max_file_bytes=req.config.inspector_max_file_bytes,
            max_records=req.config.inspector_max_records,
        )
        if req.inspector
        else None
    )
    fabric = _fabric(req, topo)
    place = Join(
        topo=topo,
        hosts=read_hosts_file(req.hosts_file) if req.hosts_file else {},
        by_rank=_by_rank(read),
        rank_map=read_rank_map(req.rank_map) if req.rank_map else {},
        fabric=fabric,
    )
    roster = Roster(place, status)
    findings: list[Finding] = []
    if status is not None:
        findings += ras_findings(status, roster)
    if earlier is not None and status is not None:
        findings += progress(earlier, status, seconds)
    comm_timings = timings(read.records, req.collective) if read is not None else ()
    if read is not None:
        findings += stragglers(comm_timings, roster, req.collective)
        findings += busbw(comm_timings, req.config)
        findings += inspector(read, comm_timings)
    findings += paths(roster)
    fabric_name = getattr(fabric, "source", None) if fabric is not None else None
    findings += join(roster, fabric_name)
    fitted = tuple(replace(f, message=fit(f.message)) for f in findings)
    meta = RunMeta.now(os.uname().nodename)  # socket.gethostname(), as node.root.host_of says
    return JobResult(
        meta, status, read, comm_timings, tuple(roster.rows.values()), fitted, fabric_name
    )
