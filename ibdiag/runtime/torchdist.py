"""The one way into torch.distributed: import it, serve and reach the rendezvous store, the call per op.

Every other collective module takes ``torch`` and ``torch.distributed`` from :func:`import_dist`, so
"not installed" and "this build has no NCCL" become ibdiag errors with a hint here and nowhere else;
:data:`COMM_ERRORS` are the exception types a collective or store call raises when a peer fails, and
:func:`first_line` turns one into a message.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Callable
from typing import Any

from ibdiag.collectives import OPS
from ibdiag.errors import CannotRunError, NotSupportedError


def import_dist() -> Any:
    """``(torch, torch.distributed)``; NotSupportedError (exit 3) when PyTorch or its distributed package is missing."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "torch":
            raise NotSupportedError(
                "ibdiag bench collective needs PyTorch (torch.distributed), which is not installed",
                hint="pip install 'ibdiag[collective]' (CPU build), or install the CUDA build of torch your jobs use",
            ) from None
        raise NotSupportedError(
            f"PyTorch is installed but does not import: {type(e).__name__}: {first_line(e)}",
            hint="repair the torch installation (pip install 'ibdiag[collective]' pulls torch and what it needs)",
        ) from None
    if not dist.is_available():
        raise NotSupportedError(
            "this PyTorch build has no torch.distributed",
            hint="install a PyTorch build with distributed support",
        )
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed.*")
    return torch, dist


def serve_store(host: str, port: int = 0, *, timeout_s: float = 120.0) -> tuple[Any, int]:
    """A TCPStore server for ranks this process launches (``--nproc``); port 0 picks a free one."""
    _, dist = import_dist()
    try:
        store = dist.TCPStore(
            host,
            port,
            None,
            True,
            timeout=datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except Exception as e:  # a bind failure has several exception types across versions
        raise CannotRunError(
            f"cannot serve the rendezvous store on {host}:{port}: {first_line(e)}",
            hint="choose another port or host",
        ) from None
    return store, int(store.port)


def client_store(addr: str, port: int, timeout_s: float) -> Any:
    _, dist = import_dist()
    return dist.TCPStore(
        addr,
        port,
        None,
        False,
        timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


def first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # gloo/c10d messages often start with a source location; keep what follows it
    line = lines[0] if lines else text
    if line.startswith("[") and "] " in line:
        line = line.split("] ", 1)[1]
    return line[:300]


COMM_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError,
    TimeoutError,
    ConnectionError,
    OSError,
)


def collective_call(
    dist: Any, op: str, rank: int, world: int, inp: Any, out: Any
) -> Callable[[], Any]:
    """The torch.distributed call that is ``op`` on these views (nccl-tests' call for the op)."""
    r, n = rank, world
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        return lambda: dist.all_reduce(inp)
    if op == "reduce":
        return lambda: dist.reduce(inp, 0)
    if op == "broadcast":
        return lambda: dist.broadcast(inp, 0)
    if op == "all_gather":
        return lambda: ag(out, inp)
    if op == "reduce_scatter":
        return lambda: rs(out, inp)
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(out, inp)
    if op == "sendrecv":
        nxt, prv = (r + 1) % n, (r - 1) % n

        def ring() -> None:
            if n == 1:
                out.copy_(inp)
                return
            works = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, inp, nxt), dist.P2POp(dist.irecv, out, prv)]
            )
            for w in works:
                w.wait()

        return ring
    raise NotSupportedError(
        f"collective {op} is not implemented", hint=f"use one of: {', '.join(OPS)}"
    )
