"""``--nproc N``: start N local ranks as real processes, watch them, and bring rank 0's result back.

The supervisor serves the rendezvous store itself (a TCPStore on 127.0.0.1, port chosen by the kernel,
so there is no free-port race), starts ``python -m ibdiag bench collective ...`` N times with torchrun's
variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``) plus ``IBDIAG_COLLECTIVE_REPORT_DIR`` (the caller's environment carries the job itself,
``IBDIAG_COLLECTIVE_JOB``: see ``ibdiag.bench.collective.spec``), and watches:

* rank 0 appends progress lines and finally writes ``result.json`` (run and findings) there;
* a rank that fails writes ``error.rank<R>.json`` (its message names who did not answer);
* a rank that dies without a word (killed, crashed) is named with its signal or exit code and the step
  its last heartbeat was at; the others are then stopped at once instead of waiting for their timeouts;
* if no heartbeat moves for ``timeout`` + 15 s, everything is stopped (the backstop for a frozen job).

Each rank's stdout and stderr go to files in the report directory; they are kept when the run fails
(the error says where) and removed when it succeeds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ibdiag.errors import (
    CannotRunError,
    IbdiagError,
    InputError,
    NotSupportedError,
    PeerTimeoutError,
    UsageError,
)

REPORT_DIR_ENV = "IBDIAG_COLLECTIVE_REPORT_DIR"
PROGRESS = "progress.jsonl"
RESULT = "result.json"

_ERRORS: dict[str, type[IbdiagError]] = {
    c.__name__: c for c in (UsageError, InputError, CannotRunError, PeerTimeoutError, NotSupportedError)
}

# variables of an enclosing launch that must not leak into the ranks we start
_DROP_PREFIXES = ("TORCHELASTIC_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_RANK")
_DROP = ("GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


# --- the rank side (called by the CLI in a supervised rank) ------------------------------------------


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_progress(directory: str | Path, done: int, total: int, label: str) -> None:
    with open(Path(directory, PROGRESS), "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"done": done, "total": total, "label": label}) + "\n")


def write_result(directory: str | Path, doc: Mapping[str, Any]) -> None:
    _atomic_write(Path(directory, RESULT), json.dumps(doc))


def write_error(directory: str | Path, rank: int, err: BaseException) -> None:
    if isinstance(err, IbdiagError):
        doc = {"kind": type(err).__name__, "status": int(err.exit_status), "message": err.message, "hint": err.hint}
    else:
        doc = {"kind": "CannotRunError", "status": 3, "message": f"rank {rank}: internal error: {type(err).__name__}: {err}", "hint": "rerun with --debug"}
    _atomic_write(Path(directory, f"error.rank{rank}.json"), json.dumps(doc))


# --- the supervisor side ----------------------------------------------------------------------------


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    # A rank whose supervisor dies (SIGKILL, OOM killer) dies with it instead of waiting for its timeout.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort, Linux only
        pass


def child_env(base: Mapping[str, str], *, rank: int, nproc: int, port: int, report_dir: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _DROP and not k.startswith(_DROP_PREFIXES)}
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    env[REPORT_DIR_ENV] = report_dir
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # torchrun's choice too: N ranks on one host must not each start a thread per core
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, nproc))))
    return env


def _tail(path: Path, lines: int = 4) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    keep = [ln.rstrip() for ln in text.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  warnings.warn")]
    return " | ".join(keep[-lines:])[-600:]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_local(
    nproc: int,
    child_args: Sequence[str],
    *,
    timeout_s: float,
    on_progress: Callable[[int, int, str], None] | None = None,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """Run ``python -m ibdiag <child_args>`` as ranks 0..nproc-1; return rank 0's result document.

    Raises the rank's own error (UsageError exit 2, PeerTimeoutError exit 3 ...) when the run fails.
    """
    from ibdiag.bench.collective.torchdist import serve_store

    base = dict(os.environ if env is None else env)
    report_dir = tempfile.mkdtemp(prefix="ibdiag-collective-")
    rdir = Path(report_dir)
    store, port = serve_store("127.0.0.1", 0, timeout_s=timeout_s)
    prefix = "ibdiag/0/"
    procs: list[subprocess.Popen[bytes]] = []
    files: list[Any] = []
    ok = False
    try:
        for r in range(nproc):
            out = open(rdir / f"rank{r}.out", "wb")  # noqa: SIM115 - closed in finally
            err = open(rdir / f"rank{r}.err", "wb")  # noqa: SIM115
            files += [out, err]
            procs.append(
                subprocess.Popen(
                    [python or sys.executable, "-m", "ibdiag", *child_args],
                    env=child_env(base, rank=r, nproc=nproc, port=port, report_dir=report_dir),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    preexec_fn=_set_pdeathsig if sys.platform.startswith("linux") else None,  # noqa: PLW1509
                )
            )
        outcome = _watch(procs, rdir, store, prefix, timeout_s, on_progress)
        ok = outcome is not None
        if outcome is not None:
            return outcome
        raise CannotRunError("the ranks ended without a result", hint=f"see the rank logs in {report_dir}")
    except IbdiagError as e:
        if e.hint is None or report_dir not in (e.hint or ""):
            e.hint = ((e.hint + "; ") if e.hint else "") + f"rank logs: {report_dir}"
        raise
    finally:
        _stop_all(procs)
        for fh in files:
            fh.close()
        if ok:
            shutil.rmtree(report_dir, ignore_errors=True)


def _stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + 3.0
    for p in alive:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _read_progress(path: Path, pos: int, on_progress: Callable[[int, int, str], None] | None) -> tuple[int, bool]:
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


def _watch(
    procs: Sequence[subprocess.Popen[bytes]],
    rdir: Path,
    store: Any,
    prefix: str,
    timeout_s: float,
    on_progress: Callable[[int, int, str], None] | None,
) -> dict[str, Any] | None:
    from ibdiag.bench.collective.liveness import DIAGNOSE_WAIT_S, read_heartbeats

    n = len(procs)
    pos = 0
    last_activity = time.monotonic()
    last_hb: dict[int, Any] = {}
    next_hb = 0.0
    grace_until: float | None = None
    stalled = False
    while True:
        pos, moved = _read_progress(rdir / PROGRESS, pos, on_progress)
        now = time.monotonic()
        if moved:
            last_activity = now
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed and codes[0] is not None:
            break  # rank 0 has given its account (or died): nothing more to wait for
        if failed and grace_until is None:
            # a rank killed by a signal says nothing more; one that failed cleanly lets rank 0 finish its diagnosis
            died = any((codes[r] or 0) < 0 or not (rdir / f"error.rank{r}.json").exists() for r in failed)
            grace_until = now + (1.0 if died else DIAGNOSE_WAIT_S + 4.0)
        if grace_until is not None and now > grace_until:
            break
        if now >= next_hb:
            next_hb = now + 2.0
            try:
                hb = read_heartbeats(store, n, prefix)
            except Exception:  # noqa: BLE001
                hb = {}
            if any(last_hb.get(r) is None or (h.counter, h.step) != (last_hb[r].counter, last_hb[r].step) for r, h in hb.items()):
                last_activity = now
            last_hb = hb
        if now - last_activity > timeout_s + 15.0:
            stalled = True
            break
        time.sleep(0.1)
    _read_progress(rdir / PROGRESS, pos, on_progress)
    codes = [p.poll() for p in procs]
    result = rdir / RESULT
    if all(c == 0 for c in codes) and result.exists():
        return json.loads(result.read_text(encoding="utf-8"))
    raise _compose_error(procs, codes, rdir, store, prefix, timeout_s, stalled, last_hb)


def _compose_error(
    procs: Sequence[subprocess.Popen[bytes]],
    codes: Sequence[int | None],
    rdir: Path,
    store: Any,
    prefix: str,
    timeout_s: float,
    stalled: bool,
    last_hb: Mapping[int, Any],
) -> IbdiagError:
    from ibdiag.bench.collective.liveness import read_heartbeats, who_did_not_answer

    errors: dict[int, dict[str, Any]] = {}
    for r in range(len(procs)):
        path = rdir / f"error.rank{r}.json"
        if path.exists():
            try:
                errors[r] = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                pass
    try:
        hb = read_heartbeats(store, len(procs), prefix)
    except Exception:  # noqa: BLE001
        hb = dict(last_hb)

    def at(r: int) -> str:
        h = hb.get(r)
        return f" at {h.where}" if h is not None and h.step else (" during setup" if h is not None else " before joining")

    # 1. ranks that died without saying why: they are the cause, whatever the others report afterwards
    silent = []
    for r, c in enumerate(codes):
        if c is None or c == 0 or r in errors:
            continue
        how = f"was killed by {_signal_name(c)}" if c < 0 else f"exited with status {c} without a report"
        tail = _tail(rdir / f"rank{r}.err")
        silent.append(f"rank {r} (pid {procs[r].pid}) {how}{at(r)}" + (f" [last output: {tail}]" if tail else ""))
    if silent:
        return PeerTimeoutError(
            "ranks that did not answer: " + "; ".join(silent),
            hint="a rank died mid-run: check the host's kernel log (OOM killer: dmesg) and the rank's log",
        )
    # 2. a usage or input problem any rank found (the same on every rank)
    for doc in errors.values():
        if int(doc.get("status", 3)) == 2:
            return _ERRORS.get(str(doc.get("kind")), UsageError)(str(doc.get("message")), doc.get("hint"))
    # 3. rank 0's account (it names who did not answer), else the lowest failing rank's
    if errors:
        doc = errors.get(0) or errors[min(errors)]
        return _ERRORS.get(str(doc.get("kind")), CannotRunError)(str(doc.get("message")), doc.get("hint"))
    if stalled:
        step = max((h.step for h in hb.values()), default=0)
        missing = who_did_not_answer(dict(last_hb), hb, len(procs), step)
        detail = "; ".join(missing) if missing else f"every rank alive at step {step}: a collective is stuck"
        return PeerTimeoutError(f"no rank made progress for {timeout_s + 15:g} s; {detail}", hint="check the hosts' load and the network; raise --timeout only for huge sizes")
    return CannotRunError(f"the ranks ended without a result (exit statuses {list(codes)})", hint="rerun with --debug")
