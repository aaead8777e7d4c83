"""NCCL RAS's JSON status (``SET FORMAT json`` then ``STATUS``; ``ncclras -f json``) -> :class:`RasStatus`.

Written from NCCL's public source (``src/ras/client_support.cc``: ``rasDumpCommsToJSON`` and the
``json*`` writers), NCCL 2.28.7 and later: ``nccl_version``, ``cuda_runtime_version``,
``cuda_driver_version``, ``timestamp`` (local time), ``communicators_count``, ``communicators`` (each
``hash``, ``secondary_hash``, ``size``, ``ranks_count``, ``missing_ranks_count``, ``ranks`` with
``rank``, ``host``, ``pid``, ``cuda_dev``, ``nvml_dev``, ``status`` {``init_state``, ``async_error``,
``finalize_called``, ``destroy_flag``, ``abort_flag``} and ``collective_counts`` {op: count},
``missing_ranks`` with ``status`` {``unresponsive``, ``considered_dead``}) and ``ras``
{``collection_time_sec``, ``timeouts_count``}. The JSON is a raw dump: what the text report says
(status, MISMATCH, INCOMPLETE, ERROR) is derived here with RAS's own rules.

Quirks of real NCCL handled, each noted in :attr:`RasStatus.notes`:

* NCCL 2.28.7 to 2.28.9 write a missing rank's ``"nvml_dev": N`` without the comma before
  ``"status"`` (fixed in 2.29): that one comma is put back, nothing else is repaired;
* an unknown host is ``"unknown"`` and an unknown pid ``-1``: both read as unknown;
* ``status`` may be ``null`` for a communicator being set up (NVIDIA/nccl#2346, 2.29.7).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ibdiag.errors import InputError
from ibdiag.job.model import (
    NOT_ERRORS,
    STATUSES,
    CommGroup,
    CountGroup,
    OpMismatch,
    RasComm,
    RasProcess,
    RasRank,
    RasStatus,
    StatusGroup,
    comm_hash,
    result_words,
)
from ibdiag.jsonread import Fields, JsonFieldError, loads

HINT = "give the output of `ncclras -f json` (NCCL 2.28.7 or later), unchanged"
#: A communicator larger than this is refused (NCCL's own limit on ranks is far lower in practice).
MAX_RANKS = 1 << 22
MAX_COMMS = 1 << 16
_NULL_STATUS = "a rank's status is null (seen with NCCL 2.29.7 while communicators are set up, NVIDIA/nccl#2346)"
_MISSING_COMMA = re.compile(r'("nvml_dev": -?\d{1,12})(\s{1,64}"status")')


def _doc(text: str, source: str) -> tuple[Mapping[str, object], list[str]]:
    notes: list[str] = []
    try:
        doc = loads(text, nan=False)
    except JsonFieldError as first:
        repaired, n = _MISSING_COMMA.subn(r"\1,\2", text)
        if not n:
            raise InputError(f"{source}: {first.problem}", hint=HINT) from None
        try:
            doc = loads(repaired, nan=False)
        except JsonFieldError as e:
            raise InputError(f"{source}: {e.problem}", hint=HINT) from None
        notes.append(
            f"put back {n} comma(s) missing after a missing rank's nvml_dev "
            "(NCCL 2.28.7-2.28.9 writes them without; fixed in 2.29)"
        )
    if not isinstance(doc, Mapping) or "communicators" not in doc:
        raise InputError(f"{source}: not a RAS JSON status (no communicators)", hint=HINT)
    return doc, notes


def _rank(f: Fields, notes: list[str]) -> RasRank:
    host = f.text("host")
    pid = f.integer("pid", -1, 2**31)
    st = f.object("status")
    base = RasRank(
        rank=f.integer("rank", 0, MAX_RANKS, required=True),
        host=None if host in (None, "", "unknown") else host,
        pid=None if pid is None or pid < 0 else pid,
        cuda_dev=_dev(f.integer("cuda_dev", -1, 4096)),
        nvml_dev=_dev(f.integer("nvml_dev", -1, 4096)),
    )
    if st is None:
        if _NULL_STATUS not in notes:
            notes.append(_NULL_STATUS)
        return base
    init = st.integer("init_state", 0, 1000) or 0
    err = st.integer("async_error", 0, 1000) or 0
    if st.flag("abort_flag"):
        status = "ABORT"
    elif st.flag("finalize_called") or st.flag("destroy_flag"):
        status = "FINALIZE"
    else:
        status = "RUNNING" if init == 0 else "INIT"
    return RasRank(
        rank=base.rank,
        host=base.host,
        pid=base.pid,
        cuda_dev=base.cuda_dev,
        nvml_dev=base.nvml_dev,
        status=status,
        init_error=None if init in NOT_ERRORS else result_words(init),
        async_error=None if err in NOT_ERRORS else result_words(err),
    )


def _dev(v: int | None) -> int | None:
    return None if v is None or v < 0 else v


def _counts(f: Fields) -> dict[str, int]:
    sub = f.object("collective_counts")
    out: dict[str, int] = {}
    if sub is not None:
        for key in list(sub.doc)[:64]:
            name = Fields({"k": key}, sub.where).text("k", required=True)
            out[name] = sub.integer(key, 0, 2**64, required=True)
    return out


def _missing(f: Fields) -> RasRank:
    host = f.text("host")
    pid = f.integer("pid", -1, 2**31)
    st = f.object("status")
    return RasRank(
        rank=f.integer("rank", 0, MAX_RANKS, required=True),
        host=None if host in (None, "", "unknown") else host,
        pid=None if pid is None or pid < 0 else pid,
        cuda_dev=_dev(f.integer("cuda_dev", -1, 4096)),
        nvml_dev=_dev(f.integer("nvml_dev", -1, 4096)),
        missing=True,
        unresponsive=None if st is None else st.flag("unresponsive"),
        dead=None if st is None else st.flag("considered_dead"),
    )


def _mismatches(
    ranks: Sequence[RasRank], counts: Sequence[dict[str, int]]
) -> tuple[OpMismatch, ...]:
    """Per collective whose count differs between ranks: the groups, most ranks first (RAS's order)."""
    ops = list(dict.fromkeys(op for c in counts for op in c))
    out = []
    for op in ops:
        by_value: dict[int, list[int]] = {}
        for r, c in zip(ranks, counts, strict=True):
            by_value.setdefault(c.get(op, 0), []).append(r.rank)
        if len(by_value) > 1:
            groups = sorted(by_value.items(), key=lambda kv: (-len(kv[1]), -kv[0]))
            out.append(
                OpMismatch(op, tuple(CountGroup(v, len(rs), tuple(sorted(rs))) for v, rs in groups))
            )
    return tuple(out)


def _comm(f: Fields, notes: list[str]) -> RasComm:
    raw = f.text("hash", required=True)
    h = comm_hash(raw)
    if h is None:
        raise JsonFieldError(f"{f.where}.hash", "is not a 64-bit hex number")
    size = f.integer("size", 0, MAX_RANKS)
    items = f.items("ranks", MAX_RANKS)
    ranks = tuple(_rank(Fields(x, f"{f.where}.ranks[{i}]"), notes) for i, x in enumerate(items))
    counts = [_counts(Fields(x, f"{f.where}.ranks[{i}]")) for i, x in enumerate(items)]
    missing = f.objects("missing_ranks", _missing, MAX_RANKS)
    statuses = Counter(r.status for r in ranks if r.status)
    nocomm = [m.rank for m in missing if m.unresponsive is False]
    if nocomm:
        statuses["NOCOMM"] += len(nocomm)
    mism = _mismatches(ranks, counts)
    errors = []
    if mism or len(statuses) > 1 or nocomm:
        errors.append("MISMATCH")
    if any(r.init_error or r.async_error for r in ranks):
        errors.append("ERROR")
    if any(m.unresponsive is not False for m in missing):
        errors.append("INCOMPLETE")
    members: dict[str, list[int]] = {"NOCOMM": nocomm}
    for r in ranks:
        if r.status:
            members.setdefault(r.status, []).append(r.rank)
    by_size = sorted(statuses.items(), key=lambda kv: -kv[1])
    groups = tuple(StatusGroup(s, n, tuple(members[s])) for s, n in by_size)
    numbers = [r.rank for r in (*ranks, *missing)]
    launched: dict[str, int] = {}
    for c in counts:
        for op, n in c.items():
            launched[op] = max(launched.get(op, 0), n)
    return RasComm(
        hash=h,
        size=size,
        status=max(statuses, key=STATUSES.index) if statuses else None,
        errors=tuple(errors) or ("OK",),
        ranks=ranks,
        missing=missing,
        missing_count=len(missing),
        mismatches=mism,
        status_groups=groups if len(statuses) > 1 else (),
        complete=size is not None and sorted(numbers) == list(range(size)),
        launched=tuple(launched.items()),
    )


def _group(i: int, c: RasComm) -> CommGroup:
    per_node = Counter(r.host for r in c.ranks if r.host)
    spread = sorted(set(per_node.values()))
    return CommGroup(
        index=i,
        comms=1,
        nodes=len(per_node) or None,
        ranks_per_node=None
        if not spread
        else (f"{spread[0]}" if len(spread) == 1 else f"{spread[0]}-{spread[-1]}"),
        size=c.size,
        ranks_total=len(c.ranks),
        status=c.status or "NOCOMM",
        errors=c.errors,
        hashes=(c.hash,),
    )


def _processes(comms: Sequence[RasComm], dead: bool) -> tuple[RasProcess, ...]:
    seen: dict[tuple[str | None, int | None], list[int]] = {}
    for c in comms:
        for m in c.missing:
            if m.unresponsive is not False and bool(m.dead) == dead:
                gpus = seen.setdefault((m.host, m.pid), [])
                if m.gpu is not None and m.gpu not in gpus:
                    gpus.append(m.gpu)
    return tuple(RasProcess(h, p, tuple(sorted(g))) for (h, p), g in seen.items())


def parse_json(text: str, source: str) -> RasStatus:
    """The JSON status in ``text``; raises :class:`InputError` (exit 2) for anything else."""
    doc, notes = _doc(text, source)
    try:
        f = Fields(doc, "")
        comms = f.objects("communicators", lambda c: _comm(c, notes), MAX_COMMS)
        ras = f.object("ras")
        status = RasStatus(
            source=source,
            format="json",
            nccl_version=f.text("nccl_version"),
            cuda_runtime=f.integer("cuda_runtime_version", -1, 10**8),
            cuda_driver=f.integer("cuda_driver_version", -1, 10**8),
            timestamp=f.text("timestamp"),
            groups=tuple(_group(i, c) for i, c in enumerate(comms)),
            comms=comms,
            timeouts=None if ras is None else ras.integer("timeouts_count", 0, 10**9),
            collection_s=None if ras is None else ras.number("collection_time_sec", 0, 1e7),
        )
    except JsonFieldError as e:
        raise InputError(f"{source}: {e}", hint=HINT) from None
    dead = _processes(comms, True)
    missing = _processes(comms, False)
    return replace(
        status,
        dead_processes=dead,
        dead_count=len(dead),
        missing_processes=missing,
        missing_processes_count=len(missing),
        notes=tuple(notes),
    )
