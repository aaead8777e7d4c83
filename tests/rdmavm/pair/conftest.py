"""Fixtures of the tests that run INSIDE node 1 of a guest pair (tests/rdmavm/vm.py, ``Node.pair``).

Two guests, two kernels, joined by a qemu socket netdev: node 0 (``$IBDIAG_RDMAVM_PEER``,
10.77.1.1) and node 1 (this one, 10.77.1.2), each with ``rxe0`` (Soft-RoCE) over ``eth0``.
Node 0 runs the test harness agent (tests/rdmavm/pair/agent.py); the :func:`node0` fixture is
the connection to it, so a test here can start ``ibdiag bench serve`` on node 0 and run
``ibdiag bench p2p`` against it from here, across the two kernels. Nothing here is a fake.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.rdmavm.guest.conftest import DEVICE, OUT, PORT_DIR, START_S, Forked, client_env
from tests.rdmavm.pair.agent import AGENT_PORT
from tests.support.p2p import write_token

PEER = os.environ.get("IBDIAG_RDMAVM_PEER", "10.77.1.1")
#: Node 0 boots at the same time as this node; under emulation either may be a minute later.
CONNECT_S = 240


class AgentError(AssertionError):
    pass


class Node0:
    """The connection to node 0's agent: one request, one reply (JSON lines)."""

    def __init__(self, addr: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection((addr, port), timeout=5)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise AgentError(
                        f"node 0's agent ({addr}:{port}) did not answer in {timeout:g} s: {e}"
                    ) from None
                time.sleep(1)
        self.sock.settimeout(None)
        self.f = self.sock.makefile("rw", encoding="utf-8")

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        self.f.write(json.dumps({"op": op, **kw}) + "\n")
        self.f.flush()
        line = self.f.readline()
        if not line:
            raise AgentError(f"node 0's agent closed the connection during {op}")
        reply = json.loads(line)
        if "error" in reply:
            raise AgentError(f"node 0's agent, {op}: {reply['error']}")
        return reply

    def close(self) -> None:
        try:
            self.call("done")
        finally:
            self.sock.close()


@pytest.fixture(scope="session", autouse=True)
def rxe_active() -> None:
    """Every pair test needs rxe0 ACTIVE here: fail (never skip) when the guest could not create it."""
    state = PORT_DIR / "state"
    if not state.is_file():
        pytest.fail(
            f"{DEVICE} was not created on node 1 (rdma link add {DEVICE} type rxe netdev eth0 failed; see console.log)"
        )
    assert "ACTIVE" in state.read_text(), f"{DEVICE} port 1 is {state.read_text().strip()}"


@pytest.fixture(scope="session")
def node0():
    n = Node0(PEER, AGENT_PORT, CONNECT_S)
    assert n.call("ping")["addr"] == PEER
    yield n
    n.close()


@pytest.fixture(scope="session")
def token(tmp_path_factory) -> Path:
    """The same token text as the agent's (write_token's default): the two nodes share no files."""
    return write_token(tmp_path_factory.mktemp("token") / "token")


class RemoteServer:
    """``ibdiag bench serve --transport rdma`` on node 0, through the agent."""

    def __init__(self, node0: Node0, *args: str) -> None:
        self.node0 = node0
        r = node0.call("serve", args=list(args))
        self.id, self.port = r["id"], r["port"]

    def wait_for(self, pattern: str, timeout: float = START_S) -> str:
        return self.node0.call("wait_for", id=self.id, pattern=pattern, timeout=timeout)["line"]

    def log(self) -> tuple[str, int | None]:
        r = self.node0.call("log", id=self.id)
        return r["log"], r["rc"]

    def kill(self) -> None:
        self.node0.call("kill", id=self.id)


@pytest.fixture
def remote_server(node0):
    started: list[RemoteServer] = []

    def start(*args: str) -> RemoteServer:
        s = RemoteServer(node0, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


def p2p_args(port: int, *args: str) -> list[str]:
    """``bench p2p`` from this node to node 0's server."""
    return ["bench", "p2p", PEER, "--port", str(port), "--transport", "rdma", *args]


def remote_client(port: int, token: Path, *args: str) -> Forked:
    """``ibdiag bench p2p PEER --port PORT --transport rdma ARGS`` as a forked process on this node."""
    return Forked(p2p_args(port, *args), env=client_env(token))


def ip_link(state: str) -> None:
    subprocess.run(["ip", "link", "set", "eth0", state], check=True, timeout=30)


def record(name: str, doc: dict[str, Any]) -> None:
    """Leave a measurement in the run directory (build/rdmavm/pair/node1/) for people to read."""
    path = OUT / "pair-results.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[name] = doc
    path.write_text(json.dumps(data, indent=2) + "\n")
