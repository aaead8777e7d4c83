"""``ibdiag bench collective`` as a library: :func:`run` measures collective bus bandwidth the way nccl-tests
does, through torch.distributed (NCCL on GPUs, gloo on CPUs), as one rank of a job a launcher started
(torchrun, srun, mpirun), or as the supervisor of ``nproc`` local ranks it starts itself
(:mod:`~ibdiag.bench.collective.spawn`), or as one of those ranks (its job in the environment).

Rank 0 (and the supervisor) return the result the views draw (:func:`ibdiag.bench.views.outputs`); every
other rank returns only its exit status. torch is imported by the ranks' modules when a rank runs, never
when this module is imported.

A rank cannot always unwind: a call stuck in NCCL or gloo cannot be interrupted, and NCCL may abort the
process. So what failed is said (``on_error``; the error file a supervisor reads) *before* any teardown,
and a rank whose watchdog expires is ended by ``on_stuck``, which the caller provides (the command line
ends the process).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.bench.collective import spawn
from ibdiag.bench.collective.analysis import to_bench_run
from ibdiag.bench.collective.runner import run_rank
from ibdiag.bench.collective.spec import JOB_ENV, RankJob, RunSpec
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.bench.results.document import BenchResult
from ibdiag.bench.results.model import bench_run_from_json
from ibdiag.config import Config
from ibdiag.errors import ExitStatus, IbdiagError, PeerTimeoutError, UsageError
from ibdiag.findings.model import Finding, RunMeta
from ibdiag.node.root import host_of
from ibdiag.outfile import check_output_path
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import LaunchEnv, detect_launch

#: Most local ranks ``nproc`` starts.
MAX_NPROC = 4096

#: Says an error (message, hint) where the user sees it.
SayError = Callable[[str, str | None], None]
#: Ends this process with the exit status given; never returns.
EndProcess = Callable[[int], None]


@dataclass(frozen=True)
class CollectiveRequest:
    """What ``ibdiag bench collective`` is asked: the run (op, sizes, loop, backend), how ranks start,
    the settings it is judged by, and what this process does with progress and failures."""

    spec: RunSpec
    nproc: int | None = None
    """Start this many local ranks here; None: this process is a rank of a launcher's job."""
    config: Config = field(default_factory=lambda: Config(None, {}))
    save: Path | None = None
    """``--save``: checked before any rank starts (the caller writes it, on rank 0)."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """The launcher's variables (``RANK``, ``WORLD_SIZE`` ...), NCCL's settings, and what a supervisor
    gives the ranks it starts (``IBDIAG_COLLECTIVE_REPORT_DIR``, ``IBDIAG_COLLECTIVE_JOB``)."""
    on_progress: Callable[[int, int, str], None] | None = None
    """Rank 0's steps (done, total, label), also from ``nproc`` ranks."""
    on_error: SayError | None = None
    """Says a rank's failure (and the watchdog's diagnosis) before any teardown; a failure said is not
    raised again (the result carries its exit status)."""
    on_stuck: EndProcess | None = None
    """Ends the process when a rank's watchdog expires (a stuck call cannot be interrupted); None:
    the diagnosis is only said."""
    debug: bool = False
    """An internal error already said is raised again (for its traceback)."""


@dataclass(frozen=True)
class CollectiveOutcome:
    """Rank 0's result (the supervisor's with ``nproc``), or None on a rank that prints nothing: any
    other rank, a rank ``nproc`` started, or a failure already said; then ``exit_status`` is its status."""

    result: BenchResult | None
    exit_status: int = 0


def run(req: CollectiveRequest) -> CollectiveOutcome:
    """Run this process's part of the benchmark; ibdiag errors (exit 2 options, 3 a rank that died or hung,
    naming it)."""
    report_dir = req.environ.get(spawn.REPORT_DIR_ENV)
    launch = detect_launch(req.environ)
    if report_dir:
        if launch is None:
            raise UsageError(
                f"{spawn.REPORT_DIR_ENV} is set but no rank environment",
                hint=f"{spawn.REPORT_DIR_ENV} is for ranks started by --nproc; unset it",
            )
        return CollectiveOutcome(None, _supervised_rank(req, launch, report_dir))
    if req.nproc is not None and not 1 <= req.nproc <= MAX_NPROC:
        raise UsageError(
            f"--nproc {req.nproc} is out of range",
            hint="start 1 to 4096 local ranks (one per GPU for NCCL)",
        )
    cfg = req.config.section("collective", CollectiveConfig)
    check_output_path(req.save, "--save")
    if req.nproc is not None:
        if launch is not None:
            raise UsageError(
                f"--nproc starts its own ranks, but this process is already rank {launch.rank} of a {launch.launcher} job of {launch.world_size}",
                hint="drop --nproc under torchrun/srun/mpirun (each rank runs ibdiag bench collective itself)",
            )
        return CollectiveOutcome(_local_ranks(req, req.nproc, cfg))
    if launch is None:
        raise UsageError(
            "no ranks to run: no launcher environment (torchrun, srun, mpirun) and no --nproc",
            hint="ibdiag bench collective --nproc 4 (4 local ranks), or launch it with torchrun/srun/mpirun",
        )
    return _this_rank(req, launch, cfg)


def _local_ranks(req: CollectiveRequest, nproc: int, cfg: CollectiveConfig) -> BenchResult:
    """``nproc`` ranks started here; rank 0's run and findings come back through its report directory."""
    child_env = {**req.environ, JOB_ENV: RankJob(req.spec, cfg).to_env()}
    doc = spawn.run_local(
        nproc,
        ["bench", "collective"],
        timeout_s=req.spec.timeout_s,
        on_progress=req.on_progress,
        env=child_env,
    )
    run = bench_run_from_json(doc["run"], source="rank 0's result")
    findings = [Finding.from_json(f) for f in doc.get("findings", [])]
    return BenchResult.of_run(run, findings, RunMeta.now(host_of(None)))


def _this_rank(
    req: CollectiveRequest, launch: LaunchEnv, cfg: CollectiveConfig
) -> CollectiveOutcome:
    """This process as one rank of a launcher's job: rank 0 returns the result, the others nothing."""
    failure = _FailureReport(None, launch.rank, req.on_error)
    try:
        with _ctrl_c_ends_the_rank():
            measurement = run_rank(
                req.spec,
                launch,
                hooks=TestHooks.from_env(req.environ),
                on_progress=req.on_progress if launch.rank == 0 else None,
                on_watchdog=_watchdog_expiry(req, None, launch.rank),
                on_failure=failure if req.on_error is not None else None,
                env=req.environ,
            )
    except IbdiagError as e:
        if failure.done:
            return CollectiveOutcome(None, int(e.exit_status))  # already said, before the teardown
        if launch.rank != 0 and not e.message.startswith("rank "):
            e.message = f"rank {launch.rank}: {e.message}"
        raise
    except Exception:
        if failure.done and not req.debug:
            return CollectiveOutcome(None, int(ExitStatus.CANNOT_RUN))
        raise
    if measurement is None:  # not rank 0: only rank 0 prints and saves
        return CollectiveOutcome(None)
    run, findings = to_bench_run(measurement, cfg)
    return CollectiveOutcome(BenchResult.of_run(run, findings, RunMeta.now(host_of(None))))


def _supervised_rank(req: CollectiveRequest, launch: LaunchEnv, report_dir: str) -> int:
    """A rank started by ``nproc``: its job comes from the supervisor (JSON in the environment);
    progress, result and errors go to files the supervisor reads. Returns the exit status."""

    def progress(done: int, total: int, label: str) -> None:
        spawn.write_progress(report_dir, done, total, label)

    failure = _FailureReport(report_dir, launch.rank, req.on_error)
    try:
        job = RankJob.from_env(req.environ)
        with _ctrl_c_ends_the_rank():
            measurement = run_rank(
                job.spec,
                launch,
                hooks=TestHooks.from_env(req.environ),
                on_progress=progress,
                on_watchdog=_watchdog_expiry(req, report_dir, launch.rank),
                on_failure=failure,
                env=req.environ,
            )
        if measurement is not None:
            run, findings = to_bench_run(measurement, job.config)
            spawn.write_result(
                report_dir, {"run": run.to_data(), "findings": [f.to_json() for f in findings]}
            )
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if failure.done:
            return int(e.exit_status) if isinstance(e, IbdiagError) else int(ExitStatus.CANNOT_RUN)
        spawn.write_error(report_dir, launch.rank, e)
        raise
    return 0


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


def _watchdog_expiry(
    req: CollectiveRequest, report_dir: str | None, rank: int
) -> Callable[[str], None]:
    """The watchdog's callback: a stuck call cannot be interrupted, so say why and end the process (exit 3)."""

    def expire(message: str) -> None:
        hint = "check the named ranks' hosts; raise --timeout only if the sizes are huge"
        if (
            report_dir and not Path(report_dir, f"error.rank{rank}.json").exists()
        ):  # never over the diagnosis written before a teardown
            try:
                spawn.write_error(report_dir, rank, PeerTimeoutError(message, hint))
            except OSError:
                pass
        if req.on_error is not None:
            req.on_error(message, hint)
        if req.on_stuck is not None:
            req.on_stuck(int(ExitStatus.CANNOT_RUN))

    return expire


class _FailureReport:
    """``run_rank``'s ``on_failure``: say what failed (``say``, and the ``nproc`` error file) before any
    teardown, so the diagnosis survives a teardown that hangs or a process that NCCL aborts."""

    def __init__(self, report_dir: str | None, rank: int, say: SayError | None) -> None:
        self.report_dir, self.rank, self.say = report_dir, rank, say
        self.done = False

    def __call__(self, err: BaseException) -> None:
        if isinstance(err, IbdiagError) and self.rank != 0 and not err.message.startswith("rank "):
            err.message = f"rank {self.rank}: {err.message}"
        if self.report_dir:
            try:
                spawn.write_error(self.report_dir, self.rank, err)
            except OSError:
                pass
        if self.say is not None:
            if isinstance(err, IbdiagError):
                self.say(err.message, err.hint)
            else:
                self.say(
                    f"rank {self.rank}: internal error: {type(err).__name__}: {err}",
                    "rerun with --debug for the traceback and report it",
                )
        self.done = True
