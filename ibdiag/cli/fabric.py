"""``ibdiag fabric``: the InfiniBand subnet itself — subnet manager, links, switch-side counters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    StrictOption,
    TextfileOption,
    emit,
    env,
    handle_errors,
    read_config,
    run_meta,
    table_width,
)
from ibdiag.infile import read_text_file

MAX_INTERVAL_S = 86400.0

FromOption = Annotated[
    Path | None,
    typer.Option(
        "--from",
        metavar="DUMP",
        help="Judge a saved fabric (a --save directory or .tar.gz, or a file of ibnetdiscover output) instead of the live one.",
    ),
]
SaveOption = Annotated[
    Path | None,
    typer.Option(
        "--save",
        metavar="DIR|FILE.tar.gz",
        help="Also save what the tools printed, for --from and --since later.",
    ),
]
SinceOption = Annotated[
    Path | None,
    typer.Option(
        "--since",
        metavar="DUMP",
        help="Judge against an earlier --save of this fabric: links lost since, counter deltas.",
    ),
]
IntervalOption = Annotated[
    float | None,
    typer.Option(
        "--interval",
        "-i",
        metavar="SECONDS",
        help="Read the counters twice, SECONDS apart: error deltas and backpressure as a share of time.",
    ),
]
CaOption = Annotated[
    str | None,
    typer.Option(
        "--ca", "-C", metavar="CA", help="This node's adapter the tools use (as ibnetdiscover -C)."
    ),
]
PortOption = Annotated[
    int | None, typer.Option("--port", "-P", metavar="PORT", help="Its port (as ibnetdiscover -P).")
]
TopoOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--topo",
        metavar="TOPO.json",
        help="`ibdiag topo -o json` of a node (repeat): names host ports by node, NIC index and nearest GPUs.",
    ),
]
ExpectOption = Annotated[
    Path | None,
    typer.Option(
        "--expect",
        metavar="PLAN",
        help="Diff the cabling against a plan: CSV (node,adapter,switch,port / switch,port,switch,port), TOML, or a saved known-good fabric.",
    ),
]
SlurmOption = Annotated[
    Path | None,
    typer.Option(
        "--slurm-topology",
        metavar="FILE",
        help="Also write topology.conf for Slurm's topology/tree plugin (host names from node descriptions or --topo).",
    ),
]
HostsOption = Annotated[
    Path | None,
    typer.Option(
        "--hosts",
        metavar="FILE",
        help="With --slurm-topology: Slurm's node names, one `<host or adapter GUID> <node name>` a line.",
    ),
]
RoutesOption = Annotated[
    bool,
    typer.Option(
        "--routes",
        help="Also read each switch's forwarding table (ibroute; saved by --save): `ibdiag report --fabric` then names the exact ISL of each pair.",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="Time limit of each infiniband-diags tool (killed past it; the fabric is then partial).",
    ),
]


@app.command("fabric")
@handle_errors
def fabric_command(
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    source: FromOption = None,
    save: SaveOption = None,
    since: SinceOption = None,
    interval: IntervalOption = None,
    ca: CaOption = None,
    port: PortOption = None,
    topo: TopoOption = None,
    expect: ExpectOption = None,
    slurm_topology: SlurmOption = None,
    hosts_map: HostsOption = None,
    timeout: TimeoutOption = 60.0,
    routes: RoutesOption = False,
    textfile: TextfileOption = None,  # written by the boundary (cli/errors.py) from the report's metrics
    debug: DebugOption = False,
) -> int:
    """The InfiniBand subnet (like ibnetdiscover + ibqueryerrors + sminfo, judged): SM, links, switch-side counters."""
    from ibdiag.counters.config import CountersConfig
    from ibdiag.errors import UsageError
    from ibdiag.fabric import dump
    from ibdiag.fabric.collect import Collector, Limits
    from ibdiag.fabric.config import FabricConfig
    from ibdiag.fabric.hosts import HostEnd, read_topo
    from ibdiag.outfile import check_output_path

    if interval is not None and not 0 < interval <= MAX_INTERVAL_S:
        raise UsageError(
            f"--interval {interval:g} is outside (0, {MAX_INTERVAL_S:g}] seconds",
            hint="e.g. --interval 10",
        )
    if interval is not None and source is not None:
        raise UsageError(
            "--interval reads the live fabric twice; it cannot judge a saved one (--from)",
            hint="use --since EARLIER with --from LATER",
        )
    if routes and source is not None:
        raise UsageError(
            "--routes reads the live fabric's forwarding tables; a saved one (--from) has them when it was saved with --routes",
            hint="drop --routes, or run `ibdiag fabric --routes --save DUMP` on the live fabric",
        )
    if not 0 < timeout <= 3600:
        raise UsageError(
            f"--timeout {timeout:g} is outside (0, 3600] seconds", hint="e.g. --timeout 60"
        )
    if port is not None and not 0 < port < 255:
        raise UsageError(f"--port {port} is not a port number", hint="1 for a single-port adapter")
    if save is not None and dump.is_archive(save):
        check_output_path(save, "--save")
    cfg_file = read_config(config)
    ccfg = cfg_file.section("counters", CountersConfig)
    fcfg = cfg_file.section("fabric", FabricConfig)
    hosts: dict[str, HostEnd] = {}
    for f in topo or []:
        hosts.update(read_topo(f))
    # lazy: --expect's reader is needed only with the flag
    from ibdiag.fabric.plan import load_plan

    plan = load_plan(expect, hosts) if expect is not None else None
    if hosts_map is not None and slurm_topology is None:
        raise UsageError(
            "--hosts names Slurm's nodes in --slurm-topology's file",
            hint="add --slurm-topology FILE",
        )
    rename = _read_hosts_map(hosts_map) if hosts_map is not None else None
    if slurm_topology is not None:
        check_output_path(slurm_topology, "--slurm-topology")
    if source is not None:
        cap = dump.load(source)
    else:
        lim = Limits(timeout, timeout, min(timeout, 10.0), min(timeout, 10.0))
        cap = _collect_while_loading(
            Collector(
                env().environ, ca=ca, port=port, limits=lim, early=_parse_early, routes=routes
            ),
            interval,
            fmt,
        )
    if save is not None:
        dump.save(cap, save)
    from ibdiag.fabric.build import build_fabric, origin
    from ibdiag.fabric.judge import judge

    fab = build_fabric(cap)
    earlier = reference = None
    mode = "interval"
    if interval is not None:
        earlier, fab = fab, build_fabric(cap, counters_run="ibqueryerrors-1")
    elif since is not None:
        reference = earlier = build_fabric(dump.load(since))
        mode = "since"
    judged = judge(
        fab,
        hosts=hosts,
        cfg=ccfg,
        fcfg=fcfg,
        origin=origin(cap),
        earlier=earlier,
        reference=reference,
        mode=mode,
        plan=plan,
    )
    if slurm_topology is not None:
        _write_slurm(judged, slurm_topology, rename)
    return _output(judged, fmt, strict)


def _collect_while_loading(collector: Any, interval: float | None, fmt: OutputFormat) -> Any:
    """The tools' run (0.3-0.5 s on a 4096-port fabric, mostly waiting on the subnet's answers) and,
    meanwhile, loading what judges and writes the fabric (about 0.1 s of imports on a small VM)."""
    import importlib
    from concurrent.futures import ThreadPoolExecutor

    from ibdiag.fabric.collect import collect

    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(collect, collector, interval_s=interval)
        for module in (
            "ibdiag.fabric.build",
            "ibdiag.fabric.judge",
            "ibdiag.fabric.views.json_data",
            *_VIEW_MODULES.get(fmt, ()),
        ):
            importlib.import_module(module)
        return running.result()


def _parse_early(run: Any) -> None:
    """ibnetdiscover's and iblinkinfo's outputs parsed while the other tools run (the parsers keep
    their last answers for the build)."""
    from ibdiag.fabric.linkinfo import parse_linkinfo
    from ibdiag.fabric.netdiscover import parse_netdiscover

    if run.rc == 0 and run.name == "ibnetdiscover":
        parse_netdiscover(run.stdout)
    elif run.rc == 0 and run.name == "iblinkinfo":
        parse_linkinfo(run.stdout)


_VIEW_MODULES = {
    OutputFormat.json: ("ibdiag.output.jsonout",),
    OutputFormat.table: ("ibdiag.fabric.views.table", "ibdiag.output.table"),
    OutputFormat.csv: ("ibdiag.fabric.views.csv_rows", "ibdiag.output.csvout"),
    OutputFormat.prom: ("ibdiag.fabric.views.prom_metrics", "ibdiag.output.prom"),
}


def _read_hosts_map(path: Path) -> dict[str, str]:
    from ibdiag.fabric.slurm import MAP_HINT, MAX_MAP_BYTES, parse_hosts_map
    from ibdiag.text import safe_value

    where = f"--hosts {safe_value(str(path))}"
    text = read_text_file(path, MAX_MAP_BYTES, where, MAP_HINT, utf8_only=False)
    return parse_hosts_map(text, where)


def _write_slurm(judged: Any, path: Path, rename: dict[str, str] | None) -> None:
    from ibdiag.fabric.slurm import topology_conf
    from ibdiag.outfile import atomic_output, check_output_path

    text = topology_conf(judged.fabric, judged.names, judged.shape, rename)
    check_output_path(path, "--slurm-topology")
    with atomic_output(path, "--slurm-topology") as fh:
        fh.write(text.encode())


def _output(judged: Any, fmt: OutputFormat, strict: bool) -> int:
    from ibdiag.fabric.views import json_data
    from ibdiag.findings.model import Report

    report = Report("fabric", json_data.fabric_data(judged), judged.findings)

    def table() -> list[Any]:
        from ibdiag.fabric.views import table as view
        from ibdiag.output.table import findings_block

        return [
            view.head(judged),
            *findings_block(report, strict=strict, width=table_width()),
            *view.items(judged),
        ]

    return emit(
        report,
        fmt,
        run_meta(),
        strict=strict,
        table=table,
        csv=lambda: _csv(judged),
        prom=lambda: _prom(judged),
    )


def _csv(judged: Any) -> tuple[Any, Any]:
    from ibdiag.fabric.views import csv_rows

    return csv_rows.CSV_HEADER, csv_rows.csv_rows(judged)


def _prom(judged: Any) -> list[Any]:
    from ibdiag.fabric.views import prom_metrics

    return prom_metrics.prom_metrics(judged)
