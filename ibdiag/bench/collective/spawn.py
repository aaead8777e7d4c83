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
* a rank whose process is stopped (SIGSTOP, a debugger) or stuck in the kernel, and whose heartbeat
  has not moved for ``timeout`` seconds, is named at once (within ``timeout`` + 1 s of the stop);
* if no heartbeat moves for ``timeout`` + 15 s (and no rank still starting uses CPU), everything is
  stopped (the backstop for a frozen job).

The watching and the blame are :mod:`~ibdiag.bench.collective.supervise`'s; a rank that dies (SIGABRT from
NCCL's watchdog) after some rank wrote its diagnosis is not blamed.

Before anything is spawned, :func:`check_capacity` refuses a rank count this node cannot hold (memory
and CPUs, exit 2). Each rank's stdout and stderr go to files in the report directory; they are kept
when the run fails (the error says where) and removed when it succeeds or is interrupted (Ctrl-C,
SIGTERM: exit 130). A supervisor killed outright (SIGKILL) takes its ranks with it (the kernel's
parent-death signal) and leaves its directory, marked with its pid: the next ``--nproc`` run removes
the directories of supervisors that are gone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ibdiag.bench.collective.supervise import PROGRESS, RESULT, watch
from ibdiag.errors import (
    CannotRunError,
    IbdiagError,
    UsageError,
)
from ibdiag.runtime.parentdeath import die_with_parent
from ibdiag.runtime.torchdist import serve_store
from ibdiag.units import format_bytes

REPORT_DIR_ENV = "IBDIAG_COLLECTIVE_REPORT_DIR"
#: The report directories' name prefix (in the temporary directory, $TMPDIR).
DIR_PREFIX = "ibdiag-collective-"
#: In a report directory of a running supervisor: ``<pid> <start time>``; removed when the logs are kept on purpose.
OWNER = "owner"
#: Memory one rank needs before its buffers: the Python interpreter with torch and gloo. A 2-rank gloo
#: run at 4 KiB peaked at 240 MiB resident per rank on the development VM (torch 2.13, CPU build);
#: the estimate leaves room for gloo's per-peer buffers.
RANK_MEMORY_BYTES = 300 * 2**20
#: Ranks per CPU beyond which a node is refused: each rank spends ~4 s of CPU importing torch before
#: the rendezvous, so past 8 per CPU the start-up alone outlasts a short --timeout and the run
#: measures the scheduler, not the fabric.
MAX_RANKS_PER_CPU = 8
# variables of an enclosing launch that must not leak into the ranks we start
_DROP_PREFIXES = ("TORCHELASTIC_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_RANK")
_DROP = (
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
)


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
        doc = {
            "kind": type(err).__name__,
            "status": int(err.exit_status),
            "message": err.message,
            "hint": err.hint,
        }
    else:
        doc = {
            "kind": "CannotRunError",
            "status": 3,
            "message": f"rank {rank}: internal error: {type(err).__name__}: {err}",
            "hint": "rerun with --debug",
        }
    _atomic_write(Path(directory, f"error.rank{rank}.json"), json.dumps(doc))


# --- the supervisor side ----------------------------------------------------------------------------


def check_capacity(
    nproc: int, *, cpus: int | None = None, available_bytes: int | None = None
) -> None:
    """Refuse (UsageError, exit 2) ``nproc`` local ranks when this node cannot hold them: more than
    :data:`MAX_RANKS_PER_CPU` per CPU this process may run on, or more than the available memory
    divided by :data:`RANK_MEMORY_BYTES`. The message names the numbers."""
    if cpus is None:
        cpus = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )
    if available_bytes is None:
        import psutil

        available_bytes = int(psutil.virtual_memory().available)
    by_cpu = cpus * MAX_RANKS_PER_CPU
    by_memory = available_bytes // RANK_MEMORY_BYTES
    if nproc <= min(by_cpu, by_memory):
        return
    raise UsageError(
        f"--nproc {nproc}: this node cannot hold {nproc} ranks: it has {cpus} CPU{'s' if cpus != 1 else ''} "
        f"(at most {MAX_RANKS_PER_CPU} ranks each: {by_cpu}) and {format_bytes(available_bytes)} of memory available "
        f"(about {RANK_MEMORY_BYTES // 2**20} MiB per rank before its buffers: {by_memory})",
        hint=f"use --nproc {max(1, min(by_cpu, by_memory))} or fewer here, or spread the ranks over nodes with torchrun/srun/mpirun",
    )


def _start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (``/proc/PID/stat`` field 22), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_alive(marker: Path) -> bool:
    try:
        pid_text, started = marker.read_text(encoding="ascii").split()
        return _start_time(int(pid_text)) == started
    except (OSError, ValueError):
        return False


def sweep_orphans(tmpdir: str | None = None) -> list[Path]:
    """Remove the report directories of supervisors that are gone (killed before they could clean up).

    Only directories of this user, named :data:`DIR_PREFIX`..., holding an :data:`OWNER` marker whose
    process no longer exists; links are never followed. Returns what was removed.
    """
    removed: list[Path] = []
    base = Path(tmpdir or tempfile.gettempdir())
    try:
        entries = list(base.glob(DIR_PREFIX + "*"))
    except OSError:
        return removed
    for d in entries:
        try:
            st = d.lstat()
        except OSError:
            continue
        import stat

        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        marker = d / OWNER
        if marker.is_file() and not marker.is_symlink() and not _owner_alive(marker):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class _Terminated(KeyboardInterrupt):
    """SIGTERM in the supervisor: unwind like Ctrl-C (stop the ranks, remove their logs, exit 130)."""


def _on_sigterm(signum: int, frame: Any) -> None:  # signal handler signature
    raise _Terminated()


def child_env(
    base: Mapping[str, str], *, rank: int, nproc: int, port: int, report_dir: str
) -> dict[str, str]:
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
    check_capacity(nproc)
    sweep_orphans()
    base = dict(os.environ if env is None else env)
    report_dir = tempfile.mkdtemp(prefix=DIR_PREFIX)
    rdir = Path(report_dir)
    (rdir / OWNER).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n", encoding="ascii")
    in_main = threading.current_thread() is threading.main_thread()
    previous_term = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    prefix = "ibdiag/0/"
    procs: list[subprocess.Popen[bytes]] = []
    files: list[Any] = []
    keep = False
    try:
        store, port = serve_store("127.0.0.1", 0, timeout_s=timeout_s)
        for r in range(nproc):
            out = open(rdir / f"rank{r}.out", "wb")  # closed in finally
            err = open(rdir / f"rank{r}.err", "wb")  # closed in finally
            files += [out, err]
            procs.append(
                subprocess.Popen(
                    [python or sys.executable, "-m", "ibdiag", *child_args],
                    env=child_env(base, rank=r, nproc=nproc, port=port, report_dir=report_dir),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    preexec_fn=die_with_parent(),  # a rank whose supervisor dies (SIGKILL, OOM killer) dies with it
                )
            )
        outcome = watch(procs, rdir, store, prefix, timeout_s, on_progress)
        if outcome is not None:
            return outcome
        keep = True
        raise CannotRunError(
            "the ranks ended without a result", hint=f"see the rank logs in {report_dir}"
        )
    except IbdiagError as e:
        keep = bool(
            procs
        )  # the ranks' logs explain a failed run; nothing ran when the set-up failed
        if keep and (e.hint is None or report_dir not in (e.hint or "")):
            e.hint = ((e.hint + "; ") if e.hint else "") + f"rank logs: {report_dir}"
        raise
    finally:
        _stop_all(procs)
        for fh in files:
            fh.close()
        if keep:
            (rdir / OWNER).unlink(
                missing_ok=True
            )  # kept on purpose: named in the error, never swept
        else:
            shutil.rmtree(report_dir, ignore_errors=True)
        if in_main:
            signal.signal(signal.SIGTERM, previous_term)


def _stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        p.terminate()
        try:
            os.kill(
                p.pid, signal.SIGCONT
            )  # a stopped rank gets its SIGTERM now, not after the wait below
        except OSError:
            pass
    deadline = time.monotonic() + 3.0
    for p in alive:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
