"""Views of a collective :class:`BenchRun`: nccl-tests' table, busbw chart, per-rank spread, CSV, metrics.

Pure functions of the run (measured or imported); cli/ prints what they return. The table keeps
nccl-tests' columns and widths (``%12li  %12li  %8s  %6s  %6s`` then ``  %7s  %6s  %6s  %6s`` per half) so
people and scripts that read nccl-tests output read this too; a half torch.distributed cannot run
natively (all_reduce out of place) shows ``-``.
"""

from __future__ import annotations

import statistics
from typing import Any

from ibdiag.bench.results.collective_meta import CollectiveMeta, CollectiveSetup
from ibdiag.bench.results.model import BenchRun, CollectiveResult
from ibdiag.bench.results.provenance_view import provenance_lines
from ibdiag.collectives import find_op, placement
from ibdiag.output.chart import hbar_chart
from ibdiag.output.prom import Metric, PromSample
from ibdiag.units import format_bytes, format_seconds


def nccl_float(value: float, width: int) -> str:
    """A number in ``width`` columns with the precision nccl-tests gives it: 2 decimals while they fit,
    then 1, then none, then exponent form (``getFloatStr`` in nccl-tests' ``util.cu``)."""
    digits = 0
    v = 1
    while value >= v:
        digits += 1
        v *= 10
    if digits < width - 2:
        return f"{value:{width}.2f}"
    if digits < width - 1:
        return f"{value:{width}.1f}"
    if digits < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def _half(r: CollectiveResult | None) -> str:
    if r is None:
        return f"  {'-':>7}  {'-':>6}  {'-':>6}  {'-':>6}"
    if r.wrong is not None:
        wrong = f"{r.wrong:g}"
    elif r.max_error is not None:
        wrong = f"{r.max_error:.0e}"  # nccl-tests before 2022: the largest error, not a count
    else:
        wrong = "N/A"
    return f"  {nccl_float(r.time_us, 7)}  {nccl_float(r.algbw_gbs, 6)}  {nccl_float(r.busbw_gbs, 6)}  {wrong:>6}"


def grouped_rows(run: BenchRun) -> list[tuple[CollectiveResult, dict[bool, CollectiveResult]]]:
    """Rows of the table: one per size (and type/redop/root), out-of-place and in-place side by side."""
    order: list[tuple[Any, ...]] = []
    halves: dict[tuple[Any, ...], dict[bool, CollectiveResult]] = {}
    for r in run.collective_rows():
        key = (r.bytes, r.count, r.dtype, r.redop, r.root)
        if key not in halves:
            order.append(key)
            halves[key] = {}
        halves[key].setdefault(r.in_place, r)
    return [(next(iter(halves[k].values())), halves[k]) for k in order]


HEADER = (
    f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place",
    f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
    f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}",
)


def table_lines(run: BenchRun) -> list[str]:
    """nccl-tests' result block: header, one line per size, the two footer lines."""
    lines = ["#", *HEADER]
    for first, halves in grouped_rows(run):
        root = -1 if first.root is None else first.root
        redop = first.redop or "none"
        lines.append(
            f"{first.bytes:12d}  {first.count:12d}  {first.dtype:>8}  {redop:>6}  {root:6d}"
            + _half(halves.get(False))
            + _half(halves.get(True))
        )
    rows = run.collective_rows()
    bad_checks = sum(1 for r in rows if r.wrong)
    lines.append(
        f"# {'Out of bounds values':<20} : {bad_checks} {'FAILED' if bad_checks else 'OK'}"
    )
    avg = _meta(run).avg_busbw_gbs
    lines.append(
        f"# {'Avg bus bandwidth':<20} : {avg:.6g}"
        if avg is not None
        else f"# {'Avg bus bandwidth':<20} : n/a"
    )
    lines.append("#")
    return lines


def _meta(run: BenchRun) -> CollectiveMeta:
    assert isinstance(run.meta, CollectiveMeta)
    return run.meta


def _ranks_phrase(m: CollectiveMeta) -> str:
    n = m.world_size
    nodes = m.nodes or (len(m.hosts) if m.hosts else None)
    per = m.ranks_per_node
    if n is None:
        return "ranks unknown"
    s = f"{n} rank{'s' if n != 1 else ''}"
    if nodes:
        s += f" on {nodes} host{'s' if nodes != 1 else ''}"
    if per:
        s += f" ({per} per host)"
    return s


def summary_lines(run: BenchRun) -> list[str]:
    """What was run and how, in nccl-tests' comment style."""
    m = _meta(run)
    imported = run.provenance.imported
    out = []
    if imported is not None:
        what = f"# imported from {imported.source}: {imported.tool} {m.op or 'collective (op unknown)'}"
        if imported.tool == "NCCL":
            what = f"# imported from {imported.source}: NCCL's own log, no result table" + (
                f" (a {m.op} run)" if m.op else ""
            )
        elif imported.format:
            what += f" ({imported.format} format)"
        out.append(what)
        gpus = m.nccl_tests.gpus if m.nccl_tests is not None else ()
        out.append(f"# {_ranks_phrase(m)}" + (f" · GPUs: {', '.join(gpus)}" if gpus else ""))
        out += provenance_lines(run)
        if imported.position is not None and imported.position.count > 1:
            out.append(
                f"# run {imported.position.index} of {imported.position.count} found in the file (not averaged)"
            )
        params = m.nccl_tests.params if m.nccl_tests is not None else {}
        if params:
            out.append("# " + " ".join(f"{k} {v}" for k, v in params.items()))
        if any(r.max_error is not None for r in run.collective_rows()):
            out.append(
                "# #wrong shows the log's error column (largest absolute error, nccl-tests before 2022), not a count"
            )
        return out
    op = m.op or "?"
    setup = m.measured or CollectiveSetup()
    out.append(
        f"# ibdiag bench collective: {op} · backend {m.backend or '?'} · {m.dtype or '?'} · {_ranks_phrase(m)} · launcher {setup.launcher or '?'}"
    )
    mode = (
        "blocking (wait and barrier after each call)"
        if m.blocking
        else "non-blocking (calls back to back, then wait)"
    )
    out.append(
        f"# iters {setup.iters}, warm-up {setup.warmup}, {mode}, validation {'on' if setup.validation else 'off'}"
    )
    if setup.setup_s is not None:
        slow = setup.setup_slowest_rank
        out.append(
            f"# setup (rendezvous + first collective): {format_seconds(setup.setup_s)} on the slowest rank"
            + (f" ({slow})" if slow is not None else "")
            + f", {format_seconds(setup.setup_s_min)} on the fastest"
        )
    spec = find_op(op)
    if spec is not None and spec.placements == (True,):
        out.append(
            f"# out-of-place: not measured, torch.distributed's {op} works in place (nccl-tests' in-place columns)"
        )
    elif spec is not None and spec.placements == (False,):
        out.append(f"# in-place: not measured, torch.distributed's {op} needs separate buffers")
    if setup.settings:
        out.append("# settings: " + " ".join(f"{k}={v}" for k, v in setup.settings.items()))
    if setup.skipped_sizes:
        out.append(
            "# skipped (no element per rank): "
            + ", ".join(format_bytes(s) for s in setup.skipped_sizes)
        )
    if len(m.hosts) == 1 and (m.world_size or 0) > 1:
        out.append(f"# note: every rank on {m.hosts[0]}: the traffic did not cross the fabric")
    if m.world_size == 1:
        out.append(
            "# note: 1 rank: nothing crosses a link (all_reduce's busbw factor 2(n-1)/n is 0)"
        )
    return out


def busbw_chart(run: BenchRun) -> str:
    """busbw by size, the placement with more rows (in-place for all_reduce), as horizontal bars."""
    rows = run.collective_rows()
    if not rows:
        return ""
    inplace = [r for r in rows if r.in_place]
    outplace = [r for r in rows if not r.in_place]
    chosen, which = (
        (outplace, "out-of-place") if len(outplace) >= len(inplace) else (inplace, "in-place")
    )
    bars = [(format_bytes(r.bytes), r.busbw_gbs) for r in chosen]
    return f"busbw by size ({which}):\n" + hbar_chart(bars, unit="GB/s", width=40)


def spread_table(run: BenchRun) -> Any:
    """Per size: loop time and in-collective time over ranks (min/median/max) and the latest rank."""
    from rich.table import Table

    measured = _meta(run).measured
    spread = measured.spread if measured is not None else ()
    if not spread:
        return None
    t = Table(
        title="Per-rank spread (µs): loop time is equal in a collective; in-collective time is shorter on a rank the others wait for",
        title_justify="left",
    )
    for col in (
        "size",
        "placement",
        "time min",
        "median",
        "max",
        "in-coll min",
        "median",
        "max",
        "hosts' medians min..max",
        "latest rank",
        "others waited",
    ):
        t.add_column(col, justify="right" if col not in ("placement",) else "left", no_wrap=True)
    for s in spread:
        tm, cm, hm = s.time_us, s.coll_us, s.host_coll_us
        share = s.latest_share
        t.add_row(
            format_bytes(s.bytes),
            placement(s.in_place),
            f"{tm.min:.1f}",
            f"{tm.median:.1f}",
            f"{tm.max:.1f}",
            f"{cm.min:.1f}",
            f"{cm.median:.1f}",
            f"{cm.max:.1f}",
            f"{hm.min:.1f}..{hm.max:.1f}",
            "-" if s.latest_rank is None else str(s.latest_rank),
            "-" if share is None else f"{(share if abs(share) >= 0.005 else 0.0):.0%}",
        )
    return t


def per_rank_table(run: BenchRun, *, limit: int = 64) -> Any:
    """Ranks (up to ``limit``): host, device, setup, median share of a collective the others waited for it."""
    from rich.table import Table

    measured = _meta(run).measured
    per_rank = measured.per_rank if measured is not None else ()
    if not per_rank or len(per_rank) > limit:
        return None
    t = Table(title="Ranks", title_justify="left")
    for col in ("rank", "host", "local", "pid", "device", "setup", "others waited (median)"):
        t.add_column(
            col,
            justify="right"
            if col in ("rank", "local", "pid", "setup", "others waited (median)")
            else "left",
            no_wrap=True,
        )
    for pr in per_rank:
        med = statistics.median(pr.late_share) if pr.late_share else None
        t.add_row(
            str(pr.rank),
            pr.host,
            "" if pr.local_rank is None else str(pr.local_rank),
            "" if pr.pid is None else str(pr.pid),
            pr.device or "",
            format_seconds(pr.setup_s),
            "-" if med is None else f"{(med if abs(med) >= 0.005 else 0.0):.0%}",
        )
    return t


CSV_HEADER = (
    "op",
    "backend",
    "world_size",
    "bytes",
    "count",
    "type",
    "redop",
    "root",
    "in_place",
    "time_us",
    "algbw_gbs",
    "busbw_gbs",
    "wrong",
    "time_us_min",
    "time_us_max",
)


def csv_rows(run: BenchRun) -> list[dict[str, Any]]:
    m = _meta(run)
    return [
        {
            "op": m.op,
            "backend": m.backend,
            "world_size": m.world_size,
            "bytes": r.bytes,
            "count": r.count,
            "type": r.dtype,
            "redop": r.redop,
            "root": r.root,
            "in_place": r.in_place,
            "time_us": r.time_us,
            "algbw_gbs": r.algbw_gbs,
            "busbw_gbs": r.busbw_gbs,
            "wrong": r.wrong,
            "time_us_min": r.time_us_min,
            "time_us_max": r.time_us_max,
        }
        for r in run.collective_rows()
    ]


def prom_metrics(run: BenchRun) -> list[Metric]:
    m = _meta(run)
    base = {"op": m.op or "unknown", "backend": m.backend or "unknown"}
    rows = run.collective_rows()
    out = [
        Metric(
            "ibdiag_collective_busbw_bytes_per_second",
            "Bus bandwidth by message size, bytes per second (nccl-tests' busbw x 1e9).",
            "gauge",
            tuple(
                PromSample(
                    {
                        **base,
                        "bytes": str(r.bytes),
                        "placement": "in_place" if r.in_place else "out_of_place",
                    },
                    r.busbw_gbs * 1e9,
                )
                for r in rows
                if r.busbw_gbs is not None
            ),
        ),
        Metric(
            "ibdiag_collective_time_seconds",
            "Time per collective by message size, mean over ranks.",
            "gauge",
            tuple(
                PromSample(
                    {
                        **base,
                        "bytes": str(r.bytes),
                        "placement": "in_place" if r.in_place else "out_of_place",
                    },
                    r.time_us * 1e-6,
                )
                for r in rows
            ),
        ),
    ]
    if m.avg_busbw_gbs is not None:
        out.append(
            Metric(
                "ibdiag_collective_avg_busbw_bytes_per_second",
                "nccl-tests' Avg bus bandwidth: mean busbw over all rows, bytes per second.",
                "gauge",
                (PromSample(base, m.avg_busbw_gbs * 1e9),),
            )
        )
    if m.world_size is not None:
        out.append(
            Metric(
                "ibdiag_collective_world_size",
                "Ranks in the measured collective.",
                "gauge",
                (PromSample(base, m.world_size),),
            )
        )
    if m.measured is not None and m.measured.setup_s is not None:
        out.append(
            Metric(
                "ibdiag_collective_setup_seconds",
                "Process-group setup (rendezvous and first collective) on the slowest rank.",
                "gauge",
                (PromSample(base, m.measured.setup_s),),
            )
        )
    return out


def table_items(run: BenchRun) -> list[Any]:
    """Everything the table format prints before the findings: what ran, nccl-tests' block, chart, spread, ranks."""
    from rich.text import Text

    def text(lines: list[str]) -> list[Any]:
        return [Text(line, no_wrap=True, overflow="ignore") for line in lines]

    imported = run.provenance.imported
    no_table = not run.results and imported is not None and imported.tool == "NCCL"
    items = text(summary_lines(run) + ([] if no_table else table_lines(run)))
    chart = busbw_chart(run)
    if chart:
        items += [Text(""), *text(chart.splitlines())]
    for extra in (spread_table(run), per_rank_table(run)):
        if extra is not None:
            items.append(extra)
    return items
