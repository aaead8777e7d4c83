"""The rank loop: set up the process group, time every size and placement, validate, gather on rank 0.

Every rank calls :func:`run_rank`; rank 0 gets the :class:`Measurement` back, the others None. The
phases are :mod:`~ibdiag.bench.collective.rank`'s, the device (host, GPU, CPU stand-in)
:mod:`~ibdiag.bench.collective.device`'s, the torch.distributed calls
:mod:`~ibdiag.runtime.torchdist`'s, the heartbeats and the watchdog
:mod:`~ibdiag.bench.collective.liveness`'s.

How it measures (nccl-tests' method, ``src/common.cu``):

* per size and placement: warm-up calls, a barrier, then ``iters`` calls timed together; the time per
  call is the total over ``iters``. NCCL: the calls are queued on the stream and timed with CUDA events
  from before the first to after the last (like nccl-tests, except that at most a bounded window of calls
  is queued ahead, so none outlives NCCL's timeout in the queue: ``timing.queue_depth``); gloo has
  no stream, each call returns when it is done, so the host timer around the loop is the same thing.
  ``blocking``: every call is waited for and followed by a barrier (nccl-tests ``-z 1``), barrier included.
* the row's time is the mean over ranks of each rank's time (nccl-tests' default ``-a 1``); every rank's
  own time and its in-collective time are kept for the straggler analysis.
* validation (nccl-tests' ``-c 1``): after timing, one call on known data (see ``validate``), wrong
  elements counted on each rank and summed.
* setup time: from connecting to the rendezvous store to the end of the first (1-element) collective,
  which is when NCCL has built its communicator and gloo its connections.

Waits are bounded. gloo's process group gets ``timeout`` and enforces it on every call; NCCL event
waits are polled against it (NCCL's own watchdog gets ``timeout`` + 30 s, as a backstop that would
otherwise kill a waiting rank first); a watchdog thread calls ``on_watchdog`` when no progress was made
for ``timeout`` + 5 s (a call stuck in C++ cannot be interrupted from Python). Every
rank publishes a heartbeat in the rendezvous store (a counter and the step it is at, every second up to
1024 ranks, less often beyond, from
a thread with its own store connection), so when a wait fails the rank can tell who did not answer:
a rank whose heartbeat stopped (process dead or frozen), a rank that never reached this step, or none
(every rank alive and here: the collective itself is stuck).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.bench.collective.device import select_device
from ibdiag.bench.collective.measurement import MeasuredRow, Measurement, RankInfo
from ibdiag.bench.collective.plan import SizePlan, plan_sizes
from ibdiag.bench.collective.rank import NCCL_EXTRA_S, _Rank
from ibdiag.bench.collective.spec import RunSpec
from ibdiag.collectives import DTYPES, OPS, placement
from ibdiag.errors import UsageError
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import LaunchEnv
from ibdiag.runtime.torchdist import import_dist
from ibdiag.units import format_bytes

__all__ = ["NCCL_EXTRA_S", "SETTING_PREFIXES", "SizeStep", "plan_steps", "run_rank"]

SETTING_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")
"""Environment variables recorded with a result: they change algorithms, transports and interfaces."""


@dataclass(frozen=True)
class SizeStep:
    """One size and placement of the run, as the ranks step through it."""

    index: int
    """1-based; 0 is the setup."""
    plan: SizePlan
    in_place: bool
    label: str


def plan_steps(
    op: str, sizes: Sequence[int], world: int, dtype: str
) -> tuple[tuple[SizeStep, ...], tuple[int, ...]]:
    spec = OPS[op]
    plans, skipped = plan_sizes(spec, sizes, world, DTYPES[dtype])
    steps: list[SizeStep] = []
    for p in plans:
        for in_place in spec.placements:
            steps.append(
                SizeStep(
                    len(steps) + 1,
                    p,
                    in_place,
                    f"{op} {format_bytes(p.bytes)} {placement(in_place)}",
                )
            )
    return tuple(steps), skipped


def run_rank(
    spec: RunSpec,
    launch: LaunchEnv,
    *,
    hooks: TestHooks | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
    on_watchdog: Callable[[str], None] | None = None,
    on_failure: Callable[[BaseException], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> Measurement | None:
    """Run this rank's part of the benchmark; rank 0 returns the gathered Measurement, the others None.

    ``on_progress(done, total, label)`` is called after each step on rank 0. ``on_watchdog(message)``
    is called from a thread when nothing progressed for ``timeout + 5`` s (or a teardown after a failure
    hangs); it must end the process (the stuck call cannot be interrupted). ``on_failure(error)`` is
    called with the error, diagnosis included, *before* any teardown, so it is written out even when the
    teardown hangs or the process is aborted; the error is raised after the teardown. Errors are ibdiag
    errors: PeerTimeoutError (exit 3) names the ranks that did not answer.
    """
    env = os.environ if env is None else env
    torch, _ = import_dist()
    device = select_device(spec.backend, env)
    steps, skipped = plan_steps(spec.op, spec.sizes, launch.world_size, spec.dtype)
    if not steps:
        raise UsageError(
            f"no size in --sizes holds an element per rank for {spec.op} over {launch.world_size} ranks",
            hint="use larger sizes (at least the data type size x the number of ranks)",
        )
    rank = _Rank(
        spec,
        launch,
        device,
        hooks or TestHooks(),
        env,
        on_progress if launch.rank == 0 else None,
        on_watchdog,
    )
    rank.total_steps = len(steps)
    failed = False
    try:
        setup_s = rank.setup()
        if rank.on_progress is not None:
            rank.on_progress(0, len(steps), f"set up in {setup_s:.3g} s; measuring")
        rank.check_memory(steps, DTYPES[spec.dtype])
        values = rank.measure(steps, spec.dtype)
        info = RankInfo(
            launch.rank,
            rank.host,
            launch.local_rank,
            os.getpid(),
            device.name(),
            setup_s,
            rank.interface,
        )
        gathered = rank.gather(info, values)
    except Exception as e:
        failed = True
        err = rank.fail(e)
        if on_failure is not None:
            on_failure(e if err is None else err)
        if err is None or err is e:
            raise
        raise err from None
    finally:
        rank.close(failed=failed)
    if gathered is None:
        return None
    return _measurement(spec, launch, device, torch, steps, skipped, gathered, env)


def _measurement(
    spec: RunSpec,
    launch: LaunchEnv,
    device: object,
    torch: object,
    steps: Sequence[SizeStep],
    skipped: tuple[int, ...],
    gathered: list[dict[str, Any]],
    env: Mapping[str, str],
) -> Measurement:
    infos = [g["info"] for g in gathered]
    rows = []
    for i, st in enumerate(steps):
        per_rank = [g["values"][i] for g in gathered]
        wrongs = [v[3] for v in per_rank]
        rows.append(
            MeasuredRow(
                plan=st.plan,
                in_place=st.in_place,
                time_us=tuple(v[0] for v in per_rank),
                coll_us=tuple(v[1] for v in per_rank),
                wrong=None if any(w is None for w in wrongs) else sum(int(w) for w in wrongs),
                coll_iter_us=tuple(tuple(v[2]) for v in per_rank),
            )
        )
    label = getattr(device, "label", "gloo")
    if label == "nccl":
        timing = "CUDA events from before the first to after the last call (calls queued back to back, a bounded window ahead), mean over ranks"
    elif label == "nccl-stand-in":
        timing = "CPU stand-in for CUDA events (a test fake: host clock at each record; gloo under NCCL's control flow), mean over ranks"
    else:
        timing = "host timer around the calls (gloo calls return when done), mean over ranks"
    if spec.blocking:
        timing += "; blocking: each call waited for and followed by a barrier"
    settings = {
        k: v
        for k, v in sorted(env.items())
        if k.startswith(SETTING_PREFIXES) or k == "CUDA_VISIBLE_DEVICES"
    }
    settings.update(getattr(device, "versions", dict)())
    return Measurement(
        settings=settings,
        op=spec.op,
        backend=label,
        dtype=spec.dtype,
        world_size=launch.world_size,
        iters=spec.iters,
        warmup=spec.warmup,
        blocking=spec.blocking,
        check=spec.check,
        launcher=launch.launcher,
        timing=timing,
        ranks=tuple(infos),
        rows=tuple(rows),
        skipped_sizes=skipped,
        torch_version=str(getattr(torch, "__version__", "?")),
        timeout_s=spec.timeout_s,
    )
