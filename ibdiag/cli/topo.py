"""``ibdiag topo``: map GPUs, RDMA adapters, PCIe and NUMA like ``nvidia-smi topo -m`` and judge the layout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

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
    emit,
    handle_errors,
    open_root,
    read_config,
    run_meta,
    table_width,
)

ExpectAdaptersOption = Annotated[
    int | None,
    typer.Option(
        "--expect-adapters",
        metavar="N",
        help="RDMA adapters this node must have: fewer fail (overrides [topo] expect_adapters).",
    ),
]


@app.command("topo")
@handle_errors
def topo_command(
    root: RootOption = Path("/"),
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    expect_adapters: ExpectAdaptersOption = None,
    expect_rate: ExpectRateOption = None,
    textfile: TextfileOption = None,  # written by the boundary (cli/errors.py) from the report's metrics
    debug: DebugOption = False,
) -> int:
    """Map GPUs, RDMA adapters, PCIe paths and NUMA (like nvidia-smi topo -m) and judge the layout."""
    from ibdiag.config import with_flags
    from ibdiag.findings.model import Report
    from ibdiag.node.discover import discover
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.ports.config import PortsConfig
    from ibdiag.topo import render
    from ibdiag.topo.checks import TopoConfig, check_topology

    cfg_file = read_config(config)
    cfg = with_flags(
        cfg_file.section("topo", TopoConfig),
        {"expect_adapters": ("--expect-adapters", expect_adapters)},
    )
    ports = cfg_file.section("ports", PortsConfig).with_expected_rate(expect_rate)
    with open_root(root) as directory:
        sysfs = SysfsRoot(directory, skip_adapters=ports.skip).check()
        topo = discover(sysfs, gdr_level=cfg.gdr_path_class)
        meta = run_meta(directory)
    report = Report("topo", topo.to_json(), tuple(check_topology(topo, cfg, ports)))

    def table() -> list[Any]:
        from rich.text import Text

        from ibdiag.output.table import findings_block

        items: list[Any] = [Text(line, no_wrap=True) for line in render.summary_lines(topo)]
        matrix = render.matrix_text(topo)
        if matrix:
            items += [
                Text(""),
                Text(matrix, no_wrap=True),
                Text(""),
                Text(render.LEGEND, style="dim"),
            ]
        if topo.gpus and topo.adapters:
            items.append(render.pairing_table(topo))
        if topo.adapters:
            items.append(render.adapters_table(topo))
        items += findings_block(report, strict=strict, width=table_width())
        return items

    return emit(
        report,
        fmt,
        meta,
        strict=strict,
        table=table,
        csv=lambda: (render.CSV_HEADER, render.csv_rows(topo)),
        prom=lambda: render.prom_metrics(topo),
    )
