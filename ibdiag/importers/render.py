"""Views of an imported point-to-point run (perftest): summary, table, chart, CSV. Pure functions."""

from __future__ import annotations

from typing import Any

from ibdiag.bench.p2p.meta import P2PMeta, PerftestLog
from ibdiag.bench.results import BenchRun, P2PResult
from ibdiag.report.chart import hbar_chart
from ibdiag.units import format_bytes


def summary_lines(run: BenchRun) -> list[str]:
    m = run.meta
    assert isinstance(m, P2PMeta)
    log = m.perftest or PerftestLog(test="?")
    imported = run.provenance.imported
    head = f"# imported from {imported.source if imported else '?'}: perftest {log.test}"
    if log.title:
        head += f" ({log.title})"
    out = [head]
    bits = [f"{k} {getattr(log, k)}" for k in ("device", "link_layer", "mtu", "connection", "qps") if getattr(log, k)]
    if bits:
        out.append("# " + " · ".join(bits))
    if imported is not None and imported.position is not None and imported.position.count > 1:
        out.append(f"# run {imported.position.index} of {imported.position.count} found in the file")
    if m.mode == "bw":
        note = f"# bandwidth read as {log.bw_unit}" + (" (assumed)" if log.bw_unit_assumed else "") + ", shown in GB/s (1e9 B/s) and Gb/s (1e9 bit/s)"
        out.append(note)
        if log.peak_measured is False:
            out.append("# peak: not measured in this run (perftest printed 0.00, e.g. duration mode -D)")
        if m.bidir:
            out.append("# bidirectional: both directions summed")
    elif log.latency:
        out.append(f"# latency: {log.latency}, as perftest prints it")
    return out


def results_table(run: BenchRun) -> Any:
    from rich.table import Table

    rows = [r for r in run.results if isinstance(r, P2PResult)]
    if run.meta.mode == "bw":  # type: ignore[union-attr]
        t = Table(title="Bandwidth", title_justify="left")
        for col in ("bytes", "iterations", "peak GB/s", "average GB/s", "average Gb/s", "msg rate Mpps"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in rows:
            t.add_row(
                str(r.bytes),
                str(r.iters),
                "-" if r.bw_peak_gbs is None else f"{r.bw_peak_gbs:.4g}",
                "-" if r.bw_gbs is None else f"{r.bw_gbs:.4g}",
                "-" if r.bw_gbps is None else f"{r.bw_gbps:.4g}",
                "-" if r.msg_rate_mpps is None else f"{r.msg_rate_mpps:.6g}",
            )
        return t
    t = Table(title="Latency (µs)", title_justify="left")
    for col in ("bytes", "iterations", "min", "typical", "avg", "99%", "99.9%", "max"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        lat = r.lat_us
        if lat is None:
            avg = r.lat_avg_us
            t.add_row(str(r.bytes), str(r.iters), "-", "-", "-" if avg is None else f"{avg:.3f}", "-", "-", "-")
            continue
        t.add_row(
            str(r.bytes),
            str(r.iters),
            f"{lat.min_us:.3f}",
            f"{lat.p50_us:.3f}",
            "-" if lat.avg_us is None else f"{lat.avg_us:.3f}",
            f"{lat.p99_us:.3f}",
            f"{lat.p999_us:.3f}",
            f"{lat.max_us:.3f}",
        )
    return t


def chart(run: BenchRun) -> str:
    rows = [r for r in run.results if isinstance(r, P2PResult) and r.bw_gbs is not None]
    if not rows:
        return ""
    return "average bandwidth by size:\n" + hbar_chart([(format_bytes(r.bytes), r.bw_gbs) for r in rows], unit="GB/s", width=40)


CSV_HEADER = (
    "test",
    "bytes",
    "iters",
    "bw_gbs",
    "bw_gbps",
    "bw_peak_gbs",
    "msg_rate_mpps",
    "lat_min_us",
    "lat_p50_us",
    "lat_avg_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_max_us",
)


def csv_rows(run: BenchRun) -> list[dict[str, Any]]:
    out = []
    for r in run.results:
        if not isinstance(r, P2PResult):
            continue
        lat = r.lat_us
        out.append(
            {
                "test": run.meta.perftest.test if isinstance(run.meta, P2PMeta) and run.meta.perftest else None,
                "bytes": r.bytes,
                "iters": r.iters,
                "bw_gbs": r.bw_gbs,
                "bw_gbps": r.bw_gbps,
                "bw_peak_gbs": r.bw_peak_gbs,
                "msg_rate_mpps": r.msg_rate_mpps,
                "lat_min_us": None if lat is None else lat.min_us,
                "lat_p50_us": None if lat is None else lat.p50_us,
                "lat_avg_us": (None if lat is None else lat.avg_us) if r.lat_avg_us is None else r.lat_avg_us,
                "lat_p99_us": None if lat is None else lat.p99_us,
                "lat_p999_us": None if lat is None else lat.p999_us,
                "lat_max_us": None if lat is None else lat.max_us,
            }
        )
    return out
