"""``ibdiag fabric``: the InfiniBand subnet itself — subnet manager, links, switch-side counters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import env, handle_errors, read_config
from ibdiag.cli.emit import emit
from ibdiag.cli.main import keep_until_exit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    StrictOption,
    TextfileOption,
    TimeoutOption,
)
from ibdiag.fabric import views
from ibdiag.fabric.command import DEFAULT_TIMEOUT_S, FabricRequest, collector_paused, run

FromOption = Annotated[
    Path | None,
    typer.Option(
        "--from",
        metavar="DUMP",
        help="Judge a saved fabric (a --save directory or .tar.gz, or a file of ibnetdiscover output) instead of the live one.",
    ),
]
# Not the shared SaveOption: fabric's --save writes a dump of what the tools printed (a directory or
# .tar.gz that --from and --since read), not the JSON result the other commands' --save writes.
SaveDumpOption = Annotated[
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
NodeNameMapOption = Annotated[
    Path | None,
    typer.Option(
        "--node-name-map",
        metavar="FILE",
        help='Name nodes by GUID, as ibnetdiscover and opensm read a node-name map (0x<GUID> "name" a line; '
        "H-<GUID> name too): adapters left with their firmware's description, switches.",
    ),
]
RoutesOption = Annotated[
    bool,
    typer.Option(
        "--routes",
        help="Also read each switch's forwarding table (ibroute; saved by --save): `ibdiag report --fabric` then names the exact ISL of each pair.",
    ),
]
DataCountersOption = Annotated[
    bool | None,
    typer.Option(
        "--data-counters/--no-data-counters",
        help="Also read every switch port's data and packet counters (ibqueryerrors --counters --switch: "
        "one more query of every port), the exporters' bandwidth series. Default: on with -o prom and "
        "--textfile on a live fabric, off otherwise.",
    ),
]


@app.command("fabric")
@handle_errors
def fabric_command(
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    source: FromOption = None,
    save: SaveDumpOption = None,
    since: SinceOption = None,
    interval: IntervalOption = None,
    ca: CaOption = None,
    port: PortOption = None,
    topo: TopoOption = None,
    expect: ExpectOption = None,
    slurm_topology: SlurmOption = None,
    hosts_map: HostsOption = None,
    node_name_map: NodeNameMapOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    routes: RoutesOption = False,
    data_counters: DataCountersOption = None,
    textfile: TextfileOption = None,  # written by the boundary (cli/errors.py) from the report's metrics
    debug: DebugOption = False,
) -> int:
    """The InfiniBand subnet (like ibnetdiscover + ibqueryerrors + sminfo, judged): SM, links, switch-side counters."""
    request = FabricRequest(
        config=read_config(config),
        source=source,
        save=save,
        since=since,
        interval_s=interval,
        ca=ca,
        port=port,
        topo=tuple(topo or ()),
        expect=expect,
        slurm_topology=slurm_topology,
        hosts=hosts_map,
        node_name_map=node_name_map,
        timeout_s=timeout,
        routes=routes,
        data_counters=data_counters
        if data_counters is not None
        else source is None and (fmt is OutputFormat.prom or textfile is not None),
        environ=env().environ,
        preload=views.FORMAT_MODULES.get(fmt.value, ()),
    )
    result = run(request)
    keep_until_exit(result)  # freed by the process's end, not object by object (issue 39)
    with collector_paused():  # writing a large fabric's document walks no model (issue 39)
        return emit(views.outputs(result), fmt, strict=strict)
