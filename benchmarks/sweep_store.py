#!/usr/bin/env python3
"""The sweep's rendezvous store at scale, on loopback: start-up and coordination per round, N ranks.

    python benchmarks/sweep_store.py [--ranks 1024,4096,16384] [--rails 1] [--rounds 5] [--procs 2]

Rank 0 is ibdiag's own: torch.distributed's TCPStore served in this process (as ``ibdiag sweep`` under
srun/mpirun serves it) and :class:`ibdiag.sweep.coord.Coordinator` making the calls rank 0 makes
(token, its node, every node's description waited for and read in batches, the fleet's size; per
round one key per rank with ``multi_set``, every rank's report waited for in batches and read with
``multi_get`` and ``wire.read_results``). Ranks
1..N-1 are simulated: asyncio clients in ``--procs`` processes, one TCP connection each, speaking the
TCPStore protocol themselves (no torch: the validation handshake, then SET/GET/CHECK, the keys under
torch's ``/`` and the sweep's ``ibdiag-sweep/0/`` prefix) with the worker's access pattern and poll
interval (``coord.poll_interval_s``): wait for the token, publish a node with ``--rails`` rails, wait
for the fleet and read it; per round wait for its task (or the end), read the description of the
peer it tests against (the first time), answer at once with one result row per rail. No test runs:
what is timed is the store's part alone.

The store resolves the address of every rank that connects to a name (c10d formats the peer's address
with getnameinfo): where the DNS server is slow or drops queries, each such lookup blocks the store's
one thread for the resolver's timeout (5 s here, seen with strace: a PTR query per connection, and
``The hostname of the client socket cannot be retrieved`` where none answers). ``--isolated`` (root)
runs everything in a network namespace of its own, with loopback only: the lookups fail at once, and
what is timed is the store itself; without it, this host's resolver is part of the figure.

Printed per N: the start (rank 0 puts the token -> every rank has read the fleet), the fleet's size,
the coordination of a round (rank 0 writes the tasks -> it has read every report; median of
``--rounds``), and the CPU seconds of rank 0's process (its store server thread included) and of the
simulated ranks. Timings on a shared machine vary with its load: the CPU seconds say what the work
costs. Needs ``ulimit -n`` above N / procs + 100 (the clients) and N + 100 (rank 0's server).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing as mp
import random
import resource
import shlex
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ibdiag.sweep.coord import Coordinator, poll_interval_s  # noqa: E402
from ibdiag.sweep.nodes import FleetNode, Rail  # noqa: E402
from ibdiag.sweep.schedule import Phase  # noqa: E402
from ibdiag.sweep.wire import read_results  # noqa: E402

PREFIX = "/ibdiag-sweep/0/"  # torch's TCPStore adds "/", the sweep's PrefixStore "ibdiag-sweep/0/"
MAGIC = 0x3C85F7CE  # c10d's validationMagicNumber (TCPStoreBackend.hpp)
VALIDATE, SET, GET, CHECK = 0, 1, 3, 5  # c10d's QueryType
READY = 0


def node_doc(rank: int, rails: int) -> dict[str, object]:
    """A rank's description as ``_Rank.publish`` writes it."""
    node = FleetNode(
        rank,
        f"gpu{rank:05d}",
        f"10.{rank >> 16 & 255}.{rank >> 8 & 255}.{rank & 255}",
        tuple(Rail(k, f"mlx5_{k}", 1, 400.0) for k in range(rails)),
    )
    return {**node.to_json(), "ports": [40000 + k for k in range(rails)]}


class Client:
    """One simulated rank's connection (TCPStore's wire protocol, native byte order as c10d writes it)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w = reader, writer

    @staticmethod
    def _key(k: str) -> bytes:
        b = (PREFIX + k).encode()
        return struct.pack("<Q", len(b)) + b

    async def set(self, k: str, value: bytes) -> None:
        self.w.write(bytes([SET]) + self._key(k) + struct.pack("<Q", len(value)) + value)
        await self.w.drain()

    async def get(self, k: str) -> bytes:
        self.w.write(bytes([GET]) + self._key(k))
        await self.w.drain()
        (n,) = struct.unpack("<Q", await self.r.readexactly(8))
        return await self.r.readexactly(n)

    async def has(self, k: str) -> bool:
        self.w.write(bytes([CHECK]) + struct.pack("<Q", 1) + self._key(k))
        await self.w.drain()
        return (await self.r.readexactly(1))[0] == READY

    async def wait_any(self, keys: list[str], poll_s: float) -> str:
        while True:
            for k in keys:  # one check per key, as Coordinator.wait_any does
                if await self.has(k):
                    return k
            await asyncio.sleep(poll_s)


async def one_rank(
    port: int, rank: int, world: int, rails: int, spread_s: float, times: dict[str, list[float]]
) -> None:
    poll_s = poll_interval_s(world)
    await asyncio.sleep(random.uniform(0.0, spread_s))  # processes start over a while, not at once
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**26)
    writer.write(bytes([VALIDATE]) + struct.pack("<I", MAGIC))
    c = Client(reader, writer)
    await c.wait_any(["token"], poll_s)
    await c.get("token")
    await c.set(f"node/{rank}", json.dumps(node_doc(rank, rails), separators=(",", ":")).encode())
    await c.wait_any(["fleet"], poll_s)
    await c.get("fleet")
    times["fleet"].append(time.time())
    i = 0
    known: set[int] = set()
    while True:
        found = await c.wait_any([f"round/{i}/{rank}", "end"], poll_s)
        task = json.loads(await c.get(found))
        times.setdefault(f"seen/{i}", []).append(time.time())
        if found == "end" or task.get("end"):
            await c.set(f"bye/{rank}", b"1")
            break
        for _rail, peer in task[
            "tests"
        ]:  # a peer's description, the first time it is tested against
            if peer not in known:
                json.loads(await c.get(f"node/{peer}"))
                known.add(peer)
        rows = [
            [k, peer, rank, 48.1, None, None, "ibdiag"]
            for k in range(rails)
            for _r, peer in task["tests"]
        ]
        await c.set(f"done/{i}/{rank}", json.dumps(rows, separators=(",", ":")).encode())
        i += 1
    writer.close()


def clients(
    port: int, ranks: list[int], world: int, rails: int, spread_s: float, out: mp.Queue
) -> None:
    times: dict[str, list[float]] = {"fleet": []}

    async def main() -> None:
        await asyncio.gather(*(one_rank(port, r, world, rails, spread_s, times) for r in ranks))

    asyncio.run(main())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((times, usage.ru_utime + usage.ru_stime))


def rank0(world: int, rails: int, rounds: int, procs: int, spread_s: float) -> dict[str, float]:
    import torch.distributed as dist  # heavy: only rank 0 needs torch, as in a real job

    server = dist.TCPStore(
        "127.0.0.1", 0, world, True, timeout=datetime.timedelta(seconds=600), wait_for_workers=False
    )
    coord = Coordinator(dist.PrefixStore("ibdiag-sweep/0", server), world)
    q: mp.Queue = mp.Queue()
    others = list(range(1, world))
    ps = [
        mp.Process(target=clients, args=(server.port, others[i::procs], world, rails, spread_s, q))
        for i in range(procs)
    ]
    for p in ps:
        p.start()
    cpu0 = time.process_time()
    t0 = time.time()
    coord.put("token", "ab" * 32)
    coord.put("node/0", node_doc(0, rails))
    deadline = time.monotonic() + 600
    keys = [f"node/{r}" for r in range(world)]  # as _Rank.gather_fleet: every description, batched
    assert not coord.wait_all(keys, deadline)
    docs = coord.read_many(keys)
    assert all(isinstance(d, dict) for d in docs)
    gathered = time.time()
    fleet = {"size": world, "missing": []}
    fleet_bytes = len(json.dumps(fleet, separators=(",", ":")))
    coord.put("fleet", fleet)
    per_round: list[float] = []
    put_at: list[float] = []
    reading: list[float] = []
    # as Leader._run_tests: one task per rank, every report waited for, read
    for i in range(rounds):
        started = time.time()
        put_at.append(started)
        tasks = []
        for r in others:
            partner = (r + i + 1) % world or 1
            tasks.append(
                (f"round/{i}/{r}", {"phase": "first", "expect": world, "tests": [[0, partner]]})
            )
        coord.put_many(tasks)
        done = [f"done/{i}/{r}" for r in others]
        silent = coord.wait_all(done, time.monotonic() + 600)
        assert not silent, f"{len(silent)} ranks never reported round {i}"
        t_read = time.time()
        for r, value in zip(others, coord.read_many(done), strict=True):
            read_results(value, i, Phase.FIRST, r, world, source=f"rank {r}")
        reading.append(time.time() - t_read)
        per_round.append(time.time() - started)
    coord.put_many([(f"round/{rounds}/{r}", {"end": True}) for r in others])
    coord.put("end", True)
    results = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(timeout=60)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    fleet_done = max(t for times, _ in results for t in times["fleet"])
    lags = [
        max(t for times, _ in results for t in times.get(f"seen/{i}", [])) - put_at[i]
        for i in range(rounds)
    ]
    return {
        "seen_s": statistics.median(lags),
        "read_s": statistics.median(reading),
        "ranks": world,
        "rails": rails,
        "start_s": fleet_done - t0,
        "gather_s": gathered - t0,
        "fleet_bytes": fleet_bytes,
        "round_s": statistics.median(per_round),
        "round_max_s": max(per_round),
        "rank0_cpu_s": usage.ru_utime + usage.ru_stime,
        "rank0_cpu_rounds_s": time.process_time() - cpu0,
        "clients_cpu_s": sum(cpu for _, cpu in results),
        "poll_s": poll_interval_s(world),
    }


def torch_version() -> str:
    import torch  # heavy, but rank 0 imports it anyway

    return str(torch.__version__)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1024,4096,16384")
    ap.add_argument("--rails", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--procs", type=int, default=2, help="processes for the simulated ranks")
    ap.add_argument(
        "--isolated",
        action="store_true",
        help="run in a network namespace of its own (root): no DNS, loopback only",
    )
    ap.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="seconds over which the simulated ranks start (0: all at once)",
    )
    args = ap.parse_args()
    if args.isolated:
        argv = [a if a != "--isolated" else "--in-namespace" for a in sys.argv[1:]]
        cmd = f"ip link set lo up && exec {shlex.quote(sys.executable)} {shlex.quote(__file__)} "
        cmd += " ".join(shlex.quote(a) for a in argv)
        return subprocess.run(["unshare", "--net", "sh", "-c", cmd], check=False).returncode
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    where = "a network namespace of its own" if args.in_namespace else "the host's network"
    print(f"# torch {torch_version()}, in {where}")
    print(
        "| ranks | rails | start (s) | of which gathering (s) | fleet key (B) | round (s, median) | round max (s) | last rank saw its task (s) | reading the reports (s) | poll (s) | rank 0 CPU (s) | simulated ranks' CPU (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.ranks.split(",")):
        m = rank0(n, args.rails, args.rounds, args.procs, args.spread)
        print(
            f"| {m['ranks']} | {m['rails']} | {m['start_s']:.1f} | {m['gather_s']:.1f} | "
            f"{m['fleet_bytes']} | {m['round_s']:.2f} | {m['round_max_s']:.2f} | "
            f"{m['seen_s']:.2f} | {m['read_s']:.2f} | "
            f"{m['poll_s']:.2f} | {m['rank0_cpu_s']:.1f} | {m['clients_cpu_s']:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
