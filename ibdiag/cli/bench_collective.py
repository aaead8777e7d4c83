"""``ibdiag bench collective`` (``ibdiag bench import`` is :mod:`ibdiag.cli.bench_import`).

``collective`` measures collective bus bandwidth the way nccl-tests does, through torch.distributed
(NCCL on GPUs, gloo on CPUs), launched by ``--nproc N`` (local ranks it starts itself), torchrun,
srun or mpirun; ``import`` reads the nccl-tests and perftest logs people already have into the same
results schema (``ibdiag.bench/1``).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from ibdiag.cli.app import bench_app
from ibdiag.cli.common import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    StrictOption,
    check_output_path,
    console,
    emit,
    env,
    handle_errors,
    print_error,
    read_config,
    run_meta,
    table_width,
    write_atomically,
)
from ibdiag.errors import ExitStatus, IbdiagError, PeerTimeoutError, UsageError
from ibdiag.parse import parse_decimal

REPORT_DIR_ENV = "IBDIAG_COLLECTIVE_REPORT_DIR"  # ibdiag.bench.collective.spawn.REPORT_DIR_ENV (literal: --help imports nothing)
DEFAULT_SIZES = "1M:64M"
DEFAULT_TIMEOUT_S = 120.0


class Backend(str, Enum):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


class _ProgressBar:
    """A rich progress bar on stderr, one step per size and placement; nothing when stderr is not a terminal."""

    def __init__(self) -> None:
        self.progress: Any = None
        self.task: Any = None

    def __enter__(self) -> _ProgressBar:
        if env().stderr_isatty:
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
        if self.progress is None:
            return
        self.progress.update(self.task, total=total, completed=done, description=label)

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()


def emit_run(run: Any, findings: Any, fmt: OutputFormat, save: Path | None, strict: bool) -> int:
    """Print a BenchRun in ``fmt`` through its kind's view; write ``--save`` first (JSON, atomically)."""
    from ibdiag.bench.views import view_for
    from ibdiag.findings.model import Report
    from ibdiag.output.jsonout import render_json

    report = Report("bench", run.to_data(), tuple(findings))
    meta = run_meta(None)
    save_error: IbdiagError | None = None
    if save is not None:
        try:
            write_atomically(save, render_json(report, meta))
        except IbdiagError as e:
            save_error = e
    view = view_for(run)

    def table() -> list[Any]:
        from ibdiag.output.table import findings_block

        return [*view.table(run), *findings_block(report, strict=strict, width=table_width())]

    prom = view.prom
    status = emit(
        report,
        fmt,
        meta,
        strict=strict,
        table=table,
        csv=lambda: view.csv(run),
        prom=None if prom is None else lambda: prom(run),
    )
    if save_error is not None:
        raise save_error
    return status


@contextmanager
def _ctrl_c_ends_the_rank() -> Iterator[None]:
    """In a rank, Ctrl-C ends the process at once (exit by SIGINT, 130 in the shell): a rank blocked in a
    collective never returns to Python to see a KeyboardInterrupt. Restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _die_from_watchdog(report_dir: str | None, rank: int) -> Any:
    """The watchdog's callback: a stuck call cannot be interrupted, so say why and end the process (exit 3)."""

    def expire(message: str) -> None:
        hint = "check the named ranks' hosts; raise --timeout only if the sizes are huge"
        if (
            report_dir and not Path(report_dir, f"error.rank{rank}.json").exists()
        ):  # never over the diagnosis written before a teardown
            from ibdiag.bench.collective.spawn import write_error

            try:
                write_error(report_dir, rank, PeerTimeoutError(message, hint))
            except OSError:
                pass
        print_error(message, hint)
        os._exit(int(ExitStatus.CANNOT_RUN))

    return expire


class _FailureReport:
    """``run_rank``'s ``on_failure``: say what failed (stderr, and the --nproc error file) before any
    teardown, so the diagnosis survives a teardown that hangs or a process that NCCL aborts."""

    def __init__(self, report_dir: str | None, rank: int) -> None:
        self.report_dir, self.rank = report_dir, rank
        self.done = False

    def __call__(self, err: BaseException) -> None:
        if isinstance(err, IbdiagError) and self.rank != 0 and not err.message.startswith("rank "):
            err.message = f"rank {self.rank}: {err.message}"
        if self.report_dir:
            from ibdiag.bench.collective.spawn import write_error

            try:
                write_error(self.report_dir, self.rank, err)
            except OSError:
                pass
        if isinstance(err, IbdiagError):
            print_error(err.message, err.hint)
        else:
            print_error(
                f"rank {self.rank}: internal error: {type(err).__name__}: {err}",
                "rerun with --debug for the traceback and report it",
            )
        self.done = True


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
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            parser=parse_decimal,
            metavar="S",
            help="Longest wait on any rank, seconds: a dead or stuck rank ends the run with exit 3 naming it.",
        ),
    ] = DEFAULT_TIMEOUT_S,
    fmt: FormatOption = OutputFormat.table,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            metavar="FILE",
            help="Also write the JSON result (ibdiag.bench/1) to FILE, atomically (for ibdiag verdict --bench).",
        ),
    ] = None,
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
    from ibdiag.bench.collective.spec import JOB_ENV, RankJob, RunSpec
    from ibdiag.bench.results.collective_config import CollectiveConfig
    from ibdiag.collectives import collective_dtype, get_op
    from ibdiag.runtime.launch import detect_launch
    from ibdiag.units import parse_size_spec

    report_dir = env().environ.get(REPORT_DIR_ENV)
    launch = detect_launch(env().environ)
    if report_dir:
        if launch is None:
            raise UsageError(
                f"{REPORT_DIR_ENV} is set but no rank environment",
                hint=f"{REPORT_DIR_ENV} is for ranks started by --nproc; unset it",
            )
        return _supervised_rank(launch, report_dir)
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
        timeout_s=timeout,
    )
    if nproc is not None and not 1 <= nproc <= 4096:
        raise UsageError(
            f"--nproc {nproc} is out of range",
            hint="start 1 to 4096 local ranks (one per GPU for NCCL)",
        )
    cfg = read_config(config).section("collective", CollectiveConfig)
    check_output_path(save, "--save")
    if nproc is not None:
        if launch is not None:
            raise UsageError(
                f"--nproc starts its own ranks, but this process is already rank {launch.rank} of a {launch.launcher} job of {launch.world_size}",
                hint="drop --nproc under torchrun/srun/mpirun (each rank runs ibdiag bench collective itself)",
            )
        from ibdiag.bench.collective import spawn
        from ibdiag.bench.results.model import bench_run_from_json
        from ibdiag.findings.model import Finding

        child_env = {**env().environ, JOB_ENV: RankJob(spec, cfg).to_env()}
        with _ProgressBar() as bar:
            doc = spawn.run_local(
                nproc, ["bench", "collective"], timeout_s=timeout, on_progress=bar, env=child_env
            )
        run = bench_run_from_json(doc["run"], source="rank 0's result")
        findings: Sequence[Finding] = [Finding.from_json(f) for f in doc.get("findings", [])]
        return emit_run(run, findings, fmt, save, strict)
    if launch is None:
        raise UsageError(
            "no ranks to run: no launcher environment (torchrun, srun, mpirun) and no --nproc",
            hint="ibdiag bench collective --nproc 4 (4 local ranks), or launch it with torchrun/srun/mpirun",
        )
    from ibdiag.bench.collective.analysis import to_bench_run
    from ibdiag.bench.collective.runner import run_rank
    from ibdiag.runtime.hooks import TestHooks

    report = _FailureReport(None, launch.rank)
    try:
        with _ctrl_c_ends_the_rank(), _ProgressBar() as bar:
            measurement = run_rank(
                spec,
                launch,
                hooks=TestHooks.from_env(env().environ),
                on_progress=bar if launch.rank == 0 else None,
                on_watchdog=_die_from_watchdog(None, launch.rank),
                on_failure=report,
                env=env().environ,
            )
    except IbdiagError as e:
        if report.done:
            return int(e.exit_status)  # already said, before the teardown
        if launch.rank != 0 and not e.message.startswith("rank "):
            e.message = f"rank {launch.rank}: {e.message}"
        raise
    except Exception:
        if report.done and not debug:
            return int(ExitStatus.CANNOT_RUN)
        raise
    if measurement is None:  # not rank 0: only rank 0 prints and saves
        return 0
    run, findings = to_bench_run(measurement, cfg)
    return emit_run(run, findings, fmt, save, strict)


def _supervised_rank(launch: Any, report_dir: str) -> int:
    """A rank started by --nproc: its job comes from the supervisor (JSON in the environment);
    progress, result and errors go to files the supervisor reads."""
    from ibdiag.bench.collective import spawn
    from ibdiag.bench.collective.analysis import to_bench_run
    from ibdiag.bench.collective.runner import run_rank
    from ibdiag.bench.collective.spec import RankJob
    from ibdiag.runtime.hooks import TestHooks

    def progress(done: int, total: int, label: str) -> None:
        spawn.write_progress(report_dir, done, total, label)

    report = _FailureReport(report_dir, launch.rank)
    try:
        job = RankJob.from_env(env().environ)
        with _ctrl_c_ends_the_rank():
            measurement = run_rank(
                job.spec,
                launch,
                hooks=TestHooks.from_env(env().environ),
                on_progress=progress,
                on_watchdog=_die_from_watchdog(report_dir, launch.rank),
                on_failure=report,
                env=env().environ,
            )
        if measurement is not None:
            run, findings = to_bench_run(measurement, job.config)
            spawn.write_result(
                report_dir, {"run": run.to_data(), "findings": [f.to_json() for f in findings]}
            )
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if report.done:
            return int(e.exit_status) if isinstance(e, IbdiagError) else int(ExitStatus.CANNOT_RUN)
        spawn.write_error(report_dir, launch.rank, e)
        raise
    return 0
