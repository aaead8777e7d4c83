"""A real InfiniBand subnet in user space for the tests: ibsim + opensm + infiniband-diags.

``SimFabric(topology_text, workdir)`` starts ``ibsim`` on the net file (stdin on a pipe that stays
open: at EOF ibsim spins), waits until its control socket is bound, starts ``opensm`` (unless
``sm=False``) through ``libumad2sim.so`` and waits for "SUBNET UP". ``env`` is the environment any
infiniband-diags tool (or ``ibdiag fabric``) needs to talk to this subnet; ``console(cmd)`` drives
ibsim's console (Unlink, ReLink, PerformanceSet, Error ...) and returns what it printed. Stop order:
opensm first, then ibsim (the other order leaves opensm hung). Recipe and timings:
``../shared/reference/FABRIC-SIM.md``.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.support.env import unavailable

UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
TOOLS = ("ibsim", "opensm", "ibnetdiscover", "iblinkinfo", "ibqueryerrors", "sminfo", "saquery")
INSTALL_HINT = "apt-get install ibsim-utils opensm infiniband-diags (make system-deps)"
_names = itertools.count()


def need_simulator() -> None:
    """Skip (fail under IBDIAG_TEST_STRICT=1, as in CI) when the simulator or the tools are missing."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing or not os.path.exists(UMAD2SIM):
        unavailable(
            f"the fabric simulator is not installed ({', '.join(missing) or UMAD2SIM}): {INSTALL_HINT}"
        )


class SimFabric:
    def __init__(
        self,
        net_text: str,
        workdir: Path,
        *,
        sm: bool = True,
        attach: str | None = None,
        timeout_s: float = 20.0,
        sizes: tuple[int, int, int] | None = None,
    ) -> None:
        """``sizes``: ibsim's ``-N nodes -S switches -P ports`` limits (its defaults, 2048 / 256 /
        13312, hold the tests' fabrics; benchmarks/fabric_sim_sizes.py raises them)."""
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.net = workdir / "net"
        self.net.write_text(net_text)
        self.name = f"ibdiag{os.getpid()}x{next(_names)}"
        # Tools attach at the first node of the file unless told; a host adapter is where they run.
        self.attach = attach or next(
            (ln.split('"')[1] for ln in net_text.splitlines() if ln.startswith("Ca\t")), None
        )
        self.timeout_s = timeout_s
        self.sms: list[subprocess.Popen[bytes]] = []
        self._out = ""
        self._cond = threading.Condition()
        limits = []
        if sizes is not None:
            limits = ["-N", str(sizes[0]), "-S", str(sizes[1]), "-P", str(sizes[2])]
        self.sim = subprocess.Popen(
            ["ibsim", *limits, "-s", str(self.net)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env={**os.environ, "IBSIM_SOCKNAME": self.name},
            start_new_session=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        self._wait(self._bound, "ibsim to bind its control socket")
        if sm:
            self.start_sm()

    # --- processes ----------------------------------------------------------------------------------

    def _pump(self) -> None:
        # The console echoes a "#marker" with no newline after it: read chunks, not lines.
        assert self.sim.stdout is not None
        fd = self.sim.stdout.fileno()
        while chunk := os.read(fd, 65536):
            with self._cond:
                self._out += chunk.decode(errors="replace")
                self._cond.notify_all()

    def _bound(self) -> bool:
        return f"@{self.name}:ctl" in Path("/proc/net/unix").read_text()

    def _wait(self, ready: object, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not ready():  # type: ignore[operator]
            if self.sim.poll() is not None:
                raise RuntimeError(f"ibsim exited ({self.sim.returncode}) while waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.01)

    def env(self, attach: str | None = None) -> dict[str, str]:
        """The environment a tool needs to talk to this subnet, attached at node id ``attach``."""
        env = {
            **os.environ,
            "IBSIM_SOCKNAME": self.name,
            "LD_PRELOAD": UMAD2SIM,
            "OSM_TMP_DIR": str(self.workdir),
            "OSM_CACHE_DIR": str(self.workdir),
        }
        where = attach or self.attach
        if where:
            env["SIM_HOST"] = where
        else:
            env.pop("SIM_HOST", None)
        return env

    def start_sm(self, attach: str | None = None, *, priority: int = 0, wait: bool = True) -> Path:
        log = self.workdir / f"opensm{len(self.sms)}.log"
        proc = subprocess.Popen(
            ["opensm", "-d", "2", "-s", "0", "-p", str(priority), "-f", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.workdir,
            env=self.env(attach),
            start_new_session=True,
        )
        self.sms.append(proc)
        if wait:
            self._wait(
                lambda: log.exists() and "SUBNET UP" in log.read_text(errors="replace"), "SUBNET UP"
            )
        return log

    def settle(self, seconds: float = 0.3) -> None:
        """Give opensm time to re-sweep after a console change (20-40 ms measured; traps drive it)."""
        time.sleep(seconds)

    def console(self, *commands: str) -> str:
        """Run console commands; returns what ibsim printed for them (up to an echoed marker)."""
        assert self.sim.stdin is not None
        marker = f"#m{next(_names)}"
        for c in commands:
            self.sim.stdin.write(c.encode() + b"\n")
        self.sim.stdin.write(marker.encode() + b"\n")
        self.sim.stdin.flush()
        with self._cond:
            if not self._cond.wait_for(lambda: marker in self._out, self.timeout_s):
                raise RuntimeError(f"ibsim did not answer {commands!r}")
            out, _, self._out = self._out.partition(marker)
        return out.replace("sim> ", "")

    def run(
        self, argv: list[str], *, attach: str | None = None, timeout: float = 20.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=self.env(attach),
            cwd=self.workdir,
            timeout=timeout,
        )

    def stop_sms(self) -> None:
        for p in self.sms:
            _stop(p)
        self.sms.clear()

    def close(self) -> None:
        self.stop_sms()
        if self.sim.stdin is not None:
            try:
                self.sim.stdin.close()
            except OSError:
                pass
        _stop(self.sim)

    def __enter__(self) -> SimFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(3)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(3)


_ROUTE_TABLE = re.compile(r"^Unicast lids .* of switch Lid \d+ guid (0x[0-9a-f]+) \((.*)\):")
_ROUTE_ENTRY = re.compile(r"^0x([0-9a-f]{4}) (\d{3})")


def ibroute_tables(text: str) -> dict[str, dict[int, int]]:
    """Switch description -> {destination LID: out port}, read from ``ibroute`` output by hand: the
    tests' own oracle, independent of ibdiag's parser (ibdiag/fabric/routes.py)."""
    tables: dict[str, dict[int, int]] = {}
    cur: dict[int, int] = {}
    for ln in text.splitlines():
        if m := _ROUTE_TABLE.match(ln):
            cur = tables.setdefault(m.group(2), {})
        elif m := _ROUTE_ENTRY.match(ln):
            cur[int(m.group(1), 16)] = int(m.group(2))
    return tables
