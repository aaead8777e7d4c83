"""The rank loop: set up the process group, time every size and placement, validate, gather on rank 0.

Every rank calls :func:`run_rank`; rank 0 gets the :class:`Measurement` back, the others None. The
torch.distributed calls themselves are :mod:`~ibdiag.bench.collective.torchdist`'s, the heartbeats and
the watchdog :mod:`~ibdiag.bench.collective.liveness`'s.

How it measures (nccl-tests' method, ``src/common.cu``):

* per size and placement: warm-up calls, a barrier, then ``iters`` calls timed together; the time per
  call is the total over ``iters``. NCCL: the calls are queued on the stream and timed with CUDA events
  from before the first to after the last (the host never waits in between, like nccl-tests); gloo has
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
rank publishes a heartbeat in the rendezvous store (a counter and the step it is at, once a second, from
a thread with its own store connection), so when a wait fails the rank can tell who did not answer:
a rank whose heartbeat stopped (process dead or frozen), a rank that never reached this step, or none
(every rank alive and here: the collective itself is stuck).
"""

from __future__ import annotations

import datetime
import gc
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.bench.collective import validate
from ibdiag.bench.collective.hooks import TestHooks
from ibdiag.bench.collective.launch import LaunchEnv
from ibdiag.bench.collective.liveness import DIAGNOSE_WAIT_S, HEARTBEAT_S, WATCHDOG_GRACE_S, HeartbeatThread, Watchdog, read_heartbeats, who_did_not_answer
from ibdiag.bench.collective.model import Measurement, MeasuredRow, RankInfo
from ibdiag.bench.collective.plan import SizePlan, buffer_bytes, plan_sizes
from ibdiag.bench.collective.spec import RunSpec
from ibdiag.bench.collective.torchdist import COMM_ERRORS, client_store, collective_call, first_line, import_dist, resolve_backend
from ibdiag.collectives import DTYPES, OPS, placement
from ibdiag.errors import CannotRunError, IbdiagError, PeerTimeoutError, UsageError
from ibdiag.units import format_bytes

SETTING_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")
"""Environment variables recorded with a result: they change algorithms, transports and interfaces."""
NCCL_EXTRA_S = 30.0
"""NCCL's process-group timeout is ``timeout`` + this: ibdiag's own bounded waits report first."""


@dataclass(frozen=True)
class SizeStep:
    """One size and placement of the run, as the ranks step through it."""

    index: int
    """1-based; 0 is the setup."""
    plan: SizePlan
    in_place: bool
    label: str


def plan_steps(op: str, sizes: Sequence[int], world: int, dtype: str) -> tuple[tuple[SizeStep, ...], tuple[int, ...]]:
    spec = OPS[op]
    plans, skipped = plan_sizes(spec, sizes, world, DTYPES[dtype])
    steps: list[SizeStep] = []
    for p in plans:
        for in_place in spec.placements:
            steps.append(SizeStep(len(steps) + 1, p, in_place, f"{op} {format_bytes(p.bytes)} {placement(in_place)}"))
    return tuple(steps), skipped


class _Rank:
    """One rank's run. Not thread-safe; the watchdog and heartbeat threads only read ``step``."""

    def __init__(self, spec: RunSpec, launch: LaunchEnv, hooks: TestHooks, on_progress: Callable[[int, int, str], None] | None, on_watchdog: Callable[[str], None] | None) -> None:
        self.torch, self.dist = import_dist()
        self.spec, self.launch, self.hooks = spec, launch, hooks
        self.on_progress, self.on_watchdog = on_progress, on_watchdog
        self.rank, self.world = launch.rank, launch.world_size
        self.prefix = f"ibdiag/{launch.restart}/"
        self.step = 0
        self.step_label = "setup (rendezvous)"
        self.total_steps = 0
        self.store: Any = None
        self.hb: HeartbeatThread | None = None
        self.watchdog: Watchdog | None = None
        self.cuda = False
        self.device: Any = None
        self.ctrl: Any = None

    # -- helpers ---------------------------------------------------------------------------------------

    def _beat(self) -> None:
        if self.watchdog is not None:
            self.watchdog.beat()

    def _enter(self, step: int, label: str) -> None:
        self.step, self.step_label = step, label
        if self.hb is not None:
            self.hb.moved(step, label)
        self._beat()

    def _where(self) -> str:
        if self.step == 0:
            return "setup (rendezvous)"
        return f"step {self.step}/{self.total_steps} ({self.step_label})"

    def diagnose(self, *, timed_out: bool = True) -> str:
        """Who did not answer: two heartbeat readings DIAGNOSE_WAIT_S apart."""
        try:
            store = client_store(self.launch.master_addr, self.launch.master_port, 10.0)
            first = read_heartbeats(store, self.world, self.prefix)
            time.sleep(DIAGNOSE_WAIT_S)
            second = read_heartbeats(store, self.world, self.prefix)
        except Exception as e:  # noqa: BLE001
            return f"the rendezvous store at {self.launch.master_addr}:{self.launch.master_port} is unreachable too ({first_line(e)}): rank 0 or the launcher is gone"
        missing = who_did_not_answer(first, second, self.world, self.step, me=self.rank)
        if missing:
            return "ranks that did not answer: " + "; ".join(missing)
        if timed_out:
            return "every rank is alive and reached this step: the collective itself is stuck (a link, a NIC or a peer's GPU)"
        return "every rank is alive and reached this step"

    def _fail(self, e: BaseException) -> IbdiagError:
        if isinstance(e, IbdiagError):
            return e
        text = first_line(e)
        if "out of memory" in text.lower() or isinstance(e, MemoryError):
            return CannotRunError(f"rank {self.rank}: out of memory at {self._where()}: {text}", hint="measure smaller sizes (--sizes) or fewer ranks per node")
        timed_out = "timeout" in text.lower() or "timed out" in text.lower() or isinstance(e, TimeoutError)
        what = f"rank {self.rank}: {self._where()} " + (f"did not complete within {self.spec.timeout_s:g} s" if timed_out else f"failed: {text}")
        return PeerTimeoutError(
            f"{what}; {self.diagnose(timed_out=timed_out)}",
            hint="check the named ranks' hosts (were they killed, out of memory, stuck?), then rerun; raise --timeout only if the sizes are huge",
        )

    def _watchdog_expired(self) -> None:
        msg = f"rank {self.rank}: no progress for {self.spec.timeout_s + WATCHDOG_GRACE_S:g} s at {self._where()}; {self.diagnose()}"
        if self.on_watchdog is not None:
            self.on_watchdog(msg)

    # -- phases ----------------------------------------------------------------------------------------

    def setup(self, backend: str) -> float:
        torch, dist = self.torch, self.dist
        timeout = datetime.timedelta(seconds=self.spec.timeout_s)
        t0 = time.perf_counter()
        if backend == "nccl":
            ngpu = torch.cuda.device_count()
            if self.launch.local_rank >= ngpu:
                raise CannotRunError(
                    f"rank {self.rank}: local rank {self.launch.local_rank} has no GPU of its own ({ngpu} visible)",
                    hint=f"start at most {ngpu} ranks per node (one GPU per rank), or use --backend gloo",
                )
            torch.cuda.set_device(self.launch.local_rank)
            self.device = torch.device("cuda", self.launch.local_rank)
            self.cuda = True
        else:
            self.device = torch.device("cpu")
        is_master = self.rank == 0 and not self.launch.agent_store
        try:
            self.store = dist.TCPStore(
                self.launch.master_addr, self.launch.master_port, self.world, is_master, timeout=timeout, wait_for_workers=False
            )
        except Exception as e:  # noqa: BLE001
            verb = "serve" if is_master else "reach"
            raise CannotRunError(
                f"rank {self.rank}: cannot {verb} the rendezvous store at {self.launch.master_addr}:{self.launch.master_port}: {first_line(e)}",
                hint="check MASTER_ADDR/MASTER_PORT (a free port on rank 0's host), that rank 0 started, and firewalls",
            ) from None
        self.hb = HeartbeatThread(self.launch.master_addr, self.launch.master_port, self.rank, self.prefix, self.spec.timeout_s)
        self.hb.start()
        if self.on_watchdog is not None:
            self.watchdog = Watchdog(self.spec.timeout_s + WATCHDOG_GRACE_S, self._watchdog_expired)
            self.watchdog.start()
        try:
            kwargs: dict[str, Any] = {}
            if self.cuda:
                kwargs["device_id"] = self.device
            # gloo enforces the timeout on each call and raises: that is how a wait ends. NCCL's watchdog
            # would instead tear the process down (blaming a waiting rank), so its limit is set past ours:
            # the polled CUDA-event wait times out first and names who did not answer.
            pg_timeout = timeout if backend == "gloo" else timeout + datetime.timedelta(seconds=NCCL_EXTRA_S)
            dist.init_process_group(backend, store=dist.PrefixStore(self.prefix + "pg", self.store), rank=self.rank, world_size=self.world, timeout=pg_timeout, **kwargs)
            self.ctrl = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD
            one = torch.ones(1, device=self.device)
            dist.all_reduce(one)
            self._sync()
            if int(one.item()) != self.world:
                raise CannotRunError(f"rank {self.rank}: the first all_reduce summed to {one.item()} instead of {self.world}", hint="the process group is broken; check the launcher's world size")
        except COMM_ERRORS as e:
            raise self._fail(e) from None
        return time.perf_counter() - t0

    def _sync(self) -> None:
        """Wait for the GPU's queued work, bounded by the timeout (a polled CUDA event, not a blocking
        synchronize that could wait forever on a stuck collective); nothing to do for gloo."""
        if self.cuda:
            ev = self.torch.cuda.Event()
            ev.record()
            self._wait_events([ev])

    def _wait_events(self, events: Sequence[Any]) -> None:
        """Wait for CUDA events in order, bounded by the timeout since the last one completed."""
        deadline = time.monotonic() + self.spec.timeout_s
        for ev in events:
            while not ev.query():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"timed out waiting {self.spec.timeout_s:g} s for the GPU")
                time.sleep(0.0002)
            deadline = time.monotonic() + self.spec.timeout_s
            self._beat()

    def check_memory(self, steps: Sequence[SizeStep], dtype: Any) -> None:
        """Refuse sizes that do not fit, on every rank together (so no rank waits for one that gave up)."""
        spec = OPS[self.spec.op]
        need = max((buffer_bytes(spec, s.plan, dtype, check=False) for s in steps), default=0)
        if self.cuda:
            free, _ = self.torch.cuda.mem_get_info(self.device)
            where, avail = f"GPU {self.device}", int(free)
        else:
            import psutil

            local = self.launch.local_world_size or 1
            where, avail = f"host memory shared by {local} local ranks", int(psutil.virtual_memory().available // local)
        problem = None
        if need > 0.9 * avail:
            problem = f"rank {self.rank}: the largest size needs {format_bytes(need)} of buffers, {where} has {format_bytes(avail)} free"
        gathered: list[Any] = [None] * self.world
        try:
            self.dist.all_gather_object(gathered, problem, group=self.ctrl)
        except COMM_ERRORS as e:
            raise self._fail(e) from None
        problems = [p for p in gathered if p]
        if problems:
            raise UsageError(problems[0], hint="lower the largest size (--sizes) or run fewer ranks per node")

    def measure(self, steps: Sequence[SizeStep], dtype_name: str) -> list[tuple[float, list[float], int | None]]:
        torch, dist = self.torch, self.dist
        op = self.spec.op
        tdtype = getattr(torch, dtype_name)
        spec = OPS[op]
        max_send = max(s.plan.send_elems for s in steps)
        max_recv = max(s.plan.recv_elems for s in steps)
        inplace_only = spec.placements == (True,)
        send_buf = torch.ones(max_send, dtype=tdtype, device=self.device)  # ones: no denormals or NaN to slow a CPU sum
        recv_buf = send_buf if inplace_only else torch.ones(max_recv, dtype=tdtype, device=self.device)
        out: list[tuple[float, list[float], int | None]] = []
        for st in steps:
            self.hooks.before_step(self.rank, st.index)  # a hung rank (test hook) stops before it reaches the step
            self._enter(st.index, st.label)
            per = st.plan.count
            send, recv, call = self._bind(st, send_buf, recv_buf)
            try:
                for _ in range(self.spec.warmup):
                    call()
                    self._beat()
                self._sync()
                dist.barrier()
                self._sync()
                t_us, c_us = self._timed(call)
                wrong: int | None = None
                if self.spec.check:
                    validate.prepare(op, self.rank, self.world, send, recv, per)
                    self._sync()
                    dist.barrier()
                    call()
                    self._sync()
                    wrong = validate.check(op, self.rank, self.world, recv, per)
            except COMM_ERRORS as e:
                raise self._fail(e) from None
            out.append((t_us, c_us, wrong))
            if self.on_progress is not None:
                self.on_progress(st.index, len(steps), st.label)
        return out

    def _bind(self, st: SizeStep, send_buf: Any, recv_buf: Any) -> tuple[Any, Any, Callable[[], Any]]:
        """The views and the call for one step (nccl-tests' in-place offsets, see ``validate.views``)."""
        p = st.plan
        inp, out = validate.views(self.spec.op, self.rank, p.send_elems, p.recv_elems, p.count, st.in_place, send_buf, recv_buf)
        return inp, out, collective_call(self.dist, self.spec.op, self.rank, self.world, inp, out)

    def _timed(self, call: Callable[[], Any]) -> tuple[float, list[float]]:
        """(time per call, in-collective time of each call), µs, on this rank."""
        iters, blocking, dist = self.spec.iters, self.spec.blocking, self.dist
        if self.cuda:
            ev = self.torch.cuda.Event
            first, last = ev(enable_timing=True), ev(enable_timing=True)
            starts = [ev(enable_timing=True) for _ in range(iters)]
            ends = [ev(enable_timing=True) for _ in range(iters)]
            first.record()
            for i in range(iters):
                self.hooks.before_iteration(self.rank)
                starts[i].record()
                call()
                ends[i].record()
                if blocking:
                    self._wait_events([ends[i]])
                    dist.barrier()
            last.record()
            self._wait_events([*ends, last])
            total_ms = first.elapsed_time(last)
            per_call = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
            return total_ms * 1e3 / iters, per_call
        per_call = []
        t0 = time.perf_counter()
        for _ in range(iters):
            self.hooks.before_iteration(self.rank)
            c0 = time.perf_counter()
            call()
            per_call.append((time.perf_counter() - c0) * 1e6)
            if blocking:
                dist.barrier()
            self._beat()
        total = time.perf_counter() - t0
        return total * 1e6 / iters, per_call

    def gather(self, info: RankInfo, values: list[tuple[float, list[float], int | None]]) -> list[Any] | None:
        payload = {"info": info, "values": values}
        self._enter(self.total_steps + 1, "gathering per-rank timings")
        gathered: list[Any] | None = [None] * self.world if self.rank == 0 else None
        try:
            self.dist.gather_object(payload, gathered, dst=0, group=self.ctrl)
            self.dist.barrier(group=self.ctrl)
        except COMM_ERRORS as e:
            raise self._fail(e) from None
        return gathered

    def close(self) -> None:
        for t in (self.watchdog, self.hb):
            if t is not None:
                t.stop()
        # Drop every reference to a process group before destroying them and collect now: a group that
        # outlives destroy_process_group() is freed during interpreter shutdown, when its worker threads
        # can no longer take the GIL and abort the process ("terminate called without an active
        # exception", seen with gloo in about 1 run in 15 before this).
        self.ctrl = None
        try:
            if self.dist.is_initialized():
                self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - teardown after a failure must not hide the failure
            pass
        gc.collect()
        for t in (self.watchdog, self.hb):
            if t is not None and t is not threading.current_thread():
                t.join(timeout=HEARTBEAT_S + 2.0)
        self.store = None


def run_rank(
    spec: RunSpec,
    launch: LaunchEnv,
    *,
    hooks: TestHooks | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
    on_watchdog: Callable[[str], None] | None = None,
) -> Measurement | None:
    """Run this rank's part of the benchmark; rank 0 returns the gathered Measurement, the others None.

    ``on_progress(done, total, label)`` is called after each step on rank 0. ``on_watchdog(message)``
    is called from a thread when nothing progressed for ``timeout + 5`` s; it must end the process
    (the stuck call cannot be interrupted). Errors are ibdiag errors: PeerTimeoutError (exit 3) names the
    ranks that did not answer.
    """
    torch, _ = import_dist()
    backend = resolve_backend(spec.backend)
    steps, skipped = plan_steps(spec.op, spec.sizes, launch.world_size, spec.dtype)
    if not steps:
        raise UsageError(
            f"no size in --sizes holds an element per rank for {spec.op} over {launch.world_size} ranks",
            hint="use larger sizes (at least the data type size x the number of ranks)",
        )
    rank = _Rank(spec, launch, hooks or TestHooks(), on_progress if launch.rank == 0 else None, on_watchdog)
    rank.total_steps = len(steps)
    try:
        setup_s = rank.setup(backend)
        if rank.on_progress is not None:
            rank.on_progress(0, len(steps), f"set up in {setup_s:.3g} s; measuring")
        rank.check_memory(steps, DTYPES[spec.dtype])
        values = rank.measure(steps, spec.dtype)
        device = "cpu"
        if rank.cuda:
            device = f"{rank.device} {torch.cuda.get_device_name(rank.device)}"
        info = RankInfo(launch.rank, socket.gethostname().split(".")[0], launch.local_rank, os.getpid(), device, setup_s)
        gathered = rank.gather(info, values)
    finally:
        rank.close()
    if gathered is None:
        return None
    infos = [g["info"] for g in gathered]
    rows = []
    for i, st in enumerate(steps):
        per_rank = [g["values"][i] for g in gathered]
        wrongs = [v[2] for v in per_rank]
        rows.append(
            MeasuredRow(
                plan=st.plan,
                in_place=st.in_place,
                time_us=tuple(v[0] for v in per_rank),
                coll_us=tuple(sum(v[1]) / len(v[1]) for v in per_rank),
                wrong=None if any(w is None for w in wrongs) else sum(int(w) for w in wrongs),
                coll_iter_us=tuple(tuple(v[1]) for v in per_rank),
            )
        )
    timing = (
        "CUDA events from before the first to after the last call (calls queued back to back), mean over ranks"
        if backend == "nccl"
        else "host timer around the calls (gloo calls return when done), mean over ranks"
    )
    if spec.blocking:
        timing += "; blocking: each call waited for and followed by a barrier"
    settings = {k: v for k, v in sorted(os.environ.items()) if k.startswith(SETTING_PREFIXES) or k == "CUDA_VISIBLE_DEVICES"}
    if backend == "nccl":
        try:
            settings["nccl_version"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - the version is a nicety
            pass
    return Measurement(
        settings=settings,
        op=spec.op,
        backend=backend,
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
        torch_version=str(torch.__version__),
        timeout_s=spec.timeout_s,
    )
