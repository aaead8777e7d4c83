"""``ibdiag sweep``: which node, rail or link of the cluster is bad.

One process per node, placed by the cluster's launcher (:mod:`ibdiag.sweep.distributed`); rank 0
prints the result, the other ranks print nothing unless they fail. ``--plan`` prints the schedule and
what it costs without running anything. Options left out take ``[sweep]``'s values from the config.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import (
    ConfigOption,
    DebugOption,
    OutputFormat,
    StrictOption,
    console,
    debug_enabled,
    env,
    handle_errors,
    read_config,
    refuse_html,
    run_meta,
)
from ibdiag.parse import parse_decimal


class PatternChoice(str, Enum):
    ring = "ring"
    pairwise = "pairwise"
    random = "random"


@app.command("sweep")
@handle_errors
def sweep_command(
    pattern: Annotated[
        PatternChoice | None,
        typer.Option(
            "--pattern",
            case_sensitive=False,
            help="ring: each node with its neighbours (2 rounds); pairwise: all pairs (N-1 rounds); random: --rounds random pairings. Default: [sweep] pattern, else ring.",
        ),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option("--rounds", metavar="K", help="Rounds of --pattern random (default 8)."),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            "--seed",
            metavar="N",
            help="Seed of --pattern random (every rank plans the same pairs).",
        ),
    ] = 0,
    second_pass: Annotated[
        bool,
        typer.Option(
            "--second-pass/--no-second-pass",
            help="Re-test each suspect against >= 2 nodes known good (tells a bad node from a bad link).",
        ),
    ] = True,
    test: Annotated[
        str,
        typer.Option(
            "--test",
            metavar="p2p|collective",
            help="p2p: ibdiag's bench p2p per pair; collective: a 2-rank gloo all_reduce per pair (host TCP path).",
        ),
    ] = "p2p",
    transport: Annotated[
        str | None,
        typer.Option(
            "--transport",
            metavar="auto|rdma|tcp",
            help="rdma: rail k against rail k (a node without RDMA: exit 3); tcp: the nodes' addresses; auto (default): rdma, TCP where a node has no RDMA (said in the findings and the line).",
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="auto|ibdiag|perftest",
            help="Who measures RDMA pairs, as bench p2p --engine: auto (ibdiag where pyverbs is installed, else perftest), ibdiag, perftest.",
        ),
    ] = "auto",
    sizes: Annotated[
        str | None,
        typer.Option(
            "--sizes",
            metavar="SIZE",
            help="Message size of each bandwidth test (binary units; default 64M).",
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode", metavar="bw|lat|both", help="Measure bandwidth, latency or both per pair."
        ),
    ] = "bw",
    rails: Annotated[
        str | None,
        typer.Option(
            "--rails",
            metavar="LIST",
            help="Adapters to test, in rail order (mlx5_0,mlx5_1,...); default: the GPUs' adapters from topo.",
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            parser=parse_decimal,
            metavar="S",
            help="Measured seconds per pair test (default 1).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            parser=parse_decimal,
            metavar="S",
            help="Longest wait on a peer (default 10): a node silent that long is named unreachable and the sweep goes on.",
        ),
    ] = None,
    plan: Annotated[
        bool, typer.Option("--plan", help="Print the schedule and its cost; run nothing.")
    ] = False,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            metavar="N",
            help="With --plan: plan for N nodes (default: the job's world size).",
        ),
    ] = None,
    pair_seconds: Annotated[
        float | None,
        typer.Option(
            "--pair-seconds",
            parser=parse_decimal,
            metavar="S",
            help="With --plan: seconds one pair test takes (default: --duration + 1 s of set-up).",
        ),
    ] = None,
    fmt: Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            "-o",
            case_sensitive=False,
            callback=refuse_html,
            help="table for people; json, csv, prom, junit, line (one-line drain list) for machines.",
        ),
    ] = OutputFormat.table,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            metavar="FILE",
            help="Also write the JSON result (ibdiag.sweep/1) to FILE, atomically.",
        ),
    ] = None,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            metavar="FILE",
            help="Write the node x node matrix per rail as a PNG (needs matplotlib).",
        ),
    ] = None,
    config: ConfigOption = None,
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """Find the bad node, rail or link of a cluster: pair tests across nodes, then node-vs-link attribution.

    One process per node, placed by the cluster's launcher (srun, torchrun, mpirun, a Kubernetes
    indexed Job); rank 0 plans, gathers and prints. Exit 1 when a node or link is bad.

    \b
    Examples:
      ibdiag sweep --plan --nodes 1024 --pattern pairwise
      srun -N 64 --ntasks-per-node 1 ibdiag sweep --pattern ring --save sweep.json
      torchrun --nnodes 64 --nproc-per-node 1 --rdzv-endpoint head:29500 -m ibdiag sweep -o line
    """
    from ibdiag.errors import UsageError
    from ibdiag.sweep.config import SweepSettingsFile
    from ibdiag.sweep.runner import PairSpec
    from ibdiag.units import parse_size

    file = read_config(config).section("sweep", SweepSettingsFile)
    chosen = pattern.value if pattern is not None else file.pattern
    if rounds is not None and chosen != "random":
        raise UsageError(
            f"--rounds is for --pattern random, not {chosen}",
            hint=f"{chosen} has a fixed number of rounds",
        )
    size = (
        parse_size(sizes, what="--sizes")
        if sizes is not None
        else parse_size(file.sizes, what="config [sweep] sizes")
    )
    spec = PairSpec(
        test=test,
        transport=transport if transport is not None else file.transport,
        bytes=size,
        mode=mode,
        duration_s=duration if duration is not None else file.duration_s,
        timeout_s=timeout if timeout is not None else file.timeout_s,
        engine=engine.lower(),
    )
    rail_names = _rail_list(rails)
    if plan:
        if fmt not in (OutputFormat.table, OutputFormat.json):
            raise UsageError(
                f"--plan prints a table or JSON, not {fmt.value}",
                hint="use -o table or -o json with --plan",
            )
        if save is not None or png is not None:
            raise UsageError(
                "--plan runs nothing: there is nothing to --save or --png",
                hint="drop --save/--png, or drop --plan",
            )
        return _print_plan(
            chosen,
            rounds,
            seed,
            spec,
            rail_names,
            nodes,
            pair_seconds,
            as_json=fmt is OutputFormat.json,
        )
    if nodes is not None or pair_seconds is not None:
        raise UsageError(
            "--nodes and --pair-seconds are for --plan",
            hint="a running sweep takes its nodes from the launcher",
        )
    if spec.test == "collective" and spec.mode != "bw":
        raise UsageError(
            f"--test collective measures bandwidth only, not --mode {spec.mode}",
            hint="drop --mode, or use --test p2p for latency",
        )
    from ibdiag.cli.sweep_run import run_sweep_command

    return run_sweep_command(
        chosen,
        rounds,
        seed,
        second_pass,
        spec,
        file,
        rail_names,
        fmt=fmt,
        save=save,
        png=png,
        strict=strict,
        debug=debug_enabled(debug),
    )


def _rail_list(text: str | None) -> tuple[str, ...] | None:
    from ibdiag.errors import UsageError
    from ibdiag.sweep.nodes import valid_adapter

    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if not valid_adapter(n)]
    if not names or bad:
        raise UsageError(
            f"--rails {text!r}: give adapter names separated by commas",
            hint="e.g. --rails mlx5_0,mlx5_1,mlx5_2,mlx5_3",
        )
    if len(set(names)) != len(names):
        raise UsageError(
            f"--rails {text!r} names an adapter twice", hint="each adapter is one rail"
        )
    return names


def _print_plan(
    pattern: str,
    rounds: int | None,
    seed: int,
    spec: Any,
    rails: tuple[str, ...] | None,
    nodes: int | None,
    pair_seconds: float | None,
    *,
    as_json: bool,
) -> int:
    from ibdiag.errors import UsageError
    from ibdiag.findings.model import Report
    from ibdiag.output.jsonout import render_json
    from ibdiag.runtime.launch import detect_launch
    from ibdiag.sweep.plan import plan_data, plan_lines

    n = nodes
    if n is None:
        launch = detect_launch(env().environ)
        if launch is None:
            raise UsageError(
                "--plan needs a node count: give --nodes N, or run it under the job's launcher",
                hint="e.g. ibdiag sweep --plan --nodes 64",
            )
        n = launch.world_size
    pair_s = pair_seconds if pair_seconds is not None else spec.duration_s + 1.0
    data = plan_data(
        pattern, n, rounds=rounds, seed=seed, rails=len(rails) if rails else 1, pair_s=pair_s
    )
    report = Report("sweep-plan", data, ())
    meta = run_meta()
    if as_json:
        env().stdout.write(render_json(report, meta))
    else:
        con = console("stdout")
        for line in plan_lines(data, rails_given=rails is not None):
            con.print(line, highlight=False, markup=False)
    return 0
