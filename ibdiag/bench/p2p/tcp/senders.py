"""``--streams N`` on the client: each stream's sender in a process of its own, so no stream waits for
another's turn at the interpreter.

One sender thread per stream would share one interpreter lock: the copies run in the kernel with the
lock released, but the Python around each ``send`` (a few bytecodes per message) runs one stream at a
time, which caps small messages at one core's worth of calls however many streams there are. So the
client forks one process per stream (as iperf3 3.16 and later run one thread per stream). Each child
sends its warm-up, says so, waits for the parent's go and the measured phase's deadline, sends the
measured phase (the same batches and markers as :func:`.data.send_stream`) and reports its count, its
end time and its CPU seconds; the parent starts the window once every child is warm, so all streams
measure the same window. The receivers stay threads (each ``recv_into`` takes up to 1 MiB of whatever
has arrived: one call per many small messages).

The children touch nothing but their socket, their pipes and the message buffer, and leave with
``os._exit``; a child that fails reports its error, and every child is killed and reaped when the
phase fails, times out or is interrupted.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ibdiag.bench.p2p.control.channel import socket_error
from ibdiag.bench.p2p.control.sockio import make_send_all, set_nodelay
from ibdiag.bench.p2p.tcp.data import BATCH_BYTES, HEADER, StreamStats, send_batches, send_messages
from ibdiag.errors import CannotRunError, IbdiagError, PeerTimeoutError
from ibdiag.runtime.parentdeath import die_with_parent
from ibdiag.text import safe_excerpt

#: go: the measured phase's deadline (perf_counter seconds; 0: count iterations).
_GO = struct.Struct("!d")
#: a child's result: messages sent, the end of its measured phase (perf_counter), its CPU seconds.
_DONE = struct.Struct("!Qdd")
_WARM, _RESULT, _ERROR = b"W", b"R", b"E"
#: Most of a child's error text read back (bytes).
_MAX_ERROR = 2000


@dataclass
class _Child:
    pid: int
    to_child: int
    from_child: int


@dataclass(frozen=True)
class Sent:
    """What the sender processes did in the measured phase."""

    stats: list[StreamStats]
    cpu_s: float
    """The children's CPU seconds over their measured phases, summed."""


def _child(
    sock: socket.socket,
    view: memoryview,
    warmup: int,
    iters: int | None,
    timeout_s: float,
    to_parent: int,
    from_parent: int,
    peer: str,
    what: str,
) -> None:
    """A sender process's whole life (never returns)."""
    status = 1
    try:
        _send_phase(sock, view, warmup, iters, timeout_s, to_parent, from_parent)
        status = 0
    except OSError as e:  # the words the parent would have used, told to it
        _tell_error(to_parent, socket_error(e, peer, f"it to take {what}", timeout_s).message)
    except BaseException as e:  # told to the parent, which raises it there
        _tell_error(to_parent, getattr(e, "message", None) or f"{type(e).__name__}: {e}")
    finally:
        os._exit(status)


def _tell_error(to_parent: int, text: str) -> None:
    try:
        os.write(to_parent, _ERROR + text.encode("utf-8", "replace")[:_MAX_ERROR])
    except OSError:
        pass


def _send_phase(
    sock: socket.socket,
    view: memoryview,
    warmup: int,
    iters: int | None,
    timeout_s: float,
    to_parent: int,
    from_parent: int,
) -> None:
    """Warm-up, the word to the parent, its go, the measured phase, the result to the parent."""
    size = len(view)
    per_batch = max(1, BATCH_BYTES // size)
    send_all = make_send_all(sock, timeout_s)
    set_nodelay(sock, False)
    send_batches(sock, view, warmup, per_batch, timeout_s)
    send_all(HEADER.pack(0))
    os.write(to_parent, _WARM)
    (deadline,) = _GO.unpack(_read_exact(from_parent, _GO.size, timeout_s + 10.0))
    cpu0 = time.process_time()
    sent = 0
    if iters is not None:
        send_batches(sock, view, iters, per_batch, timeout_s)
        sent = iters
    else:
        clock = time.perf_counter
        header = HEADER.pack(per_batch)
        while clock() < deadline:
            send_all(header)
            send_messages(sock, view, per_batch, timeout_s)
            sent += per_batch
    set_nodelay(sock, True)
    send_all(HEADER.pack(0))
    t_end = time.perf_counter()
    os.write(to_parent, _RESULT + _DONE.pack(sent, t_end, time.process_time() - cpu0))


def _read_exact(fd: int, n: int, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    out = b""
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError("no word from a sender process")
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError("a sender process ended without a word")
        out += chunk
    return out


def _expect(child: _Child, what: bytes, n: int, timeout_s: float, peer: str, label: str) -> bytes:
    """``what`` and ``n`` more bytes from ``child``; its error, or a clear one, otherwise."""
    try:
        kind = _read_exact(child.from_child, 1, timeout_s)
        if kind == _ERROR:  # the child's own words (an ibdiag error's message)
            text = os.read(child.from_child, _MAX_ERROR).decode("utf-8", "replace")
            raise CannotRunError(safe_excerpt(text, 600), hint="see the server's log")
        if kind != what:
            raise CannotRunError(f"{label}: its sender process said {kind!r}")
        return _read_exact(child.from_child, n, timeout_s) if n else b""
    except TimeoutError:
        raise PeerTimeoutError(
            f"no answer from {peer} within {timeout_s:g} s while waiting for it to take {label}",
            hint="the server or the network stalled; see the server's log",
        ) from None
    except EOFError as e:
        raise CannotRunError(f"{label}: {e}") from None


def _reap(children: Sequence[_Child], kill: bool) -> None:
    for c in children:
        if kill:
            try:
                os.kill(c.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(c.pid, 0)
        except ChildProcessError:
            pass
        for fd in (c.to_child, c.from_child):
            try:
                os.close(fd)
            except OSError:
                pass


def _fork(
    sock: socket.socket,
    view: memoryview,
    warmup: int,
    iters: int | None,
    timeout_s: float,
    peer: str,
    what: str,
) -> _Child:
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    guard = die_with_parent()
    pid = os.fork()
    if pid == 0:  # the child: only its socket, its pipes and the buffer from here on
        if guard is not None:  # SIGKILL when the client dies (killed, OOM): no sender outlives it
            guard()
        os.close(up_r)
        os.close(down_w)
        _child(sock, view, warmup, iters, timeout_s, up_w, down_r, peer, what)
    os.close(up_w)
    os.close(down_r)
    return _Child(pid, down_w, up_r)


def send_in_processes(
    socks: Sequence[socket.socket],
    view: memoryview,
    *,
    warmup: int,
    iters: int | None,
    duration_s: float | None,
    timeout_s: float,
    peer: str,
    what_of: Callable[[int], str],
    on_start: Callable[[], None],
) -> Sent:
    """Send ``warmup`` then ``iters`` messages (or for ``duration_s``) on every socket, one process each.

    ``on_start`` runs once every stream is warm, as the measured window opens (the CPU meter).
    """
    children: list[_Child] = []
    ok = False
    try:
        for i, s in enumerate(socks):
            children.append(_fork(s, view, warmup, iters, timeout_s, peer, what_of(i)))
        for i, c in enumerate(children):
            _expect(c, _WARM, 0, timeout_s + 10.0, peer, what_of(i))
        on_start()
        t_start = time.perf_counter()
        go = _GO.pack(t_start + duration_s if iters is None and duration_s else 0.0)
        for c in children:
            os.write(c.to_child, go)
        stats: list[StreamStats] = []
        cpu = 0.0
        wait_s = (duration_s or 0.0) + timeout_s + 10.0
        for i, c in enumerate(children):
            sent, t_end, cpu_s = _DONE.unpack(
                _expect(c, _RESULT, _DONE.size, wait_s, peer, what_of(i))
            )
            stats.append(StreamStats(sent, sent * len(view), t_start, t_end))
            cpu += max(0.0, cpu_s)
        ok = True
        return Sent(stats, cpu)
    except IbdiagError:
        raise
    except OSError as e:
        raise socket_error(e, peer, what_of(0), timeout_s) from None
    finally:
        _reap(children, kill=not ok)
