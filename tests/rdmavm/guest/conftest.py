"""Fixtures of the tests that run INSIDE the single-node guest (tests/rdmavm/vm.py, ``Node.single``).

The guest has a real kernel RDMA stack: ``rxe0`` (Soft-RoCE) over ``veth0`` at
``$IBDIAG_RDMAVM_ADDR``. A server and a client in the guest both use rxe0; the client reaches the
server over rxe0's own address, which rxe loops back internally. Nothing here is a fake.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.p2p import LogLines, write_token

DEVICE = "rxe0"
ADDR = os.environ.get("IBDIAG_RDMAVM_ADDR", "10.77.0.1")
OUT = Path(os.environ.get("IBDIAG_RDMAVM_OUT", "/mnt/out"))
PORT_DIR = Path("/sys/class/infiniband") / DEVICE / "ports" / "1"
#: Python starts slowly under emulation (a few seconds per process): generous waits for start-up.
START_S = 90


@pytest.fixture(scope="session", autouse=True)
def rxe_active() -> None:
    """Every guest test needs rxe0 ACTIVE: fail (never skip) when the guest could not create it."""
    state = PORT_DIR / "state"
    if not state.is_file():
        pytest.fail(
            f"{DEVICE} was not created in the guest (rdma link add {DEVICE} type rxe netdev veth0 failed; see console.log)"
        )
    assert "ACTIVE" in state.read_text(), f"{DEVICE} port 1 is {state.read_text().strip()}"


@pytest.fixture(scope="session")
def token(tmp_path_factory) -> Path:
    return write_token(tmp_path_factory.mktemp("token") / "token")


def ibdiag_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ibdiag", *args]


def client_env(token: Path) -> dict[str, str]:
    return {**os.environ, "IBDIAG_TOKEN": token.read_text().strip(), "COLUMNS": "200"}


class Forked:
    """``ibdiag ARGS`` as a real child process, forked from this one (ibdiag is already imported:
    a fresh Python start costs 5-20 s under emulation). Its own process, its own RDMA resources,
    killed by a real signal; stdout and stderr are pipes read line by line."""

    def __init__(
        self,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        before: Callable[[], None] | None = None,
    ) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 70
            try:
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)
                sys.stderr = open(2, "w", buffering=1, closefd=False)
                if env is not None:
                    os.environ.clear()
                    os.environ.update(env)
                # SIGABRT from wait()'s timeout prints every thread's Python stack (a hang's diagnosis)
                faulthandler.enable(file=sys.stderr, all_threads=True)
                if before is not None:
                    before()
                from ibdiag.cli import app

                app([*args], prog_name="ibdiag")
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(out_w)
        os.close(err_w)
        self.pid = pid
        self.returncode: int | None = None
        self.log = LogLines()
        self.out = LogLines()
        self._readers = [
            threading.Thread(target=self._read, args=(fd, sink), daemon=True)
            for fd, sink in ((err_r, self.log), (out_r, self.out))
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(fd: int, sink: LogLines) -> None:
        with open(fd, errors="replace") as f:
            for line in f:
                sink(line.rstrip("\n"))

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"ibdiag (pid {self.pid}) still running after {timeout:g} s; {self._hung()}; "
                    f"stderr:\n{self.log.text()}"
                )
            time.sleep(0.05)
        for t in self._readers:
            t.join(5)
        assert self.returncode is not None
        return self.returncode

    def _hung(self) -> str:
        """Where a child that outlived its wait is: its state and kernel wait channel (a system call
        that does not return, e.g. in the RDMA driver), then every thread's Python stack from
        faulthandler (SIGABRT), read back from its stderr."""
        proc = Path(f"/proc/{self.pid}")
        try:
            state = next(
                (
                    ln
                    for ln in (proc / "status").read_text().splitlines()
                    if ln.startswith("State:")
                ),
                "State: ?",
            )
            where = f"{state.strip()}, wchan {(proc / 'wchan').read_text().strip() or '-'}"
            stack = (proc / "stack").read_text().strip().replace("\n", " | ")[:600]
        except OSError as e:
            where, stack = f"/proc unreadable ({e})", ""
        os.kill(self.pid, signal.SIGABRT)
        end = time.monotonic() + 5
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        for t in self._readers:
            t.join(2)
        return f"{where}; kernel stack: {stack or '-'}; exit after SIGABRT: {self.returncode}"

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.wait(20)

    @property
    def stderr(self) -> str:
        return self.log.text()

    @property
    def stdout(self) -> str:
        return self.out.text()


class Server(Forked):
    """``ibdiag bench serve --transport rdma`` on rxe0 (forked); waits until it listens."""

    def __init__(self, token: Path, *args: str, before: Callable[[], None] | None = None) -> None:
        argv = [
            "bench",
            "serve",
            "--bind",
            ADDR,
            "--port",
            "0",
            "--transport",
            "rdma",
            "--token-file",
            str(token),
            *args,
        ]
        super().__init__(argv, before=before)
        line = self.log.wait_for(r"listening on ", timeout=START_S)
        self.port = int(re.search(r":(\d+) \(", line).group(1))  # type: ignore[union-attr]

    def close(self) -> None:
        self.kill()


@pytest.fixture
def server(token):
    started: list[Server] = []

    def start(*args: str, before: Callable[[], None] | None = None) -> Server:
        s = Server(token, *args, before=before)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def client(port: int, token: Path, *args: str) -> Forked:
    """``ibdiag bench p2p ADDR --port PORT --transport rdma ARGS`` as a forked process."""
    return Forked(p2p_args(port, *args), env=client_env(token))


def p2p_args(port: int, *args: str) -> list[str]:
    return ["bench", "p2p", ADDR, "--port", str(port), "--transport", "rdma", *args]


def rdma_resources() -> dict[str, int]:
    """``rdma resource show`` of rxe0 as counts: {'pd': 0, 'cq': 0, 'qp': 1, 'mr': 0, ...}."""
    r = subprocess.run(
        ["rdma", "resource", "show"], capture_output=True, text=True, timeout=30, check=True
    )
    for line in r.stdout.splitlines():
        if f"{DEVICE}:" in line:
            tail = line.split(f"{DEVICE}:", 1)[1].split()
            return {k: int(v) for k, v in zip(tail[::2], tail[1::2], strict=False)}
    raise AssertionError(f"rdma resource show has no {DEVICE}: {r.stdout!r}")
