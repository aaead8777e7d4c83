"""The view of a point-to-point :class:`BenchRun`, measured (``bench p2p``) or imported (perftest logs).

One view per format: header lines and a perftest-like table with a bandwidth-by-size chart (table),
one row per size (csv), a PNG chart. Builders only (strings, rich renderables, rows); ``ibdiag/cli``
prints them. Columns appear when the run has their data: peak bandwidth (perftest), latency
percentiles, the mean latency when it is all there is (duration mode), CPU per GB (``bench p2p``).
"""

from __future__ import annotations

from typing import Any, BinaryIO

from ibdiag.bench.p2p.params import describe_request
from ibdiag.bench.results.model import BenchRun, P2PResult
from ibdiag.bench.results.p2p_meta import P2PMeta, P2PSetup
from ibdiag.bench.results.provenance_view import provenance_lines
from ibdiag.output.chart import hbar_chart
from ibdiag.units import format_bytes

CSV_HEADER = (
    "transport",
    "mode",
    "peer",
    "bytes",
    "iters",
    "bw_gbs",
    "bw_gbps",
    "msg_rate_mpps",
    "line_rate_share",
    "lat_iters",
    "lat_min_us",
    "lat_p50_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_max_us",
    "lat_avg_us",
    "cpu_client_s_per_gb",
    "cpu_server_s_per_gb",
    "elapsed_s",
    "test",
    "bw_peak_gbs",
)


def _meta(run: BenchRun) -> P2PMeta:
    assert isinstance(run.meta, P2PMeta)
    return run.meta


def _share(r: P2PResult, ceiling_gbps: float | None) -> float | None:
    if ceiling_gbps is None or r.bw_gbps is None:
        return None
    return r.bw_gbps / ceiling_gbps


def _lat_avg(r: P2PResult) -> float | None:
    return (
        r.lat_avg_us
        if r.lat_avg_us is not None
        else (None if r.lat_us is None else r.lat_us.avg_us)
    )


def csv_rows(run: BenchRun) -> list[dict[str, Any]]:
    """One row per size (long form, loads straight into pandas)."""
    m = _meta(run)
    ceiling = m.ceiling_gbps
    peer = m.measured.peer if m.measured is not None else None
    test = m.test
    rows = []
    for r in run.p2p_rows():
        lat = r.lat_us
        rows.append(
            {
                "transport": m.transport,
                "mode": m.mode,
                "peer": peer,
                "bytes": r.bytes,
                "iters": r.iters,
                "bw_gbs": _round(r.bw_gbs, 6),
                "bw_gbps": _round(r.bw_gbps, 6),
                "msg_rate_mpps": _round(r.msg_rate_mpps, 6),
                "line_rate_share": _round(_share(r, ceiling), 4),
                "lat_iters": r.lat_iters,
                "lat_min_us": None if lat is None else _round(lat.min_us, 3),
                "lat_p50_us": None if lat is None else _round(lat.p50_us, 3),
                "lat_p99_us": None if lat is None else _round(lat.p99_us, 3),
                "lat_p999_us": None if lat is None else _round(lat.p999_us, 3),
                "lat_max_us": None if lat is None else _round(lat.max_us, 3),
                "lat_avg_us": _round(_lat_avg(r), 3),
                "cpu_client_s_per_gb": _round(r.cpu_s_per_gb.get("client"), 6),
                "cpu_server_s_per_gb": _round(r.cpu_s_per_gb.get("server"), 6),
                "elapsed_s": _round(r.elapsed_s, 6),
                "test": test,
                "bw_peak_gbs": _round(r.bw_peak_gbs, 6),
            }
        )
    return rows


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(float(v), digits)


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def title(run: BenchRun) -> str:
    """``ibdiag bench p2p: tcp bw+lat, 2 sizes 4 KiB..1 MiB, 1 s per size to host:18516``, or the perftest test."""
    m = _meta(run)
    if m.measured is None:
        return f"perftest {m.perftest.test}" if m.perftest is not None else "point-to-point"
    s = m.measured
    sizes = [r.bytes for r in run.p2p_rows()]
    what = (
        describe_request(
            m.transport or "?",
            m.mode or "bw",
            sizes,
            streams=s.streams or 1,
            bidir=m.bidir,
            iters=s.iters,
            duration_s=s.duration_s,
        )
        if sizes
        else m.transport
    )
    engines = engines_of(s)
    tools = sorted({e for e in engines.values() if e != "ibdiag"})
    engine = ""
    if len(set(engines.values())) == 1 and tools:
        engine = f" with {tools[0]}"
        if (
            tools == ["perftest"]
            and s.iters is None
            and s.duration_s is None
            and isinstance(what, str)
        ):
            what = what.rsplit(", ", 1)[0] + ", perftest's default iterations per size"
    elif tools:
        engine = " with " + " and ".join(
            f"{e} for {'bandwidth' if k == 'bw' else 'latency'}" for k, e in engines.items()
        )
    return f"ibdiag bench p2p: {what} to {s.peer}{engine}"


def engines_of(s: P2PSetup) -> dict[str, str]:
    """Who measured each kind; files from before ``engines`` say one ``engine`` (or none: ibdiag)."""
    if s.engines is not None:
        return dict(s.engines)
    return {"all": s.engine or "ibdiag"}


def summary_lines(run: BenchRun) -> list[str]:
    """What was run: the server, devices and line rate (``bench p2p``), or the perftest log's banner."""
    m = _meta(run)
    if m.measured is not None:
        return _measured_lines(m.measured, run.p2p_rows())
    log = m.perftest
    imported = run.provenance.imported
    head = f"# imported from {imported.source if imported else '?'}: perftest {log.test if log else '?'}"
    if log is not None and log.title:
        head += f" ({log.title})"
    out = [head]
    if log is not None:
        bits = [
            f"{k} {getattr(log, k)}"
            for k in ("device", "link_layer", "mtu", "connection", "qps", "gid_index", "post_list")
            if getattr(log, k)
        ]
        if log.duration_mode:
            bits.append("duration mode (-D)")
        if bits:
            out.append("# " + " · ".join(bits))
    out += provenance_lines(run)
    if imported is not None and imported.position is not None and imported.position.count > 1:
        out.append(
            f"# run {imported.position.index} of {imported.position.count} found in the file"
        )
    if m.mode == "bw" and (log is None or log.bw_unit is not None):
        assumed = " (assumed)" if log is not None and log.bw_unit_assumed else ""
        out.append(
            f"# bandwidth read as {log.bw_unit if log else '?'}{assumed}, shown in GB/s (1e9 B/s) and Gb/s (1e9 bit/s)"
        )
        if log is not None and log.peak_measured is False:
            out.append(
                "# peak: not measured in this run (perftest printed 0.00, e.g. duration mode -D)"
            )
        if m.bidir:
            out.append("# bidirectional: both directions summed")
    elif log is not None and log.latency:
        out.append(f"# latency: {log.latency}, as perftest prints it")
    return out


def _measured_lines(s: P2PSetup, rows: tuple[P2PResult, ...]) -> list[str]:
    lines = [f"server {s.server_host} (ibdiag {s.server_version}) at {s.peer}"]
    if s.rdma is not None:
        c, v = s.rdma.client, s.rdma.server
        lines.append(
            f"client {c.device} port {c.ib_port} GID index {c.gid_index} ({c.gid_choice}); "
            f"server {v.device} port {v.ib_port} GID index {v.gid_index}; "
            f"path MTU {s.rdma.path_mtu or '-'}; tx depth {s.rdma.tx_depth}"
        )
    engines = engines_of(s)
    for p in s.tools:
        kinds = [k for k, e in engines.items() if e == p.tool and k in ("bw", "lat")]
        what = " and ".join("bandwidth" if k == "bw" else "latency" for k in kinds)
        lines.append(
            f"{what or 'everything'} measured by {p.tool} {p.version or '?'} (server {p.server_version or '?'}); {p.tool}'s own warm-up"
        )
        if p.commands:
            lines.append(
                f"client ran: {p.commands[0]}"
                + (f" (and {len(p.commands) - 1} more)" if len(p.commands) > 1 else "")
            )
    warm = "auto" if s.warmup is None else str(s.warmup)
    if not s.tools:
        lines.append(f"warm-up {warm} per size; latency is one-way (round trip / 2)")
    elif "ibdiag" in engines.values():
        lines.append(f"ibdiag's loops: warm-up {warm} per size")
    b = s.busy_poll
    if b is not None:
        so = ", ".join(
            f"{side} {'yes' if ok else 'no'}"
            for side, ok in b.so_busy_poll.items()
            if ok is not None
        )
        lines.append(
            f"latency: each side busy-polls up to {b.budget_us} µs before it blocks"
            + (f" (SO_BUSY_POLL: {so})" if so else "")
            if b.budget_us
            else "latency: each side blocks in recv (--busy-poll 0)"
        )
    if s.tools:
        lines.append("latency is one-way (round trip / 2)")
    if s.line_rate.gbps is not None:
        lines.append(f"line rate {s.line_rate.gbps:g} Gb/s ({s.line_rate.source})")
    return lines


def results_table(run: BenchRun) -> Any:
    """perftest's columns in one table: size, iterations, BW (GB/s, Gb/s), peak, MsgRate, latency percentiles, CPU/GB."""
    from rich.table import Table

    results = run.p2p_rows()
    ceiling = _meta(run).ceiling_gbps
    has_bw = any(r.bw_gbs is not None for r in results)
    has_peak = any(r.bw_peak_gbs is not None for r in results)
    has_pct = any(r.lat_us is not None for r in results)
    has_avg_only = any(r.lat_us is None and r.lat_avg_us is not None for r in results)
    has_cpu = has_bw and any(r.cpu_s_per_gb for r in results)
    table = Table(title=title(run), title_justify="left")
    table.add_column("size", justify="right", no_wrap=True)
    if has_bw:
        table.add_column("iters", justify="right")
        table.add_column("BW GB/s", justify="right")
        table.add_column("BW Gb/s", justify="right")
        if has_peak:
            table.add_column("peak GB/s", justify="right")
        if ceiling is not None:
            table.add_column("of line", justify="right")
        table.add_column("Mmsg/s", justify="right")
    if has_pct or has_avg_only:
        table.add_column("lat iters" if has_bw else "iters", justify="right")
        if has_pct:
            for name in ("min", "p50", "p99", "p99.9", "max"):
                table.add_column(f"{name} µs", justify="right")
        if has_avg_only:
            table.add_column("avg µs", justify="right")
    if has_cpu:
        table.add_column("CPU s/GB client", justify="right")
        table.add_column("server", justify="right")
    for r in results:
        row: list[str] = [format_bytes(r.bytes)]
        if has_bw:
            share = _share(r, ceiling)
            row += [
                str(r.iters) if r.bw_gbs is not None else "-",
                _f(r.bw_gbs, ".3f"),
                _f(r.bw_gbps, ".2f"),
            ]
            if has_peak:
                row.append(_f(r.bw_peak_gbs, ".3f"))
            if ceiling is not None:
                row.append("-" if share is None else f"{share:.0%}")
            row.append(_f(r.msg_rate_mpps, ".4f"))
        if has_pct or has_avg_only:
            lat_iters = r.lat_iters if has_bw or r.lat_iters is not None else r.iters
            row.append(
                "-"
                if lat_iters is None or (r.lat_us is None and r.lat_avg_us is None)
                else str(lat_iters)
            )
            if has_pct:
                lat = r.lat_us
                row += (
                    ["-"] * 5
                    if lat is None
                    else [
                        f"{lat.min_us:.2f}",
                        f"{lat.p50_us:.2f}",
                        f"{lat.p99_us:.2f}",
                        f"{lat.p999_us:.2f}",
                        f"{lat.max_us:.2f}",
                    ]
                )
            if has_avg_only:
                row.append(_f(r.lat_avg_us, ".2f"))
        if has_cpu:
            row += [
                _f(r.cpu_s_per_gb.get("client"), ".3f"),
                _f(r.cpu_s_per_gb.get("server"), ".3f"),
            ]
        table.add_row(*row)
    return table


def stream_lines(run: BenchRun) -> list[str]:
    """Each stream's bandwidth per size, where several streams were measured (``--streams N``)."""
    out = []
    for r in run.p2p_rows():
        if r.per_stream:
            each = " / ".join(_f(x.bw_gbs, ".3f") for x in r.per_stream)
            out.append(
                f"per stream at {format_bytes(r.bytes)} (GB/s, as each receiver saw it): {each}"
            )
    return out


def bandwidth_chart(run: BenchRun) -> str | None:
    """Bandwidth by size as terminal bars (Gb/s), with the line rate marked; None without bandwidth."""
    ceiling = _meta(run).ceiling_gbps
    rows = [(format_bytes(r.bytes), r.bw_gbps) for r in run.p2p_rows() if r.bw_gbs is not None]
    if not rows:
        return None
    return hbar_chart(
        rows, unit="Gb/s", marker=ceiling, marker_label="line rate" if ceiling is not None else ""
    )


def table_items(run: BenchRun) -> list[Any]:
    """Everything the table format prints before the findings."""
    from rich.text import Text

    items: list[Any] = [Text(line) for line in summary_lines(run)]
    if run.results:  # a run that failed before its first row has none
        items.append(results_table(run))
    items += [Text(line) for line in stream_lines(run)]
    chart = bandwidth_chart(run)
    if chart:
        items += [Text("bandwidth by message size (Gb/s)"), Text(chart)]
    m = _meta(run)
    if (
        m.measured is not None
        and m.measured.line_rate.gbps is None
        and any(r.bw_gbs is not None for r in run.p2p_rows())
    ):
        items.append(
            Text(
                f"line rate unknown ({m.measured.line_rate.source}): give --line-rate-gbps to judge the bandwidth",
                style="dim",
            )
        )
    return items


def png_available() -> bool:
    try:
        import matplotlib  # noqa: F401 - imported only to see whether it is installed
    except ImportError:
        return False
    return True


def write_png(run: BenchRun, out: BinaryIO | Any) -> None:
    """Bandwidth (Gb/s) by message size on a log2 axis, line rate dashed, to ``out`` (a path or a binary
    file); needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ceiling = _meta(run).ceiling_gbps
    pts = [(r.bytes, r.bw_gbps) for r in run.p2p_rows() if r.bw_gbps is not None]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label="measured")
        if ceiling is not None:
            ax.axhline(ceiling, linestyle="--", color="grey", label=f"line rate {ceiling:g} Gb/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks([p[0] for p in pts])
        ax.set_xticklabels([format_bytes(p[0]) for p in pts], rotation=45, ha="right")
        ax.set_xlabel("message size")
        ax.set_ylabel("bandwidth (Gb/s)")
        ax.set_ylim(bottom=0)
        ax.set_title(title(run))
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
