"""Measurement -> the shared results model and findings: averages, per-rank spread, stragglers.

Pure arithmetic (tests feed it literal numbers). Check ids (stable, CI keys on them):

* ``collective.wrong``      validation found wrong elements (nccl-tests' #wrong): fail
* ``collective.straggler``  a rank or host keeps the others waiting (see below): warn
* ``collective.busbw``      busbw of the largest size below ``[collective] min_busbw_gbs``: fail
* ``collective.setup``      rendezvous slower than ``[collective] max_setup_s``: warn

Straggler arithmetic. In a collective nobody finishes before the last rank arrives, so the loop time
(nccl-tests' ``time``) is the same on every rank and cannot name anyone. What differs is the time each
rank spends *inside* the collective: a rank that arrives late finds the others already waiting and
leaves with them, so its in-collective time is shorter by the time it kept them waiting. Per row,
call by call (call i is the same collective on every rank)::

    late[r][i]    = median over ranks of coll[.][i] - coll[r][i]
    late_share[r] = median over calls of late[r][i] / row time

(the median over calls, so one descheduled call does not make a rank late).

A rank is a straggler when ``late_share > straggler_share`` in at least ``straggler_min_fraction`` of the
rows judged (rows faster than ``straggler_min_time_us`` are not judged). A host is one when the median
(lower median) of its ranks' shares does the same (with at least two hosts); its ranks are then reported
under it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ibdiag.bench.collective.measurement import MeasuredRow, Measurement, RankInfo
from ibdiag.bench.results.collective_checks import busbw_findings, wrong_findings
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.bench.results.collective_meta import (
    CollectiveMeta,
    CollectiveSetup,
    MinMedMax,
    RankTiming,
    Spread,
    Straggler,
)
from ibdiag.bench.results.model import BenchRun, CollectiveResult
from ibdiag.collectives import DTYPES, DType, OpSpec, algbw_gbs, avg_busbw, get_op
from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry

#: Check ids of collective runs, measured or imported (the mechanism: :mod:`ibdiag.findings.registry`).
CHECKS = CheckRegistry("collective")
CHECKS.declare("collective.wrong", "validation found wrong elements (nccl-tests' #wrong): fail")
CHECKS.declare("collective.straggler", "a rank or host keeps the others waiting: warn")
CHECKS.declare(
    "collective.busbw", "busbw of the largest size below [collective] min_busbw_gbs: fail"
)
CHECKS.declare("collective.setup", "rendezvous slower than [collective] max_setup_s: warn")


def _stats(values: Sequence[float]) -> MinMedMax:
    return MinMedMax(min(values), statistics.median(values), max(values))


def late_shares(row: MeasuredRow) -> list[float]:
    """Per rank: how long the others waited for it, as a share of the row's mean loop time.

    With per-call times: call by call, the median rank's in-collective time minus this rank's, then
    the median over calls (robust to a single descheduled call). Without: the same on the means.
    """
    t = statistics.fmean(row.time_us)
    n = len(row.coll_us)
    if t <= 0 or n < 2:
        return [0.0] * n
    its = row.coll_iter_us
    if its and all(len(x) == len(its[0]) for x in its) and its[0]:
        calls = len(its[0])
        late: list[list[float]] = [[] for _ in range(n)]
        for i in range(calls):
            values = [its[r][i] for r in range(n)]
            med = statistics.median(values)
            for r in range(n):
                late[r].append(med - values[r])
        return [statistics.median(v) / t for v in late]
    med = statistics.median(row.coll_us)
    return [(med - c) / t for c in row.coll_us]


def judged_rows(rows: Sequence[MeasuredRow], cfg: CollectiveConfig) -> list[MeasuredRow]:
    return [
        r
        for r in rows
        if len(r.coll_us) >= 2 and statistics.fmean(r.time_us) >= cfg.straggler_min_time_us
    ]


def find_stragglers(
    rows: Sequence[MeasuredRow], hosts: Sequence[str], cfg: CollectiveConfig
) -> list[Straggler]:
    """Ranks and hosts that keep the others waiting consistently (module docstring). ``hosts[r]`` is rank r's host."""
    judged = judged_rows(rows, cfg)
    if not judged:
        return []
    n = len(hosts)
    need = max(1, math.ceil(cfg.straggler_min_fraction * len(judged)))
    shares = [late_shares(r) for r in judged]  # [row][rank]
    out: list[Straggler] = []
    host_names = list(dict.fromkeys(hosts))
    flagged_hosts: set[str] = set()
    if len(host_names) >= 2:
        for h in host_names:
            members = [r for r in range(n) if hosts[r] == h]
            # the lower median: a host is late when at least half its ranks are, not when one of two is
            per_row = [statistics.median_low([s[r] for r in members]) for s in shares]
            late = sum(1 for v in per_row if v > cfg.straggler_share)
            if late >= need:
                flagged_hosts.add(h)
                out.append(
                    Straggler(
                        "host",
                        h,
                        tuple(members),
                        sorted(per_row, reverse=True)[need - 1],
                        max(per_row),
                        late,
                        len(judged),
                    )
                )
    for r in range(n):
        if hosts[r] in flagged_hosts:
            continue
        per_row = [s[r] for s in shares]
        late = sum(1 for v in per_row if v > cfg.straggler_share)
        if late >= need:
            out.append(
                Straggler(
                    "rank",
                    hosts[r],
                    (r,),
                    sorted(per_row, reverse=True)[need - 1],
                    max(per_row),
                    late,
                    len(judged),
                )
            )
    out.sort(key=lambda s: -s.share)
    return out


def row_spread(row: MeasuredRow, hosts: Sequence[str]) -> Spread:
    """min/median/max over ranks (and over hosts' medians) of the loop time and the in-collective time."""
    shares = late_shares(row)
    latest = max(range(len(shares)), key=lambda r: shares[r]) if shares else None
    by_host: dict[str, list[float]] = {}
    for r, c in enumerate(row.coll_us):
        by_host.setdefault(hosts[r], []).append(c)
    host_medians = [statistics.median(v) for v in by_host.values()]
    return Spread(
        bytes=row.plan.bytes,
        in_place=row.in_place,
        time_us=_stats(row.time_us),
        coll_us=_stats(row.coll_us),
        host_coll_us=_stats(host_medians),
        latest_rank=latest,
        latest_share=None if latest is None else shares[latest],
    )


def to_bench_run(m: Measurement, cfg: CollectiveConfig) -> tuple[BenchRun, tuple[Finding, ...]]:
    """The ``ibdiag.bench/1`` run (``kind: collective``) and its findings."""
    op = get_op(m.op)
    dtype = DTYPES[m.dtype]
    # bench collective runs only the collective=True types, which all have an NCCL name
    assert dtype.nccl_name is not None
    hosts = [r.host for r in sorted(m.ranks, key=lambda x: x.rank)]
    n = m.world_size
    results = _results(m, op, dtype)
    avg = avg_busbw(r.busbw_gbs for r in results)
    stragglers = find_stragglers(m.rows, hosts, cfg)
    setups = [r.setup_s for r in m.ranks]
    slowest_setup = max(m.ranks, key=lambda r: r.setup_s) if m.ranks else None
    per_rank = _per_rank(m)
    setup = CollectiveSetup(
        launcher=m.launcher,
        iters=m.iters,
        warmup=m.warmup,
        validation=m.check,
        timing=m.timing,
        timeout_s=m.timeout_s,
        torch_version=m.torch_version,
        settings=dict(m.settings),
        setup_s=max(setups) if setups else None,
        setup_s_min=min(setups) if setups else None,
        setup_slowest_rank=None if slowest_setup is None else slowest_setup.rank,
        skipped_sizes=tuple(m.skipped_sizes),
        spread=tuple(row_spread(row, hosts) for row in m.rows),
        stragglers=tuple(stragglers),
        per_rank=per_rank,
    )
    meta = CollectiveMeta(
        op=op.name,
        backend=m.backend,
        dtype=m.dtype,
        redop="sum" if op.redop else None,
        world_size=n,
        ranks_per_node=m.ranks_per_node,
        nodes=len(m.hosts),
        hosts=tuple(m.hosts),
        blocking=m.blocking,
        avg_busbw_gbs=avg,
        measured=setup,
    )
    run = BenchRun(meta, tuple(results))
    findings = list(wrong_findings(op.name, results, checked=m.check))
    findings += straggler_findings(stragglers, m, cfg)
    findings += busbw_findings(op.name, results, cfg)
    findings += _setup_findings(setups, slowest_setup, n, cfg)
    return run, tuple(findings)


def _results(m: Measurement, op: OpSpec, dtype: DType) -> list[CollectiveResult]:
    """One row per measured size and placement: the mean time over ranks, algbw and busbw from it."""
    assert dtype.nccl_name is not None  # the collective spec admits only NCCL's float types
    n = m.world_size
    results: list[CollectiveResult] = []
    for row in m.rows:
        t_us = statistics.fmean(row.time_us)
        algbw = algbw_gbs(row.plan.bytes, t_us * 1e-6)
        results.append(
            CollectiveResult(
                bytes=row.plan.bytes,
                count=row.plan.count,
                dtype=dtype.nccl_name,
                redop="sum" if op.redop else None,
                root=0 if op.rooted else None,
                in_place=row.in_place,
                time_us=t_us,
                algbw_gbs=algbw,
                busbw_gbs=algbw * op.busbw_factor(n),
                wrong=row.wrong,
                time_us_min=min(row.time_us),
                time_us_max=max(row.time_us),
            )
        )
    return results


def _per_rank(m: Measurement) -> tuple[RankTiming, ...]:
    """Each rank's own numbers, row by row (its time, its in-collective time, its late share)."""
    shares_by_row = [late_shares(row) for row in m.rows]
    return tuple(
        RankTiming(
            rank=info.rank,
            host=info.host,
            local_rank=info.local_rank,
            pid=info.pid,
            device=info.device,
            setup_s=info.setup_s,
            interface=info.interface or None,
            time_us=tuple(row.time_us[info.rank] for row in m.rows),
            coll_us=tuple(row.coll_us[info.rank] for row in m.rows),
            late_share=tuple(s[info.rank] for s in shares_by_row),
        )
        for info in sorted(m.ranks, key=lambda x: x.rank)
    )


def _setup_findings(
    setups: list[float], slowest_setup: RankInfo | None, n: int, cfg: CollectiveConfig
) -> list[Finding]:
    """``collective.setup``: the slowest rendezvous against ``max_setup_s`` (when configured)."""
    findings: list[Finding] = []
    if cfg.max_setup_s is not None and setups:
        worst = max(setups)
        sev = Severity.WARN if worst > cfg.max_setup_s else Severity.OK
        who = (
            f" (slowest: rank {slowest_setup.rank} on {slowest_setup.host})"
            if slowest_setup
            else ""
        )
        findings.append(
            Finding(
                "collective.setup",
                sev,
                f"{n} ranks",
                f"rendezvous and first collective took {worst:.3g} s{who}",
                value=round(worst, 3),
                limit=cfg.max_setup_s,
                unit="s",
                hint="slow setup at scale: check the store host's load, DNS, and NCCL bootstrap settings (NCCL_SOCKET_IFNAME)"
                if sev is Severity.WARN
                else None,
            )
        )
    return findings


def straggler_findings(
    stragglers: Sequence[Straggler], m: Measurement, cfg: CollectiveConfig
) -> list[Finding]:
    if m.world_size < 2:
        return []
    judged = len(judged_rows(m.rows, cfg))
    if not judged:
        return [
            Finding(
                "collective.straggler",
                Severity.OK,
                f"{m.world_size} ranks",
                f"not judged: every row is faster than {cfg.straggler_min_time_us:g} µs (latency-bound rows are mostly scheduling noise)",
            )
        ]
    if not stragglers:
        return [
            Finding(
                "collective.straggler",
                Severity.OK,
                f"{m.world_size} ranks",
                f"no rank or host kept the others waiting more than {cfg.straggler_share:.0%} of a collective in {judged} rows",
                limit=cfg.straggler_share,
                unit="share",
            )
        ]
    out = []
    for s in stragglers:
        who = s.subject if s.kind == "rank" else f"host {s.host} (ranks {_ranks(s.ranks)})"
        out.append(
            Finding(
                "collective.straggler",
                Severity.WARN,
                s.subject,
                f"{who} is slower than the median rank: the others waited for it at least {s.share:.0%} of a collective "
                f"in {s.rows_late} of {s.rows_judged} rows (worst {s.worst_share:.0%})",
                value=round(s.share, 3),
                limit=cfg.straggler_share,
                unit="share",
                hint=(
                    "check that host's load, CPU/GPU clocks and its NIC (ibdiag counters: xmit_wait, symbol errors); "
                    "one late rank makes every rank wait (seed 000)"
                ),
            )
        )
    return out


def _ranks(ranks: Sequence[int]) -> str:
    if len(ranks) > 6:
        return f"{ranks[0]}..{ranks[-1]}, {len(ranks)} ranks"
    return ", ".join(str(r) for r in ranks)
