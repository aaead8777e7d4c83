"""``ibdiag bench collective``: collective bus bandwidth the way nccl-tests measures it, through
torch.distributed (NCCL on GPUs, gloo on CPUs), launched by ``--nproc N`` (local ranks it starts
itself), torchrun, srun or mpirun. The library is :mod:`ibdiag.bench.collective.command`.
"""

from __future__ import annotations

import os
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Annotated

import typer

from ibdiag.bench import views
from ibdiag.bench.collective.command import CollectiveRequest, run
from ibdiag.bench.collective.spec import RunSpec
from ibdiag.cli.app import bench_app
from ibdiag.cli.common import env, handle_errors, print_error, read_config
from ibdiag.cli.console import console
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    SaveOption,
    StrictOption,
    TimeoutOption,
)
from ibdiag.collectives import collective_dtype, get_op
from ibdiag.parse import parse_decimal
from ibdiag.units import parse_size_spec

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

DEFAULT_SIZES = "1M:64M"
DEFAULT_TIMEOUT_S = 120.0


class Backend(str, Enum):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


@bench_app.command("collective")
@handle_errors
def collective_command(
    op: Annotated[
        str,
        typer.Option(
            "--op",
            metavar="OP",
            help="all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, sendrecv (ring).",
        ),
    ] = "all_reduce",
    backend: Annotated[
        Backend,
        typer.Option(
            "--backend",
            case_sensitive=False,
            help="auto: NCCL with one GPU per local rank when CUDA is available, else gloo.",
        ),
    ] = Backend.auto,
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            metavar="TYPE",
            help="float32, bfloat16 or float16 (nccl-tests -d float/bfloat16/half).",
        ),
    ] = "float32",
    sizes: Annotated[
        str,
        typer.Option(
            "--sizes",
            metavar="LIST|MIN:MAX",
            help="Message sizes like nccl-tests -b/-e: 4K,1M,64M or 1M:256M (x --factor). Per-rank buffer for all_reduce, total for all_gather/reduce_scatter/all_to_all.",
        ),
    ] = DEFAULT_SIZES,
    factor: Annotated[
        float,
        typer.Option(
            "--factor",
            parser=parse_decimal,
            metavar="F",
            help="Step between MIN and MAX (nccl-tests -f).",
        ),
    ] = 2.0,
    iters: Annotated[
        int, typer.Option("--iters", metavar="N", help="Timed calls per size (nccl-tests -n).")
    ] = 20,
    warmup: Annotated[
        int,
        typer.Option(
            "--warmup", metavar="N", help="Untimed calls before each size (nccl-tests -w)."
        ),
    ] = 5,
    blocking: Annotated[
        bool,
        typer.Option(
            "--blocking", help="Wait for each call and barrier after it (nccl-tests -z 1)."
        ),
    ] = False,
    no_check: Annotated[
        bool,
        typer.Option(
            "--no-check", help="Skip result validation (nccl-tests -c 0): #wrong shows N/A."
        ),
    ] = False,
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc",
            metavar="N",
            help="Start N local ranks here (one node); without it, run under torchrun, srun or mpirun.",
        ),
    ] = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    fmt: FormatOption = OutputFormat.table,
    save: SaveOption = None,
    config: ConfigOption = None,
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """Collective bus bandwidth like nccl-tests (algbw, busbw, #wrong), per-rank timings and stragglers.

    Through torch.distributed: NCCL with one GPU per local rank, or gloo on CPUs. Only rank 0 prints
    and saves; a rank that dies or hangs ends the run with exit 3 naming it.

    \b
    Examples:
      ibdiag bench collective --nproc 4 --backend gloo --sizes 1M:256M
      torchrun --nnodes 64 --nproc-per-node 8 --rdzv-endpoint head:29500 -m ibdiag bench collective --sizes 8:8G
      srun -N 64 --ntasks-per-node 8 ibdiag bench collective --op all_gather --save run.json
    """
    # The spec checks its own fields (ibdiag/bench/collective/spec.py), naming the flag.
    spec = RunSpec(
        op=get_op(op).name,
        backend=backend.value,
        dtype=collective_dtype(dtype).name,
        sizes=parse_size_spec(sizes, factor=factor),
        iters=iters,
        warmup=warmup,
        blocking=blocking,
        check=not no_check,
        timeout_s=DEFAULT_TIMEOUT_S if timeout is None else timeout,
    )
    with _ProgressBar() as bar:
        outcome = run(
            CollectiveRequest(
                spec,
                nproc=nproc,
                config=read_config(config),
                save=save,
                environ=env().environ,
                on_progress=bar,
                on_error=print_error,
                on_stuck=os._exit,
                debug=debug,
            )
        )
    if outcome.result is None:  # a rank that prints nothing, or a failure already said
        return outcome.exit_status
    return emit(views.outputs(outcome.result), fmt, strict=strict, save=save, files_last=True)


class _ProgressBar:
    """A rich progress bar on stderr, one step per size and placement; nothing when stderr is not a terminal."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> _ProgressBar:
        if env().stderr_isatty:
            # lazy: rich, for a terminal's progress bar only
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console("stderr"),
                transient=True,
            )
            self.progress.start()
            # until rank 0 reports, the ranks are starting and meeting (minutes at thousands of ranks)
            self.task = self.progress.add_task("starting ranks, rendezvous", total=None)
        return self

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.progress is None or self.task is None:
            return
        self.progress.update(self.task, total=total, completed=done, description=label)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.progress is not None:
            self.progress.stop()
