"""``job.*`` findings from Inspector's timings and from the join: stragglers, a communicator's bus
bandwidth, what Inspector's files held, and what the fabric says of the paths of the ranks named.
Registered in :data:`ibdiag.job.checks.CHECKS`."""

from __future__ import annotations

from collections.abc import Sequence

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.findings.model import Finding, Severity, worst
from ibdiag.job.checks import CHECKS
from ibdiag.job.config import JobConfig
from ibdiag.job.inspector import InspectorRead
from ibdiag.job.roster import Roster, ranks_text
from ibdiag.job.timing import CommTiming, largest_rows
from ibdiag.units import format_bytes


def _comm(t: CommTiming) -> str:
    named = f" ({t.name})" if t.name and t.name != "unknown" else ""
    return f"communicator {t.comm}{named}"


@CHECKS.check(
    "job.straggler",
    "Inspector: a rank or host keeps the others waiting (bench collective's late-share method): warn",
)
def stragglers(
    timings: Sequence[CommTiming], roster: Roster, cfg: CollectiveConfig
) -> list[Finding]:
    out: list[Finding] = []
    for t in timings:
        if t.ranks_seen < 2:
            continue
        if not t.rows_judged:
            out.append(
                Finding(
                    "job.straggler",
                    Severity.OK,
                    t.comm,
                    f"{_comm(t)}: not judged (no collective that every rank recorded and that took "
                    f"{cfg.straggler_min_time_us:g} µs or more)",
                )
            )
            continue
        for s in t.stragglers:
            places = []
            for rank in s.ranks:
                host, pid = t.host_of(rank) or (s.host, None)
                places.append(roster.inspector(t.comm, rank, host, pid, "straggler"))
            who = (
                f"rank {s.ranks[0]} ({places[0].text})"
                if s.kind == "rank"
                else f"host {places[0].node or s.host} (ranks {ranks_text(list(s.ranks))})"
            )
            out.append(
                Finding(
                    "job.straggler",
                    Severity.WARN,
                    places[0].subject if s.kind == "rank" else (places[0].node or s.host),
                    f"{_comm(t)}: {who} is late: the others waited for it at least {s.share:.0%} "
                    f"of a collective in {s.rows_late} of {s.rows_judged} rows (worst {s.worst_share:.0%})",
                    value=round(s.share, 3),
                    limit=cfg.straggler_share,
                    unit="share",
                    hint="one late rank makes every rank wait: check its host's load, its GPU's "
                    "clocks and its NIC (ibdiag counters; the path findings below)",
                )
            )
        if not t.stragglers:
            out.append(
                Finding(
                    "job.straggler",
                    Severity.OK,
                    t.comm,
                    f"{_comm(t)}: no rank or host kept the others waiting more than "
                    f"{cfg.straggler_share:.0%} of a collective in {t.rows_judged} row(s)",
                    limit=cfg.straggler_share,
                    unit="share",
                )
            )
    return out


@CHECKS.check(
    "job.busbw",
    "Inspector: a communicator's busbw at its largest size under [job] min_busbw_gbs: warn",
)
def busbw(timings: Sequence[CommTiming], cfg: JobConfig) -> list[Finding]:
    if cfg.min_busbw_gbs is None:
        return []
    out: list[Finding] = []
    for t in timings:
        if t.nnodes is not None and t.nnodes < 2:
            continue  # inside one node the fabric is not crossed: NVLink's busbw is not the fabric's
        for r in largest_rows(t):
            if r.busbw_gbs is None or r.bytes < cfg.busbw_min_bytes:
                continue
            low = r.busbw_gbs < cfg.min_busbw_gbs
            out.append(
                Finding(
                    "job.busbw",
                    Severity.WARN if low else Severity.OK,
                    t.comm,
                    f"{_comm(t)} ({t.nranks} ranks): {r.coll} of {format_bytes(r.bytes)} ran at "
                    f"{r.busbw_gbs:.4g} GB/s busbw (median of {r.ranks} ranks' Inspector records"
                    f", lowest {r.busbw_min_gbs:.4g})",
                    value=round(r.busbw_gbs, 2),
                    limit=cfg.min_busbw_gbs,
                    unit="GB/s",
                    hint="below what the fabric can give this job: look at the stragglers and path "
                    "findings, then at congestion (ibdiag fabric, counters xmit_wait)"
                    if low
                    else None,
                )
            )
    return out


@CHECKS.check(
    "job.inspector",
    "what Inspector's files held: lines skipped, host-timed records, records cut: warn/ok",
)
def inspector(read: InspectorRead, timings: Sequence[CommTiming]) -> list[Finding]:
    cpu = sum(t.cpu_timed for t in timings)
    problems = []
    if read.skipped:
        problems.append(f"{read.skipped} line(s) skipped (" + "; ".join(read.problems[:2]) + ")")
    if read.truncated:
        problems.append(f"only the first {read.limit} records read ([job] inspector_max_records)")
    missing = [t for t in timings if t.ranks_seen < t.nranks]
    if missing:
        t = missing[0]
        problems.append(
            f"{len(missing)} communicator(s) with ranks that wrote no record "
            f"(e.g. {t.comm}: {t.ranks_seen} of {t.nranks}): their stragglers are not judged"
        )
    if cpu:
        problems.append(f"{cpu} record(s) timed by the host's clock, not the GPU's")
    text = (
        f"{len(read.records)} collective record(s) of {len(timings)} communicator(s) in "
        f"{len(read.files)} file(s)"
    )
    return [
        Finding(
            "job.inspector",
            Severity.WARN if problems else Severity.OK,
            "inspector",
            text + (": " + "; ".join(problems) if problems else ""),
            hint="give every rank's file (NCCL_INSPECTOR_DUMP_DIR of the whole job)"
            if problems
            else None,
        )
    ]


@CHECKS.check(
    "job.path",
    "a rank named by another finding sits behind a NIC or leaf port the fabric's checks flag: their severity",
)
def paths(roster: Roster) -> list[Finding]:
    out: list[Finding] = []
    seen: set[str] = set()
    for row in roster.rows.values():
        p = row.place
        if not p.path_findings or p.subject in seen:
            continue
        seen.add(p.subject)
        worst_sev = worst(f.severity for f in p.path_findings)
        said = "; ".join(f"{f.check} {f.subject}: {f.message}" for f in p.path_findings[:3])
        who = f"rank {row.rank}" if row.rank is not None else "process"
        out.append(
            Finding(
                "job.path",
                worst_sev,
                p.subject,
                f"{who} ({', '.join(row.roles)}) runs on {p.text}, where the fabric says: {said}",
                hint="a bad cable or port on a rank's path slows every collective it is in: fix it "
                "first (ibdiag fabric for the details)",
            )
        )
    return out


@CHECKS.check(
    "job.join", "how many of the ranks named were placed on a node, NIC and leaf port: ok"
)
def join(roster: Roster, fabric: str | None) -> list[Finding]:
    rows = list(roster.rows.values())
    if not rows:
        return []
    node = sum(1 for r in rows if r.place.node)
    nic = sum(1 for r in rows if r.place.nics)
    leaf = sum(1 for r in rows if r.place.leaves)
    reasons = sorted({u for r in rows for u in r.place.unknown})
    text = f"{len(rows)} rank(s) or process(es) named: {node} on a known node, {nic} on a NIC"
    if fabric:
        text += f", {leaf} on a leaf port of {fabric}"
    if reasons:
        text += "; not joined: " + "; ".join(reasons[:3]) + (" ..." if len(reasons) > 3 else "")
    return [Finding("job.join", Severity.OK, "job", text)]
