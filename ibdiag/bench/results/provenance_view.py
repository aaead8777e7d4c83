"""What an imported run's log said around its table, as the summary lines above the table.

A pure function of the run (:class:`~ibdiag.bench.results.provenance.Provenance`, and the header and cycle
fields of its kind's log part); the collective and point-to-point views put these lines under their
``# imported from ...`` line. Text from the log passes through :func:`ibdiag.text.safe_excerpt`.
"""

from __future__ import annotations

from typing import Any

from ibdiag.bench.results.model import BenchRun
from ibdiag.bench.results.provenance import NcclPath
from ibdiag.text import safe_excerpt


def _yes_no(v: bool | None, yes: str, no: str | None) -> str | None:
    return None if v is None else (yes if v else no)


def _path_extra(path: NcclPath) -> list[str]:
    """The GID in use and the network's completion errors, one line each."""
    out: list[str] = []
    if path.gid_index is not None or path.gids:
        index = f"GID index {path.gid_index}" if path.gid_index is not None else "GIDs"
        gids = ", ".join(safe_excerpt(g, 60) for g in path.gids[:4])
        src = f" (from {safe_excerpt(path.gid_source, 80)})" if path.gid_source else ""
        out.append(f"# RoCE {index}{src}" + (f": {gids}" if gids else ""))
    if path.completion_errors:
        e = path.completion_errors[0]
        count = max(path.completion_error_count, len(path.completion_errors))
        out.append(
            f"# network errors: {count} completion error(s), first error {e.status} ({e.status_name})"
            + (f" vendor err {e.vendor_err}" if e.vendor_err is not None else "")
            + f", {safe_excerpt(e.where, 40)}"
            + (f" on {safe_excerpt(e.host, 60)}" if e.host else "")
        )
    return out


def provenance_lines(run: BenchRun) -> list[str]:
    """``# command: ...``, ``# NCCL 2.27.3: network IB (mlx5_0:1/IB ...), GPUDirect RDMA on, ...``,
    a cut header, cycles, skipped lines: the important facts first, one line each."""
    prov = run.provenance
    out: list[str] = []
    cmd = prov.command
    if cmd is not None:
        out.append(f"# command: {safe_excerpt(cmd.text, 200)}")
        where = [
            f"{cmd.ranks} ranks" if cmd.ranks else None,
            f"{cmd.nodes} nodes" if cmd.nodes else None,
            f"{cmd.tasks_per_node} per node" if cmd.tasks_per_node else None,
        ]
        env = [f"{k}={safe_excerpt(v, 60)}" for k, v in list(cmd.env.items())[:6]]
        bits = [b for b in where if b] + env
        if bits:
            out.append(f"# launched by {cmd.launcher or 'the shell'}: " + ", ".join(bits))
    path = prov.nccl_path
    if path is not None:
        head = f"# NCCL {safe_excerpt(prov.nccl_version, 40)}" if prov.nccl_version else "# NCCL"
        net = f"network {path.transport or 'not named'}"
        if path.devices:
            net += f" ({', '.join(safe_excerpt(d, 40) for d in path.devices[:4])}{' ...' if len(path.devices) > 4 else ''})"
        facts = [
            net,
            f"plugin {safe_excerpt(path.net_plugin, 40)}" if path.net_plugin else None,
            _yes_no(path.gdr, "GPUDirect RDMA on", "GPUDirect RDMA off"),
            "SHARP" if path.sharp else None,
            _yes_no(path.collnet, "CollNet on", None) if path.collnet else None,
            _yes_no(path.nvls, "NVLS on", None) if path.nvls else None,
            "/".join(path.algorithms) if path.algorithms else None,
            f"{path.channels} channels" if path.channels is not None else None,
        ]
        out.append(f"{head}: " + ", ".join(f for f in facts if f))
        told = [
            f"network from {safe_excerpt(path.transport_source, 100)}"
            if path.transport_source
            else None,
            f"GPUDirect from {safe_excerpt(path.gdr_source, 100)}" if path.gdr_source else None,
        ]
        if any(told):
            out.append("# told by: " + "; ".join(t for t in told if t))
        out += _path_extra(path)
    elif prov.nccl_version:
        out.append(
            f"# NCCL {safe_excerpt(prov.nccl_version, 40)} (no NCCL INFO lines: run with NCCL_DEBUG=INFO to see the path)"
        )
    if prov.failure:
        out.append(f"# the run failed: {safe_excerpt(prov.failure, 200)}")
    log: Any = getattr(run.meta, "nccl_tests", None) or getattr(run.meta, "perftest", None)
    if log is not None and getattr(log, "header", None):
        out.append(f"# header incomplete ({log.header}): columns told from the rows")
    if log is not None and getattr(log, "cycles", None):
        out.append(
            f"# {log.cycles} cycles (-N): rows are the first cycle's; every cycle's spread is in cycle_stats (-o json)"
        )
    if prov.skipped_lines:
        nccl_only = prov.imported is not None and prov.imported.tool == "NCCL"
        out.append(
            f"# {prov.skipped_lines} other line(s) skipped (the job's own output, prompts, launcher output)"
            if nccl_only
            else f"# {prov.skipped_lines} line(s) around the table skipped (prompts, launcher output, other text)"
        )
    return out
