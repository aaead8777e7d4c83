"""The sweep's coordination through the job's rendezvous store (torch.distributed's TCPStore).

Only the store is used between ranks, never a collective: a collective over the whole job hangs or
fails as soon as one node is gone, while a store key that a rank does not write is simply missing
when its deadline passes — which is how a dead node is named and the sweep goes on without it.

Keys, under ``ibdiag-sweep/<restart>/`` (torchrun's restart count, so an earlier attempt's keys are
never read as this one's)::

    token                 rank 0: the p2p servers' shared token (hex), read by every rank
    node/<r>              rank r: its hostname, address, rails and the ports of its p2p servers (JSON)
    fleet                 rank 0: the nodes of the sweep in rank order, and who never published (JSON)
    round/<i>/<r>         rank 0: rank r's tests in round i, or the end of the sweep (JSON)
    done/<i>/<r>          rank r: its results of round i (JSON); rank 0 counts the round complete
                          when it has found every live rank's key (no key any rank can write, such
                          as a shared counter, ends its wait early)
    end                   rank 0: the sweep is over (also for a rank it stopped waiting for)
    bye/<r>               rank r: it read the end (rank 0 waits for these before it may take the
                          store down, when it serves it)

Every value read is untrusted (another rank, or anyone who can reach the store, wrote it) and is
checked by the reader, parsed within :func:`ibdiag.jsonread.loads`'s budget (a ``"[" * 100000`` is a
refused value, not a RecursionError). The store itself is not authenticated: any process of the job can
write any key, so everyone in the job is trusted not to forge another rank's report (docs/security.md).
Waits poll :meth:`check` so that a missing key costs no error message from
the store's C++ side; the poll interval grows with the job so the store is not flooded, and rank 0
asks for many keys per request (:data:`BATCH`: a check of all of them, a ``multi_get``), so that a
round of 16384 ranks costs it tens of requests, not tens of thousands
(``benchmarks/sweep_store.py``).

Here too: how a rank reaches the store (:func:`connect_store`) and the address it publishes to its
peers, the one that routes to rank 0 (:func:`route_address`).
"""

from __future__ import annotations

import datetime
import json
import socket
import time
from collections.abc import Sequence
from typing import Any

from ibdiag.errors import CannotRunError, InputError
from ibdiag.jsonread import JsonFieldError, loads
from ibdiag.runtime.launch import LaunchEnv
from ibdiag.runtime.torchdist import first_line, import_dist

#: Largest value a rank accepts from the store (a round's results on 64 rails are a few KiB).
MAX_VALUE_BYTES = 4 * 2**20
#: Keys asked for in one request to the store (a check of many keys, a multi_get).
BATCH = 256
#: How often rank 0 looks again for a round's reports: each look is one request per batch not yet
#: whole (64 at 16384 ranks), so it need not slow down with the job as every rank's own polls do.
WAIT_ALL_POLL_S = 0.05


def poll_interval_s(world: int) -> float:
    """Seconds between polls of a key: 20 ms for a small job, up to 1 s at 16384 ranks (~16 k polls/s)."""
    return min(1.0, 0.02 * max(1.0, world / 64))


class Coordinator:
    """JSON values and bounded waits over a store (anything with ``set``, ``get``, ``add``, ``check``)."""

    def __init__(self, store: Any, world: int) -> None:
        self.store = store
        self.world = world
        self.poll_s = poll_interval_s(world)

    # --- values ------------------------------------------------------------------------------------

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        """A store call; its failure (the store's host gone, a reset connection) is a CannotRunError."""
        try:
            return fn(*args)
        except Exception as e:  # the store raises RuntimeError subclasses, OSError, ValueError
            raise CannotRunError(
                f"the rendezvous store failed while {what}: {first_line(e)}",
                hint="rank 0 or the launcher's agent that serves the store is gone; check rank 0's output",
            ) from None

    def put(self, key: str, value: Any) -> None:
        self._call(f"writing {key}", self.store.set, key, json.dumps(value, separators=(",", ":")))

    def put_many(self, items: Sequence[tuple[str, Any]]) -> None:
        if not items:
            return
        keys = [k for k, _ in items]
        values = [json.dumps(v, separators=(",", ":")) for _, v in items]
        multi = getattr(self.store, "multi_set", None)
        if multi is not None:
            self._call(f"writing {keys[0]} and {len(keys) - 1} more", multi, keys, values)
        else:
            for k, v in zip(keys, values, strict=False):
                self._call(f"writing {k}", self.store.set, k, v)

    def has(self, key: str) -> bool:
        return bool(self._call(f"looking for {key}", self.store.check, [key]))

    def read(self, key: str) -> Any:
        """The JSON value of a key known to be there: InputError when it is not JSON within the budget
        of :func:`~ibdiag.jsonread.loads` (or too long), CannotRunError when the store fails."""
        value = self._parse(key, self._call(f"reading {key}", self.store.get, key))
        if isinstance(value, InputError):
            raise value
        return value

    def _parse(self, key: str, raw: bytes) -> Any:
        """A store value as JSON, or the :class:`InputError` that says why it is not (returned, so
        one bad value among a batch's does not lose the others)."""
        if len(raw) > MAX_VALUE_BYTES:
            return InputError(
                f"store key {key}: {len(raw)} bytes, more than a sweep writes",
                hint="is another job using the same rendezvous store and port?",
            )
        try:
            return loads(bytes(raw))
        except JsonFieldError as e:
            return InputError(
                f"store key {key} does not hold JSON ibdiag reads: {e.problem}",
                hint="is another job using the same rendezvous store and port?",
            )

    def count(self, key: str, by: int = 1) -> int:
        return int(self._call(f"counting {key}", self.store.add, key, by))

    # --- waits -------------------------------------------------------------------------------------

    def wait_for(self, key: str, deadline: float) -> bool:
        """Poll until ``key`` exists or ``time.monotonic()`` passes ``deadline``; True when it exists."""
        while True:
            if self.has(key):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))

    def wait_any(self, keys: Sequence[str], deadline: float) -> str | None:
        """Poll until one of ``keys`` exists (the first of them that does), None at the deadline."""
        while True:
            for key in keys:
                if self.has(key):
                    return key
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))

    def wait_value(self, key: str, deadline: float) -> Any | None:
        """The key's JSON value once it exists, None when the deadline passes first."""
        return self.read(key) if self.wait_for(key, deadline) else None

    def missing(self, keys: Sequence[str]) -> list[str]:
        """Which of ``keys`` do not exist: a batch of :data:`BATCH` at a time in one request (the
        store's check answers whether all of them exist), key by key within a batch that is not whole."""
        out: list[str] = []
        for i in range(0, len(keys), BATCH):
            batch = list(keys[i : i + BATCH])
            if len(batch) > 1 and self._all(batch):
                continue
            out += [k for k in batch if not self.has(k)]
        return out

    def _all(self, keys: Sequence[str]) -> bool:
        return bool(
            self._call(
                f"looking for {keys[0]} and {len(keys) - 1} more", self.store.check, list(keys)
            )
        )

    def wait_all(self, keys: Sequence[str], deadline: float) -> list[str]:
        """Poll until every one of ``keys`` exists or the deadline passes; the keys still missing.

        While waiting, one request per batch of :data:`BATCH` keys not yet whole (a batch once whole
        is not asked again); which keys are missing is asked key by key only at the deadline, so a
        16384-rank round costs 64 requests per poll, not 16384."""
        left = [list(keys[i : i + BATCH]) for i in range(0, len(keys), BATCH)]
        while True:
            left = [b for b in left if not self._all(b)]
            if not left:
                return []
            if time.monotonic() >= deadline:
                return self.missing([k for b in left for k in b])
            time.sleep(min(WAIT_ALL_POLL_S, self.poll_s, max(0.0, deadline - time.monotonic())))

    def read_many(self, keys: Sequence[str]) -> list[Any]:
        """The JSON values of keys known to be there, a batch per request (``multi_get`` where the
        store has it); a value that is not JSON within the budget is an :class:`InputError` in its place."""
        out: list[Any] = []
        multi = getattr(self.store, "multi_get", None)
        for i in range(0, len(keys), BATCH):
            batch = list(keys[i : i + BATCH])
            if multi is None:
                raws = [self._call(f"reading {k}", self.store.get, k) for k in batch]
            else:
                raws = self._call(f"reading {batch[0]} and {len(batch) - 1} more", multi, batch)
            out += [self._parse(k, raw) for k, raw in zip(batch, raws, strict=True)]
        return out

    def report(self, round_index: int, rank: int, results: Any) -> None:
        """Publish this rank's results of a round (rank 0 looks for each rank's key)."""
        self.put(f"done/{round_index}/{rank}", results)


def route_address(master_addr: str, port: int) -> str:
    """This host's address on the way to ``master_addr``: the source address the kernel picks (UDP
    connect sends nothing). That is the interface the peers reach, also when a host has several."""
    try:
        infos = socket.getaddrinfo(master_addr, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as e:
        raise CannotRunError(
            f"cannot resolve the rendezvous host {master_addr!r}: {e.strerror}",
            hint="check MASTER_ADDR / the launcher's rendezvous endpoint",
        ) from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect(addr)
        except OSError as e:
            raise CannotRunError(
                f"no route to the rendezvous host {master_addr}: {e.strerror}",
                hint="check the network, or MASTER_ADDR",
            ) from None
        return str(s.getsockname()[0])


def connect_store(launch: LaunchEnv, timeout_s: float) -> Any:
    """The job's rendezvous store, under this sweep's prefix (rank 0 serves it unless the launcher's agent does)."""
    _, dist = import_dist(needs="ibdiag sweep")
    is_master = launch.rank == 0 and not launch.agent_store
    try:
        store = dist.TCPStore(
            launch.master_addr,
            launch.master_port,
            launch.world_size,
            is_master,
            timeout=datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except Exception as e:  # connect and bind failures have several types across versions
        verb = "serve" if is_master else "reach"
        raise CannotRunError(
            f"rank {launch.rank}: cannot {verb} the rendezvous store at {launch.master_addr}:{launch.master_port}: {first_line(e)}",
            hint="check MASTER_ADDR/MASTER_PORT (a free port on rank 0's host), that rank 0 started, and firewalls",
        ) from None
    return dist.PrefixStore(f"ibdiag-sweep/{launch.restart}", store)  # PrefixStore adds the "/"
