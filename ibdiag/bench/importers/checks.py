"""Findings about an imported run: what the log itself says is wrong, and what does not add up.

Check ids:

* ``collective.wrong``       rows with wrong elements (#wrong > 0): fail (same check as a measured run)
* ``collective.busbw``       largest size below ``[collective] min_busbw_gbs``: fail
* ``import.out_of_bounds``   the footer counts failed validations: fail
* ``import.avg_mismatch``    the footer's Avg bus bandwidth is not the mean of the rows read: warn
  (rows missing, a truncated file, or rows of interleaved runs attributed to the wrong run)
* ``import.busbw_factor``    busbw/algbw does not match the op's factor for the ranks in the header: warn
* ``import.single_rank``     one rank: nothing crossed a network: warn
* ``import.incomplete``      no footer: the run was cut short: warn
* ``import.op_unknown``      the log does not say which collective: warn
* ``import.nccl_warnings``   NCCL WARN lines or ``# error:`` lines in the log: warn
* ``import.unit_assumed``    a perftest JSON whose bandwidth unit could not be told: warn
* ``import.socket_fallback`` the run crossed nodes over NCCL's socket transport (TCP), however the
  log says it (``NET/Socket`` lines, ``NCCL_IB_DISABLE=1``, ``NCCL_NET=Socket``, ``Failed to open
  libibverbs``, ``NET/IB : No device found``): fail; the finding names the line that told it
* ``import.run_failed``      the tool printed an error where its results should be (``Test NCCL
  failure``, perftest's ``Couldn't connect to``, ``Failed to modify QP to RTR``, completion with
  error): fail
* ``import.header_incomplete`` the paste lacks the table's header: the columns were told from the rows: warn
* ``import.network_error``   NCCL's IB/RoCE transport got a completion error (``NET/IB : Got completion
  … with error 12 … vendor err 129``, or the verbs provider's CQE dump): the run failed on the network: fail

A run without rows (NCCL's own log, a benchmark that died before its table) gets the findings of what
its log says; ``import.incomplete`` fails when a benchmark was run and printed no result row.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ibdiag.bench.importers.nccl_log import is_nccl_log
from ibdiag.bench.results.collective_checks import busbw_findings, wrong_findings
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.bench.results.collective_meta import CollectiveMeta, NcclTestsLog
from ibdiag.bench.results.model import BenchRun, CollectiveResult
from ibdiag.bench.results.p2p_meta import P2PMeta
from ibdiag.bench.results.provenance import CompletionError, NcclPath, Provenance
from ibdiag.collectives import find_op
from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry

#: Check ids of imported runs (the mechanism: :mod:`ibdiag.findings.registry`); ``collective.wrong`` and
#: ``collective.busbw`` are the collective package's.
CHECKS = CheckRegistry("import")
CHECKS.declare("import.out_of_bounds", "the footer counts failed validations: fail")
CHECKS.declare(
    "import.avg_mismatch", "the footer's Avg bus bandwidth is not the mean of the rows read: warn"
)
CHECKS.declare(
    "import.busbw_factor",
    "busbw/algbw does not match the op's factor for the ranks in the header: warn",
)
CHECKS.declare("import.single_rank", "one rank: nothing crossed a network: warn")
CHECKS.declare("import.incomplete", "no footer: the run was cut short: warn")
CHECKS.declare("import.op_unknown", "the log does not say which collective: warn")
CHECKS.declare("import.nccl_warnings", "NCCL WARN lines or '# error:' lines in the log: warn")
CHECKS.declare(
    "import.unit_assumed", "a perftest JSON whose bandwidth unit could not be told: warn"
)
CHECKS.declare(
    "import.header_incomplete",
    "the paste lacks the table's header (columns told from the rows): warn",
)


def run_nodes(run: BenchRun) -> int | None:
    """How many nodes the run spanned, from the rank lines, the command line or NCCL's init lines."""
    prov = run.provenance
    found = [
        run.meta.nodes if isinstance(run.meta, CollectiveMeta) else None,
        prov.command.nodes if prov.command is not None else None,
        prov.nccl_path.nodes if prov.nccl_path is not None else None,
    ]
    known = [n for n in found if n]
    return max(known) if known else None


@CHECKS.check(
    "import.socket_fallback",
    "the run crossed nodes over NCCL's socket transport (NET/Socket, NCCL_IB_DISABLE=1 ...): fail",
)
def socket_fallback(run: BenchRun) -> Finding | None:
    """A multi-node collective whose NCCL used TCP sockets (NET/Socket) instead of the IB/RoCE fabric,
    told by any signal (:mod:`~ibdiag.bench.importers.transport`)."""
    path = run.provenance.nccl_path
    nodes = run_nodes(run)
    if (
        path is None
        or path.transport is None
        or path.transport.lower() != "socket"
        or not nodes
        or nodes < 2
    ):
        return None
    devs = f" over {', '.join(path.devices[:4])}" if path.devices else ""
    told = f" (told by {path.transport_source})" if path.transport_source else ""
    return Finding(
        "import.socket_fallback",
        Severity.FAIL,
        "NET/Socket",
        f"NCCL used NET/Socket (TCP{devs}) between the {nodes} nodes{told}: the collective did not use the IB/RoCE fabric",
        value="Socket",
        limit="IB",
        hint="NCCL found no usable RDMA device: check NCCL_IB_HCA / NCCL_NET, that nvidia-peermem and the RDMA stack are loaded in the job's environment, and ibdiag topo on the nodes",
    )


#: What a completion status means for the fabric, and what to check (``ibv_wc_status``).
_STATUS_HINT = {
    12: "the peer's adapter never acknowledged: the two NICs cannot reach each other over IB/RoCE, or the "
    "link drops packets. On RoCE first the GID index: NCCL_IB_GID_INDEX must name the RoCE v2 IPv4 GID "
    "on every node (show_gids), then VLAN, routing and PFC; run ib_write_bw between the same NICs with "
    "the same GID index, and ibdiag counters on both ends",
    13: "the receiver had no buffer posted in time (RNR): a rank that stopped or fell behind; read the "
    "other ranks' logs",
    4: "the adapter refused a memory access of its own: with GPUDirect RDMA, nvidia-peermem (nv_peer_mem) "
    "and the PCIe path between GPU and NIC (ACS, IOMMU); rerun with NCCL_NET_GDR_LEVEL=LOC to confirm, "
    "then ibdiag topo",
    8: "the adapter refused a memory access of its own: GPUDirect RDMA registration (nvidia-peermem, ACS, "
    "IOMMU); ibdiag topo",
    10: "the peer refused the access: a memory region gone on the other side (a rank that died), or "
    "GPUDirect RDMA registration there",
}


def _first_cause(errors: tuple[CompletionError, ...]) -> CompletionError:
    """The first error that is not a consequence (5: work request flushed, after an earlier error)."""
    return next((e for e in errors if e.status != 5), errors[0])


def _gid_said(path: NcclPath) -> str:
    if path.gid_index is None and not path.gids:
        return ""
    gids = f" ({', '.join(path.gids[:3])})" if path.gids else ""
    index = f"GID index {path.gid_index}" if path.gid_index is not None else "GIDs"
    return f"; {index}{gids}"


@CHECKS.check(
    "import.network_error",
    "NCCL's IB/RoCE transport got a completion error (NET/IB : Got completion ... with error): fail",
)
def network_error(run: BenchRun) -> Finding | None:
    """The run failed on the network: NCCL's completion error lines, or the provider's CQE dump."""
    path = run.provenance.nccl_path
    if path is None or not path.completion_errors:
        return None
    e = _first_cause(path.completion_errors)
    count = max(path.completion_error_count, len(path.completion_errors))
    hosts = sorted({x.host for x in path.completion_errors if x.host})
    where = [f"{e.where}"]
    for label, value in (("on", e.host), ("from peer", e.peer), ("hca", e.hca), ("", e.direction)):
        if value:
            where.append(f"{label} {value}".strip())
    vendor = f", vendor err {e.vendor_err} (0x{e.vendor_err:x})" if e.vendor_err is not None else ""
    also = f"; on {len(hosts)} hosts ({', '.join(hosts[:4])})" if len(hosts) > 1 else ""
    return Finding(
        "import.network_error",
        Severity.FAIL,
        "NET/IB",
        f"the network failed the run: {count} completion error(s), first: error {e.status} ({e.status_name}){vendor}, "
        f"{' '.join(where)}{also}{_gid_said(path) if e.status == 12 else ''}",
        value=e.status,
        hint=_STATUS_HINT.get(
            e.status,
            "read the NCCL WARN lines around it; check the link (ibdiag counters) and the adapters (ibv_devinfo) on the hosts named",
        ),
    )


@CHECKS.check("import.run_failed", "the tool printed an error where its results should be: fail")
def run_failed(run: BenchRun) -> Finding | None:
    """The log's run ended in the tool's own error line (kept in ``provenance.failure``)."""
    failure = run.provenance.failure
    if failure is None:
        return None
    tool = run.provenance.imported.tool if run.provenance.imported is not None else "the tool"
    rows = len(run.results)
    return Finding(
        "import.run_failed",
        Severity.FAIL,
        tool,
        f"the {tool} run failed: {failure}"
        + (f" (after {rows} result rows)" if rows else " (no result rows)"),
        hint="the run did not finish: fix what the error names (NCCL_DEBUG=WARN, ibv_devinfo, the peer's address and port) and rerun",
    )


@CHECKS.check("import.multiple_runs", "a file holding several runs, one imported (--run): warn")
def multiple_runs(source: str, run_index: int, run_count: int, separation: str) -> Finding:
    """One of several runs in the file was imported (``--run``)."""
    return Finding(
        "import.multiple_runs",
        Severity.WARN,
        source,
        f"run {run_index} of {run_count} imported ({separation}); the others are not included",
        hint="a file with several runs usually means the benchmark was launched wrongly (e.g. nccl-tests without MPI under mpirun)",
    )


def _header_finding(subject: str, header: str) -> Finding:
    return Finding(
        "import.header_incomplete",
        Severity.WARN,
        subject,
        f"the table's header is not in the log ({header}): columns told from the rows' shape; ranks and parameters unknown",
        hint="paste the log from the command line or the first '#' line of the benchmark's output",
    )


def import_findings(run: BenchRun, cfg: CollectiveConfig | None = None) -> list[Finding]:
    cfg = cfg or CollectiveConfig()
    m = run.meta
    prov = run.provenance
    src = prov.imported.source if prov.imported is not None else "log"
    if isinstance(m, P2PMeta):
        return run_failed(run) + _perftest_findings(m, src)
    assert isinstance(m, CollectiveMeta)
    log = m.nccl_tests or NcclTestsLog()
    rows = run.collective_rows()
    op = m.op
    subject = str(op or "collective")
    out = wrong_findings(
        subject, rows, checked=bool(rows) and all(r.wrong is not None for r in rows)
    )
    out += run_failed(run)
    out += network_error(run)
    out += _out_of_bounds(subject, log)
    out += socket_fallback(run)
    if log.header:
        out.append(_header_finding(subject, log.header))
    out += _avg_mismatch(subject, m, log, rows)
    out += _busbw_factor(subject, op, m.world_size, rows)
    out += _no_table(run) if is_nccl_log(run) else _run_shape(subject, src, m, log, rows)
    out += _nccl_warnings(subject, prov)
    out += busbw_findings(subject, rows, cfg)
    return out


def _perftest_findings(m: P2PMeta, src: str) -> list[Finding]:
    out: list[Finding] = []
    if m.perftest is not None and m.perftest.header:
        out.append(_header_finding(src, m.perftest.header))
    if m.perftest is not None and m.perftest.bw_unit_assumed:
        out.append(
            Finding(
                "import.unit_assumed",
                Severity.WARN,
                src,
                "the perftest JSON does not say its bandwidth unit and MsgRate cannot tell it: MiB/s assumed",
                hint="if the run used --report_gbits, divide by 8.39 or rerun and import the text output",
            )
        )
    return out


def _out_of_bounds(subject: str, log: NcclTestsLog) -> list[Finding]:
    """``import.out_of_bounds``: the footer counts failed validations."""
    out: list[Finding] = []
    oob = log.out_of_bounds
    if oob is not None and oob > 0:
        out.append(
            Finding(
                "import.out_of_bounds",
                Severity.FAIL,
                subject,
                f"the log's footer counts {oob} failed validation{'s' if oob != 1 else ''} (Out of bounds values)",
                value=oob,
                limit=0,
                hint="data corrupted in flight or by a faulty GPU/NIC: rerun, then check ibdiag counters and the GPUs",
            )
        )
    return out


def _avg_mismatch(
    subject: str, m: CollectiveMeta, log: NcclTestsLog, rows: Sequence[CollectiveResult]
) -> list[Finding]:
    """``import.avg_mismatch``: the footer's average is not the rows' (every cycle's rows when known)."""
    out: list[Finding] = []
    avg, rep = m.avg_busbw_gbs, log.avg_busbw_gbs_reported
    if log.avg_busbw_gbs_all_cycles is not None:
        avg = log.avg_busbw_gbs_all_cycles  # the footer averages every cycle's rows
    if avg is not None and rep is not None and abs(avg - rep) > 0.006 + 1e-3 * abs(rep):
        out.append(
            Finding(
                "import.avg_mismatch",
                Severity.WARN,
                subject,
                f"the footer's Avg bus bandwidth is {rep:g} GB/s but the {len(rows)} rows read average {avg:.4g} GB/s",
                value=round(avg, 4),
                limit=rep,
                unit="GB/s",
                hint="rows are missing or belong to another run (interleaved output): check the file",
            )
        )
    return out


def _busbw_factor(
    subject: str, op: str | None, n: int | None, rows: Sequence[CollectiveResult]
) -> list[Finding]:
    """``import.busbw_factor``: busbw/algbw in most rows is not the op's factor for ``n`` ranks."""
    out: list[Finding] = []
    spec = None if op is None else find_op(op)
    if spec is not None and n is not None and n >= 1:
        f = spec.busbw_factor(n)
        judged = [r for r in rows if r.algbw_gbs >= 0.05]
        if judged:
            bad = [
                r
                for r in judged
                if abs(r.busbw_gbs - r.algbw_gbs * f) > 0.006 + 0.006 * f + 0.002 * r.busbw_gbs
            ]
            if len(bad) * 2 > len(judged):
                ratio = statistics.median(r.busbw_gbs / r.algbw_gbs for r in judged)
                out.append(
                    Finding(
                        "import.busbw_factor",
                        Severity.WARN,
                        subject,
                        f"busbw/algbw is {ratio:.3g} in {len(bad)} of {len(judged)} rows, but {op} over {n} ranks has factor {f:.3g}",
                        value=round(ratio, 4),
                        limit=round(f, 4),
                        hint="the op or the rank count is not what the header says (give --op, or check for interleaved runs)",
                    )
                )
    return out


def _run_shape(
    subject: str, src: str, m: CollectiveMeta, log: NcclTestsLog, rows: Sequence[CollectiveResult]
) -> list[Finding]:
    """``import.single_rank``, ``import.incomplete``, ``import.op_unknown``."""
    out: list[Finding] = []
    n, op = m.world_size, m.op
    if n == 1:
        out.append(
            Finding(
                "import.single_rank",
                Severity.WARN,
                subject,
                "the run has 1 rank: nothing crossed a network (all_reduce busbw is 0 by definition)",
                hint="under mpirun a binary built without MPI runs 1-rank jobs: rebuild nccl-tests with MPI=1",
            )
        )
    if m.nccl_tests is not None and not log.complete:
        out.append(
            Finding(
                "import.incomplete",
                Severity.WARN if rows else Severity.FAIL,
                subject,
                f"the run has no footer (Avg bus bandwidth): it was cut short after {len(rows)} rows"
                if rows
                else "the run printed no result row: it ended before measuring",
                hint="rerun to completion; a crash or a timeout ended it (the findings above say what the log shows)",
            )
        )
    if not op:
        cands = log.op_candidates
        out.append(
            Finding(
                "import.op_unknown",
                Severity.WARN,
                src,
                "the log does not say which collective it measured"
                + (f" (could be {' or '.join(cands)})" if cands else ""),
                hint="give --op (e.g. --op all_gather), or keep the binary's name in the file name",
            )
        )
    return out


def _no_table(run: BenchRun) -> list[Finding]:
    """``import.incomplete`` for NCCL's own log: only when its command ran a benchmark (a training
    job's log has no table to miss)."""
    cmd = run.provenance.command
    if cmd is None or cmd.binary is None:
        return []
    return [
        Finding(
            "import.incomplete",
            Severity.FAIL,
            cmd.binary,
            f"the log has the command ({cmd.binary}) and NCCL's lines, but no result table: the run ended before measuring",
            hint="rerun to completion; the findings above say what NCCL's lines show",
        )
    ]


def _nccl_warnings(subject: str, prov: Provenance) -> list[Finding]:
    """``import.nccl_warnings``: NCCL WARN or ``# error:`` lines in the log."""
    out: list[Finding] = []
    warns, errs = prov.nccl_warnings, prov.nccl_errors
    if warns or errs:
        count = (prov.nccl_warning_count or len(warns)) + len(errs)
        first = (errs or warns)[0]
        out.append(
            Finding(
                "import.nccl_warnings",
                Severity.WARN,
                subject,
                f"the log has {count} NCCL warning/error line{'s' if count != 1 else ''}, first: {str(first)[:200]}",
                value=count,
                hint="read them: a fallback transport (NET/Socket instead of IB) or a retry explains low busbw",
            )
        )
    return out
