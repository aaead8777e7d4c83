"""``ibdiag sweep``: which node, rail or link of the cluster is bad.

One process per node, placed by the cluster's launcher (:func:`ibdiag.sweep.command.run`); rank 0
prints the result, the other ranks print nothing unless they fail. ``--plan`` prints the schedule and
what it costs without running anything (:func:`ibdiag.sweep.command.plan`). Options left out take
``[sweep]``'s values from the config.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Annotated

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import debug_enabled, env, handle_errors, print_warning, read_config
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    PngOption,
    SaveOption,
    StrictOption,
    TimeoutOption,
)
from ibdiag.parse import parse_decimal
from ibdiag.sweep import command, views
from ibdiag.sweep.command import SweepProgress, SweepRequest
from ibdiag.sweep.schedule import Pattern

PatternOption = Annotated[
    Pattern | None,
    typer.Option(
        "--pattern",
        case_sensitive=False,
        help="ring: each node with its neighbours (2 rounds); pairwise: all pairs (N-1 rounds); random: --rounds random pairings. Default: [sweep] pattern, else ring.",
    ),
]
RoundsOption = Annotated[
    int | None,
    typer.Option("--rounds", metavar="K", help="Rounds of --pattern random (default 8)."),
]
SeedOption = Annotated[
    int,
    typer.Option(
        "--seed", metavar="N", help="Seed of --pattern random (every rank plans the same pairs)."
    ),
]
SecondPassOption = Annotated[
    bool,
    typer.Option(
        "--second-pass/--no-second-pass",
        help="Re-test each suspect against >= 2 nodes known good (tells a bad node from a bad link).",
    ),
]
TestOption = Annotated[
    str,
    typer.Option(
        "--test",
        metavar="p2p|collective",
        help="p2p: ibdiag's bench p2p per pair; collective: a 2-rank gloo all_reduce per pair (host TCP path).",
    ),
]
TransportOption = Annotated[
    str | None,
    typer.Option(
        "--transport",
        metavar="auto|rdma|tcp",
        help="rdma: rail k against rail k (a node without RDMA: exit 3); tcp: the nodes' addresses; auto (default): rdma, TCP where a node has no RDMA (said in the findings and the line).",
    ),
]
EngineOption = Annotated[
    str,
    typer.Option(
        "--engine",
        metavar="auto|ibdiag|perftest",
        help="Who measures RDMA pairs, as bench p2p --engine: auto (ibdiag where pyverbs is installed, else perftest), ibdiag, perftest.",
    ),
]
SizesOption = Annotated[
    str | None,
    typer.Option(
        "--sizes",
        metavar="SIZE",
        help="Message size of each bandwidth test (binary units; default 64M).",
    ),
]
ModeOption = Annotated[
    str,
    typer.Option(
        "--mode", metavar="bw|lat|both", help="Measure bandwidth, latency or both per pair."
    ),
]
RailsOption = Annotated[
    str | None,
    typer.Option(
        "--rails",
        metavar="LIST",
        help="Adapters to test, in rail order (mlx5_0,mlx5_1,...); default: the GPUs' adapters from topo.",
    ),
]
DurationOption = Annotated[
    float | None,
    typer.Option(
        "--duration",
        parser=parse_decimal,
        metavar="S",
        help="Measured seconds per pair test (default 1).",
    ),
]
PlanOption = Annotated[
    bool, typer.Option("--plan", help="Print the schedule and its cost; run nothing.")
]
NodesOption = Annotated[
    int | None,
    typer.Option(
        "--nodes",
        metavar="N",
        help="With --plan: plan for N nodes (default: the job's world size).",
    ),
]
PairSecondsOption = Annotated[
    float | None,
    typer.Option(
        "--pair-seconds",
        parser=parse_decimal,
        metavar="S",
        help="With --plan: seconds one pair test takes (default: --duration + 1 s of set-up).",
    ),
]


FabricOption = Annotated[
    Path | None,
    typer.Option(
        "--fabric",
        metavar="DUMP|PLAN",
        help="Where the nodes sit: a fabric saved by `ibdiag fabric --save` (with --routes: exact paths) or a "
        "cabling plan (fabric --expect's CSV/TOML; for a routed RoCE/IP fabric). Rank 0 reads it and keeps each "
        "round's tests off each other's links; the other nodes need not have the file.",
    ),
]


class _ProgressLine:
    """Rank 0's progress on stderr. On a terminal: one line, rewritten after each round, cleared at the
    end. Elsewhere (plain ``srun``, a batch log): a line per round, kept, so a long sweep shows it lives."""

    def __init__(self, stream: IO[str], *, terminal: bool) -> None:
        self.stream = stream
        self.terminal = terminal
        self.shown = False

    def __call__(self, progress: SweepProgress) -> None:
        if self.terminal:
            self.stream.write("\r\x1b[2K" + progress.line())
        else:
            self.stream.write("ibdiag: " + progress.line() + "\n")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown and self.terminal:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


def _debug_line(line: str) -> None:
    env().stderr.write(line + "\n")


@app.command("sweep")
@handle_errors
def sweep_command(
    pattern: PatternOption = None,
    rounds: RoundsOption = None,
    seed: SeedOption = 0,
    second_pass: SecondPassOption = True,
    test: TestOption = "p2p",
    transport: TransportOption = None,
    engine: EngineOption = "auto",
    sizes: SizesOption = None,
    mode: ModeOption = "bw",
    rails: RailsOption = None,
    duration: DurationOption = None,
    timeout: TimeoutOption = None,
    plan: PlanOption = False,
    nodes: NodesOption = None,
    pair_seconds: PairSecondsOption = None,
    fabric: FabricOption = None,
    fmt: FormatOption = OutputFormat.table,
    save: SaveOption = None,
    png: PngOption = None,
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
      ibdiag sweep --plan --fabric fabric.tar.gz --pattern random      # rounds kept apart on the fabric
      srun -N 64 --ntasks-per-node 1 ibdiag sweep --pattern ring --save sweep.json
      torchrun --nnodes 64 --nproc-per-node 1 --rdzv-endpoint head:29500 -m ibdiag sweep -o line
    """
    progress = None if plan else _ProgressLine(env().stderr, terminal=env().stderr_isatty)
    request = SweepRequest(
        pattern=pattern,
        rounds=rounds,
        seed=seed,
        second_pass=second_pass,
        test=test,
        transport=transport,
        engine=engine,
        sizes=sizes,
        mode=mode,
        rails=rails,
        duration_s=duration,
        timeout_s=timeout,
        nodes=nodes,
        pair_s=pair_seconds,
        fabric=fabric,
        output_format=fmt.value,
        save=save,
        png=png,
        config=read_config(config),
        environ=env().environ,
        on_progress=progress,
        on_warning=print_warning,
        on_log=_debug_line if debug_enabled(debug) else None,
    )
    if plan:
        return emit(views.plan_outputs(command.plan(request)), fmt, strict=strict)
    try:
        result = command.run(request)
    finally:
        if progress is not None:
            progress.clear()
    if result is None:  # not rank 0: rank 0 writes the result
        return 0
    return emit(views.outputs(result), fmt, strict=strict, save=save, png=png)
