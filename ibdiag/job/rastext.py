"""NCCL RAS's text report (``ncclras``, ``echo status | nc localhost 28028``) -> :class:`RasStatus`.

Written from NCCL's public source (``src/ras/client_support.cc``, ``rasClientRunInit`` and
``rasClientRunComms``), not from samples. Two layouts:

* NCCL 2.24 and 2.25: one collective count per rank (``different collective operation counts``),
  missing ranks by number only (``The missing ranks: 21``), ``UNKNOWN`` for a rank that no longer
  belongs to the communicator;
* NCCL 2.26 to 2.30: counts per collective (``different AllGather operation counts``), every rank
  named with its GPU, process and node (``Rank 12 -- GPU 4 managed by process 323032 on node
  10.137.190.124``), ``NOCOMM``.

The report is ``NCCL version`` and CUDA lines, ``Job summary``, ``Communicators... (0.00s)`` with a
table of communicator groups, ``Errors`` (INCOMPLETE, DEAD, per-communicator INCOMPLETE and ERROR
blocks) and ``Warnings`` (TIMEOUT, per-communicator MISMATCH blocks). Lines before the version line
(a launcher's warnings) and after the last block (a pasted log) are skipped and counted in the notes;
so is any line inside the report this parser does not know. Each line is cut at :data:`MAX_LINE`
characters before any pattern sees it, and every pattern is anchored and linear.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ibdiag.job.model import (
    RAS_ERROR_WORDS,
    CommGroup,
    CountGroup,
    OpMismatch,
    RasComm,
    RasProcess,
    RasRank,
    RasStatus,
    StatusGroup,
    comm_hash,
)
from ibdiag.text import safe_excerpt

MAX_LINE = 4096
#: Ranks and processes kept over the whole report, and table rows: far above what RAS lists for the
#: largest jobs (it names outliers only; ``VERBOSE STATUS`` under half of a group), so a hostile
#: file of endless rank lines costs bounded memory. The lines past it are counted as not understood.
MAX_LISTED = 1 << 18
MAX_GROUPS = 1 << 16
#: Lines not understood that are quoted in the notes (the rest are counted).
MAX_QUOTED = 5

_VERSION = re.compile(
    r"^NCCL version ([0-9A-Za-z.+_-]{1,64}) compiled with CUDA (\d{1,4}\.\d{1,4})$"
)
_CUDA = re.compile(r"^CUDA runtime version (-?\d{1,9}), driver version (-?\d{1,9})$")
_COMMS = re.compile(r"^Communicators\.\.\.(?: \((\d{1,9}\.\d{1,6})s\))?$")
_INTS = re.compile(r"^ {0,16}\d{1,9}(?: {1,16}\d{1,9}){1,4} {0,4}$")
#: A node as RAS names it: an IPv4 or IPv6 address (``inet_ntop``); never anything a terminal acts on.
HOST = r"[0-9A-Za-z.:%_-]{1,256}"
_OUTLIER = re.compile(r"^  Node (" + HOST + r") running process(?:es)? [\d,]{1,1024}$")
_ROW = re.compile(
    r"^ {0,8}(\d{1,9}) {1,16}(\d{1,9}) {1,16}(\d{1,9}) {1,16}(\d{1,9}(?:-\d{1,9})?) {1,16}"
    r"(\d{1,9}) {1,16}(\d{1,9}) {1,16}([A-Z]{1,16}) {1,16}([A-Z,]{1,64})$"
)
_BLOCK = re.compile(r"^#(\d{1,9})-(\d{1,9}) \(([0-9a-fA-F]{1,16})\) (INCOMPLETE|ERROR|MISMATCH)$")
_JOB_MISSING = re.compile(r"^  Missing communicator data from (\d{1,9}) job process(?:es)?$")
_JOB_DEAD = re.compile(
    r"^  (\d{1,9}) job process(?:es are| is) considered dead \(unreachable via the RAS network\)$"
)
_PROCESS = re.compile(
    r"^  Process (\d{1,10}) on node (" + HOST + r") managing GPUs? ([\d,]{1,512})"
    r"(?: \(NVML ([\d,]{1,512})\))?$"
)
_NOT_FOUND = re.compile(r"^  \[could not find information on (\d{1,9}) process(?:es)?\]$")
_TIMEOUTS = re.compile(
    r"^  Encountered (\d{1,9}) communication timeouts? while gathering communicator data$"
)
# The head of a rank line (before " -- ") and its tail.
_RANK_HEAD = re.compile(
    r"^  Rank (\d{1,10})(?: has status ([A-Z]{1,16})| has launched up to operation (\d{1,20})"
    r"|( has not launched any operations)| reported (.{1,64}))?$"
)
_RANK_TAIL = re.compile(
    r"^(?:GPU (\d{1,4})(?: \(NVML (\d{1,4})\))? managed by process (\d{1,10}) on node ("
    + HOST
    + r")"
    r"|\[process information not found\])$"
)
_GROUP_HEAD = re.compile(
    r"^  (\d{1,10}) ranks (?:have status ([A-Z]{1,16})|have launched up to operation (\d{1,20})"
    r"|(have not launched any operations)|reported (.{1,64}))$"
)
_SUMMARY_HEAD = re.compile(r"^ {0,32}(?:\(total\)|(?:Nodes|Processes|per node|per process)\b)")
_COMM_MISSING = re.compile(r"^  Missing communicator data from (\d{1,10}) ranks?$")
_RANK_LIST = re.compile(r"^  The (missing|unknown) ranks?: ([\d,]{1,4096})$")
_DIFFERENT = re.compile(
    r"^  Communicator ranks have different (?:(status)|(\w{1,32}) operation counts)$"
)
_ERRORS_ON = re.compile(r"^  (Initialization|Asynchronous) errors? on (\d{1,10}) ranks?$")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


@dataclass
class _Group:
    """A group of ranks while it is read: ranks are appended, the frozen group built at the end."""

    key: str | int
    """The status word or the operations launched."""
    count: int
    ranks: list[int] = field(default_factory=list)


@dataclass
class _Comm:
    """A communicator while its blocks are read (it may appear in Errors and in Warnings)."""

    hash: str
    label: str
    ranks: dict[int, dict[str, object]] = field(default_factory=dict)
    missing: dict[int, dict[str, object]] = field(default_factory=dict)
    missing_count: int | None = None
    ops: dict[str | None, list[_Group]] = field(default_factory=dict)
    statuses: list[_Group] = field(default_factory=list)
    # what the current indented lines are about
    context: str = ""
    op: str | None = None
    value: int | None = None
    words: str | None = None


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.section = "preamble"
        self.head: dict[str, object] = {}
        self.groups: list[CommGroup] = []
        self.comms: dict[str, _Comm] = {}
        self.block = ""
        self.comm: _Comm | None = None
        self.missing: list[RasProcess] = []
        self.dead: list[RasProcess] = []
        self.counts = {"missing": 0, "dead": 0}
        self.timeouts: int | None = None
        self.outliers: list[str] = []
        self.total_header = False
        self.skipped_before = 0
        self.skipped_after = 0
        self.unknown: list[str] = []
        self.unknown_count = 0
        self.ended = False
        self.listed = 0

    # -- lines -------------------------------------------------------------------------------

    def feed(self, raw: str) -> None:
        line = raw[:MAX_LINE].rstrip("\r").rstrip()
        if self.ended:
            self.skipped_after += 1 if line else 0
            return
        if not line or set(line) == {"="}:
            return
        if self._section_line(line):
            return
        if self.section == "preamble":
            self.skipped_before += 1
        elif self.section == "head":
            self._unknown(line)
        elif self.section == "summary":
            self._summary(line)
        elif self.section == "comms":
            self._table(line)
        else:
            self._report_line(line)

    def _section_line(self, line: str) -> bool:
        if m := _VERSION.match(line):
            self.head["version"] = m.group(1)
            self.section = "head"
            return True
        if m := _CUDA.match(line):
            self.head.update(runtime=int(m.group(1)), driver=int(m.group(2)))
            return True
        names = {"Job summary": "summary", "Errors": "errors", "Warnings": "warnings"}
        if line in names:
            self.section = names[line]
            self.comm, self.block = None, ""
            return True
        if m := _COMMS.match(line):
            self.section = "comms"
            if m.group(1):
                self.head["collection_s"] = float(m.group(1))
            return True
        if self.section in ("preamble", "head", "summary") and line.startswith("Group     Comms"):
            self.section = "comms"  # an excerpt that starts at the table
            return True
        if self.section in ("preamble", "head", "summary", "comms") and _BLOCK.match(line):
            self.section = "warnings" if line.endswith("MISMATCH") else "errors"
            self._block_start(line)  # an excerpt that starts at a communicator's block
            return True
        return False

    def _summary(self, line: str) -> None:
        if _INTS.match(line):
            numbers = [int(x) for x in line.split()]
            if self.total_header and len(numbers) == 5:
                self.head.update(nodes=numbers[0], processes=numbers[3], gpus=numbers[4])
            elif self.total_header and len(numbers) == 3:
                self.head.update(nodes=numbers[0], processes=numbers[1], gpus=numbers[2])
            return
        self.total_header = line.startswith("(total)")
        if m := _OUTLIER.match(line):
            self.outliers.append(m.group(1))
        elif not (_SUMMARY_HEAD.match(line) or line.startswith("The outlier node")):
            self._unknown(line)

    def _table(self, line: str) -> None:
        if len(self.groups) >= MAX_GROUPS:
            self._unknown(line)
        elif m := _ROW.match(line):
            g = m.groups()
            self.groups.append(
                CommGroup(
                    index=int(g[0]),
                    comms=int(g[1]),
                    nodes=int(g[2]),
                    ranks_per_node=g[3],
                    size=int(g[4]),
                    ranks_total=int(g[5]),
                    status="NOCOMM" if g[6] == "UNKNOWN" else g[6],
                    errors=tuple(g[7].split(",")),
                )
            )
        elif not (
            line.startswith(("Group ", "    #")) or line == "No communicator data collected!"
        ):
            self._unknown(line)

    def _report_line(self, line: str) -> None:
        if not line.startswith("  "):
            self._block_start(line)
        elif self.comm is not None:
            c = self.comm
            before = len(c.ranks) + len(c.missing)
            if self.listed >= MAX_LISTED or not _comm_line(c, line):
                self._unknown(line)
            self.listed += len(c.ranks) + len(c.missing) - before
        elif not self._job_line(line):
            self._unknown(line)

    def _block_start(self, line: str) -> None:
        self.comm = None
        if line in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            self.block = line
            return
        m = _BLOCK.match(line)
        if m is None:
            if self.section == "warnings":
                self.ended = True  # the report is over: the rest is whatever followed it
                self.skipped_after += 1
            else:
                self._unknown(line)
            return
        h = comm_hash(m.group(3)) or m.group(3)
        label = f"#{m.group(1)}-{m.group(2)}"
        self.comm = self.comms.setdefault(label, _Comm(h, label))
        self.comm.context = m.group(4)
        self.block = m.group(4)

    def _job_line(self, line: str) -> bool:
        if m := _JOB_MISSING.match(line):
            self.counts["missing"] = int(m.group(1))
        elif m := _JOB_DEAD.match(line):
            self.counts["dead"] = int(m.group(1))
        elif (m := _PROCESS.match(line)) and self.listed < MAX_LISTED:
            self.listed += 1
            gpus = _ints(m.group(3))
            proc = RasProcess(m.group(2), int(m.group(1)), gpus, _ints(m.group(4) or "") or gpus)
            (self.dead if self.block == "DEAD" else self.missing).append(proc)
        elif m := _TIMEOUTS.match(line):
            self.timeouts = int(m.group(1))
        else:
            return _NOT_FOUND.match(line) is not None
        return True

    def _unknown(self, line: str) -> None:
        self.unknown_count += 1
        if len(self.unknown) < MAX_QUOTED:
            self.unknown.append(safe_excerpt(line, 100))

    # -- result ------------------------------------------------------------------------------

    def result(self) -> RasStatus:
        dead = {(p.host, p.pid) for p in self.dead}
        by_group = {g.index: g for g in self.groups}
        comms = tuple(_finish(c, by_group, dead) for c in self.comms.values())
        notes = []
        if self.skipped_before:
            notes.append(f"{self.skipped_before} line(s) before the report skipped")
        if self.skipped_after:
            notes.append(f"{self.skipped_after} line(s) after the report skipped")
        if self.unknown_count:
            notes.append(
                f"{self.unknown_count} line(s) of the report not understood, e.g. "
                + "; ".join(self.unknown)
            )
        h = self.head
        return RasStatus(
            source=self.source,
            format="text",
            nccl_version=_text(h.get("version")),
            cuda_runtime=_int(h.get("runtime")),
            cuda_driver=_int(h.get("driver")),
            nodes=_int(h.get("nodes")),
            processes=_int(h.get("processes")),
            gpus=_int(h.get("gpus")),
            outlier_nodes=tuple(self.outliers),
            missing_processes=tuple(self.missing),
            missing_processes_count=max(self.counts["missing"], len(self.missing)),
            dead_processes=tuple(self.dead),
            dead_count=max(self.counts["dead"], len(self.dead)),
            groups=tuple(self.groups),
            comms=comms,
            timeouts=self.timeouts,
            collection_s=_float(h.get("collection_s")),
            notes=tuple(notes),
        )

    @property
    def found(self) -> bool:
        return self.section != "preamble" or bool(self.head)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) else None


def _float(v: object) -> float | None:
    return v if isinstance(v, float) else None


def _text(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _rank_fields(tail: str) -> dict[str, object] | None:
    """``GPU 4 (NVML 6) managed by process 323032 on node 10.137.190.124`` -> its fields."""
    m = _RANK_TAIL.match(tail)
    if m is None:
        return None
    if m.group(1) is None:
        return {}
    cuda = int(m.group(1))
    nvml = int(m.group(2)) if m.group(2) else cuda
    return {"cuda_dev": cuda, "nvml_dev": nvml, "pid": int(m.group(3)), "host": m.group(4)}


def _comm_line(c: _Comm, line: str) -> bool:
    """One indented line of a communicator block; False when it is not one this parser knows."""
    head, sep, tail = line.partition(" -- ")
    fields: dict[str, object] = {}
    if sep:
        got = _rank_fields(tail)
        if got is None:
            return False
        fields = got
    if m := _RANK_HEAD.match(head):
        return _rank_line(c, m, fields)
    if sep:
        return False
    if m := _GROUP_HEAD.match(line):
        _group_line(c, m)
    elif m := _COMM_MISSING.match(line):
        c.missing_count = int(m.group(1))
    elif m := _RANK_LIST.match(line):
        for r in _ints(m.group(2)):
            if m.group(1) == "missing":
                c.missing.setdefault(r, {"unresponsive": True})
            else:
                c.ranks.setdefault(r, {})["status"] = "NOCOMM"
    elif m := _DIFFERENT.match(line):
        c.context = "status" if m.group(1) else "counts"
        c.op = None if m.group(2) in (None, "collective") else m.group(2)
        c.value = None
    elif m := _ERRORS_ON.match(line):
        c.context = "init" if m.group(1) == "Initialization" else "async"
        c.words = None
    else:
        return False
    return True


def _group_line(c: _Comm, m: re.Match[str]) -> None:
    count = int(m.group(1))
    if m.group(2):
        c.statuses.append(_Group(_status(m.group(2)), count))
    elif m.group(3) is not None or m.group(4):
        c.ops.setdefault(c.op, []).append(_Group(int(m.group(3) or 0), count))
    else:
        c.words = RAS_ERROR_WORDS.get(m.group(5) or "", "unexpected error")


def _status(word: str) -> str:
    return "NOCOMM" if word == "UNKNOWN" else word


def _rank_line(c: _Comm, m: re.Match[str], fields: dict[str, object]) -> bool:
    rank = int(m.group(1))
    status, launched, none_launched, words = m.group(2), m.group(3), m.group(4), m.group(5)
    if c.context == "INCOMPLETE":
        c.missing.setdefault(rank, {"unresponsive": True}).update(fields)
        return True
    entry = c.ranks.setdefault(rank, {})
    entry.update(fields)
    if c.context == "status":
        if status:
            c.statuses.append(_Group(_status(status), 1, [rank]))
        elif c.statuses:
            c.statuses[-1].ranks.append(rank)
        else:
            return False
        entry["status"] = c.statuses[-1].key
        return True
    if c.context == "counts":
        if launched is not None or none_launched:
            c.ops.setdefault(c.op, []).append(_Group(int(launched or 0), 1, [rank]))
        elif c.ops.get(c.op):
            c.ops[c.op][-1].ranks.append(rank)
        else:
            return False
        return True
    if c.context in ("init", "async"):
        said = RAS_ERROR_WORDS.get(words, "unexpected error") if words else c.words
        if said is None:
            return False
        entry[f"{c.context}_error"] = said
        return True
    return False


def _finish(
    c: _Comm, groups: dict[int, CommGroup], dead: set[tuple[str | None, int | None]]
) -> RasComm:
    group = groups.get(int(c.label[1:].split("-")[0]))

    def rank(number: int, f: dict[str, object], missing: bool) -> RasRank:
        host, pid = f.get("host"), f.get("pid")
        return RasRank(
            rank=number,
            host=host if isinstance(host, str) else None,
            pid=pid if isinstance(pid, int) else None,
            cuda_dev=_int(f.get("cuda_dev")),
            nvml_dev=_int(f.get("nvml_dev")),
            status=_text(f.get("status")),
            init_error=_text(f.get("init_error")),
            async_error=_text(f.get("async_error")),
            missing=missing,
            unresponsive=True if missing else None,
            dead=((host, pid) in dead) if missing and pid is not None else None,
        )

    return RasComm(
        hash=c.hash,
        label=c.label,
        size=group.size if group else None,
        status=group.status if group else None,
        errors=group.errors if group else (),
        ranks=tuple(rank(r, f, False) for r, f in sorted(c.ranks.items())),
        missing=tuple(rank(r, f, True) for r, f in sorted(c.missing.items())),
        missing_count=c.missing_count,
        mismatches=tuple(
            OpMismatch(op, tuple(CountGroup(int(g.key), g.count, tuple(g.ranks)) for g in gs))
            for op, gs in c.ops.items()
        ),
        launched=tuple(
            (op or "collective", max(int(g.key) for g in gs)) for op, gs in c.ops.items()
        ),
        status_groups=tuple(StatusGroup(str(g.key), g.count, tuple(g.ranks)) for g in c.statuses),
    )


def parse_text(text: str, source: str) -> RasStatus | None:
    """The report in ``text``; None when there is none (no version line, no section of a report)."""
    p = _Parser(source)
    for line in text.split("\n"):
        p.feed(line)
    return p.result() if p.found else None
