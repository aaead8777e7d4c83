"""``ibdiag bench p2p --engine perftest``: perftest's C loops, driven through ibdiag's control channel.

Per size and kind the server starts the perftest server side (``ib_write_bw -p PORT ...``) on a TCP
port it picks, waits until perftest listens there, and tells the client; the client runs the same
binary with the server's address; ibdiag's perftest importer reads the client's output into the
same :class:`~ibdiag.bench.results.model.P2PResult` rows as ibdiag's own engine. Messages beyond
:mod:`.session`'s (after ``phase``)::

    server -> client  go      {perftest_port, command}      (perftest listens on perftest_port)
    client -> server  beat    (every second while the client's perftest runs)
    client -> server  done    {rc}
    server -> client  result  {rc, output}                    (the server's perftest, bounded)

perftest runs from an argv list (never a shell), in its own session, with output to a private file;
every process is killed (SIGKILL to its process group) and reaped when a run ends, times out, the
peer dies or ibdiag is interrupted (:func:`kill_all`), and the kernel kills it when ibdiag itself is
killed (SIGKILL, the OOM killer: :mod:`ibdiag.runtime.parentdeath`). perftest's own TCP exchange uses
its own port on the server, one per run, picked free by the kernel (:func:`free_port`), which a
firewall must allow; when another program takes that port before perftest binds it, the server
starts perftest again on a new one (at most :data:`LISTEN_TRIES` ports).

The limits below are perftest's own parser's (perftest 6.06, ``perftest_parameters.c``): a request
outside them is refused here (exit 2) instead of by perftest after the connection.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ibdiag.bench.p2p.control.protocol import (
    Channel,
    ProtocolError,
    RemoteError,
    peer_text,
    peer_value,
)
from ibdiag.bench.p2p.meta import PerftestEngine
from ibdiag.bench.p2p.params import ENGINES, RequestError, RunRequest, check_int
from ibdiag.bench.results.model import LatencyStats, P2PResult
from ibdiag.errors import CannotRunError
from ibdiag.runtime.parentdeath import die_with_parent
from ibdiag.units import format_bytes

#: perftest's message size bounds (``-s``: "Message Size should be between 1 and 2147483647").
MAX_SIZE = 2**31 - 1
#: ``-n``: "Iteration num should be between 5 and 100000000".
MIN_ITERS, MAX_ITERS = 5, 100_000_000
#: ``-I``: "Max inline should be between 0 and 912".
MAX_INLINE = 912
#: ``-D`` takes whole seconds ("Duration period argument 1.5 should be int"); perftest measures
#: within a margin of 2 s on each side of it (``-f``, default 2).
DURATION_MARGIN_S = 2
INSTALL_HINT = "install perftest on both hosts (apt install perftest, dnf install perftest, or build github.com/linux-rdma/perftest)"
#: Most output kept from one perftest process (bytes); perftest prints a few kilobytes.
MAX_OUTPUT = 256 * 1024
#: Most of the server's perftest output sent to the client (characters).
MAX_REMOTE_OUTPUT = 4000
#: Slowest rate and longest per-message time assumed when bounding an --iters run (bytes/s, s).
SLOWEST_BPS = 50e6
SLOWEST_MESSAGE_S = 1e-3
#: How often a client tells the server its perftest is still running (seconds).
BEAT_S = 1.0

#: Ports the server tries for one perftest run: between ibdiag's pick of a free port and perftest's
#: bind, another program may take it (perftest then says "Couldn't listen to port N" and exits).
LISTEN_TRIES = 3

_ROW_PREFIX = re.compile(r"^\s*\d+(?:\s+[\d.]+)+(?=[A-Za-z])")
_VERSION = re.compile(r"Version:\s*([0-9][0-9A-Za-z.\-]*)")
#: perftest 6.06's words when its TCP exchange port is taken (``perftest_communication.c``).
_BIND_FAILED = re.compile(r"Couldn't listen to port|Failed to bind socket|Address already in use")


def binary(verb: str, kind: str) -> str:
    """``ib_write_bw``, ``ib_read_lat``, ``ib_send_bw`` ..."""
    return f"ib_{verb}_{kind}"


def request_problem(req: RunRequest) -> str | None:
    """Why ``req`` cannot run on perftest (no equivalent option, or outside perftest's bounds), or None.

    Checked by the client's command line (exit 2) and again by the server (untrusted request).
    """
    if req.transport != "rdma":
        return "--engine perftest applies to --transport rdma"
    if req.warmup is not None:
        return "--warmup has no perftest equivalent (perftest warms up on its own); drop it with --engine perftest"
    if req.duration_s is not None and (req.duration_s != int(req.duration_s) or req.duration_s < 1):
        return f"--duration {req.duration_s:g}: perftest's -D takes whole seconds (1 or more)"
    if req.iters is not None and not MIN_ITERS <= req.iters <= MAX_ITERS:
        return f"--iters {req.iters}: perftest's -n takes {MIN_ITERS} to {MAX_ITERS}"
    if req.max_size > MAX_SIZE:
        return f"a {format_bytes(req.max_size)} message is beyond perftest's -s limit of {MAX_SIZE} bytes"
    if req.inline is not None and req.inline > MAX_INLINE:
        return f"--inline {req.inline}: perftest's -I takes 0 to {MAX_INLINE}"
    if "lat" in req.kinds and req.qps > 1:
        return '--qps above 1 with latency: perftest\'s latency tests use one queue pair ("Multiple QPs only available on bw tests")'
    if req.mode == "lat" and req.bidir:
        return "--bidir with --mode lat: perftest's -b is for bandwidth tests only"
    return None


def check_request(req: RunRequest) -> None:
    problem = request_problem(req)
    if problem:
        raise RequestError(
            problem,
            hint="use --engine ibdiag for this, or change the option (see docs/bench-p2p.md, 'perftest engine')",
        )


def perftest_argv(
    program: str,
    req: RunRequest,
    kind: str,
    size: int,
    *,
    device: str,
    ib_port: int,
    gid_index: int | None,
    tcp_port: int,
    server: str | None = None,
) -> list[str]:
    """The perftest command for one size and kind; ``server`` is None on the server side.

    ibdiag option -> perftest: --sizes -> ``-s`` (one run per size), --iters -> ``-n``,
    --duration -> ``-D``, --qps -> ``-q``, --bidir -> ``-b``, --tx-depth -> ``-t`` (bandwidth),
    --inline -> ``-I``, --tclass -> ``--tclass``, --sl -> ``-S``, --device -> ``-d``,
    --ib-port -> ``-i``, --gid-index -> ``-x``; ``-F`` always (no failure on a CPU frequency
    warning, as on VMs); ``-p`` is perftest's own TCP exchange port.
    """
    argv = [program, "-d", device, "-i", str(ib_port)]
    if gid_index is not None:
        argv += ["-x", str(gid_index)]
    argv += ["-s", str(size), "-p", str(tcp_port), "-F"]
    if req.iters is not None:
        argv += ["-n", str(req.iters)]
    elif req.duration_s is not None:
        argv += ["-D", str(int(req.duration_s))]
    if kind == "bw":
        argv += ["-t", str(req.tx_depth)]
        if req.qps > 1:
            argv += ["-q", str(req.qps)]
        if req.bidir:
            argv.append("-b")
    if req.inline is not None and req.verb != "read":
        argv += ["-I", str(req.inline)]
    if req.tclass:
        argv.append(f"--tclass={req.tclass}")
    if req.sl:
        argv += ["-S", str(req.sl)]
    if server is not None:
        argv.append(server)
    return argv


def run_limit_s(req: RunRequest, kind: str, size: int, timeout_s: float) -> float:
    """Longest one perftest run may take before it is killed (seconds): its expected length plus ``timeout_s``.

    Without --iters/--duration perftest runs its defaults (5000 bandwidth, 1000 latency messages).
    """
    if req.duration_s is not None:
        expected = req.duration_s + 2 * DURATION_MARGIN_S
    else:
        n = req.iters if req.iters is not None else (5000 if kind == "bw" else 1000)
        per = size / SLOWEST_BPS + SLOWEST_MESSAGE_S
        expected = n * per * (2 if kind == "lat" else 1) * (req.qps if kind == "bw" else 1)
    return expected + timeout_s + 5.0


def find_program(name: str, path: str | None, where: str = "this host") -> str:
    """The absolute path of perftest's ``name`` on ``path`` (a PATH string); CannotRunError (exit 3) if absent."""
    found = shutil.which(name, path=path)
    if not found:
        raise CannotRunError(
            f"perftest's {name} is not installed on {where} (not on PATH)", hint=INSTALL_HINT
        )
    return os.path.abspath(found)


def parse_version(text: str) -> str | None:
    """``Version: 6.06`` (perftest ``--version``) -> ``6.06``."""
    m = _VERSION.search(text)
    return m.group(1)[:32] if m else None


def program_version(program: str) -> str | None:
    """perftest's version as ``PROGRAM --version`` prints it, or None."""
    try:
        r = subprocess.run(
            [program, "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(r.stdout + r.stderr)


def select_device(sysfs_root: str, device: str | None, ib_port: int, gid_index: int | None) -> Any:
    """Device, port and GID from sysfs alone (perftest needs no pyverbs): like ``select_rdma``."""
    from ibdiag.bench.p2p.rdma.plan import choose_device, choose_gid
    from ibdiag.bench.p2p.rdma.session import RdmaSelection
    from ibdiag.node.discover import list_adapters, list_ports, read_port
    from ibdiag.node.sysfs import SysfsRoot

    sysfs = SysfsRoot(sysfs_root)
    ports = [
        read_port(sysfs, name, ib_port)
        for name in list_adapters(sysfs)
        if ib_port in list_ports(sysfs, name)
    ]
    port = choose_device(ports, device)
    gid = choose_gid(port, gid_index)
    return RdmaSelection(
        port.adapter, port.port, gid.index, gid.gid, gid.reason, port.link_layer, None
    )


def listening_sockets(proc_net_tcp: str) -> dict[int, set[int]]:
    """Sockets in LISTEN state (``st`` 0A) in a ``/proc/net/tcp`` or ``tcp6`` table: port -> socket inodes."""
    out: dict[int, set[int]] = {}
    for line in proc_net_tcp.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != "0A":
            continue
        try:
            port, inode = int(parts[1].rsplit(":", 1)[1], 16), int(parts[9])
        except (IndexError, ValueError):
            continue
        out.setdefault(port, set()).add(inode)
    return out


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Ports in LISTEN state in a ``/proc/net/tcp`` or ``tcp6`` table."""
    return set(listening_sockets(proc_net_tcp))


def socket_inodes(pid: int, proc_root: str = "/proc") -> set[int]:
    """The socket inodes process ``pid`` holds open (``/proc/PID/fd/N -> socket:[INODE]``)."""
    fd_dir = os.path.join(proc_root, str(pid), "fd")
    out: set[int] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            try:
                out.add(int(target[8:-1]))
            except ValueError:
                continue
    return out


def listens_on(pid: int, port: int, proc_root: str = "/proc") -> bool:
    """Whether process ``pid`` itself listens on TCP ``port`` (another program listening there does not count)."""
    inodes: set[int] = set()
    for name in ("net/tcp", "net/tcp6"):
        try:
            with open(os.path.join(proc_root, name)) as f:
                inodes |= listening_sockets(f.read()).get(port, set())
        except OSError:
            continue
    return bool(inodes) and bool(inodes & socket_inodes(pid, proc_root))


def free_port() -> int:
    """A TCP port free right now (the kernel's choice) for perftest's exchange."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# --- processes ---------------------------------------------------------------------------------------

_live: set[PerftestProcess] = set()
_live_lock = threading.Lock()


class PerftestProcess:
    """One perftest process: argv list, own session, output to a private temporary file, killed and reaped by :meth:`kill`.

    It gets SIGKILL from the kernel when this process dies (:func:`~ibdiag.runtime.parentdeath.die_with_parent`;
    strictly, when the thread that started it ends: the sides below start, wait for and kill their
    process in the same thread).
    """

    def __init__(self, argv: list[str]) -> None:
        self.argv = list(argv)
        self._out = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                shell=False,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - only a prctl and a getppid between fork and exec
            )
        except OSError as e:
            self._out.close()
            raise CannotRunError(
                f"cannot start {self.argv[0]}: {e.strerror or e}", hint=INSTALL_HINT
            ) from None
        with _live_lock:
            _live.add(self)

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout_s: float) -> int | None:
        """The exit status, or None when it is still running after ``timeout_s``."""
        try:
            return self.proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL its process group (unless it has exited) and reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with _live_lock:
            _live.discard(self)

    def output(self) -> str:
        """What it printed (stdout and stderr), at most :data:`MAX_OUTPUT` bytes from the end."""
        try:
            size = self._out.seek(0, os.SEEK_END)
            self._out.seek(max(0, size - MAX_OUTPUT))
            return self._out.read(MAX_OUTPUT).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        self.kill()
        self._out.close()

    @property
    def command(self) -> str:
        return " ".join(self.argv)


def kill_all() -> int:
    """Kill and reap every perftest process this process started and still runs; returns how many."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        p.kill()
    return len(procs)


def live_count() -> int:
    with _live_lock:
        return len(_live)


def status_text(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by signal {rc * -1} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def error_lines(output: str, limit: int = 3) -> str:
    """perftest's own complaint from its output: the lines that say what failed, else the last lines."""
    # perftest may print its complaint right after a table row, on the same line ("65536 0 0.00 ... 0.000000ethernet_read_keys: ...").
    lines = [_ROW_PREFIX.sub("", ln).strip() for ln in output.splitlines()]
    lines = [ln for ln in lines if ln and not set(ln) <= set("-*")]
    bad = [
        ln
        for ln in lines
        if re.search(
            r"(?i)couldn't|could not|can't|unable|fail|error|not |invalid|should be|no ", ln
        )
    ]
    picked = (bad or lines)[-limit:] if (bad or lines) else ["(no output)"]
    return "; ".join(ln[:200] for ln in picked)


# --- reading perftest's result -----------------------------------------------------------------------


class UnreadableResult(CannotRunError):
    """perftest ended well but its output holds no readable row for the size (under emulation
    ib_write_lat now and then prints ``inf`` or no row at all): :func:`run_all` runs it again."""


#: Extra runs of one size and kind whose output was unreadable (every command run is listed in the
#: result's ``perftest_commands``, so a repeated run shows there).
UNREADABLE_RETRIES = 2


def read_result(output: str, size: int, kind: str, verb: str, source: str) -> P2PResult:
    """The row for ``size`` in perftest's output, in ibdiag's model (perftest importer).

    READ latency is printed as the round trip; ibdiag's own engine reports half of it (one way), so
    it is halved here to keep one meaning per field. CannotRunError when the output has no such row.
    """
    from ibdiag.bench.importers.perftest import parse_log
    from ibdiag.errors import InputError

    try:
        runs = parse_log(output, source)
    except InputError as e:
        raise UnreadableResult(
            f"{source}: perftest's output has no result: {e.message}",
            hint="run the same command by hand to see what perftest says",
        ) from None
    rows = [r for run in runs for r in run.p2p_rows() if r.bytes == size]
    if not rows:
        raise UnreadableResult(
            f"{source}: perftest printed no {format_bytes(size)} row (its last lines: {error_lines(output)})",
            hint="run the same command by hand to see what perftest says",
        )
    row = rows[-1]
    if kind == "lat" and verb == "read":
        row = _halved(row)
    return row


def _halved(r: P2PResult) -> P2PResult:
    from dataclasses import replace

    lat = r.lat_us
    if lat is not None:
        halves: dict[str, Any] = {k: (None if v is None else v / 2) for k, v in vars(lat).items()}
        lat = LatencyStats(**halves)
    return replace(r, lat_us=lat, lat_avg_us=None if r.lat_avg_us is None else r.lat_avg_us / 2)


def merge(size: int, bw: P2PResult | None, lat: P2PResult | None) -> P2PResult:
    """One row per size, as ibdiag's engine writes it: bandwidth fields from the bw run, latency from the lat run."""
    base = bw if bw is not None else lat
    assert base is not None
    return P2PResult(
        bytes=size,
        iters=base.iters,
        bw_gbs=None if bw is None else bw.bw_gbs,
        bw_peak_gbs=None if bw is None else bw.bw_peak_gbs,
        msg_rate_mpps=None if bw is None else bw.msg_rate_mpps,
        lat_us=None if lat is None else lat.lat_us,
        lat_avg_us=None if lat is None else lat.lat_avg_us,
        lat_iters=None if lat is None else lat.iters,
    )


# --- both sides over the control channel ---------------------------------------------------------------


def _port_field(msg: dict[str, Any], peer: str) -> int:
    try:
        return check_int(msg.get("perftest_port"), "perftest_port", 1, 65535)
    except RequestError as e:
        raise ProtocolError(f"{peer} sent an invalid {e.message}") from None


def _rc_field(msg: dict[str, Any], peer: str) -> int | None:
    rc = msg.get("rc")
    if rc is None:
        return None
    try:
        return check_int(rc, "rc", -255, 255)
    except RequestError as e:
        raise ProtocolError(f"{peer} sent an invalid {e.message}") from None


def _details(sel: Any) -> dict[str, Any]:
    return {
        "device": sel.device,
        "ib_port": sel.port,
        "gid_index": sel.gid_index,
        "gid": sel.gid,
        "gid_choice": sel.gid_reason,
        "link_layer": sel.link_layer,
        "mtu": None,
    }


def _await_listening(proc: PerftestProcess, port: int, deadline: float) -> bool:
    """True once ``proc`` itself listens on ``port``; False when it exits first or ``deadline`` passes."""
    while not listens_on(proc.proc.pid, port):
        if proc.returncode is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class _OwnsPerftest:
    """A side that runs at most one perftest process at a time (``proc``); :meth:`close` kills it."""

    proc: PerftestProcess | None = None

    def close(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None


class PerftestServerSide(_OwnsPerftest):
    """The server's half: one perftest server process per phase, on a port it picks."""

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        sel: Any,
        *,
        timeout_s: float,
        path: str | None,
        log: Callable[[str], None],
    ) -> None:
        check_request(req)  # the request is untrusted: perftest's bounds are checked here too
        self.ch, self.req, self.sel, self.timeout_s, self.log = ch, req, sel, timeout_s, log
        self.programs = {
            k: find_program(binary(req.verb, k), path, "the server") for k in req.kinds
        }
        self.version = program_version(next(iter(self.programs.values())))
        self.proc: PerftestProcess | None = None

    def prepare(self) -> dict[str, Any]:
        return {**_details(self.sel), "engine": "perftest", "perftest_version": self.version}

    def connect(self) -> None:
        """Nothing to connect ahead: each perftest run makes its own queue pairs."""

    def phase(self, msg: dict[str, Any]) -> None:
        from ibdiag.bench.p2p.session import _phase_msg

        kind, size, _ = _phase_msg(msg, self.req)
        proc, port = self.start_listening(kind, size)
        try:
            self.ch.send({"type": "go", "perftest_port": port, "command": proc.command})
            limit = time.monotonic() + run_limit_s(self.req, kind, size, self.timeout_s)
            while True:
                m = self.ch.recv(f"the client's perftest {kind} run of {format_bytes(size)}")
                if m["type"] == "beat":
                    if time.monotonic() > limit:
                        raise CannotRunError(
                            f"the perftest {kind} run of {format_bytes(size)} ran past its limit",
                            hint="give --iters/--duration that fit, or a longer --timeout",
                        )
                    continue
                if m["type"] == "done":
                    break
                if m["type"] == "error":
                    raise RemoteError(
                        "failed", f"the client gave up: {peer_text(m.get('message', '?'))}"
                    )
                raise ProtocolError(f"unexpected {peer_value(m['type'])} during a perftest run")
            client_rc = _rc_field(m, self.ch.peer)
            # The client's perftest has finished; the server's finishes at the same time, or is stuck.
            rc = proc.wait(self.timeout_s if client_rc == 0 else 2.0)
            output = proc.output()
            if rc is None:
                proc.kill()
            self.ch.send(
                {
                    "type": "result",
                    "rc": rc,
                    "output": output[-MAX_REMOTE_OUTPUT:],
                    "command": proc.command,
                }
            )
            if rc != 0:
                self.log(
                    f"perftest {kind} {format_bytes(size)} on the server: {status_text(rc)}: {error_lines(output)}"
                )
        finally:
            proc.close()
            self.proc = None

    def start_listening(self, kind: str, size: int) -> tuple[PerftestProcess, int]:
        """perftest's server for ``kind`` and ``size``, listening on a port picked free; the process and the port.

        perftest listens itself, so a port free at the pick may be taken before perftest binds it (the
        kernel hands the same ephemeral ports to everyone): perftest then exits saying it could not
        listen, and runs again on a new port, :data:`LISTEN_TRIES` ports in all. Ready means perftest
        itself listens there, not just anyone. CannotRunError (exit 3) when it fails otherwise, does not
        listen within ``timeout_s``, or every port was taken.
        """
        program = self.programs[kind]
        name = os.path.basename(program)
        taken: list[int] = []
        for _ in range(LISTEN_TRIES):
            port = free_port()
            argv = perftest_argv(
                program,
                self.req,
                kind,
                size,
                device=self.sel.device,
                ib_port=self.sel.port,
                gid_index=self.sel.gid_index,
                tcp_port=port,
            )
            proc = self.proc = PerftestProcess(argv)
            try:
                ready = _await_listening(proc, port, time.monotonic() + self.timeout_s)
            except BaseException:
                proc.close()
                self.proc = None
                raise
            if ready:
                return proc, port
            rc = proc.wait(0)
            output = proc.output()
            proc.close()
            self.proc = None
            if rc is not None and rc != 0 and _BIND_FAILED.search(output):
                self.log(
                    f"perftest could not listen on port {port} (taken since it was picked free); starting it on another"
                )
                taken.append(port)
                continue
            why = (
                status_text(rc)
                if rc is not None
                else f"not listening on port {port} after {self.timeout_s:g} s"
            )
            raise CannotRunError(
                f"perftest on the server ({name}) failed before the client could connect ({why}): {error_lines(output)}",
                hint=f"the server ran: {proc.command}",
            )
        ports = ", ".join(str(p) for p in taken)
        raise CannotRunError(
            f"perftest on the server ({name}) could not listen on its TCP port: {len(taken)} ports picked free ({ports}) were each taken before perftest bound them",
            hint="another program on the server is taking ephemeral ports as fast as they free up; run again, or find it with 'ss -tlnp'",
        )


class PerftestClientSide(_OwnsPerftest):
    """The client's half: per size and kind, ask the server to start perftest, then run the client side."""

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        sel: Any,
        *,
        timeout_s: float,
        path: str | None,
        server_address: str,
    ) -> None:
        check_request(req)
        self.ch, self.req, self.sel, self.timeout_s, self.server_address = (
            ch,
            req,
            sel,
            timeout_s,
            server_address,
        )
        self.programs = {k: find_program(binary(req.verb, k), path) for k in req.kinds}
        self.version = program_version(next(iter(self.programs.values())))
        self.server_version: str | None = None
        self.commands: list[str] = []
        self.server_commands: list[str] = []
        self.proc: PerftestProcess | None = None

    def details(self) -> dict[str, Any]:
        return _details(self.sel)

    def check_ready(self, ready: dict[str, Any]) -> None:
        if ready.get("engine") != "perftest":
            raise ProtocolError(
                f"{self.ch.peer} does not run --engine perftest (it would measure with ibdiag's own loops)",
                hint="run the same ibdiag version on both hosts",
            )
        v = ready.get("perftest_version")
        self.server_version = peer_text(v, 32) if isinstance(v, str) else None

    def info(self) -> PerftestEngine:
        return PerftestEngine(
            self.version, self.server_version, tuple(self.commands), tuple(self.server_commands)
        )

    def run(self, size: int, kind: str) -> P2PResult:
        """One perftest run of ``size``-byte ``kind`` messages; CannotRunError (exit 3) when either end's perftest fails."""
        peer = self.ch.peer
        what = f"{binary(self.req.verb, kind)} {format_bytes(size)}"
        self.ch.send({"type": "phase", "kind": kind, "bytes": size, "warmup": 0})
        go = self.ch.expect("go", f"the server to start {what}")
        port = _port_field(go, peer)
        server_cmd = peer_text(go.get("command", "?"), 1000)
        self.server_commands.append(server_cmd)
        argv = perftest_argv(
            self.programs[kind],
            self.req,
            kind,
            size,
            device=self.sel.device,
            ib_port=self.sel.port,
            gid_index=self.sel.gid_index,
            tcp_port=port,
            server=self.server_address,
        )
        proc = self.proc = PerftestProcess(argv)
        self.commands.append(proc.command)
        try:
            limit = time.monotonic() + run_limit_s(self.req, kind, size, self.timeout_s)
            rc = None
            while rc is None:
                rc = proc.wait(BEAT_S)
                if rc is None:
                    if time.monotonic() > limit:
                        proc.kill()
                        self.ch.send_error("failed", f"{what} ran past its limit")
                        raise CannotRunError(
                            f"{what} ran past its limit and was killed",
                            hint="give --iters/--duration that fit, or a longer --timeout",
                        )
                    self.ch.send({"type": "beat"})
            self.ch.send({"type": "done", "rc": rc})
            res = self.ch.expect("result", f"the server's perftest to finish ({what})")
            server_rc = _rc_field(res, peer)
            server_out = (
                peer_text(res.get("output", ""), MAX_REMOTE_OUTPUT)
                if isinstance(res.get("output"), str)
                else ""
            )
            output = proc.output()
            if rc != 0:
                server = (
                    ""
                    if server_rc == 0
                    else f"; the server's perftest: {status_text(server_rc)}: {error_lines(server_out)}"
                )
                raise CannotRunError(
                    f"perftest failed: {what} on this host: {status_text(rc)}: {error_lines(output)}{server}",
                    hint=f"this host ran: {proc.command}; the server ran: {server_cmd}",
                )
            return read_result(output, size, kind, self.req.verb, what)
        finally:
            proc.close()
            self.proc = None


def run_all(
    side: PerftestClientSide,
    sizes: Iterable[int],
    kinds: tuple[str, ...],
    progress: Callable[[int, int, str], None] | None,
) -> list[P2PResult]:
    sizes = list(sizes)
    total = len(sizes) * len(kinds)
    done = 0
    out: list[P2PResult] = []
    for size in sizes:
        got: dict[str, P2PResult] = {}
        for kind in kinds:
            if progress is not None:
                progress(done, total, f"{kind} {format_bytes(size)}")
            for attempt in range(UNREADABLE_RETRIES + 1):
                try:
                    got[kind] = side.run(size, kind)
                    break
                except UnreadableResult:
                    if attempt == UNREADABLE_RETRIES:
                        raise
            done += 1
        out.append(merge(size, got.get("bw"), got.get("lat")))
    if progress is not None:
        progress(done, total, "done")
    return out


def pyverbs_available() -> bool:
    """Can ibdiag's own engine load pyverbs here (the venv, or Debian's dist-packages)?"""
    from ibdiag.bench.p2p.rdma import verbs

    try:
        verbs.import_pyverbs()
    except CannotRunError:
        return False
    return True


def resolve_engine(req: RunRequest, path: str | None, *, have_pyverbs: bool | None = None) -> str:
    """``--engine auto``: ibdiag's own engine where pyverbs loads (or for TCP); else perftest where
    its binaries are on ``path`` and it can run ``req``; else ibdiag's (whose error names pyverbs)."""
    if req.transport != "rdma":
        return "ibdiag"
    if have_pyverbs is None:
        have_pyverbs = pyverbs_available()
    if have_pyverbs:
        return "ibdiag"
    if request_problem(req) is None and all(
        shutil.which(binary(req.verb, k), path=path) for k in req.kinds
    ):
        return "perftest"
    return "ibdiag"


__all__ = [
    "ENGINES", "INSTALL_HINT", "PerftestClientSide", "PerftestProcess", "PerftestServerSide", "binary",
    "check_request", "error_lines", "find_program", "free_port", "kill_all", "listening_ports", "listening_sockets", "listens_on", "merge", "parse_version",
    "perftest_argv", "read_result", "request_problem", "resolve_engine", "run_all", "run_limit_s", "select_device",
]  # fmt: skip
