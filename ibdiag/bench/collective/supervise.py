"""The ``--nproc`` supervisor's watch over its ranks, and whom to blame when the run fails.

:func:`watch` polls the ranks started by :func:`ibdiag.bench.collective.spawn.run_local`: their exit
codes, rank 0's progress lines, the ranks' error files and their heartbeats in the store it serves (see
that module's docstring for what ends a run). When the run fails, :func:`blame` decides who caused it:

* a rank that died without a report *before* any rank wrote its diagnosis is a cause (killed, crashed);
* a rank that died *after* a diagnosis was written is a consequence -- NCCL's watchdog aborts (SIGABRT)
  ranks still waiting on a broken communicator, including the diagnosing rank once its report is out --
  and is mentioned, never blamed;
* otherwise rank 0's report (it names who did not answer), else the lowest failing rank's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ibdiag.bench.collective.liveness import (
    diagnose_wait,
    heartbeat_period,
    read_heartbeats,
    who_did_not_answer,
)
from ibdiag.errors import (
    CannotRunError,
    IbdiagError,
    InputError,
    NotSupportedError,
    PeerTimeoutError,
    UsageError,
)

#: The files rank 0 leaves in the report directory (:mod:`.spawn` writes them, the supervisor reads them).
PROGRESS = "progress.jsonl"
RESULT = "result.json"
#: How often the supervisor reads the heartbeats (seconds; 2 s above 64 ranks).
HEARTBEAT_POLL_S = 0.5

_ERRORS: dict[str, type[IbdiagError]] = {
    c.__name__: c
    for c in (UsageError, InputError, CannotRunError, PeerTimeoutError, NotSupportedError)
}


def _tail(path: Path, lines: int = 4) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    keep = [
        ln.rstrip()
        for ln in text.splitlines()
        if ln.strip() and "Warning" not in ln and not ln.startswith("  warnings.warn")
    ]
    return " | ".join(keep[-lines:])[-600:]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _read_progress(
    path: Path, pos: int, on_progress: Callable[[int, int, str], None] | None
) -> tuple[int, bool]:
    try:
        with open(path, encoding="utf-8") as fh:
            fh.seek(pos)
            chunk = fh.read()
    except FileNotFoundError:
        return pos, False
    moved = False
    consumed = 0
    for line in chunk.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # a line still being written
        consumed += len(line.encode("utf-8"))
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        moved = True
        if on_progress is not None:
            on_progress(int(ev["done"]), int(ev["total"]), str(ev["label"]))
    return pos + consumed, moved


def watch(
    procs: Sequence[subprocess.Popen[bytes]],
    rdir: Path,
    store: Any,
    prefix: str,
    timeout_s: float,
    on_progress: Callable[[int, int, str], None] | None,
) -> dict[str, Any] | None:
    n = len(procs)
    pos = 0
    last_activity = time.monotonic()
    last_hb: dict[int, Any] = {}
    beat_seen: dict[int, float] = {}  # when each rank's heartbeat was last seen to move
    starting_cpu: dict[
        int, float
    ] = {}  # CPU seconds of ranks that have not written a heartbeat yet
    hb_every = HEARTBEAT_POLL_S if n <= 64 else 2.0
    next_hb = 0.0
    grace_until: float | None = None
    stalled = False
    frozen: list[str] = []
    exited_at: dict[int, float] = {}  # when each rank was first seen ended
    reported_at: dict[int, float] = {}  # when each rank's error file was first seen
    while True:
        pos, moved = _read_progress(rdir / PROGRESS, pos, on_progress)
        now = time.monotonic()
        if moved:
            last_activity = now
        for r in range(n):
            if r not in reported_at and (rdir / f"error.rank{r}.json").exists():
                reported_at[r] = now
        codes = [p.poll() for p in procs]
        for r, c in enumerate(codes):
            if c is not None:
                exited_at.setdefault(r, now)
        if all(c is not None for c in codes):
            break
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed and codes[0] is not None:
            break  # rank 0 has given its account (or died): nothing more to wait for
        if 0 in reported_at and now - reported_at[0] > 0.5:
            break  # rank 0's diagnosis is written: its teardown (and the others') need not be waited for
        if failed and grace_until is None:
            # a rank killed by a signal says nothing more; one that failed cleanly lets rank 0 finish its diagnosis
            died = any(
                (codes[r] or 0) < 0 or not (rdir / f"error.rank{r}.json").exists() for r in failed
            )
            grace_until = now + (1.0 if died else diagnose_wait(n) + 4.0)
        if grace_until is not None and now > grace_until:
            break
        if now >= next_hb:
            next_hb = now + hb_every
            alive, last_hb, frozen = _poll_heartbeats(
                procs, codes, store, prefix, now, timeout_s, last_hb, beat_seen, starting_cpu
            )
            if alive:
                last_activity = now
            if frozen:
                break
        if now - last_activity > timeout_s + 15.0:
            stalled = True
            break
        time.sleep(0.1)
    _read_progress(rdir / PROGRESS, pos, on_progress)
    if frozen:
        raise PeerTimeoutError(
            "ranks that stopped answering: " + "; ".join(frozen),
            hint="something stopped the process (SIGSTOP, a debugger, a frozen cgroup) or it hangs in the kernel: check that host; the other ranks were stopped",
        )
    codes = [p.poll() for p in procs]
    result = rdir / RESULT
    if all(c == 0 for c in codes) and result.exists():
        return dict(json.loads(result.read_text(encoding="utf-8")))
    now = time.monotonic()
    for r, c in enumerate(codes):
        if c is not None:
            exited_at.setdefault(r, now)
    raise _compose_error(
        procs, codes, rdir, store, prefix, timeout_s, stalled, last_hb, exited_at, reported_at
    )


def _poll_heartbeats(
    procs: Sequence[subprocess.Popen[bytes]],
    codes: list[int | None],
    store: Any,
    prefix: str,
    now: float,
    timeout_s: float,
    last_hb: dict[int, Any],
    beat_seen: dict[int, float],
    starting_cpu: dict[int, float],
) -> tuple[bool, dict[int, Any], list[str]]:
    """One look at the heartbeats: (did any rank show life, the heartbeats known now, the ranks
    frozen). ``beat_seen`` and ``starting_cpu`` are updated in place."""
    n = len(procs)
    alive = False
    try:
        hb = read_heartbeats(store, n, prefix)
    except Exception:  # the store raises several types; no heartbeats this time
        hb = {}
    for r, h in hb.items():
        if last_hb.get(r) is None or (h.counter, h.step) != (
            last_hb[r].counter,
            last_hb[r].step,
        ):
            alive = True
            beat_seen[r] = now
    last_hb = {**last_hb, **hb}
    if _starting_ranks_busy(procs, codes, last_hb, starting_cpu):
        alive = True  # still importing torch on a loaded node: alive, not stalled
    frozen = _frozen_ranks(
        procs, codes, last_hb, beat_seen, now, max(timeout_s, 2 * heartbeat_period(n))
    )
    return alive, last_hb, frozen


#: Process states (psutil) of a rank that cannot be making progress, whatever its threads would do.
_NOT_RUNNING = ("stopped", "tracing-stop", "disk-sleep")


def _starting_ranks_busy(
    procs: Sequence[subprocess.Popen[bytes]],
    codes: Sequence[int | None],
    heartbeats: Mapping[int, Any],
    cpu: dict[int, float],
) -> bool:
    """Whether a rank that has not written its first heartbeat used CPU since the last look (``cpu``
    keeps each one's CPU seconds): start-up (importing torch, ~4 s of CPU) is progress too."""
    import psutil

    moved = False
    for r, p in enumerate(procs):
        if r in heartbeats or codes[r] is not None:
            cpu.pop(r, None)
            continue
        try:
            t = psutil.Process(p.pid).cpu_times()
        except psutil.Error:
            continue
        used = t.user + t.system
        if used > cpu.get(r, -1.0):
            moved = True
        cpu[r] = used
    return moved


def _frozen_ranks(
    procs: Sequence[subprocess.Popen[bytes]],
    codes: Sequence[int | None],
    heartbeats: Mapping[int, Any],
    beat_seen: Mapping[int, float],
    now: float,
    timeout_s: float,
) -> list[str]:
    """Ranks alive but stopped or stuck in the kernel whose heartbeat has not moved for ``timeout_s``.

    A heartbeat is written every second from its own thread, so a rank that is merely busy or
    waiting keeps beating; one that does not, and whose process is not running, is stopped.
    """
    import psutil

    out: list[str] = []
    for r, seen in beat_seen.items():
        if codes[r] is not None or now - seen < timeout_s:
            continue
        try:
            state = psutil.Process(procs[r].pid).status()
        except psutil.Error:
            continue
        if state in _NOT_RUNNING:
            h = heartbeats.get(r)
            where = f" at {h.where}" if h is not None and h.step else " during setup"
            out.append(
                f"rank {r} (pid {procs[r].pid}) is {state}{where}: no heartbeat for {now - seen:.1f} s (--timeout {timeout_s:g})"
            )
    return out


def blame(
    codes: Sequence[int | None], reported: Mapping[int, float], exited_at: Mapping[int, float]
) -> tuple[list[int], list[int]]:
    """(causes, consequences): ranks that ended badly without a report, split by whether they ended
    before the first report was seen (a cause) or after it (a consequence of the failure being torn
    down, e.g. NCCL's watchdog aborting a waiting rank). ``reported``/``exited_at``: first seen, monotonic."""
    first_report = min(reported.values(), default=None)
    causes: list[int] = []
    after: list[int] = []
    for r, c in enumerate(codes):
        if c is None or c == 0 or r in reported:
            continue
        if first_report is not None and exited_at.get(r, float("inf")) > first_report:
            after.append(r)
        else:
            causes.append(r)
    return causes, after


def _read_errors(rdir: Path, n: int) -> dict[int, dict[str, Any]]:
    """The error reports ranks wrote (``error.rank<R>.json``), by rank; an unreadable one is left out."""
    errors: dict[int, dict[str, Any]] = {}
    for r in range(n):
        path = rdir / f"error.rank{r}.json"
        if path.exists():
            try:
                errors[r] = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                pass
    return errors


def _stall_error(
    last_hb: Mapping[int, Any], hb: dict[int, Any], n: int, timeout_s: float
) -> PeerTimeoutError:
    """No rank made progress: who did not answer at the furthest step, or a stuck collective."""
    step = max((h.step for h in hb.values()), default=0)
    missing = who_did_not_answer(dict(last_hb), hb, n, step)
    detail = (
        "; ".join(missing) if missing else f"every rank alive at step {step}: a collective is stuck"
    )
    return PeerTimeoutError(
        f"no rank made progress for {timeout_s + 15:g} s; {detail}",
        hint="check the hosts' load and the network; raise --timeout only for huge sizes",
    )


def _compose_error(
    procs: Sequence[subprocess.Popen[bytes]],
    codes: Sequence[int | None],
    rdir: Path,
    store: Any,
    prefix: str,
    timeout_s: float,
    stalled: bool,
    last_hb: Mapping[int, Any],
    exited_at: Mapping[int, float],
    reported_at: Mapping[int, float],
) -> IbdiagError:
    errors = _read_errors(rdir, len(procs))
    try:
        hb = read_heartbeats(store, len(procs), prefix)
    except Exception:  # the store raises several types; the last heartbeats seen stand
        hb = dict(last_hb)

    def at(r: int) -> str:
        h = hb.get(r)
        return (
            f" at {h.where}"
            if h is not None and h.step
            else (" during setup" if h is not None else " before joining")
        )

    def how(r: int) -> str:
        c = codes[r] or 0
        return (
            f"was killed by {_signal_name(c)}"
            if c < 0
            else f"exited with status {c} without a report"
        )

    reported = {r: reported_at.get(r, 0.0) for r in errors}
    causes, after = blame(codes, reported, exited_at)
    # 1. ranks that died without saying why before anyone reported: they are the cause
    if causes:
        silent = []
        for r in causes:
            tail = _tail(rdir / f"rank{r}.err")
            silent.append(
                f"rank {r} (pid {procs[r].pid}) {how(r)}{at(r)}"
                + (f" [last output: {tail}]" if tail else "")
            )
        return PeerTimeoutError(
            "ranks that did not answer: " + "; ".join(silent),
            hint="a rank died mid-run: check the host's kernel log (OOM killer: dmesg) and the rank's log",
        )
    later = ""
    if after:
        later = (
            "; afterwards "
            + ", ".join(f"rank {r} {how(r)}" for r in after)
            + " (ended while the failure was torn down, e.g. by NCCL's watchdog: not a cause)"
        )
    # 2. a usage or input problem any rank found (the same on every rank)
    for doc in errors.values():
        if int(doc.get("status", 3)) == 2:
            return _ERRORS.get(str(doc.get("kind")), UsageError)(
                str(doc.get("message")), doc.get("hint")
            )
    # 3. rank 0's account (it names who did not answer), else the lowest failing rank's
    if errors:
        doc = errors.get(0) or errors[min(errors)]
        return _ERRORS.get(str(doc.get("kind")), CannotRunError)(
            str(doc.get("message")) + later, doc.get("hint")
        )
    if stalled:
        return _stall_error(last_hb, hb, len(procs), timeout_s)
    return CannotRunError(
        f"the ranks ended without a result (exit statuses {list(codes)})", hint="rerun with --debug"
    )
