"""``ibdiag verdict``: given the model, the ranks and the measured bandwidth, is the network the bottleneck?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.cli.app import app
from ibdiag.cli.common import env, handle_errors, read_config
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    StrictOption,
)
from ibdiag.config import Config
from ibdiag.job.config import JobConfig
from ibdiag.job.forverdict import inspector_source
from ibdiag.parse import parse_decimal
from ibdiag.verdict import views
from ibdiag.verdict.command import VerdictRequest, run
from ibdiag.verdict.inputs import MeasuredSource

_W = "Workload"
_M = "Measured bandwidth (one of)"
_C = "Ceiling and node"
_O = "Output"


@app.command("verdict")
@handle_errors
def verdict_command(
    params: Annotated[
        str | None,
        typer.Option(
            "--params",
            metavar="N",
            help="Parameters whose gradients are reduced: 8e9, 8B, 70B (B = billion).",
            rich_help_panel=_W,
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            metavar="TYPE",
            help="Gradient type with --params: fp32, bf16, fp16, fp8.",
            rich_help_panel=_W,
        ),
    ] = None,
    grad_bytes: Annotated[
        str | None,
        typer.Option(
            "--grad-bytes",
            metavar="SIZE",
            help="Gradient size instead of --params/--dtype: 16GB (decimal), 15GiB (binary).",
            rich_help_panel=_W,
        ),
    ] = None,
    ranks: Annotated[
        int,
        typer.Option("--ranks", metavar="N", help="Ranks (GPUs) in the job.", rich_help_panel=_W),
    ] = ...,  # type: ignore[assignment]  # typer: ... makes the option required
    ranks_per_node: Annotated[
        int | None,
        typer.Option(
            "--ranks-per-node",
            metavar="N",
            help="Ranks per node (default: the GPUs under --root, else 1).",
            rich_help_panel=_W,
        ),
    ] = None,
    strategy: Annotated[
        str,
        typer.Option(
            "--strategy",
            metavar="S",
            help="ddp, zero1, zero2 (2(n-1)/n x S per rank) or fsdp/zero3 (3(n-1)/n x S).",
            rich_help_panel=_W,
        ),
    ] = "ddp",
    compute_s: Annotated[
        float,
        typer.Option(
            "--compute-s",
            parser=parse_decimal,
            metavar="SECONDS",
            help="Backward-pass time per step, seconds.",
            rich_help_panel=_W,
        ),
    ] = ...,  # type: ignore[assignment]  # typer: ... makes the option required
    forward_s: Annotated[
        float | None,
        typer.Option(
            "--forward-s",
            parser=parse_decimal,
            metavar="SECONDS",
            help="Forward-pass time per step, seconds (default 0: the share is then an upper bound).",
            rich_help_panel=_W,
        ),
    ] = None,
    bucket: Annotated[
        str,
        typer.Option(
            "--bucket",
            metavar="SIZE",
            help="Gradient bucket size (DDP's default 25MiB).",
            rich_help_panel=_W,
        ),
    ] = "25MiB",
    busbw: Annotated[
        float | None,
        typer.Option(
            "--busbw",
            parser=parse_decimal,
            metavar="GB/S",
            help="Measured bus bandwidth, GB/s (nccl-tests' busbw at the bucket size).",
            rich_help_panel=_M,
        ),
    ] = None,
    bench: Annotated[
        Path | None,
        typer.Option(
            "--bench",
            metavar="FILE",
            help="An ibdiag bench JSON (bench p2p/collective --save): busbw at the size closest to the bucket.",
            rich_help_panel=_M,
        ),
    ] = None,
    nccl_tests: Annotated[
        Path | None,
        typer.Option(
            "--nccl-tests",
            metavar="FILE",
            help="An nccl-tests log (all_reduce_perf output), read by the bench importer.",
            rich_help_panel=_M,
        ),
    ] = None,
    inspector: Annotated[
        list[Path] | None,
        typer.Option(
            "--inspector",
            metavar="PATH",
            help="NCCL Inspector's logs of the job (files or directories, repeat): the AllReduce busbw measured in production, at the size closest to the bucket.",
            rich_help_panel=_M,
        ),
    ] = None,
    latency_us: Annotated[
        float | None,
        typer.Option(
            "--latency-us",
            parser=parse_decimal,
            metavar="US",
            help="Per-collective latency, µs (default: from --bench/--nccl-tests, else [verdict] latency_us).",
            rich_help_panel=_M,
        ),
    ] = None,
    link_gbps: Annotated[
        float | None,
        typer.Option(
            "--link-gbps",
            parser=parse_decimal,
            metavar="GBIT/S",
            help="Rail link rate, Gb/s (400 for NDR; default: from --root).",
            rich_help_panel=_C,
        ),
    ] = None,
    rails_per_node: Annotated[
        int | None,
        typer.Option(
            "--rails-per-node",
            metavar="N",
            help="Rails (adapters) per node carrying the job (default: from --root, else 1).",
            rich_help_panel=_C,
        ),
    ] = None,
    # Not the shared RootOption: verdict reads a node only when asked (no --root: no node, no health),
    # where the others read / by default.
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            metavar="DIR|TAR",
            help="Also judge this node's fabric health and read its rails: / for this node, a fixture or snapshot.",
            rich_help_panel=_C,
        ),
    ] = None,
    fabric: Annotated[
        str | None,
        typer.Option(
            "--fabric",
            metavar="DUMP|live",
            help="The subnet (an `ibdiag fabric --save`, or live): the fabric's ceiling for the job's nodes where they are.",
            rich_help_panel=_C,
        ),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes",
            metavar="HOSTLIST",
            help="The job's nodes, a Slurm host list (gpu[01-64]); default $SLURM_JOB_NODELIST.",
            rich_help_panel=_C,
        ),
    ] = None,
    topo: Annotated[
        list[Path] | None,
        typer.Option(
            "--topo",
            metavar="TOPO.json",
            help="With --fabric: `ibdiag topo -o json` of the job's nodes (repeat): names their adapters by host and NIC index where node descriptions do not.",
            rich_help_panel=_C,
        ),
    ] = None,
    rank_order: Annotated[
        str | None,
        typer.Option(
            "--rank-order",
            metavar="FILE|HOSTLIST",
            help="The nodes in rank order when not the list's (a file of one host a line, or a host list).",
            rich_help_panel=_C,
        ),
    ] = None,
    chart: Annotated[
        Path | None,
        typer.Option(
            "--chart",
            metavar="PNG",
            help="Also write the scaling-wall chart as a PNG (needs matplotlib).",
            rich_help_panel=_O,
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """Is the network the bottleneck? The 2xS all-reduce arithmetic, bucket overlap, the scaling wall, fabric health.

    Examples:

    \b
      ibdiag verdict --params 8e9 --dtype bf16 --ranks 512 --ranks-per-node 1 --link-gbps 400 --busbw 50 --compute-s 2
      ibdiag verdict --params 8e9 --dtype bf16 --ranks 512 --ranks-per-node 8 --compute-s 0.5 --bench run.json
      ibdiag verdict --params 70B --dtype bf16 --strategy fsdp --ranks 1024 --compute-s 1.2 --nccl-tests ar.log --root /
    """
    cfg = read_config(config)
    request = VerdictRequest(
        ranks=ranks,
        compute_s=compute_s,
        params=params,
        dtype=dtype,
        grad_bytes=grad_bytes,
        ranks_per_node=ranks_per_node,
        strategy=strategy,
        forward_s=forward_s,
        bucket=bucket,
        busbw_gbs=busbw,
        bench=bench,
        nccl_tests=nccl_tests,
        latency_us=latency_us,
        link_gbps=link_gbps,
        rails_per_node=rails_per_node,
        root=root,
        fabric=fabric,
        nodes=nodes,
        topo=tuple(topo or ()),
        rank_order=rank_order,
        chart=chart,
        measured=None if not inspector else _inspector(inspector, cfg),
        config=cfg,
        environ=env().environ,
    )
    # --chart is verdict's --png: the scaling-wall chart, named as the option was before --png existed
    return emit(views.outputs(run(request)), fmt, strict=strict, png=chart, png_option="--chart")


def _inspector(paths: list[Path], cfg: Config) -> MeasuredSource:
    """``--inspector``: ``ibdiag job``'s Inspector reader as the verdict's measured source (job sits
    above verdict in the layers: the command line joins them)."""
    return inspector_source(
        paths, cfg.section("job", JobConfig), cfg.section("collective", CollectiveConfig)
    )
