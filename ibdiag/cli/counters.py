"""``ibdiag counters``: is any RDMA port erroring, flapping or backpressured — now, over an interval, or across a job?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ibdiag.cli.app import app
from ibdiag.cli.common import (
    ConfigOption,
    DebugOption,
    ExpectRateOption,
    FormatOption,
    OutputFormat,
    RootOption,
    StrictOption,
    TextfileOption,
    console,
    emit,
    env,
    exit_status,
    handle_errors,
    open_root,
    read_config,
    record,
    run_meta,
    table_width,
    warn_refused,
)
from ibdiag.cli.counters_options import (
    CountOption,
    DeviceOption,
    FarEndOption,
    IntervalOption,
    SinceOption,
    WatchOption,
)
from ibdiag.cli.history import (
    HistoryOption,
    HistorySetup,
    KernelLogOption,
    history_setup,
    with_history,
)

#: Shortest --interval: mlx5 caches hw_counters for ``lifespan`` ms (10-12 ms by default), and
#: every counters/ read is a MAD to the adapter's firmware on a live node.
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 86400.0
MAX_COUNT = 1_000_000


def _progress(text: str, *, end: str = "\n") -> None:
    """A status line for people on stderr; nothing when stderr is not a terminal (scripts, CI logs)."""
    e = env()
    if e.stderr_isatty:
        e.stderr.write(f"\r\x1b[Kibdiag: {text}{end}")
        e.stderr.flush()


def _validate(
    fmt: OutputFormat, interval: float | None, count: int | None, watch: bool, since: Path | None
) -> None:
    from ibdiag.errors import UsageError

    if interval is not None and not (MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S):
        raise UsageError(
            f"--interval {interval:g} is out of range",
            hint=f"give seconds between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g}: below {MIN_INTERVAL_S:g} s the driver's counter cache (hw_counters/lifespan) dominates",
        )
    if count is not None:
        if count < 1 or count > MAX_COUNT:
            raise UsageError(
                f"--count {count} is out of range", hint=f"give 1 to {MAX_COUNT} samples"
            )
        if interval is None and not watch:
            raise UsageError(
                "--count needs --interval (or --watch)",
                hint="e.g. ibdiag counters --interval 1 --count 60 -o csv",
            )
    if since is not None and (interval is not None or watch or count is not None):
        raise UsageError(
            "--since cannot be combined with --interval, --count or --watch",
            hint="--since compares a saved reading with one reading now",
        )
    if watch:
        if fmt is not OutputFormat.table:
            raise UsageError(
                f"--watch draws a live table; it cannot write {fmt.value}",
                hint="for machines use --interval S --count N -o csv (or json)",
            )
        if not env().stdout_isatty:
            raise UsageError(
                "--watch needs a terminal on stdout",
                hint="for a log use --interval S --count N -o csv",
            )


@app.command("counters")
@handle_errors
def counters_command(
    root: RootOption = Path("/"),
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    device: DeviceOption = None,
    interval: IntervalOption = None,
    count: CountOption = None,
    watch: WatchOption = False,
    since: SinceOption = None,
    expect_rate: ExpectRateOption = None,
    far_end: FarEndOption = False,
    history: HistoryOption = None,
    kernel_log: KernelLogOption = None,
    textfile: TextfileOption = None,  # written by the boundary (cli/errors.py) from the report's metrics
    debug: DebugOption = False,
) -> int:
    """Port error, backpressure and throughput counters (like perfquery -x): snapshot, --interval, --watch, --since."""
    from ibdiag.counters.checks import Judging
    from ibdiag.counters.read import discover_layout, parse_device_filter
    from ibdiag.errors import CannotRunError, UsageError
    from ibdiag.node.sysfs import SysfsRoot

    _validate(fmt, interval, count, watch, since)
    if far_end and (watch or since is not None or interval is not None):
        raise UsageError(
            "--far-end reads the far ends once, with a snapshot",
            hint="for rates of switch ports, fabric-wide: ibdiag fabric --interval 10",
        )
    if watch and textfile is not None:
        raise UsageError(
            "--watch draws a live table; it cannot write --textfile",
            hint="for node_exporter run ibdiag counters --textfile FILE.prom from cron or a timer",
        )
    cfg_file = read_config(config)
    judge = Judging.from_config(cfg_file).with_expected_rate(expect_rate)
    hist = history_setup(history, cfg_file, watch=watch, kernel_log=kernel_log, root=root)
    patterns = parse_device_filter(device or [])
    with open_root(root) as directory:
        sysfs = SysfsRoot(directory, skip_adapters=judge.ports.skip).check()
        meta = run_meta(directory)
        layout = discover_layout(sysfs, patterns)
        warn_refused(sysfs)
        if not any(item.port is not None for item in layout):
            raise CannotRunError(
                "no RDMA port to read counters from (/sys/class/infiniband is empty or absent)",
                hint="this node has no RDMA adapter, or its driver is not loaded: check `lsmod | grep -E 'mlx5_ib|ib_core'` and `ibv_devices`",
            )
        if patterns:
            judge = judge.with_node_peers(sysfs)
        if watch:
            return _watch(sysfs, layout, judge, meta, interval or 1.0, count, strict)
        if since is not None:
            return _since(sysfs, layout, judge, meta, since, patterns, fmt, strict, hist)
        if interval is not None:
            return _interval(sysfs, layout, judge, meta, interval, count or 1, fmt, strict, hist)
        return _snapshot(sysfs, layout, judge, meta, fmt, strict, far_end, hist)


def _record(sysfs: Any, sample: Any, meta: Any) -> Any:
    """The history record of a counters reading."""
    from ibdiag.history.model import Record

    return Record(sample.taken_at_s, meta.host, "counters", sample.ports)


def _topo(sysfs: Any) -> Any:
    """The node's topology, for the kernel log's device names (discovered only when asked)."""

    def discover_topology() -> Any:
        from ibdiag.node.discover import discover

        return discover(sysfs)

    return discover_topology


def _report_items(
    report: Any, strict: bool, head: list[Any], table: Any, hint: str | None, legend: str
) -> list[Any]:
    from rich.text import Text

    from ibdiag.output.table import findings_block

    items = [*head, table, *findings_block(report, strict=strict, width=table_width())]
    if hint:
        items.append(Text(hint, style="dim"))
    if legend:
        items.append(Text(legend, style="dim"))
    return items


def _snapshot(
    sysfs: Any,
    layout: Any,
    judge: Any,
    meta: Any,
    fmt: OutputFormat,
    strict: bool,
    far_end: bool = False,
    hist: HistorySetup | None = None,
) -> int:
    from rich.text import Text

    from ibdiag.counters.read import read_sample
    from ibdiag.counters.views import csv_rows, json_data, prom_metrics
    from ibdiag.counters.views import table as view
    from ibdiag.findings.model import Report

    cfg = judge.cfg
    sample = read_sample(sysfs, layout, data_bits=cfg.data_bits)
    report = Report("counters", json_data.snapshot_data(sample, cfg), tuple(judge.snapshot(sample)))
    report, hist_metrics = with_history(
        report, hist, _record(sysfs, sample, meta), cfg, _topo(sysfs), sysfs
    )
    ends: list[Any] = []
    if far_end:
        from ibdiag.cli.far_end import far_ends, with_far_ends

        ends = far_ends(sysfs, sample)
        report = with_far_ends(report, ends, cfg)
    n_ports = sum(1 for p in sample.ports if p.port is not None)

    def table() -> list[Any]:
        head: list[Any] = [
            Text(
                f"{meta.host}: {n_ports} RDMA port(s); counts since the last counter reset (the time of that reset is unknown)."
            )
        ]
        hint = "for rates: ibdiag counters --interval 10 · across a job: ibdiag counters -o json > before.json; <job>; ibdiag counters --since before.json"
        if ends:
            from ibdiag.fabric.views.table import far_end_table

            head.append(far_end_table(ends))
        return _report_items(
            report,
            strict,
            head,
            view.snapshot_table(sample, report.findings, cfg, judge.ports, width=table_width()),
            hint,
            view.legend(sample, cfg, interval=False, width=table_width()),
        )

    return emit(
        report,
        fmt,
        meta,
        strict=strict,
        table=table,
        csv=lambda: (csv_rows.CSV_HEADER, csv_rows.csv_rows_snapshot(sample)),
        prom=lambda: prom_metrics.prom_metrics(sample, cfg) + hist_metrics,
    )


def _span_output(
    span: Any,
    judge: Any,
    meta: Any,
    fmt: OutputFormat,
    strict: bool,
    *,
    title: str,
    baseline: Any = None,
    hist: HistorySetup | None = None,
    sysfs: Any = None,
) -> int:
    from ibdiag.counters.views import csv_rows, json_data, prom_metrics
    from ibdiag.counters.views import table as view
    from ibdiag.findings.model import Report

    cfg = judge.cfg
    report = Report(
        "counters", json_data.span_data(span, cfg, baseline=baseline), tuple(judge.span(span))
    )
    report, hist_metrics = with_history(
        report, hist, _record(sysfs, span.last, meta), cfg, _topo(sysfs), sysfs
    )

    def table() -> list[Any]:
        from rich.text import Text

        t = view.interval_table(
            span.last,
            span.totals,
            span.totals,
            report.findings,
            cfg,
            judge.ports,
            title=title,
            width=table_width(),
        )
        head = [
            Text(
                f"{meta.host}: {sum(1 for p in span.last.ports if p.port is not None)} RDMA port(s)"
            )
        ]
        if span.missing:
            head.append(Text(f"gone since the baseline: {', '.join(span.missing)}", style="yellow"))
        return _report_items(
            report,
            strict,
            head,
            t,
            None,
            view.legend(span.last, cfg, interval=True, width=table_width(), span=span),
        )

    def csv() -> tuple[Any, Any]:
        rows = []
        for step in span.steps:
            rows.extend(csv_rows.csv_rows_step(step))
        return csv_rows.CSV_HEADER, rows

    return emit(
        report,
        fmt,
        meta,
        strict=strict,
        table=table,
        csv=csv,
        prom=lambda: prom_metrics.prom_metrics(span.last, cfg, span) + hist_metrics,
    )


def _since(
    sysfs: Any,
    layout: Any,
    judge: Any,
    meta: Any,
    since: Path,
    patterns: list[str],
    fmt: OutputFormat,
    strict: bool,
    hist: HistorySetup | None = None,
) -> int:
    import dataclasses

    from ibdiag.counters.baseline import check_comparable, load_baseline
    from ibdiag.counters.delta import build_span
    from ibdiag.counters.read import read_sample, selected
    from ibdiag.units import format_duration

    before, info = load_baseline(since, host=meta.host)
    now = read_sample(sysfs, layout, data_bits=judge.cfg.data_bits)
    if patterns:
        # --device narrows both sides: baseline ports outside it are not "gone".
        before = dataclasses.replace(
            before, ports=tuple(p for p in before.ports if selected(p.adapter, p.port, patterns))
        )
    check_comparable(since, before, now)
    span = build_span([before, now], mode="since")
    title = f"since {info.get('sampled_at') or info.get('generated_at')} ({format_duration(span.interval_s)}; baseline {since})"
    return _span_output(
        span, judge, meta, fmt, strict, title=title, baseline=info, hist=hist, sysfs=sysfs
    )


def _interval(
    sysfs: Any,
    layout: Any,
    judge: Any,
    meta: Any,
    interval: float,
    count: int,
    fmt: OutputFormat,
    strict: bool,
    hist: HistorySetup | None = None,
) -> int:
    from ibdiag.counters.sampler import Sampler, run_series
    from ibdiag.counters.views import csv_rows, prom_metrics
    from ibdiag.findings.model import Report
    from ibdiag.output.csvout import render_csv
    from ibdiag.units import format_duration

    sampler = Sampler(sysfs, layout, interval_s=interval, data_bits=judge.cfg.data_bits)
    first = sampler.first()
    n_ports = sum(1 for p in first.ports if p.port is not None)
    _progress(
        f"baseline read of {n_ports} port(s); {count} sample(s) every {interval:g} s — Ctrl-C stops"
    )
    stream_csv = fmt is OutputFormat.csv
    header_written = [False]

    def on_step(step: Any) -> None:
        _progress(f"sample {step.index}/{count} taken", end="" if step.index < count else "\n")
        if stream_csv:
            # Rows go out as each sample arrives: a long series survives Ctrl-C as valid CSV.
            text = render_csv(csv_rows.CSV_HEADER, csv_rows.csv_rows_step(step))
            if header_written[0]:
                text = text.split("\n", 1)[1]
            header_written[0] = True
            out = env().stdout
            out.write(text)
            out.flush()

    mode = "series" if count > 1 else "interval"
    span = run_series(
        sampler,
        count,
        mode=mode,
        keep_steps=fmt is OutputFormat.json or (count == 1 and not stream_csv),
        on_step=on_step,
        first=first,
    )
    if stream_csv:
        report = Report("counters", {}, tuple(judge.span(span)))
        report, hist_metrics = with_history(
            report, hist, _record(sysfs, span.last, meta), judge.cfg, _topo(sysfs), sysfs
        )
        record(
            report,
            strict=strict,
            prom=lambda: prom_metrics.prom_metrics(span.last, judge.cfg, span) + hist_metrics,
        )
        return exit_status(report, strict)
    if count > 1:
        title = f"{count} samples every {interval:g} s ({format_duration(span.interval_s)}): rates over the whole run, error increases in total"
    else:
        title = f"rates over {format_duration(span.interval_s)}"
    return _span_output(span, judge, meta, fmt, strict, title=title, hist=hist, sysfs=sysfs)


def _watch(
    sysfs: Any, layout: Any, judge: Any, meta: Any, interval: float, count: int | None, strict: bool
) -> int:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from ibdiag.counters.delta import Accumulator
    from ibdiag.counters.sampler import Sampler
    from ibdiag.counters.views.table import interval_table
    from ibdiag.findings.model import Report
    from ibdiag.output.table import findings_paragraphs, summary_line
    from ibdiag.units import format_duration

    sampler = Sampler(sysfs, layout, interval_s=interval, data_bits=judge.cfg.data_bits)
    acc = Accumulator(sampler.first(), mode="interval", keep_steps=False)
    status = 0
    con = console("stdout")
    # Live hides the cursor and redraws in place; leaving the block (Ctrl-C included) shows it again.
    with Live(
        Text(
            f"ibdiag counters --watch: first sample taken; rates in {interval:g} s (Ctrl-C to stop)"
        ),
        console=con,
        auto_refresh=False,
        transient=False,
    ) as live:
        i = 0
        while count is None or i < count:
            i += 1
            step = acc.add(sampler.next())
            span = acc.span()
            report = Report("counters", {}, tuple(judge.span(span)))
            title = f"{meta.host} · sample {i} · rates over the last {interval:g} s · error increases since start ({format_duration(span.interval_s)}) · Ctrl-C stops"
            items: list[Any] = [
                interval_table(
                    step.sample,
                    step.deltas,
                    span.totals,
                    report.findings,
                    judge.cfg,
                    judge.ports,
                    title=title,
                    width=con.width,
                )
            ]
            problems = report.problems()
            if problems:
                items.append(
                    findings_paragraphs(
                        problems,
                        limit=8,
                        hints=False,
                        more="(ibdiag counters --interval N for the full report with hints)",
                    )
                )
            items.append(summary_line(report, strict=strict))
            live.update(Group(*items), refresh=True)
            status = exit_status(report, strict)
    return status
