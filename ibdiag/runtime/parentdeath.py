"""Children that die with their parent: Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``).

A process ibdiag starts (perftest's ``ib_write_bw``, a ``bench collective`` rank) must not outlive an
ibdiag that is killed with SIGKILL or by the OOM killer, which no clean-up code survives: the kernel
then sends the child SIGKILL itself. :func:`die_with_parent` gives the ``preexec_fn`` for
:class:`subprocess.Popen` that asks for it, between fork and exec (the setting survives exec, except
into set-user-ID programs).

Two facts of the kernel's (``prctl(2)``) shape the use:

* The signal comes when the *thread* that forked the child ends, not only the process: start the
  child from a thread that outlives it (every caller here waits for, or kills, its child before the
  starting thread returns).
* A parent that dies between fork and the ``prctl`` call sends nothing; the child then has a new
  parent already, so the child compares ``getppid()`` with the pid it was forked from afterwards and
  kills itself when they differ.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1


@functools.lru_cache(maxsize=1)
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, resolved in the parent (nothing is loaded between fork and exec); None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(
    parent_pid: int | None = None, sig: int = signal.SIGKILL
) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when its parent dies; None where that is not available.

    ``parent_pid`` is the process the child must not outlive: this one by default (tests give another
    to drive the check that follows the ``prctl``).
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid() if parent_pid is None else parent_pid
    signum = int(sig)

    def child() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: nobody will send the signal
            os.kill(os.getpid(), signum)
            os._exit(128 + signum)

    return child


__all__ = ["PR_SET_PDEATHSIG", "die_with_parent"]
