"""``ibdiag verdict``: given the model, the ranks and the measured bandwidth, is the network the bottleneck?"""

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
    atomic_output,
    check_output_path,
    emit,
    env,
    handle_errors,
    open_root,
    read_config,
    run_meta,
    table_width,
)
from ibdiag.parse import parse_decimal

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
    from ibdiag.findings.model import Report
    from ibdiag.verdict import inputs
    from ibdiag.verdict.ceiling import ceiling
    from ibdiag.verdict.chart import write_png
    from ibdiag.verdict.checks import findings
    from ibdiag.verdict.config import VerdictConfig
    from ibdiag.verdict.judge import judge
    from ibdiag.verdict.render import CSV_HEADER, csv_rows, prom_metrics

    if chart is not None:
        from ibdiag.verdict.chart import need_matplotlib

        need_matplotlib()
        check_output_path(chart, "--chart")
    cfg_file = read_config(config)
    cfg = cfg_file.section("verdict", VerdictConfig)
    source = inputs.choose_source(busbw, bench, nccl_tests)
    inputs.check_positive(
        "--link-gbps", link_gbps, maximum=inputs.MAX_LINK_GBPS, unit="Gb/s", example="400"
    )
    inputs.check_positive(
        "--latency-us", latency_us, maximum=inputs.MAX_LATENCY_US, unit="µs", allow_zero=True
    )
    if rails_per_node is not None and not 1 <= rails_per_node <= inputs.MAX_RAILS:
        from ibdiag.errors import UsageError

        raise UsageError(
            f"--rails-per-node must be between 1 and {inputs.MAX_RAILS}, not {rails_per_node}",
            hint="the adapters per node that carry the job's traffic, e.g. 8 on a DGX H100",
        )

    node = None
    if root is not None:
        from ibdiag.node.sysfs import SysfsRoot
        from ibdiag.ports.config import PortsConfig
        from ibdiag.verdict.node import read_node

        with open_root(root) as directory:
            skip = cfg_file.section("ports", PortsConfig).skip
            node = read_node(SysfsRoot(directory, skip_adapters=skip).check(), cfg_file)
            meta = run_meta(directory)
    else:
        meta = run_meta(None)

    work = inputs.workload(
        params=params,
        dtype=dtype,
        grad_bytes=grad_bytes,
        ranks=ranks,
        ranks_per_node=ranks_per_node,
        gpus_under_root=node.gpus if node else None,
        strategy=strategy,
        compute_s=compute_s,
        forward_s=forward_s,
        bucket=bucket,
    )
    ceil = ceiling(
        link_gbps=link_gbps,
        rails_per_node=rails_per_node,
        ranks_per_node=work.ranks_per_node,
        rails=node.rails if node else None,
        payload_share=cfg.link_payload_share,
    )
    kw: dict[str, Any] = {
        "bucket_bytes": work.bucket_bytes,
        "ranks": work.ranks,
        "rails_used": ceil.rails_used,
    }
    if source == "--busbw":
        measured = inputs.from_flag(busbw)  # type: ignore[arg-type]  # choose_source: this flag was given
    elif source == "--bench":
        measured = inputs.load_bench(bench, **kw)  # type: ignore[arg-type]  # choose_source: this flag was given
    else:
        measured = inputs.load_nccl_tests(nccl_tests, **kw)  # type: ignore[arg-type]  # choose_source: this flag was given
    inputs.check_positive("busbw", measured.busbw_gbs, maximum=inputs.MAX_GBS, unit="GB/s")

    v = judge(
        work,
        measured,
        ceil,
        health=node.health if node else None,
        config=cfg,
        latency_us=latency_us,
    )
    data, found, place_lines = v.to_json(), list(findings(v)), []
    if (nodes or rank_order or topo) and fabric is None:
        from ibdiag.errors import UsageError

        raise UsageError(
            "--nodes, --rank-order and --topo place the job on a fabric",
            hint="add --fabric live or --fabric DUMP",
        )
    if fabric is not None:
        from ibdiag.cli.verdict_fabric import job_placement
        from ibdiag.verdict.placement import placement, placement_lines

        where = job_placement(
            fabric,
            nodes,
            rank_order,
            dict(env().environ),
            topo=topo or (),
            rails_used=ceil.rails_used if ceil.rails_source != "default" else work.ranks_per_node,
            payload_share=cfg.link_payload_share,
        )
        data["placement"] = where.to_json()
        # verdict's rail ceiling where its rails are known (flags, --root), else the fabric's host links
        rail_gbs = ceil.busbw_gbs if ceil.rails_source != "default" else None
        found += placement(where, rail_gbs, measured.busbw_gbs)
        place_lines = placement_lines(where, rail_gbs)
    report = Report("verdict", data, tuple(found))
    if chart is not None:
        with atomic_output(chart, "--chart") as fh:
            write_png(v, fh)

    def table() -> list[Any]:
        from rich.text import Text

        from ibdiag.output.table import findings_block
        from ibdiag.verdict.render import table_items

        items = table_items(v)
        if place_lines:
            items.append(Text("Fabric placement", style="bold"))
            items.extend(Text("  " + line) for line in place_lines)
            items.append(Text(""))
        if chart is not None:
            items.append(Text(f"Chart written to {chart}"))
        items += findings_block(report, strict=strict, width=table_width())
        return items

    return emit(
        report,
        fmt,
        meta,
        strict=strict,
        table=table,
        csv=lambda: (CSV_HEADER, csv_rows(v)),
        prom=lambda: prom_metrics(v),
    )
