"""``ibdiag sweep`` as a library: :func:`run` is this process's part of a sweep across the job's nodes,
:func:`plan` what a sweep would cost without running anything (``--plan``).

One process per node, placed by the cluster's launcher (srun, torchrun, mpirun, a Kubernetes indexed
Job), found in the request's ``environ``: rank 0 plans, gathers and returns the result; every other rank
returns None once its part is done. Options left out take ``[sweep]``'s values from the config. Nothing
here prints: rank 0's progress and the warnings go to the request's callbacks, the result to its views
(:mod:`ibdiag.sweep.views`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.config import Config
from ibdiag.errors import UsageError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.node.root import host_of
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.outfile import check_output_path
from ibdiag.output.chart import need_matplotlib
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import LaunchEnv, detect_launch
from ibdiag.sweep.checks import sweep_findings
from ibdiag.sweep.conduct import RoundDone
from ibdiag.sweep.config import SweepSettingsFile
from ibdiag.sweep.job import SweepJob
from ibdiag.sweep.layout import FabricDescription
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.nodes import valid_adapter
from ibdiag.sweep.plan import plan_data, plan_fleet
from ibdiag.sweep.progress import progress_line
from ibdiag.sweep.runner import PairSpec
from ibdiag.sweep.schedule import Pattern
from ibdiag.units import parse_size

#: The ``-o`` formats ``--plan`` has a view for.
PLAN_FORMATS = ("table", "json")


@dataclass(frozen=True)
class SweepProgress:
    """Rank 0's progress after a round: what the round left done, and the seconds since the sweep began."""

    done: RoundDone
    elapsed_s: float

    def line(self) -> str:
        """``sweep: round 2/4 (first pass), 6 tests done, 3.1 s elapsed, ETA 3 s + second pass``."""
        return progress_line(self.done, self.elapsed_s)


@dataclass(frozen=True)
class SweepRequest:
    """What ``ibdiag sweep`` is asked: the options (None: ``[sweep]``'s value, else the default), the
    launcher's environment, and where the progress and the warnings go."""

    pattern: Pattern | None = None
    """``--pattern``: ring (2 rounds), pairwise (N-1 rounds) or random (``rounds`` rounds)."""
    rounds: int | None = None
    """``--rounds``: rounds of the random pattern (only there)."""
    seed: int = 0
    second_pass: bool = True
    test: str = "p2p"
    """``--test``: p2p (bench p2p per pair) or collective (a 2-rank gloo all_reduce per pair)."""
    transport: str | None = None
    """``--transport``: auto, rdma or tcp."""
    engine: str = "auto"
    """``--engine``: auto, ibdiag or perftest (any case)."""
    sizes: str | None = None
    """``--sizes``: the message size of each bandwidth test, binary units (``64M``)."""
    mode: str = "bw"
    rails: str | None = None
    """``--rails``: adapters in rail order, separated by commas; None: the GPUs' adapters from topo."""
    duration_s: float | None = None
    timeout_s: float | None = None
    """``--timeout``: the longest wait on a peer; a node silent that long is unreachable."""
    nodes: int | None = None
    """``--plan --nodes``: plan for this many nodes (default: the launcher's world size)."""
    pair_s: float | None = None
    """``--plan --pair-seconds``: seconds one pair test takes (default: the duration + 1 s of set-up)."""
    fabric: Path | None = None
    """``--fabric``: where the nodes sit (a saved fabric, with ``--routes`` its exact paths, or a
    cabling plan): rank 0 keeps each round's tests off each other's links. Read on rank 0 only."""
    output_format: str = "table"
    """The ``-o`` format the result will be written in: ``--plan`` refuses one it has no view for."""
    save: Path | None = None
    """``--save``: checked on rank 0 before the sweep runs (the writer writes it); ``--plan`` refuses it."""
    png: Path | None = None
    """``--png``: as ``save``, and matplotlib must be installed."""
    config: Config = field(default_factory=lambda: Config(None, {}))
    environ: Mapping[str, str] = field(default_factory=dict)
    """The launcher's variables (rank, world size, rendezvous), ``PATH`` for perftest, test hooks."""
    on_progress: Callable[[SweepProgress], None] | None = None
    """Called on rank 0 after every round."""
    on_warning: Callable[[str], None] = lambda message: None
    """Told, before the sweep runs, what will make its result doubtful (several ranks per node)."""
    on_log: Callable[[str], None] | None = None
    """Each line of this rank's servers and runners (``--debug``), ``rank N: `` first."""


@dataclass(frozen=True)
class SweepRunResult:
    """Rank 0's result: the report (``ibdiag.sweep/1``) and the sweep the views draw.

    (Not ``SweepResult``: that name is the sweep's own document, :class:`ibdiag.sweep.model.SweepResult`.)
    """

    report: Report
    meta: RunMeta
    sweep: SweepResult
    saved_to: Path | None = None
    """``--save``: where the writer puts the JSON document (the table says so)."""


@dataclass(frozen=True)
class PlanResult:
    """``--plan``: the schedule and what every pattern costs (``ibdiag.sweep-plan/1``)."""

    report: Report
    meta: RunMeta
    rails_given: bool
    """Whether ``--rails`` counted the rails (else the plan assumes one and says so)."""


@dataclass(frozen=True)
class _Settings:
    """The options checked and merged with ``[sweep]``."""

    file: SweepSettingsFile
    pattern: Pattern
    spec: PairSpec
    rails: tuple[str, ...] | None


def _settings(req: SweepRequest) -> _Settings:
    """The options with ``[sweep]``'s values for those left out; UsageError for one that cannot be."""
    file = req.config.section("sweep", SweepSettingsFile)
    chosen = req.pattern.value if req.pattern is not None else file.pattern
    if req.rounds is not None and chosen != "random":
        raise UsageError(
            f"--rounds is for --pattern random, not {chosen}",
            hint=f"{chosen} has a fixed number of rounds",
        )
    size = (
        parse_size(req.sizes, what="--sizes")
        if req.sizes is not None
        else parse_size(file.sizes, what="config [sweep] sizes")
    )
    spec = PairSpec(
        test=req.test,
        transport=req.transport if req.transport is not None else file.transport,
        bytes=size,
        mode=req.mode,
        duration_s=req.duration_s if req.duration_s is not None else file.duration_s,
        timeout_s=req.timeout_s if req.timeout_s is not None else file.timeout_s,
        engine=req.engine.lower(),
    )
    return _Settings(file, Pattern(chosen), spec, _rail_list(req.rails))


def _rail_list(text: str | None) -> tuple[str, ...] | None:
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


def plan(req: SweepRequest) -> PlanResult:
    """The schedule of the sweep ``req`` asks for and what every pattern costs; runs nothing."""
    s = _settings(req)
    if req.output_format not in PLAN_FORMATS:
        raise UsageError(
            f"--plan prints a table or JSON, not {req.output_format}",
            hint="use -o table or -o json with --plan",
        )
    if req.save is not None or req.png is not None:
        raise UsageError(
            "--plan runs nothing: there is nothing to --save or --png",
            hint="drop --save/--png, or drop --plan",
        )
    desc = _description(req.fabric)
    n = req.nodes
    if n is None and desc is not None:
        n = len(plan_fleet(desc))
    if n is None:
        launch = detect_launch(req.environ)
        if launch is None:
            raise UsageError(
                "--plan needs a node count: give --nodes N, or run it under the job's launcher",
                hint="e.g. ibdiag sweep --plan --nodes 64",
            )
        n = launch.world_size
    pair_s = req.pair_s if req.pair_s is not None else s.spec.duration_s + 1.0
    data = plan_data(
        s.pattern.value,
        n,
        rounds=req.rounds,
        seed=req.seed,
        rails=len(s.rails) if s.rails else 1,
        pair_s=pair_s,
        fabric=desc,
    )
    return PlanResult(
        Report("sweep-plan", data, ()), RunMeta.now(host_of(None)), s.rails is not None
    )


def run(req: SweepRequest) -> SweepRunResult | None:
    """This process's part of the sweep: rank 0 returns the result, every other rank None.

    UsageError (exit 2) for options that cannot be a sweep and for a process no launcher placed;
    CannotRunError (exit 3) when the rendezvous store cannot be reached or rank 0 went away.
    """
    s = _settings(req)
    if req.nodes is not None or req.pair_s is not None:
        raise UsageError(
            "--nodes and --pair-seconds are for --plan",
            hint="a running sweep takes its nodes from the launcher",
        )
    if s.spec.test == "collective" and s.spec.mode != "bw":
        raise UsageError(
            f"--test collective measures bandwidth only, not --mode {s.spec.mode}",
            hint="drop --mode, or use --test p2p for latency",
        )
    launch = _launch(req)
    desc = _description(req.fabric) if launch.rank == 0 else None
    job = SweepJob(
        s.pattern,
        req.rounds,
        req.seed,
        req.second_pass,
        s.spec,
        s.file.thresholds(),
        s.rails,
        s.file.start_timeout_s,
        sysfs=SysfsRoot("/"),  # this rank's one tree (rails, servers, clients)
        perftest_path=req.environ.get("PATH"),
        fabric=desc,
    )
    # The distributed runtime (bench's p2p client and engines, perftest, torch's store) is loaded for a
    # running sweep only: --plan and --help start without it.
    # lazy: start-up time of --plan
    from ibdiag.sweep.distributed import run_distributed

    result = run_distributed(
        job,
        launch,
        log=_log(req, launch.rank),
        on_round=_on_round(req) if launch.rank == 0 else None,
        hooks=TestHooks.from_env(req.environ),
    )
    if result is None:
        return None
    report = Report("sweep", result.to_json(), tuple(sweep_findings(result)))
    return SweepRunResult(report, RunMeta.now(host_of(None)), result, req.save)


def _description(path: Path | None) -> FabricDescription | None:
    """``--fabric``'s description of where the nodes sit (InputError, exit 2, for a bad file)."""
    if path is None:
        return None
    # lazy: fabric's dump reader and graph (networkx) for a saved fabric, with --fabric only
    from ibdiag.sweep.layoutread import load_description

    return load_description(path)


def _launch(req: SweepRequest) -> LaunchEnv:
    """This process's place in the job; on rank 0 the output paths checked before the sweep runs."""
    launch = detect_launch(req.environ)
    if launch is None:
        raise UsageError(
            "ibdiag sweep runs as one process per node under the cluster's launcher, and none was found (no RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK)",
            hint="srun -N 4 --ntasks-per-node 1 ibdiag sweep, or torchrun --nnodes 4 --nproc-per-node 1 ... -m ibdiag sweep; to see a plan: ibdiag sweep --plan --nodes N",
        )
    if launch.rank == 0:  # only rank 0 writes: the paths need not exist on the other nodes
        check_output_path(req.save, "--save")
        check_output_path(req.png, "--png")
        if req.png is not None:
            need_matplotlib("--png", "leave --png out (the matrix is in the table and the JSON)")
    if launch.rank == 0 and launch.local_world_size is not None and launch.local_world_size > 1:
        req.on_warning(
            f"{launch.local_world_size} ranks per node: a sweep tests nodes, one process per node (--ntasks-per-node 1, --nproc-per-node 1); ranks on one host test each other over loopback"
        )
    return launch


def _log(req: SweepRequest, rank: int) -> Callable[[str], None]:
    tell = req.on_log
    if tell is None:
        return lambda line: None
    return lambda line: tell(f"rank {rank}: {line}")


def _on_round(req: SweepRequest) -> Callable[[RoundDone], None] | None:
    """Rank 0's round callback: the request's progress with the time since the sweep began."""
    tell = req.on_progress
    if tell is None:
        return None
    started = time.monotonic()
    return lambda done: tell(SweepProgress(done, time.monotonic() - started))
