"""Live: run infiniband-diags as subprocesses, each with a time limit, into a :class:`~.capture.Capture`.

One discovery: ``ibnetdiscover --cache`` writes libibnetdisc's cache into a private temporary
directory; ``iblinkinfo`` and ``ibqueryerrors`` load it instead of discovering again. Then ``sminfo``
(the master), ``saquery -s`` (every port with the IsSM capability) and ``sminfo LID`` for each other
SM. With ``routes`` (``--routes``), meanwhile, ``ibroute -n LID`` for each switch the discovery found
(:data:`ROUTE_WORKERS` at a time, each with its limit): the subnet manager's unicast forwarding tables,
kept as one run (``ibroute``, the outputs concatenated). ``-C``/``-P`` pick this node's adapter and port, as for the tools. The tools run from an argv list
(never a shell) with the environment ibdiag was given; a tool past its limit is killed and noted, one
that prints more than a dump may keep of a file (:data:`MAX_OUTPUT_BYTES` a stream) is stopped and
the run refused (exit 3).
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ibdiag.errors import CannotRunError, InputError
from ibdiag.fabric.capture import Capture, ToolRun
from ibdiag.fabric.dump import MAX_FILE_BYTES
from ibdiag.fabric.model import SWITCH
from ibdiag.fabric.netdiscover import parse_netdiscover
from ibdiag.fabric.sminfo import parse_sm_lids

TOOLS_HINT = "install infiniband-diags (Debian/Ubuntu: apt-get install infiniband-diags; RHEL: dnf install infiniband-diags)"
#: Most other subnet managers queried one by one.
MAX_SMS = 8
#: ``ibroute`` processes at a time (each one a umad client: ibsim serves 10 at once, opensm holds one).
ROUTE_WORKERS = 3
#: Most bytes read from each of a tool's streams: what a dump keeps of one file.
MAX_OUTPUT_BYTES = MAX_FILE_BYTES


@dataclass(frozen=True)
class Limits:
    discover_s: float = 60.0
    query_s: float = 60.0
    sm_s: float = 10.0
    route_s: float = 10.0
    """Each switch's ``ibroute``."""


Runner = Callable[[Sequence[str], Mapping[str, str], float], tuple[str, str, int | None, float]]


def run_tool(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float
) -> tuple[str, str, int | None, float]:
    """stdout, stderr, exit status (None when killed at the limit) and seconds taken.

    The tool runs in a private temporary directory, removed after it: the tools write nothing, but a
    preload library may (ibsim's umad2sim writes ``./sys-<pid>/``), and never into the user's directory.
    What it prints is read within :data:`MAX_OUTPUT_BYTES` a stream, as a dump's file is: a tool
    that prints more is killed (CannotRunError, exit 3).
    """
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ibdiag-tool-") as cwd:
        with subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
        ) as proc:
            try:
                out, err, ended = _read_bounded(proc, start + timeout_s)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    if ended == "too much":
        raise CannotRunError(
            f"{os.path.basename(argv[0])} printed more than {MAX_OUTPUT_BYTES >> 20} MiB: stopped",
            hint="no real fabric makes the tools print that much; run it by hand to see what it prints",
        )
    rc = None if ended == "timeout" else proc.returncode
    return (
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        rc,
        time.monotonic() - start,
    )


def _read_bounded(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes, str]:
    """The tool's stdout and stderr as it writes them, until it exits (``exited``), the deadline
    passes (``timeout``) or a stream passes :data:`MAX_OUTPUT_BYTES` (``too much``)."""
    assert proc.stdout is not None and proc.stderr is not None
    got: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    size = dict.fromkeys(got, 0)
    with selectors.DefaultSelector() as sel:
        for fd in got:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return (
                    b"".join(got[proc.stdout.fileno()]),
                    b"".join(got[proc.stderr.fileno()]),
                    "timeout",
                )
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                got[key.fd].append(chunk)
                size[key.fd] += len(chunk)
                if size[key.fd] > MAX_OUTPUT_BYTES:
                    return b"", b"", "too much"
    out, err = b"".join(got[proc.stdout.fileno()]), b"".join(got[proc.stderr.fileno()])
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return out, err, "timeout"
    return out, err, "exited"


#: Where distributions install infiniband-diags (Debian: /usr/sbin), searched after PATH: cron's and
#: slurmd's PATH often lack the sbin directories.
SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"


def find_tool(tool: str, env: Mapping[str, str]) -> str:
    path = shutil.which(tool, path=env.get("PATH") or os.defpath) or shutil.which(tool, path=SBIN)
    if path is None:
        raise CannotRunError(
            f"{tool} is not installed (ibdiag fabric runs infiniband-diags)", hint=TOOLS_HINT
        )
    return path


class Collector:
    def __init__(
        self,
        env: Mapping[str, str],
        *,
        ca: str | None = None,
        port: int | None = None,
        limits: Limits = Limits(),
        runner: Runner = run_tool,
        early: Callable[[ToolRun], object] | None = None,
        routes: bool = False,
    ) -> None:
        """``early``: called with ibnetdiscover's and iblinkinfo's runs as soon as each is done, while
        the other tools still run (to parse them meanwhile); what it raises is left to the build."""
        self.env = env
        self.early = early
        self.sel = [*(("-C", ca) if ca else ()), *(("-P", str(port)) if port else ())]
        self.limits = limits
        self.runner = runner
        self.routes = routes

    def _run(self, name: str, argv: list[str], timeout_s: float) -> ToolRun:
        argv = [find_tool(argv[0], self.env), *argv[1:]]
        taken = time.time()
        out, err, rc, elapsed = self.runner(argv, self.env, timeout_s)
        if rc is not None and rc < 0:
            # Killed by a signal it did not get from us (ibqueryerrors once died by SIGSEGV on a
            # 4096-port simulated fabric, and not the next time): once more; a second death is kept.
            taken = time.time()
            out, err, rc, elapsed = self.runner(argv, self.env, timeout_s)
        shown = " ".join([os.path.basename(argv[0]), *argv[1:]])
        return ToolRun(name, shown, out, err, rc, round(elapsed, 4), taken)

    def capture(self, cache_dir: str) -> list[ToolRun]:
        cache = os.path.join(cache_dir, "ibnetdiscover.cache")
        discover = ["ibnetdiscover", *self.sel, "--cache", cache]
        runs = [self._run("ibnetdiscover", discover, self.limits.discover_s)]
        load = ["--load-cache", cache] if os.path.exists(cache) else []
        # After the one discovery the rest are independent queries: run side by side (each its own process).
        with ThreadPoolExecutor(max_workers=5 if self.routes else 4) as pool:
            lfts = pool.submit(self.forwarding, runs[0]) if self.routes else None
            link = pool.submit(
                self._run,
                "iblinkinfo",
                ["iblinkinfo", *self.sel, "-l", *load],
                self.limits.discover_s,
            )
            errors = pool.submit(self.counters, cache_dir, "ibqueryerrors")
            sminfo = pool.submit(self._run, "sminfo", ["sminfo", *self.sel], self.limits.sm_s)
            sa = pool.submit(self._run, "saquery", ["saquery", *self.sel, "-s"], self.limits.sm_s)
            self._early(runs[0])
            runs.append(link.result())
            self._early(runs[-1])
            runs += [errors.result(), sminfo.result(), sa.result()]
            lids = parse_sm_lids(runs[-1].stdout)[:MAX_SMS]
            others = [
                pool.submit(
                    self._run, f"sminfo-{lid}", ["sminfo", *self.sel, str(lid)], self.limits.sm_s
                )
                for lid in lids
            ]
            runs += [f.result() for f in others]
            if lfts is not None:
                runs.append(lfts.result())
        return runs

    def forwarding(self, discovery: ToolRun) -> ToolRun:
        """``ibroute -n LID`` of every switch the discovery names, as one run: stdouts concatenated in
        LID order (each starts with its own header naming the switch), stderrs likewise; the exit
        status the first non-zero one (None when one was killed at its limit)."""
        try:
            nodes, _ports = parse_netdiscover(discovery.stdout)
        except InputError:
            nodes = ()  # the build reports what is wrong with the discovery
        lids = sorted({n.lid for n in nodes if n.kind == SWITCH and n.lid})
        start, taken = time.monotonic(), time.time()
        with ThreadPoolExecutor(max_workers=ROUTE_WORKERS) as pool:
            done = list(
                pool.map(
                    lambda lid: self._run(
                        "ibroute", ["ibroute", *self.sel, "-n", str(lid)], self.limits.route_s
                    ),
                    lids,
                )
            )
        rc: int | None = 0
        for r in done:
            if r.rc is None or (r.rc and rc == 0):
                rc = r.rc
            if rc is None:
                break
        return ToolRun(
            "ibroute",
            f"ibroute {' '.join(self.sel)}{' ' if self.sel else ''}-n LID (each of {len(lids)} switches)",
            "".join(r.stdout for r in done),
            "".join(r.stderr for r in done),
            rc,
            round(time.monotonic() - start, 4),
            taken,
        )

    def _early(self, run: ToolRun) -> None:
        if self.early is not None:
            try:
                self.early(run)
            except Exception:  # the build parses it again and reports what is wrong
                pass

    def counters(self, cache_dir: str, name: str) -> ToolRun:
        cache = os.path.join(cache_dir, "ibnetdiscover.cache")
        load = ["--load-cache", cache] if os.path.exists(cache) else []
        # An empty threshold file: every non-zero error counter is listed, whatever a site's
        # /etc/infiniband-diags/error_thresholds raises (ibdiag applies [counters] thresholds itself).
        argv = [
            "ibqueryerrors",
            *self.sel,
            *load,
            "--threshold-file",
            os.devnull,
            "--data",
            "--details",
        ]
        return self._run(name, argv, self.limits.query_s)

    def version(self) -> str:
        out, err, _rc, _ = self.runner(
            [find_tool("ibnetdiscover", self.env), "--version"], self.env, self.limits.sm_s
        )
        text = (out + err).strip().splitlines()
        return text[0][-40:] if text else "unknown"


def collect(
    collector: Collector,
    *,
    interval_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Capture:
    """Everything once; with ``interval_s``, the counters again that many seconds later (``ibqueryerrors-1``)."""
    with tempfile.TemporaryDirectory(prefix="ibdiag-fabric-") as tmp:
        taken = time.time()
        runs = collector.capture(tmp)
        if interval_s:
            sleep(interval_s)
            runs.append(collector.counters(tmp, "ibqueryerrors-1"))
        return Capture("live", tuple(runs), taken, {"infiniband-diags": collector.version()})
