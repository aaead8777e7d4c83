"""What RAS's status means for the job: ``job.*`` findings, each naming the rank's node, GPU, process
and, when known, its NIC and leaf port.

Severities follow where RAS itself files a problem: what its report lists under *Errors* (a dead or
unresponsive process, an initialisation or asynchronous error) fails; what it lists under *Warnings*
(ranks that disagree on operation counts or status) warns, as does a communicator still setting up
or tearing down; an aborted communicator fails.
"""

from __future__ import annotations

from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.job.model import CountGroup, OpMismatch, RasComm, RasProcess, RasStatus
from ibdiag.job.places import Place
from ibdiag.job.ras import version_tuple
from ibdiag.job.roster import (
    MAX_NAMED,
    Roster,
    comm_name,
    is_missing_rank,
    places_text,
    ranks_text,
)

#: Ranks of one side of a mismatch placed one by one (and listed in the JSON ``ranks``); a larger
#: side is named by its rank ranges.
MAX_PLACED = 256

CHECKS = CheckRegistry("job")

_DEAD_HINT = (
    "the process crashed, hung hard or its node lost the network: look at that node (dmesg, the "
    "rank's own log) — the job cannot finish without it and will hang or time out"
)
_UNRESPONSIVE_HINT = (
    "a stopped, hung or overloaded process, or its node's bootstrap network: query again; RAS "
    "declares a process dead after 60 s without an answer"
)


def _process_ranks(status: RasStatus, p: RasProcess) -> str:
    """``#0-0 rank 21, #1-3 rank 5``: where the process is missing."""
    out = [
        f"{c.label or c.hash} rank {m.rank}"
        for c in status.comms
        for m in c.missing
        if m.host == p.host and m.pid == p.pid and p.pid is not None
    ]
    return ", ".join(out[:6]) + (f" and {len(out) - 6} more" if len(out) > 6 else "")


def _placed(c: RasComm, ranks: list[int], role: str, roster: Roster) -> list[tuple[int, Place]]:
    """Ranks placed one by one, when there are at most :data:`MAX_PLACED` of them (a side of
    thousands is named by its ranges)."""
    if len(ranks) > MAX_PLACED:
        return []
    return [(n, roster.rank(c, n, role)) for n in ranks]


@CHECKS.check("job.ras_dead", "a job process RAS declared dead (unreachable for 60 s): fail")
def dead(status: RasStatus, roster: Roster) -> list[Finding]:
    out: list[Finding] = []
    for p in status.dead_processes:
        place = roster.process(p, "dead")
        where = _process_ranks(status, p)
        out.append(
            Finding(
                "job.ras_dead",
                Severity.FAIL,
                place.subject,
                f"process {p.pid if p.pid is not None else '?'} ({place.text}) is dead to RAS: "
                "unreachable over the RAS network" + (f"; its ranks: {where}" if where else ""),
                hint=_DEAD_HINT,
            )
        )
    unnamed = status.dead_count - len(status.dead_processes)
    if unnamed > 0:
        out.append(
            Finding(
                "job.ras_dead",
                Severity.FAIL,
                "job",
                f"{unnamed} more process(es) are dead to RAS; it did not name them (ask for VERBOSE "
                "STATUS or the JSON status)",
                value=status.dead_count,
                hint=_DEAD_HINT,
            )
        )
    if not out:
        n = f"{status.processes} processes" if status.processes else "the job's processes"
        out.append(
            Finding("job.ras_dead", Severity.OK, "job", f"RAS reaches all of {n}: none is dead")
        )
    return out


def _missing_comm_ranks(status: RasStatus, roster: Roster) -> list[Finding]:
    """Missing ranks RAS gave no process for (NCCL 2.24/2.25 list numbers only)."""
    out: list[Finding] = []
    for c in status.comms:
        anonymous = [
            m.rank for m in c.missing if is_missing_rank(m) and m.pid is None and not m.dead
        ]
        if anonymous:
            places = [(n, roster.rank(c, n, "unresponsive")) for n in anonymous]
            out.append(
                Finding(
                    "job.ras_unresponsive",
                    Severity.FAIL,
                    places[0][1].subject,
                    f"{comm_name(c)}: no data from rank(s) {ranks_text(anonymous)} "
                    f"({places_text(places)})",
                    value=len(anonymous),
                    unit="ranks",
                    hint=_UNRESPONSIVE_HINT,
                )
            )
    return out


@CHECKS.check(
    "job.ras_unresponsive",
    "a job process or rank that did not answer RAS (its data is missing, not yet dead): fail",
)
def unresponsive(status: RasStatus, roster: Roster) -> list[Finding]:
    out: list[Finding] = []
    for p in status.missing_processes:
        place = roster.process(p, "unresponsive")
        where = _process_ranks(status, p)
        out.append(
            Finding(
                "job.ras_unresponsive",
                Severity.FAIL,
                place.subject,
                f"process {p.pid if p.pid is not None else '?'} ({place.text}) did not answer RAS: "
                "its communicators' data is missing" + (f" ({where})" if where else ""),
                hint=_UNRESPONSIVE_HINT,
            )
        )
    unnamed = status.missing_processes_count - len(status.missing_processes)
    if unnamed > 0:
        out.append(
            Finding(
                "job.ras_unresponsive",
                Severity.FAIL,
                "job",
                f"{unnamed} more process(es) did not answer RAS; it did not name them (ask for "
                "VERBOSE STATUS or the JSON status)",
                value=status.missing_processes_count,
                hint=_UNRESPONSIVE_HINT,
            )
        )
    out += _missing_comm_ranks(status, roster)
    if not out:
        out.append(
            Finding("job.ras_unresponsive", Severity.OK, "job", "every process answered RAS")
        )
    return out


_VICTIM_HINT = (
    "ranks that report 'remote process error' fail because another rank did: look first at a rank "
    "with another error, or at a dead or unresponsive one"
)


@CHECKS.check("job.ras_error", "a rank reported an initialisation or asynchronous NCCL error: fail")
def errors(status: RasStatus, roster: Roster) -> list[Finding]:
    out: list[Finding] = []
    for c in status.comms:
        by_error: dict[tuple[str, str], list[int]] = {}
        for r in c.ranks:
            if r.init_error:
                by_error.setdefault(("initialisation", r.init_error), []).append(r.rank)
            if r.async_error:
                by_error.setdefault(("asynchronous", r.async_error), []).append(r.rank)
        for (kind, words), ranks in sorted(by_error.items(), key=lambda kv: len(kv[1])):
            places = _placed(c, ranks, f"{kind} error", roster) or [
                (ranks[0], roster.rank(c, ranks[0], f"{kind} error"))
            ]
            out.append(
                Finding(
                    "job.ras_error",
                    Severity.FAIL,
                    places[0][1].subject,
                    f"{comm_name(c)}: {kind} error '{words}' on {len(ranks)} rank(s) "
                    f"{ranks_text(ranks)} ({places_text(places)})",
                    value=len(ranks),
                    unit="ranks",
                    hint=_VICTIM_HINT
                    if words == "remote process error"
                    else "read that rank's NCCL log (NCCL_DEBUG=WARN) for the cause; an error "
                    "aborts the communicator",
                )
            )
    if not out:
        out.append(Finding("job.ras_error", Severity.OK, "job", "no rank reported an NCCL error"))
    return out


_STATE_HINT = {
    "ABORT": "a rank called ncclCommAbort (after an error or a timeout): look for that rank's error",
    "INIT": "still setting up: repeat the query; a communicator in INIT for minutes waits for a rank "
    "that never joined",
    "FINALIZE": "being torn down: repeat the query; it should disappear",
    "NOCOMM": "its ranks no longer belong to it (torn down): repeat the query",
}


def _status_groups(c: RasComm, roster: Roster) -> Finding:
    parts = []
    for g in c.status_groups:
        places = _placed(c, list(g.ranks), f"status {g.status}", roster)
        named = f": {places_text(places, g.count)}" if places else ""
        parts.append(f"{g.count} rank(s) {g.status}{named}")
    first = next((roster.rank(c, g.ranks[0], "") for g in c.status_groups if g.ranks), None)
    return Finding(
        "job.ras_comm_state",
        Severity.WARN,
        first.subject if first else c.hash,
        f"{comm_name(c)}: its ranks are in different states — " + "; ".join(parts),
        hint="normal while a communicator is set up or torn down; if it persists across queries, "
        "the ranks in the odd state are the ones to look at",
    )


@CHECKS.check(
    "job.ras_comm_state",
    "a communicator not RUNNING (INIT, FINALIZE, NOCOMM: warn; ABORT: fail) or whose ranks disagree: warn",
)
def comm_state(status: RasStatus, roster: Roster) -> list[Finding]:
    out: list[Finding] = []
    for g in status.groups:
        if g.status == "RUNNING":
            continue
        hashes = list(g.hashes) or [
            c.hash for c in status.comms if c.label and c.label.startswith(f"#{g.index}-")
        ]
        which = f" ({', '.join(hashes[:4])})" if hashes else ""
        out.append(
            Finding(
                "job.ras_comm_state",
                Severity.FAIL if g.status == "ABORT" else Severity.WARN,
                hashes[0] if len(hashes) == 1 else f"group{g.index}",
                f"{g.comms} communicator(s) of {g.size} rank(s) on {g.nodes} node(s) are "
                f"{g.status}{which}",
                hint=_STATE_HINT.get(g.status),
            )
        )
    out += [_status_groups(c, roster) for c in status.comms if len(c.status_groups) > 1]
    if not out:
        n = sum(g.comms for g in status.groups)
        out.append(
            Finding(
                "job.ras_comm_state", Severity.OK, "job", f"all {n} communicator(s) are RUNNING"
            )
        )
    return out


def _behind_ahead(c: RasComm, m: OpMismatch) -> tuple[list[int], list[int], bool]:
    """(ranks ahead, ranks behind, found by elimination): ahead = the highest count."""
    top = max(g.value for g in m.groups)
    listed = {r for g in m.groups for r in g.ranks}
    unlisted = [g for g in m.groups if len(g.ranks) < g.count]
    guessed: dict[int, list[int]] = {}
    if len(unlisted) == 1 and c.size and len(listed) + unlisted[0].count == c.size:
        rest = [r for r in range(c.size) if r not in listed]
        guessed[id(unlisted[0])] = rest
    ahead: list[int] = []
    behind: list[int] = []
    for g in m.groups:
        ranks = list(g.ranks) or guessed.get(id(g), [])
        (ahead if g.value == top else behind).extend(ranks)
    return ahead, behind, bool(guessed)


def _group_words(g: CountGroup) -> str:
    what = f"up to operation {g.value}" if g.value else "no operation"
    return f"{g.count} rank(s) launched {what}"


@CHECKS.check(
    "job.ras_op_mismatch",
    "ranks of a communicator launched different numbers of an operation (ranks ahead and behind): warn",
)
def op_mismatch(status: RasStatus, roster: Roster) -> list[Finding]:
    out: list[Finding] = []
    for c in status.comms:
        for m in c.mismatches:
            ahead, behind, guessed = _behind_ahead(c, m)
            behind_places = _placed(c, behind, "behind", roster)
            # the ranks ahead matter when they are the odd ones out (NVIDIA/nccl#1911's case is the
            # reverse: the many behind are what the operator asks for)
            few = len(ahead) <= max(len(behind), MAX_NAMED)
            ahead_places = _placed(c, ahead, "ahead", roster) if few else []
            op = m.op or "collective"
            groups = ", ".join(_group_words(g) for g in sorted(m.groups, key=lambda g: -g.value))
            text = f"{comm_name(c)}: {op} counts differ ({groups})"
            if behind:
                how = " (by elimination: RAS lists only the outliers)" if guessed else ""
                text += f"; behind: rank(s) {ranks_text(behind)}{how}"
                text += f" — {places_text(behind_places)}" if behind_places else ""
            if ahead:
                text += f"; ahead: rank(s) {ranks_text(ahead)}"
                text += f" — {places_text(ahead_places)}" if ahead_places else ""
            named = [p for _, p in (*behind_places, *ahead_places)]
            subject = next((p for p in named if p.known), named[0] if named else None)
            out.append(
                Finding(
                    "job.ras_op_mismatch",
                    Severity.WARN,
                    subject.subject if subject else c.hash,
                    text,
                    value=len(behind) or None,
                    unit="ranks behind" if behind else None,
                    hint="normal while collectives are in flight (the counts move between queries); "
                    "the same counts in two queries seconds apart mean the communicator is stuck, "
                    "waiting for the ranks behind: look at their processes, GPUs and NICs",
                )
            )
    if not out:
        out.append(
            Finding(
                "job.ras_op_mismatch",
                Severity.OK,
                "job",
                "no communicator's ranks disagree on their operation counts",
            )
        )
    return out


@CHECKS.check(
    "job.ras_collection",
    "RAS's own gathering: communication timeouts, data RAS misread (a known NCCL bug): warn",
)
def collection(status: RasStatus) -> list[Finding]:
    out: list[Finding] = []
    if status.timeouts:
        out.append(
            Finding(
                "job.ras_collection",
                Severity.WARN,
                "job",
                f"RAS hit {status.timeouts} communication timeout(s) while gathering: some "
                "processes answer slowly or not at all",
                value=status.timeouts,
                hint="repeat the query; processes that stay silent show up as unresponsive, then dead",
            )
        )
    suspect = [n for n in status.notes if "nccl#1762" in n]
    if suspect:
        out.append(
            Finding(
                "job.ras_collection",
                Severity.WARN,
                "job",
                "; ".join(suspect[:3]),
                hint="upgrade to NCCL 2.29.2 or later for a RAS that reads its data right",
            )
        )
    if not out:
        v = version_tuple(status.nccl_version)
        words = f"NCCL {status.nccl_version}" if v else "NCCL"
        out.append(
            Finding(
                "job.ras_collection",
                Severity.OK,
                "job",
                f"{words} RAS {status.format} status read from {status.source}"
                + (f" ({status.collection_s:.3g} s to gather)" if status.collection_s else ""),
            )
        )
    return out


def ras_findings(status: RasStatus, roster: Roster) -> list[Finding]:
    """Every RAS check, in the order they are shown."""
    out: list[Finding] = []
    out += dead(status, roster)
    out += unresponsive(status, roster)
    out += errors(status, roster)
    out += comm_state(status, roster)
    out += op_mismatch(status, roster)
    out += collection(status)
    return out
