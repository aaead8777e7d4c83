"""Two RAS readings some seconds apart: is each communicator still moving?

RAS's documentation says what one reading cannot: ranks that disagree on their operation counts are
normal while collectives are in flight; the *same* counts in two queries mean the communicator is
stuck, waiting for the ranks behind. And a reading where every rank agrees says nothing about a hang
where every rank sits in the same collective (NVIDIA/nccl#1730): only a count that does not move does.

Per communicator present in both (by hash), with the most any rank launched per operation
(:attr:`RasComm.launched`, every operation in the JSON status, the mismatched ones in the text):

* a count went up: it moves (ok);
* nothing moved and the ranks still disagree the same way: stuck, waiting for the ranks behind (fail);
* nothing moved and the ranks agree (JSON only): no operation was launched in the interval — a hang
  in a collective every rank entered, or a job busy elsewhere (checkpoint, data loading): warn.
"""

from __future__ import annotations

from ibdiag.findings.model import Finding, Severity
from ibdiag.job.checks import CHECKS
from ibdiag.job.model import RasComm, RasStatus
from ibdiag.job.roster import comm_name, ranks_text


def _shape(c: RasComm) -> tuple[tuple[str | None, tuple[tuple[int, int], ...]], ...]:
    return tuple((m.op, tuple((g.value, g.count) for g in m.groups)) for m in c.mismatches)


def _behind(c: RasComm) -> str:
    parts = []
    for m in c.mismatches:
        top = max(g.value for g in m.groups)
        ranks = [r for g in m.groups if g.value < top for r in g.ranks]
        count = sum(g.count for g in m.groups if g.value < top)
        listed = f" (rank(s) {ranks_text(ranks)})" if ranks else ""
        parts.append(f"{count} rank(s) behind on {m.op or 'collectives'}{listed}")
    return "; ".join(parts)


def _judge(before: RasComm, after: RasComm, seconds: float | None) -> Finding | None:
    was, now = dict(before.launched), dict(after.launched)
    moved = [op for op, n in now.items() if n > was.get(op, n)]
    name = comm_name(after)
    within = f"in {seconds:g} s" if seconds else "between the two readings"
    if moved:
        return Finding(
            "job.ras_progress",
            Severity.OK,
            after.hash,
            f"{name}: {', '.join(moved)} counts went up {within}",
        )
    if after.mismatches and _shape(before) == _shape(after):
        return Finding(
            "job.ras_progress",
            Severity.FAIL,
            after.hash,
            f"{name}: stuck — the same counts {within}, {_behind(after)}",
            value=seconds,
            unit="s",
            hint="the communicator waits for the ranks behind: look at their processes (py-spy "
            "dump), GPUs and NICs (job.path, ibdiag counters on their nodes)",
        )
    if now and not after.mismatches and now == was:
        return Finding(
            "job.ras_progress",
            Severity.WARN,
            after.hash,
            f"{name}: no operation launched {within}, every rank at the same count",
            value=seconds,
            unit="s",
            hint="either every rank is inside one collective that does not finish (a hang RAS "
            "cannot see: check the job's watchdog and the ranks' NICs), or the job is busy "
            "elsewhere (checkpoint, data loading): query again later",
        )
    return None


@CHECKS.check(
    "job.ras_progress",
    "two RAS readings: counts that did not move (stuck with ranks behind: fail; all still: warn)",
)
def progress(before: RasStatus, after: RasStatus, seconds: float | None) -> list[Finding]:
    out: list[Finding] = []
    for c in after.comms:
        earlier = before.comm(c.hash)
        if earlier is not None:
            f = _judge(earlier, c, seconds)
            if f is not None:
                out.append(f)
    if not out:
        out.append(
            Finding(
                "job.ras_progress",
                Severity.OK,
                "job",
                "two readings: no communicator whose counts can be compared "
                "(the text report gives counts only for ranks that disagree)",
            )
        )
    return out
