"""What NCCL's RAS service said about the job, whether it said it as text or as JSON.

One model for both formats (``ncclras`` text, NCCL 2.24 and later; ``SET FORMAT json`` + ``STATUS``,
NCCL 2.28.7 and later): the job summary, the communicators (grouped as RAS's table groups them),
the processes RAS could not reach or declared dead, and per communicator the ranks RAS named — with
their node (the IP address of NCCL's bootstrap interface, as RAS prints it), process id, GPU,
status, errors and operation counts. The text report names only the outliers; the JSON status names
every rank (:attr:`RasComm.complete`). Facts follow ``src/ras/client_support.cc`` of NCCL's public
source; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The communicator states RAS prints (``statusStr`` in client_support.cc). NCCL 2.24 and 2.25 printed
#: ``UNKNOWN`` where 2.26 and later print ``NOCOMM``: the parsers store ``NOCOMM`` for both.
STATUSES = ("NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT")
#: The error flags of RAS's table (``errorStr``): combinations are comma-joined.
ERROR_FLAGS = ("OK", "MISMATCH", "ERROR", "INCOMPLETE")

#: ``ncclResult_t`` (nccl.h): the codes in the JSON status's ``init_state`` and ``async_error``.
#: ``ncclTimeout`` (8) exists since NCCL 2.27.
NCCL_RESULTS = {
    0: "success",
    1: "unhandled CUDA error",
    2: "system error",
    3: "internal error",
    4: "invalid argument",
    5: "invalid usage",
    6: "remote process error",
    7: "in progress",
    8: "timeout",
}
#: The words RAS's text report uses for them (``ncclErrorToString``); it prints any code it does not
#: list (``ncclTimeout`` included, NVIDIA/nccl#2263) as ``Unexpected error``.
RAS_ERROR_WORDS = {
    "Unhandled CUDA error": "unhandled CUDA error",
    "System error": "system error",
    "Internal error": "internal error",
    "Invalid argument": "invalid argument",
    "Invalid usage": "invalid usage",
    "Remote process error": "remote process error",
    "NCCL operation in progress": "in progress",
    "Unexpected error": "unexpected error",
}
#: Codes that are not errors: success, and initialisation still in progress.
NOT_ERRORS = (0, 7)


def result_words(code: int) -> str:
    """``ncclRemoteError`` -> ``remote process error``; an unknown code by its number."""
    return NCCL_RESULTS.get(code, f"error code {code}")


@dataclass(frozen=True)
class RasProcess:
    """A job process RAS names (``Process 3487984 on node 172.16.64.213 managing GPU 5``)."""

    host: str | None
    """The node as RAS names it: the IP address of NCCL's bootstrap interface; None: not known."""
    pid: int | None
    gpus: tuple[int, ...] = ()
    """CUDA device numbers the process manages."""
    nvml_gpus: tuple[int, ...] = ()
    """NVML (physical) device numbers, when RAS printed them apart (``CUDA_VISIBLE_DEVICES``); else
    the same as :attr:`gpus`."""

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "cuda_devs": list(self.gpus),
            "nvml_devs": list(self.nvml_gpus or self.gpus),
        }


@dataclass(frozen=True)
class RasRank:
    """One rank of a communicator as RAS described it; a field RAS did not give is None."""

    rank: int
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    """The physical GPU (NVML numbering, = ``nvidia-smi`` and ``ibdiag topo``'s GPU index)."""
    status: str | None = None
    """One of :data:`STATUSES`; None when not known."""
    init_error: str | None = None
    """Initialisation error in words (:data:`NCCL_RESULTS`); None: none reported."""
    async_error: str | None = None
    """Asynchronous error (what ``ncclCommGetAsyncError`` returns) in words; None: none reported."""
    missing: bool = False
    """RAS has no data of this rank for this communicator."""
    unresponsive: bool | None = None
    """Missing because its process did not answer RAS (JSON ``unresponsive``; text INCOMPLETE)."""
    dead: bool | None = None
    """Its process is declared dead (unreachable over the RAS network for 60 s)."""

    @property
    def gpu(self) -> int | None:
        return self.nvml_dev if self.nvml_dev is not None else self.cuda_dev

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "cuda_dev": self.cuda_dev,
            "nvml_dev": self.nvml_dev,
            "status": self.status,
            "init_error": self.init_error,
            "async_error": self.async_error,
            "missing": self.missing,
            "unresponsive": self.unresponsive,
            "dead": self.dead,
        }


@dataclass(frozen=True)
class CountGroup:
    """Ranks that launched the same number of operations of one kind."""

    value: int
    """Operations launched (0: none)."""
    count: int
    """Ranks in the group."""
    ranks: tuple[int, ...] = ()
    """The ranks RAS listed (the text report lists outliers only: may be fewer than :attr:`count`)."""


@dataclass(frozen=True)
class OpMismatch:
    """Ranks of one communicator that disagree on how many operations of a kind they launched."""

    op: str | None
    """``AllReduce``, ``AllGather``...; None in NCCL 2.24/2.25's text, which counted every collective
    together."""
    groups: tuple[CountGroup, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "groups": [
                {"launched": g.value, "ranks_count": g.count, "ranks": list(g.ranks)}
                for g in self.groups
            ],
        }


@dataclass(frozen=True)
class StatusGroup:
    """Ranks of one communicator in one state (when its ranks disagree)."""

    status: str
    count: int
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class CommGroup:
    """A row of RAS's communicator table: communicators alike in size, nodes, status and errors."""

    index: int
    comms: int
    nodes: int | None
    ranks_per_node: str | None
    """``8`` or ``7-8``."""
    size: int | None
    """Ranks per communicator."""
    ranks_total: int | None
    status: str
    errors: tuple[str, ...]
    """Subset of :data:`ERROR_FLAGS` (``OK`` alone when fine)."""
    hashes: tuple[str, ...] = ()
    """The communicators' hashes when known (the JSON status: one group per communicator)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.index,
            "hashes": list(self.hashes),
            "comms": self.comms,
            "nodes_per_comm": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "ranks_per_comm": self.size,
            "ranks_in_group": self.ranks_total,
            "status": self.status,
            "errors": list(self.errors),
        }


@dataclass(frozen=True)
class RasComm:
    """A communicator RAS described in detail (text: one named in Errors or Warnings; JSON: all)."""

    hash: str
    """NCCL's communicator hash, 16 lower-case hex digits (also Inspector's ``id`` and NCCL's logs)."""
    label: str | None = None
    """``#0-1``: RAS's group and index in the group (text only)."""
    size: int | None = None
    status: str | None = None
    errors: tuple[str, ...] = ()
    ranks: tuple[RasRank, ...] = ()
    """The ranks RAS named individually (JSON: every rank that answered)."""
    missing: tuple[RasRank, ...] = ()
    missing_count: int | None = None
    """Ranks with no data (text: ``Missing communicator data from N ranks``)."""
    mismatches: tuple[OpMismatch, ...] = ()
    status_groups: tuple[StatusGroup, ...] = ()
    complete: bool = False
    """Every rank of the communicator is described (the JSON status): the rank map is known."""
    launched: tuple[tuple[str, int], ...] = ()
    """Per operation, the most any rank launched (JSON: every operation; text: the mismatched ones)."""

    def rank(self, number: int) -> RasRank | None:
        for r in (*self.ranks, *self.missing):
            if r.rank == number:
                return r
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "hash": self.hash,
            "label": self.label,
            "size": self.size,
            "status": self.status,
            "errors": list(self.errors),
            "missing_count": self.missing_count,
            "complete": self.complete,
            "launched": dict(self.launched),
            "ranks": [r.to_json() for r in self.ranks],
            "missing_ranks": [r.to_json() for r in self.missing],
            "mismatches": [m.to_json() for m in self.mismatches],
            "status_groups": [
                {"status": g.status, "ranks_count": g.count, "ranks": list(g.ranks)}
                for g in self.status_groups
            ],
        }


@dataclass(frozen=True)
class RasStatus:
    """One RAS reply (or file), parsed."""

    source: str
    """``127.0.0.1:28028``, a file name or ``stdin``."""
    format: str
    """``text`` or ``json``."""
    nccl_version: str | None = None
    cuda_runtime: int | None = None
    cuda_driver: int | None = None
    timestamp: str | None = None
    """The JSON status's ``timestamp`` (local time of the RAS process, no zone)."""
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    outlier_nodes: tuple[str, ...] = ()
    """Nodes RAS printed as running an unusual number of processes."""
    missing_processes: tuple[RasProcess, ...] = ()
    missing_processes_count: int = 0
    dead_processes: tuple[RasProcess, ...] = ()
    dead_count: int = 0
    groups: tuple[CommGroup, ...] = ()
    comms: tuple[RasComm, ...] = ()
    timeouts: int | None = None
    """Communication timeouts while RAS gathered the data."""
    collection_s: float | None = None
    notes: tuple[str, ...] = ()
    """What the parser noticed: lines it did not understand, signs of a known NCCL bug, repairs."""

    def comm(self, hash_: str) -> RasComm | None:
        return next((c for c in self.comms if c.hash == hash_), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "nccl_version": self.nccl_version,
            "cuda_runtime_version": self.cuda_runtime,
            "cuda_driver_version": self.cuda_driver,
            "timestamp": self.timestamp,
            "nodes": self.nodes,
            "processes": self.processes,
            "gpus": self.gpus,
            "outlier_nodes": list(self.outlier_nodes),
            "missing_processes_count": self.missing_processes_count,
            "missing_processes": [p.to_json() for p in self.missing_processes],
            "dead_count": self.dead_count,
            "dead_processes": [p.to_json() for p in self.dead_processes],
            "groups": [g.to_json() for g in self.groups],
            "communicators": [c.to_json() for c in self.comms],
            "timeouts": self.timeouts,
            "collection_s": self.collection_s,
            "notes": list(self.notes),
        }


def comm_hash(text: str) -> str | None:
    """``0xfa93daea854b060b``, ``fa93daea854b060b``, ``0x7f8c496ae9f661`` -> 16 lower-case hex digits;
    None when it is not a 64-bit hex number (RAS prints ``%016lx``, its JSON and Inspector ``0x%lx``)."""
    digits = text[2:] if text[:2] in ("0x", "0X") else text
    if not 1 <= len(digits) <= 16 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        return None
    return digits.lower().rjust(16, "0")
