"""NCCL Inspector's JSONL (``NCCL_PROFILER_PLUGIN=…libnccl-profiler-inspector.so``) -> records.

Written from NCCL's public source (``ext-profiler/inspector/`` in NCCL 2.28 and 2.29,
``plugins/profiler/inspector/`` from 2.29.7; ``inspector_json.cc``), output format ``v4.0``: one JSON
object per line and per completed operation, in ``<hostname>-pid<pid>.log`` under
``NCCL_INSPECTOR_DUMP_DIR``::

    {"header": {"id": "0x…", "comm_name": "…", "rank": 2, "n_ranks": 8, "nnodes": 1},
     "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "…", "rec_mechanism": "…",
                  "dump_timestamp_us": …, "hostname": "…", "pid": …},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                   "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
                   "coll_algobw_gbs": 277.21, "coll_busbw_gbs": 485.12}}

``comm_name`` appears with NCCL 2.30, ``p2p_perf`` lines (sends and receives) with 2.30 too (counted,
not judged); ``coll_timing_source`` is ``kernel_gpu`` (GPU timer), ``kernel_cpu`` or ``collective_cpu``
(host timer, kept only with ``NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=0``). A busbw that is not a number
is written as the string ``"nan"``; ``id`` is NCCL's communicator hash, the same as RAS's.

Every line is untrusted: each file is read within a byte budget, a line longer than
:data:`MAX_LINE` is skipped, each line is parsed by :func:`ibdiag.jsonread.loads` (depth, size and
integer limits) and every value used is checked; a bad line is skipped and counted, never fatal.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibdiag.errors import InputError
from ibdiag.infile import RefusedFile, iter_lines
from ibdiag.job.model import comm_hash
from ibdiag.jsonread import Fields, JsonFieldError, loads
from ibdiag.text import safe_excerpt, safe_value

HINT = "give the .log files NCCL's Inspector wrote (NCCL_INSPECTOR_DUMP_DIR), or that directory"
#: A verbose line (``NCCL_INSPECTOR_DUMP_VERBOSE=1``) with 64 channels' kernel events is about 12 KB.
MAX_LINE = 64 * 1024
MAX_FILES = 65536
#: Problems quoted in the summary (the rest are counted).
MAX_QUOTED = 5
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_FILES = (".log", ".jsonl", ".json")


@dataclass(frozen=True, slots=True)
class CollRecord:
    """One completed collective on one rank."""

    comm: str
    """NCCL's communicator hash (16 hex digits)."""
    rank: int
    nranks: int
    host: str
    pid: int | None
    coll: str
    sn: int
    """The collective's sequence number in its communicator: the same call on every rank."""
    bytes: int
    exec_us: float
    """Kernel execution time on this rank (µs): shorter on a rank that arrived late."""
    busbw_gbs: float | None
    """Inspector's bus bandwidth from this rank's time (GB/s = 1e9 B/s)."""
    gpu_timed: bool
    """Timed by the GPU's clock (``kernel_gpu``), not the host's."""
    nnodes: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class InspectorRead:
    records: tuple[CollRecord, ...]
    files: tuple[str, ...]
    lines: int
    skipped: int
    """Lines that are not a collective record this reader can use."""
    p2p: int
    """Send/receive records (counted, not judged)."""
    truncated: bool
    """More records than :attr:`limit`: the rest of the input was not read."""
    problems: tuple[str, ...]
    versions: tuple[str, ...]
    limit: int

    def to_json(self) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "lines": self.lines,
            "records": len(self.records),
            "skipped_lines": self.skipped,
            "p2p_records": self.p2p,
            "truncated": self.truncated,
            "problems": list(self.problems),
            "format_versions": list(self.versions),
        }


def find_files(paths: Sequence[Path]) -> list[Path]:
    """The files named, and the Inspector logs directly inside each directory named."""
    out: list[Path] = []
    for p in paths:
        try:
            is_dir = p.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            try:
                names = sorted(os.listdir(p))
            except OSError as e:
                raise InputError(f"{safe_value(str(p))}: {e.strerror}", hint=HINT) from None
            out += [p / n for n in names if n.endswith(_FILES) and not n.startswith(".")]
        else:
            out.append(p)
        if len(out) > MAX_FILES:
            raise InputError(f"more than {MAX_FILES} Inspector files", hint=HINT)
    return out


def parse_record(line: bytes) -> CollRecord | str | None:
    """One line -> a record, ``"p2p"`` for a send/receive record, None for an empty line; raises
    :class:`JsonFieldError` for anything else."""
    if not line.strip():
        return None
    doc = loads(line, max_depth=16)
    f = Fields(doc, "")
    head = f.object("header")
    meta = f.object("metadata")
    perf = f.object("coll_perf")
    if perf is None:
        if f.has("p2p_perf"):
            return "p2p"
        raise JsonFieldError("coll_perf", "is missing")
    if head is None or meta is None:
        raise JsonFieldError("header" if head is None else "metadata", "is missing")
    comm = comm_hash(head.text("id", required=True))
    if comm is None:
        raise JsonFieldError("header.id", "is not a communicator hash")
    host = meta.text("hostname", required=True)
    if not _HOST.match(host):
        raise JsonFieldError("metadata.hostname", f"{safe_value(host, 40)} is not a host name")
    nranks = head.integer("n_ranks", 1, 1 << 22, required=True)
    busbw = perf.doc.get("coll_busbw_gbs")
    return CollRecord(
        comm=comm,
        rank=head.integer("rank", 0, nranks - 1, required=True),
        nranks=nranks,
        host=host,
        pid=meta.integer("pid", 0, 2**31),
        coll=perf.text("coll", required=True)[:32],
        sn=perf.integer("coll_sn", 0, 2**64, required=True),
        bytes=perf.integer("coll_msg_size_bytes", 0, 2**62, required=True),
        exec_us=perf.number("coll_exec_time_us", 0, 1e12, required=True),
        busbw_gbs=None if busbw == "nan" else perf.number("coll_busbw_gbs", 0, 1e7),
        gpu_timed=perf.text("coll_timing_source") in (None, "kernel_gpu"),
        nnodes=head.integer("nnodes", 0, 1 << 22),
        name=head.text("comm_name"),
    )


def _version(line: bytes) -> str | None:
    m = re.search(rb'"inspector_output_format_version": ?"(v[0-9.]{1,8})"', line[:4096])
    return m.group(1).decode() if m else None


def read_inspector(
    paths: Iterable[Path], *, max_file_bytes: int, max_records: int
) -> InspectorRead:
    """Every collective record of the Inspector files (or directories) ``paths``; InputError (exit 2)
    when a file cannot be read at all or no line of any holds a record."""
    files = find_files(list(paths))
    if not files:
        raise InputError("no Inspector file found (*.log, *.jsonl)", hint=HINT)
    records: list[CollRecord] = []
    lines = skipped = p2p = 0
    problems: list[str] = []
    versions: set[str] = set()
    truncated = False
    for path in files:
        name = safe_value(str(path), 200)
        try:
            for n, line in enumerate(iter_lines(path, max_file_bytes, MAX_LINE), 1):
                lines += 1
                if line is None:
                    skipped += 1
                    if len(problems) < MAX_QUOTED:
                        problems.append(f"{name}:{n}: longer than {MAX_LINE} bytes")
                    continue
                try:
                    got = parse_record(line)
                except JsonFieldError as e:
                    skipped += 1
                    if len(problems) < MAX_QUOTED:
                        problems.append(f"{name}:{n}: {safe_excerpt(str(e), 120)}")
                    continue
                if got == "p2p":
                    p2p += 1
                elif isinstance(got, CollRecord):
                    if len(records) >= max_records:
                        truncated = True
                        break
                    if not versions or n == 1:
                        v = _version(line)
                        if v:
                            versions.add(v)
                    records.append(got)
        except RefusedFile as e:
            raise InputError(f"{name}: {e.problem}", hint=HINT) from None
        except OSError as e:
            raise InputError(f"{name}: cannot read: {e.strerror or e}", hint=HINT) from None
        if truncated:
            break
    if not records and not p2p:
        shown = "; ".join(problems[:2]) or "the files are empty"
        raise InputError(f"no Inspector record in {len(files)} file(s): {shown}", hint=HINT)
    return InspectorRead(
        tuple(records),
        tuple(safe_value(str(p), 200) for p in files),
        lines,
        skipped,
        p2p,
        truncated,
        tuple(problems),
        tuple(sorted(versions)),
        max_records,
    )
