"""Liveness of a run's ranks: heartbeats in the rendezvous store, who did not answer, and the watchdog.

Every rank publishes ``counter step pid host label`` under ``ibdiag/<restart>/hb/<rank>`` every
:func:`heartbeat_period` (1 s up to 1024 ranks, so the store gets at most 1024 writes a second; and at
once when it reaches a new step) from a thread with its own store connection. When a
wait fails, two readings :func:`diagnose_wait` apart tell a rank whose heartbeat stopped (process
dead or frozen) from one alive but not at this step; the ``--nproc`` supervisor reads the same keys.
The watchdog calls back when nothing progressed for ``timeout`` + :data:`WATCHDOG_GRACE_S`: a call
stuck in C++ cannot be interrupted from Python.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ibdiag.runtime.torchdist import client_store

HEARTBEAT_S = 1.0
"""How often a rank's heartbeat thread writes its counter and step, up to :data:`STORE_BEATS_PER_S` ranks."""
DIAGNOSE_WAIT_S = 2.5
"""How long a failing rank watches the heartbeats before naming the ranks that stopped (small jobs)."""
STORE_BEATS_PER_S = 1024
"""Heartbeat writes per second the rendezvous store receives at most: beyond this many ranks the period grows."""


def heartbeat_period(world: int) -> float:
    """Seconds between one rank's heartbeats: 1 s up to 1024 ranks, then ``world / 1024`` (4 s at 4096)."""
    return max(HEARTBEAT_S, world / STORE_BEATS_PER_S)


def diagnose_wait(world: int) -> float:
    """How long to watch the heartbeats: long enough for two beats of every live rank."""
    return max(DIAGNOSE_WAIT_S, 2 * heartbeat_period(world) + 0.5)


WATCHDOG_GRACE_S = 5.0
"""The watchdog fires this long after ``timeout`` so the backend's own timeout reports first."""


def _hb_key(prefix: str, rank: int) -> str:
    return f"{prefix}hb/{rank}"


@dataclass(frozen=True)
class Heartbeat:
    counter: int
    step: int
    pid: int
    host: str
    label: str = ""

    @property
    def where(self) -> str:
        return (
            f"step {self.step} ({self.label})"
            if self.label and self.step
            else ("setup" if not self.step else f"step {self.step}")
        )


def read_heartbeats(store: Any, world: int, prefix: str = "ibdiag/0/") -> dict[int, Heartbeat]:
    """Every rank's last heartbeat in ``store`` (ranks that never wrote one are absent)."""
    out: dict[int, Heartbeat] = {}
    keys = [_hb_key(prefix, r) for r in range(world)]
    values: dict[int, bytes] = {}
    if world and hasattr(store, "multi_get") and store.check(keys):
        values = dict(
            enumerate(store.multi_get(keys))
        )  # every rank has joined: two round trips, not 2 x world
    else:
        values = {r: store.get(k) for r, k in enumerate(keys) if store.check([k])}
    for r, raw in values.items():
        parts = raw.decode("utf-8", "replace").split(" ", 4)
        try:
            out[r] = Heartbeat(
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                parts[3] if len(parts) > 3 else "?",
                parts[4] if len(parts) > 4 else "",
            )
        except (ValueError, IndexError):
            continue
    return out


def who_did_not_answer(
    first: dict[int, Heartbeat],
    second: dict[int, Heartbeat],
    world: int,
    step: int,
    *,
    me: int | None = None,
) -> list[str]:
    """Ranks that did not answer, in words, from two heartbeat readings taken a few seconds apart."""
    out: list[str] = []
    for r in range(world):
        if r == me:
            continue
        hb = second.get(r)
        if hb is None:
            out.append(f"rank {r}: never joined (no heartbeat)")
            continue
        old = first.get(r)
        where = f"rank {r} on {hb.host} (pid {hb.pid})"
        if old is not None and old.counter == hb.counter:
            out.append(f"{where}: stopped responding at {hb.where} (process dead or frozen)")
        elif hb.step < step:
            out.append(f"{where}: alive but did not reach step {step} (still at {hb.where})")
    return out


class HeartbeatThread(threading.Thread):
    """Writes ``counter step pid host`` under ``hb/<rank>`` every second through its own store client."""

    def __init__(
        self,
        addr: str,
        port: int,
        rank: int,
        prefix: str,
        timeout_s: float,
        period_s: float = HEARTBEAT_S,
    ) -> None:
        super().__init__(name="ibdiag-heartbeat", daemon=True)
        self.addr, self.port, self.rank, self.prefix, self.timeout_s = (
            addr,
            port,
            rank,
            prefix,
            timeout_s,
        )
        self.period_s = period_s
        self.step = 0
        self.label = "setup"
        self._halt = threading.Event()
        self._wake = threading.Event()
        self.host = socket.gethostname().split(".")[0]

    def moved(self, step: int, label: str) -> None:
        """A new step: publish it now rather than at the next tick."""
        self.step, self.label = step, label
        self._wake.set()

    def run(self) -> None:
        try:
            store = client_store(self.addr, self.port, min(self.timeout_s, 30.0))
        except Exception:  # without a store there is no heartbeat; the run reports its own errors
            return
        counter = 0
        try:
            while not self._halt.is_set():
                counter += 1
                try:
                    store.set(
                        _hb_key(self.prefix, self.rank),
                        f"{counter} {self.step} {os.getpid()} {self.host} {self.label}",
                    )
                except Exception:  # the store host may be gone at the end of the run
                    return
                self._wake.wait(self.period_s)
                self._wake.clear()
        finally:
            del (
                store
            )  # closed in this thread: a store torn down at interpreter exit aborts the process

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()


class Watchdog(threading.Thread):
    """Calls ``on_expire`` once when :meth:`beat` was not called for ``limit_s``; :meth:`extend` changes the
    limit (teardown after a failure gets its own bound, so a hanging teardown still ends)."""

    def __init__(self, limit_s: float, on_expire: Callable[[], None]) -> None:
        super().__init__(name="ibdiag-watchdog", daemon=True)
        self.limit_s = limit_s
        self.on_expire = on_expire
        self.last = time.monotonic()
        self._halt = threading.Event()

    def beat(self) -> None:
        self.last = time.monotonic()

    def extend(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.last = time.monotonic()

    def run(self) -> None:
        while not self._halt.wait(0.5):
            if time.monotonic() - self.last > self.limit_s:
                self.on_expire()
                return

    def stop(self) -> None:
        self._halt.set()
