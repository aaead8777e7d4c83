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
    env,
    handle_errors,
    open_root,
    read_config,
    run_meta,
    table_width,
)
from ibdiag.cli.history import HistoryOption, KernelLogOption, history_setup, with_history

ExpectAdaptersOption = Annotated[
    int | None,
    typer.Option(
        "--expect-adapters",
        metavar="N",
        help="RDMA adapters this node must have: fewer fail (overrides [topo] expect_adapters).",
    ),
]
NcclEnvOption = Annotated[
    Path | None,
    typer.Option(
        "--nccl-env",
        metavar="FILE",
        help="Judge the NCCL_* settings in FILE (KEY=VALUE lines, or a launcher line with -x KEY=VALUE) "
        "instead of this environment's.",
    ),
]


def _dcb_reader(root: Path, directory: Path) -> Any:
    """``dcb -j`` on the live node; the JSON saved beside sys/ (``dcb/<netdev>/``) in any other tree."""
    import os
    import shutil
    from functools import partial

    from ibdiag.node import dcb

    if str(root) == "/":
        # dcb lives in /usr/sbin (Debian, RHEL), which a user's PATH often lacks.
        path = os.pathsep.join([env().environ.get("PATH", ""), "/usr/sbin", "/sbin"])
        return partial(dcb.read_live, shutil.which("dcb", path=path))
    return partial(dcb.read_saved, directory)


@app.command("topo")
@handle_errors
def topo_command(
    root: RootOption = Path("/"),
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    expect_adapters: ExpectAdaptersOption = None,
    expect_rate: ExpectRateOption = None,
    nccl_env: NcclEnvOption = None,
    history: HistoryOption = None,
    kernel_log: KernelLogOption = None,
    textfile: TextfileOption = None,  # written by the boundary (cli/errors.py) from the report's metrics
    debug: DebugOption = False,
) -> int:
    """Map GPUs, RDMA adapters, PCIe paths and NUMA (like nvidia-smi topo -m) and judge the layout."""
    import dataclasses

    from ibdiag.config import with_flags
    from ibdiag.findings.model import Report
    from ibdiag.node.discover import discover
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.ports.config import PortsConfig
    from ibdiag.topo import render
    from ibdiag.topo.checks import TopoConfig, check_topology
    from ibdiag.topo.configuration import check_configuration, read_configuration
    from ibdiag.topo.nccl_env import from_environ, read_env_file

    cfg_file = read_config(config)
    cfg = with_flags(
        cfg_file.section("topo", TopoConfig),
        {"expect_adapters": ("--expect-adapters", expect_adapters)},
    )
    ports = cfg_file.section("ports", PortsConfig).with_expected_rate(expect_rate)
    hist = history_setup(history, cfg_file, kernel_log=kernel_log, root=root)
    with open_root(root) as directory:
        sysfs = SysfsRoot(directory, skip_adapters=ports.skip).check()
        topo = discover(sysfs, gdr_level=cfg.gdr_path_class)
        nccl = read_env_file(str(nccl_env)) if nccl_env else from_environ(env().environ)
        node_config = read_configuration(sysfs, topo, nccl, _dcb_reader(root, directory))
        # what the configuration reads could not read (a refused mtu, a malformed ecn flag) is reported
        # by topo.sysfs_value like every other value
        topo = dataclasses.replace(topo, problems=tuple(sysfs.problems))
        meta = run_meta(directory)
        findings = [*check_topology(topo, cfg, ports), *check_configuration(topo, node_config)]
        report = Report("topo", {**topo.to_json(), **node_config.to_json()}, tuple(findings))
        # Inside the root: the history's record reads AER counts from it (a snapshot is unpacked here).
        report, hist_metrics = with_history(
            report, hist, _record(topo, meta.host), topo=lambda: topo, sysfs=sysfs
        )

    def table() -> list[Any]:
        from rich.text import Text

        from ibdiag.output.table import findings_block

        items: list[Any] = [Text(line, no_wrap=True) for line in render.summary_lines(topo)]
        if nccl:
            names = ", ".join(k for k, _ in nccl.variables)
            items.append(Text(f"NCCL settings judged ({nccl.source}): {names}", no_wrap=True))
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
        prom=lambda: render.prom_metrics(topo) + hist_metrics,
    )


def _record(topo: Any, host: str) -> Any:
    """The history record of a topo reading: every port's state and rate, no counters."""
    import time

    from ibdiag.history.model import Record
    from ibdiag.history.run import topo_ports

    ports = [p for a in topo.adapters for p in a.ports]
    return Record(time.time(), host, "topo", topo_ports(ports))
