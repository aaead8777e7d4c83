"""NCCL's own log without a result table -> a run without rows that holds what the log says.

A training job's ``NCCL_DEBUG=INFO`` output, or a benchmark that died before its table, says plainly
what matters (:mod:`~ibdiag.bench.importers.context`, :mod:`~ibdiag.bench.importers.transport`): the
transport (``NET/IB : No device found`` then ``Using network Socket``: the socket fallback), GPUDirect
RDMA (``via NET/IB/0/GDRDMA`` or ``via NET/IB/4``), the devices, the hosts, the NCCL version, the RoCE
GID index, the network's fatal errors (``NET/IB : Got completion … with error 4 … vendor err 81`` and
the CQE dump). Such a log is read into a ``kind: collective`` run without rows, its
``provenance.imported.tool`` ``NCCL``: the findings are the path's (``import.socket_fallback``,
``import.network_error``, ``import.nccl_warnings``), and ``import.incomplete`` when the log's command
was a benchmark that printed no table. Pure functions of what the context read.
"""

from __future__ import annotations

from ibdiag.bench.importers.context import Context
from ibdiag.bench.results.collective_meta import CollectiveMeta
from ibdiag.bench.results.model import BenchRun
from ibdiag.bench.results.provenance import ImportInfo, Provenance
from ibdiag.collectives import op_in_text

TOOL = "NCCL"
FORMAT = "NCCL debug log, no result table"


def says_something(ctx: Context) -> bool:
    """True when NCCL's own lines are in the log (INFO, WARN, its version, a completion error)."""
    f = ctx.facts
    return bool(f.info_lines or ctx.warning_count or ctx.nccl_version or f.completion_count)


def is_nccl_log(run: BenchRun) -> bool:
    """A run read from NCCL's own lines, without a benchmark's table."""
    imported = run.provenance.imported
    return imported is not None and imported.tool == TOOL


def nccl_log_run(
    ctx: Context, source: str, *, op: str | None, file_name: str | None, skipped: int
) -> BenchRun:
    """The run NCCL's lines describe (``op``: canonical, from ``--op``)."""
    command = ctx.command_for(1 << 62)  # the last command in the log
    path = ctx.nccl_path(command)
    named = op_in_text(command.binary) if command is not None and command.binary else None
    op = named or op or (op_in_text(file_name) if file_name else None)
    hosts = path.hosts if path is not None else ()
    ranks = path.ranks if path is not None else None
    if ranks is None and command is not None:
        ranks = command.ranks
    nodes = max(len(hosts), path.nodes or 0) if path is not None else 0
    if command is not None and command.nodes:
        nodes = max(nodes, command.nodes)
    meta = CollectiveMeta(
        op=op,
        backend="nccl",
        world_size=ranks,
        nodes=nodes or None,
        hosts=hosts,
    )
    provenance = Provenance(
        imported=ImportInfo(tool=TOOL, source=source, format=FORMAT, first_line=1),
        nccl_version=ctx.nccl_version,
        nccl_warnings=tuple(f"line {n}: {t}" for n, t in ctx.warnings),
        nccl_warning_count=ctx.warning_count or None,
        command=command,
        nccl_path=path,
        skipped_lines=(skipped + len(ctx.commands)) or None,
    )
    return BenchRun(meta, (), provenance)
