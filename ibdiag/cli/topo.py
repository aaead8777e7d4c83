"""``ibdiag topo``: map GPUs, RDMA adapters, PCIe and NUMA like ``nvidia-smi topo -m`` and judge the layout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import env, handle_errors, read_config
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    ExpectRateOption,
    FormatOption,
    HistoryOption,
    KernelLogOption,
    KernelLogSinceOption,
    KernelLogWindowOption,
    OutputFormat,
    RootOption,
    StrictOption,
    TextfileOption,
)
from ibdiag.history import attach
from ibdiag.topo import views
from ibdiag.topo.command import TopoRequest, run

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
    kernel_log_window: KernelLogWindowOption = None,
    kernel_log_since: KernelLogSinceOption = None,
    textfile: TextfileOption = None,  # written by the boundary (cli/errors.py) from the report's metrics
    debug: DebugOption = False,
) -> int:
    """Map GPUs, RDMA adapters, PCIe paths and NUMA (like nvidia-smi topo -m) and judge the layout."""
    cfg = read_config(config)
    hist = attach.setup(
        history,
        cfg,
        kernel_log=kernel_log,
        kernel_window=kernel_log_window,
        kernel_since=kernel_log_since,
        root=root,
    )
    request = TopoRequest(
        root=root,
        config=cfg,
        expect_adapters=expect_adapters,
        expect_rate_gbps=expect_rate,
        nccl_env=nccl_env,
        environ=env().environ,
        extras=() if hist is None else (attach.topo_addition(hist),),
    )
    return emit(views.outputs(run(request)), fmt, strict=strict)
