"""One rank's run, phase by phase: set-up, memory check, the timed steps, the gather, and teardown.

Driven by :func:`ibdiag.bench.collective.runner.run_rank`. The device (gloo's host, NCCL's GPU, or the
CPU stand-in used by the tests) is behind :mod:`~ibdiag.bench.collective.device`; the timed loop is
:mod:`~ibdiag.bench.collective.timing`'s; heartbeats and the watchdog are
:mod:`~ibdiag.bench.collective.liveness`'s.

Failure and teardown. A failed wait is turned into an error that names who did not answer
(:meth:`_Rank.fail`, from the heartbeats) *before* anything is torn down, and the caller writes it out
(stderr, the ``--nproc`` error file) before :meth:`_Rank.close`. On failure the process groups are
aborted (``_abort_process_group``) when the run has a device stream (NCCL, or its stand-in), not destroyed:
``destroy_process_group()`` can hang on a broken NCCL communicator (a gloo-only run is destroyed: that is quick). ibdiag's watchdog stays alive through the teardown with its own bound
(:data:`TEARDOWN_S`), so a teardown that hangs still ends the process (exit 3) after the diagnosis
was written.
"""

from __future__ import annotations

import datetime
import gc
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ibdiag.bench.collective import validate
from ibdiag.bench.collective.liveness import (
    WATCHDOG_GRACE_S,
    HeartbeatThread,
    Watchdog,
    diagnose_wait,
    heartbeat_period,
    read_heartbeats,
    who_did_not_answer,
)
from ibdiag.bench.collective.netif import control_interface
from ibdiag.bench.collective.plan import buffer_bytes
from ibdiag.bench.collective.spec import RunSpec
from ibdiag.bench.collective.timing import (
    calls_kept,
    kept_indices,
    queue_depth,
    timed_host,
    timed_queued,
    wait_events,
    warmup_queued,
)
from ibdiag.collectives import OPS
from ibdiag.errors import CannotRunError, IbdiagError, PeerTimeoutError, UsageError
from ibdiag.runtime.hooks import TestHooks
from ibdiag.runtime.launch import LaunchEnv
from ibdiag.runtime.torchdist import (
    COMM_ERRORS,
    client_store,
    collective_call,
    first_line,
    import_dist,
)
from ibdiag.units import format_bytes

NCCL_EXTRA_S = 30.0
"""NCCL's process-group timeout is ``timeout`` + this: ibdiag's own bounded waits report first."""
TEARDOWN_S = 20.0
"""After a failure, the teardown (abort of the process groups) gets at most this long (and at least 5 s, or
``--timeout`` when shorter) before the watchdog ends the process."""

StepValues = tuple[float, float, list[float], "int | None"]
"""One step on one rank: time per call, mean in-collective time, kept per-call times, wrong elements."""


class _Rank:
    """One rank's run. Not thread-safe; the watchdog and heartbeat threads only read ``step``."""

    def __init__(
        self,
        spec: RunSpec,
        launch: LaunchEnv,
        device: Any,
        hooks: TestHooks,
        env: Mapping[str, str],
        on_progress: Callable[[int, int, str], None] | None,
        on_watchdog: Callable[[str], None] | None,
    ) -> None:
        self.torch, self.dist = import_dist()
        self.spec, self.launch, self.dev, self.hooks, self.env = spec, launch, device, hooks, env
        self.on_progress, self.on_watchdog = on_progress, on_watchdog
        self.rank, self.world = launch.rank, launch.world_size
        self.prefix = f"ibdiag/{launch.restart}/"
        self.step = 0
        self.step_label = ""
        self.phase = "reading the launch"
        self.total_steps = 0
        self.store: Any = None
        self.hb: HeartbeatThread | None = None
        self.watchdog: Watchdog | None = None
        self.device: Any = None
        self.ctrl: Any = None
        self.interface = ""
        self.host = socket.gethostname().split(".")[0]

    @property
    def queued(self) -> bool:
        return bool(self.dev.queued)

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
            return f"setup ({self.phase})"
        return f"step {self.step}/{self.total_steps} ({self.step_label})"

    # -- failure ----------------------------------------------------------------------------------------

    def diagnose(self, *, timed_out: bool = True) -> str:
        """Who did not answer: two heartbeat readings :func:`diagnose_wait` apart ("" when all is well and nothing timed out)."""
        try:
            store = client_store(self.launch.master_addr, self.launch.master_port, 10.0)
            first = read_heartbeats(store, self.world, self.prefix)
            time.sleep(diagnose_wait(self.world))
            second = read_heartbeats(store, self.world, self.prefix)
        except Exception as e:  # any store failure means it is unreachable; said below
            return f"the rendezvous store at {self.launch.master_addr}:{self.launch.master_port} is unreachable too ({first_line(e)}): rank 0 or the launcher is gone"
        missing = who_did_not_answer(first, second, self.world, self.step, me=self.rank)
        if missing:
            return "ranks that did not answer: " + "; ".join(missing)
        if timed_out:
            return "every rank is alive and reached this step: the collective itself is stuck (a link, a NIC or a peer's GPU)"
        return ""

    def fail(self, e: BaseException) -> IbdiagError | None:
        """The error to report for ``e`` (diagnosis included), or None for a bug (reported as an internal error)."""
        if isinstance(e, IbdiagError):
            return e
        text = first_line(e)
        if "out of memory" in text.lower() or isinstance(e, MemoryError):
            return CannotRunError(
                f"rank {self.rank}: out of memory at {self._where()}: {text}",
                hint="measure smaller sizes (--sizes) or fewer ranks per node",
            )
        if isinstance(e, ImportError) or "numpy is not available" in text.lower():
            return CannotRunError(
                f"rank {self.rank}: {self._where()} failed: {type(e).__name__}: {text}",
                hint="torch's object collectives need numpy: pip install 'ibdiag[collective]' (or pip install numpy) where the ranks run",
            )
        if not isinstance(e, COMM_ERRORS):
            return None
        timed_out = (
            "timeout" in text.lower() or "timed out" in text.lower() or isinstance(e, TimeoutError)
        )
        what = f"rank {self.rank}: {self._where()} " + (
            f"did not complete within {self.spec.timeout_s:g} s" if timed_out else f"failed: {text}"
        )
        who = self.diagnose(timed_out=timed_out)
        if not who:
            return CannotRunError(
                f"{what}; every other rank is alive",
                hint="this rank's own error: see the message; rerun with --debug for the traceback",
            )
        return PeerTimeoutError(
            f"{what}; {who}",
            hint="check the named ranks' hosts (were they killed, out of memory, stuck?), then rerun; raise --timeout only if the sizes are huge",
        )

    def _watchdog_expired(self) -> None:
        limit = self.watchdog.limit_s if self.watchdog is not None else self.spec.timeout_s
        if self.phase == "teardown after a failure":
            msg = f"rank {self.rank}: teardown after the failure above did not finish within {limit:g} s; ended by ibdiag's watchdog"
        else:
            msg = f"rank {self.rank}: no progress for {limit:g} s at {self._where()}; {self.diagnose() or 'every rank is alive'}"
        if self.on_watchdog is not None:
            self.on_watchdog(msg)

    # -- phases ----------------------------------------------------------------------------------------

    def setup(self) -> float:
        torch, dist = self.torch, self.dist
        timeout = datetime.timedelta(seconds=self.spec.timeout_s)
        t0 = time.perf_counter()
        spans = self.launch.launcher != "ibdiag" and (
            self.launch.local_world_size is not None and self.world > self.launch.local_world_size
        )
        iface = control_interface(self.env, spans_hosts=spans)
        if iface.export:
            os.environ["GLOO_SOCKET_IFNAME"] = (
                iface.export
            )  # gloo reads it when the process group is made
        self.interface = iface.describe()
        self.phase = "connecting to the rendezvous store"
        is_master = self.rank == 0 and not self.launch.agent_store
        try:
            self.store = dist.TCPStore(
                self.launch.master_addr,
                self.launch.master_port,
                self.world,
                is_master,
                timeout=timeout,
                wait_for_workers=False,
            )
        except Exception as e:  # a store failure has several exception types across versions
            verb = "serve" if is_master else "reach"
            raise CannotRunError(
                f"rank {self.rank}: cannot {verb} the rendezvous store at {self.launch.master_addr}:{self.launch.master_port}: {first_line(e)}",
                hint="check MASTER_ADDR/MASTER_PORT (a free port on rank 0's host), that rank 0 started, and firewalls",
            ) from None
        self.hb = HeartbeatThread(
            self.launch.master_addr,
            self.launch.master_port,
            self.rank,
            self.prefix,
            self.spec.timeout_s,
            heartbeat_period(self.world),
        )
        self.hb.start()
        if self.on_watchdog is not None:
            self.watchdog = Watchdog(self.spec.timeout_s + WATCHDOG_GRACE_S, self._watchdog_expired)
            self.watchdog.start()
        self.phase = "binding to a device"
        self.device = self.dev.bind(
            torch, self.launch, self.env, self.store, self.prefix, self.host
        )
        self.phase = "creating the process group"
        # gloo enforces the timeout on each call and raises: that is how a wait ends. NCCL's watchdog
        # would instead tear the process down (blaming a waiting rank), so its limit is set past ours:
        # the polled CUDA-event wait times out first and names who did not answer.
        pg_timeout = (
            timeout + datetime.timedelta(seconds=NCCL_EXTRA_S)
            if self.dev.pg_backend == "nccl"
            else timeout
        )
        store = dist.PrefixStore(self.prefix + "pg", self.store)
        dist.init_process_group(
            self.dev.pg_backend,
            store=store,
            rank=self.rank,
            world_size=self.world,
            timeout=pg_timeout,
            **self.dev.init_kwargs(),
        )
        self.ctrl = (
            dist.new_group(backend="gloo", timeout=timeout) if self.queued else dist.group.WORLD
        )
        self.phase = "the first collective"
        one = torch.ones(1, device=self.device)
        dist.all_reduce(one)
        self._sync()
        if int(one.item()) != self.world:
            raise CannotRunError(
                f"rank {self.rank}: the first all_reduce summed to {one.item()} instead of {self.world}",
                hint="the process group is broken; check the launcher's world size",
            )
        return time.perf_counter() - t0

    def _sync(self) -> None:
        """Wait for the device's queued work, bounded by the timeout; nothing to do for gloo."""
        if self.queued:
            ev = self.dev.event()
            ev.record()
            wait_events([ev], self.spec.timeout_s, self._beat)

    def check_memory(self, steps: Sequence[Any], dtype: Any) -> None:
        """Refuse sizes that do not fit, on every rank together (so no rank waits for one that gave up)."""
        self.phase = "checking memory on every rank"
        need = max(
            (buffer_bytes(OPS[self.spec.op], s.plan, dtype, check=False) for s in steps), default=0
        )
        where, avail = self.dev.free_bytes(self.launch)
        problem = None
        if need > 0.9 * avail:
            problem = f"rank {self.rank}: the largest size needs {format_bytes(need)} of buffers, {where} has {format_bytes(avail)} free"
        gathered: list[Any] = [None] * self.world
        self.dist.all_gather_object(gathered, problem, group=self.ctrl)
        problems = [p for p in gathered if p]
        if problems:
            raise UsageError(
                problems[0], hint="lower the largest size (--sizes) or run fewer ranks per node"
            )

    def measure(self, steps: Sequence[Any], dtype_name: str) -> list[StepValues]:
        torch, dist = self.torch, self.dist
        op, spec = self.spec.op, OPS[self.spec.op]
        tdtype = getattr(torch, dtype_name)
        send_buf = torch.ones(
            max(s.plan.send_elems for s in steps), dtype=tdtype, device=self.device
        )  # ones: no denormals or NaN to slow a CPU sum
        recv_buf = (
            send_buf
            if spec.placements == (True,)
            else torch.ones(max(s.plan.recv_elems for s in steps), dtype=tdtype, device=self.device)
        )
        keep = kept_indices(self.spec.iters, calls_kept(self.spec.iters, self.world, len(steps)))
        out: list[StepValues] = []
        for st in steps:
            self.hooks.before_step(
                self.rank, st.index
            )  # a hung rank (test hook) stops before it reaches the step
            self._enter(st.index, st.label)
            per = st.plan.count
            inp, outv = validate.views(
                op,
                self.rank,
                st.plan.send_elems,
                st.plan.recv_elems,
                per,
                st.in_place,
                send_buf,
                recv_buf,
            )
            call = collective_call(dist, op, self.rank, self.world, inp, outv)
            t_us, c_us = self._timed(call)
            wrong: int | None = None
            if self.spec.check:
                validate.prepare(op, self.rank, self.world, inp, outv, per)
                self._sync()
                dist.barrier()
                call()
                self._sync()
                wrong = validate.check(op, self.rank, self.world, outv, per)
            out.append((t_us, sum(c_us) / len(c_us), [c_us[i] for i in keep], wrong))
            if self.on_progress is not None:
                self.on_progress(st.index, len(steps), st.label)
        return out

    def _timed(self, call: Callable[[], Any]) -> tuple[float, list[float]]:
        """Warm-up, barrier, then the timed calls: (time per call, in-collective time of each call), µs."""
        s, dist = self.spec, self.dist

        def before() -> None:
            self.hooks.before_iteration(self.rank)

        if not self.queued:
            for _ in range(s.warmup):
                call()
                self._beat()
            dist.barrier()
            return timed_host(
                call,
                s.iters,
                blocking=s.blocking,
                barrier=dist.barrier,
                before=before,
                beat=self._beat,
            )
        call_s = warmup_queued(self.dev, call, s.warmup, s.timeout_s, self._beat)
        depth = queue_depth(s.iters, call_s, s.timeout_s + NCCL_EXTRA_S)
        self._sync()
        dist.barrier()
        self._sync()
        return timed_queued(
            self.dev,
            call,
            s.iters,
            depth,
            blocking=s.blocking,
            barrier=dist.barrier,
            before=before,
            timeout_s=s.timeout_s,
            beat=self._beat,
        )

    def gather(self, info: Any, values: list[StepValues]) -> list[Any] | None:
        """Every rank's info and per-step values on rank 0 (bounded: see ``timing.calls_kept``)."""
        self._enter(self.total_steps + 1, "gathering per-rank timings")
        gathered: list[Any] | None = [None] * self.world if self.rank == 0 else None
        self.dist.gather_object({"info": info, "values": values}, gathered, dst=0, group=self.ctrl)
        self.dist.barrier(group=self.ctrl)
        return gathered

    def close(self, *, failed: bool) -> None:
        """Tear down: destroy the process groups after a good run, abort them after a failure (with the
        watchdog still running, bounded by :data:`TEARDOWN_S`); then stop the threads."""
        if failed:
            self.phase = "teardown after a failure"
            if self.watchdog is not None:
                self.watchdog.extend(min(TEARDOWN_S, max(5.0, self.spec.timeout_s)))
            self.hooks.before_teardown(self.rank)
        # Drop every reference to a process group before tearing them down and collect now: a group that
        # outlives it is freed during interpreter shutdown, when its worker threads can no longer take the
        # GIL and abort the process ("terminate called without an active exception", seen with gloo).
        self.ctrl = None
        try:
            if self.dist.is_initialized():
                abort = getattr(self.dist.distributed_c10d, "_abort_process_group", None)
                if (
                    failed and abort is not None and self.queued
                ):  # gloo alone: destroying is quick and safe
                    abort()
                else:
                    self.dist.destroy_process_group()
        except Exception:  # teardown after a failure must not hide the failure
            pass
        gc.collect()
        threads = [t for t in (self.watchdog, self.hb) if t is not None]
        for t in threads:
            t.stop()
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=heartbeat_period(self.world) + 2.0)
        self.store = None
