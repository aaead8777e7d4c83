"""Views of a point-to-point run: perftest-like table, bandwidth-by-size chart, CSV rows, PNG.

Builders only (rich renderables, strings, rows); ``ibdiag/cli`` prints them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ibdiag.bench.results import P2PResult
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
)


def _share(r: P2PResult, ceiling_gbps: float | None) -> float | None:
    if ceiling_gbps is None or r.bw_gbps is None:
        return None
    return r.bw_gbps / ceiling_gbps


def csv_rows(results: Sequence[P2PResult], *, transport: str, mode: str, peer: str, ceiling_gbps: float | None) -> list[dict[str, Any]]:
    """One row per size (long form, loads straight into pandas)."""
    rows = []
    for r in results:
        lat = r.lat_us
        share = _share(r, ceiling_gbps)
        rows.append(
            {
                "transport": transport,
                "mode": mode,
                "peer": peer,
                "bytes": r.bytes,
                "iters": r.iters,
                "bw_gbs": _round(r.bw_gbs, 6),
                "bw_gbps": _round(r.bw_gbps, 6),
                "msg_rate_mpps": _round(r.msg_rate_mpps, 6),
                "line_rate_share": _round(share, 4),
                "lat_iters": r.lat_iters,
                "lat_min_us": None if lat is None else _round(lat.min_us, 3),
                "lat_p50_us": None if lat is None else _round(lat.p50_us, 3),
                "lat_p99_us": None if lat is None else _round(lat.p99_us, 3),
                "lat_p999_us": None if lat is None else _round(lat.p999_us, 3),
                "lat_max_us": None if lat is None else _round(lat.max_us, 3),
                "lat_avg_us": None if lat is None else _round(lat.avg_us, 3),
                "cpu_client_s_per_gb": _round(r.cpu_s_per_gb.get("client"), 6),
                "cpu_server_s_per_gb": _round(r.cpu_s_per_gb.get("server"), 6),
                "elapsed_s": _round(r.elapsed_s, 6),
            }
        )
    return rows


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(float(v), digits)


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def results_table(results: Sequence[P2PResult], *, ceiling_gbps: float | None, title: str) -> Any:
    """perftest's columns in one table: size, iterations, BW (GB/s, Gb/s), MsgRate, latency percentiles, CPU/GB."""
    from rich.table import Table

    has_bw = any(r.bw_gbs is not None for r in results)
    has_lat = any(r.lat_us is not None for r in results)
    table = Table(title=title, title_justify="left")
    table.add_column("size", justify="right", no_wrap=True)
    if has_bw:
        table.add_column("iters", justify="right")
        table.add_column("BW GB/s", justify="right")
        table.add_column("BW Gb/s", justify="right")
        if ceiling_gbps is not None:
            table.add_column("of line", justify="right")
        table.add_column("Mmsg/s", justify="right")
    if has_lat:
        if has_bw:
            table.add_column("lat iters", justify="right")
        else:
            table.add_column("iters", justify="right")
        for name in ("min", "p50", "p99", "p99.9", "max"):
            table.add_column(f"{name} µs", justify="right")
    if has_bw:
        table.add_column("CPU s/GB client", justify="right")
        table.add_column("server", justify="right")
    for r in results:
        row: list[str] = [format_bytes(r.bytes)]
        if has_bw:
            share = _share(r, ceiling_gbps)
            row += [str(r.iters) if r.bw_gbs is not None else "-", _f(r.bw_gbs, ".3f"), _f(r.bw_gbps, ".2f")]
            if ceiling_gbps is not None:
                row.append("-" if share is None else f"{share:.0%}")
            row.append(_f(r.msg_rate_mpps, ".4f"))
        if has_lat:
            lat = r.lat_us
            row.append("-" if r.lat_iters is None else str(r.lat_iters))
            if lat is None:
                row += ["-"] * 5
            else:
                row += [f"{lat.min_us:.2f}", f"{lat.p50_us:.2f}", f"{lat.p99_us:.2f}", f"{lat.p999_us:.2f}", f"{lat.max_us:.2f}"]
        if has_bw:
            row += [_f(r.cpu_s_per_gb.get("client"), ".3f"), _f(r.cpu_s_per_gb.get("server"), ".3f")]
        table.add_row(*row)
    return table


def bandwidth_chart(results: Sequence[P2PResult], *, ceiling_gbps: float | None) -> str | None:
    """Bandwidth by size as terminal bars (Gb/s), with the line rate marked; None without bandwidth."""
    from ibdiag.report.chart import hbar_chart

    rows = [(format_bytes(r.bytes), r.bw_gbps) for r in results if r.bw_gbs is not None]
    if not rows:
        return None
    return hbar_chart(rows, unit="Gb/s", marker=ceiling_gbps, marker_label="line rate" if ceiling_gbps is not None else "")


def png_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_png(results: Sequence[P2PResult], path: Path, *, ceiling_gbps: float | None, title: str) -> None:
    """Bandwidth (Gb/s) by message size on a log2 axis, line rate dashed; needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [(r.bytes, r.bw_gbps) for r in results if r.bw_gbps is not None]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label="measured")
        if ceiling_gbps is not None:
            ax.axhline(ceiling_gbps, linestyle="--", color="grey", label=f"line rate {ceiling_gbps:g} Gb/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks([p[0] for p in pts])
        ax.set_xticklabels([format_bytes(p[0]) for p in pts], rotation=45, ha="right")
        ax.set_xlabel("message size")
        ax.set_ylabel("bandwidth (Gb/s)")
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
