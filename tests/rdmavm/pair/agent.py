"""TEST HARNESS, not product code: the command service node 0 of a guest pair runs for node 1's tests.

``make test-rdma`` boots two guests (tests/rdmavm/vm.py, ``Node.pair``). Node 0 runs this agent
instead of a test selection: a TCP service on its eth0 address (``AGENT_PORT``) taking one JSON
object per line and answering one per line. Node 1's tests (tests/rdmavm/pair/) use it to act on
node 0: start or SIGKILL ``ibdiag bench serve --transport rdma`` (forked, as the single-node
tests do), start a perftest server, run ``ibdiag counters`` and read rxe0's hw_counters there.
``{"op": "done"}`` ends it and node 0 powers off; so does ``IDLE_S`` without a request.

Ops: ping; serve(args) -> id, port; log(id) -> log, rc; wait_for(id, pattern, timeout) -> line;
kill(id) -> rc; perftest(argv) -> id; output(id, timeout) -> rc, stdout, stderr;
ibdiag(args, timeout, save) -> rc, stdout, stderr
(stdout also written to the file ``save`` on node 0); hw(name) -> value; done.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

AGENT_PORT = 7709
#: Without a request for this long, node 1 is taken to be gone: the agent ends (exit 1).
IDLE_S = 900.0


class Agent:
    def __init__(self, token: Path) -> None:
        self.token = token
        self.procs: dict[int, Any] = {}
        self.next_id = 1

    def _add(self, proc: Any) -> int:
        n = self.next_id
        self.next_id += 1
        self.procs[n] = proc
        return n

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        from tests.rdmavm.guest.conftest import PORT_DIR, Forked, Server

        op = req.get("op")
        if op == "ping":
            return {"ok": True, "addr": os.environ.get("IBDIAG_RDMAVM_ADDR")}
        if op == "serve":
            s = Server(self.token, *req.get("args", []))
            return {"id": self._add(s), "port": s.port}
        if op == "log":
            p = self.procs[req["id"]]
            return {"log": p.stderr, "rc": p.poll()}
        if op == "wait_for":
            p = self.procs[req["id"]]
            return {"line": p.log.wait_for(req["pattern"], timeout=float(req.get("timeout", 60)))}
        if op == "kill":
            p = self.procs[req["id"]]
            p.kill()
            return {"rc": p.returncode}
        if op == "perftest":
            p = subprocess.Popen(
                req["argv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            return {"id": self._add(p)}
        if op == "output":
            p = self.procs[req["id"]]
            try:
                out, err = p.communicate(timeout=float(req.get("timeout", 120)))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            return {"rc": p.returncode, "stdout": out, "stderr": err}
        if op == "ibdiag":
            f = Forked(list(req["args"]), env={**os.environ, "COLUMNS": "200"})
            rc = f.wait(float(req.get("timeout", 120)))
            if req.get("save"):  # e.g. a counters -o json for a later --since
                Path(req["save"]).write_text(f.stdout)
            return {"rc": rc, "stdout": f.stdout, "stderr": f.stderr}
        if op == "hw":
            return {"value": int((PORT_DIR / "hw_counters" / req["name"]).read_text())}
        raise ValueError(f"unknown op {op!r}")

    def close(self) -> None:
        for p in self.procs.values():
            try:
                p.kill()
            except Exception:  # already gone
                pass


def serve(addr: str, port: int, token: Path) -> int:
    import ibdiag.cli  # noqa: F401 - imported once here, so each forked ibdiag starts at once

    agent = Agent(token)
    lsock = socket.create_server((addr, port), reuse_port=False)
    lsock.settimeout(IDLE_S)
    print(f"agent: listening on {addr}:{port}", flush=True)
    try:
        while True:
            try:
                conn, peer = lsock.accept()
            except TimeoutError:
                print(f"agent: no request for {IDLE_S:g} s; giving up", flush=True)
                return 1
            print(f"agent: connection from {peer[0]}", flush=True)
            conn.settimeout(IDLE_S)
            with conn, conn.makefile("rw", encoding="utf-8") as f:
                try:
                    for line in f:
                        req = json.loads(line)
                        if req.get("op") == "done":
                            f.write(json.dumps({"ok": True}) + "\n")
                            f.flush()
                            print("agent: done", flush=True)
                            return 0
                        t0 = time.monotonic()
                        try:
                            reply = agent.handle(req)
                        except Exception as e:  # the error goes back to the test
                            reply = {"error": f"{type(e).__name__}: {e}"}
                        print(
                            f"agent: {req.get('op')} {time.monotonic() - t0:.1f} s{' ERROR ' + reply['error'] if 'error' in reply else ''}",
                            flush=True,
                        )
                        f.write(json.dumps(reply) + "\n")
                        f.flush()
                except (OSError, TimeoutError) as e:
                    print(f"agent: connection lost ({e}); waiting for the next", flush=True)
    finally:
        agent.close()
        lsock.close()


def main() -> int:
    from tests.support.p2p import write_token

    token = write_token(Path("/root/pair-token"))
    return serve(os.environ.get("IBDIAG_RDMAVM_ADDR", "10.77.1.1"), AGENT_PORT, token)


if __name__ == "__main__":
    sys.exit(main())
