#!/usr/bin/env python3
"""Sweep planning and attribution at cluster scale, in one process, on synthetic results.

    python benchmarks/sweep_scale.py [--nodes 64,1024,16384] [--rails 8] [--runs 3] [--tree 32]

For each fleet size and pattern: the time to plan the first pass (every round generated), the time of
the second-pass planning and of the analysis (median of --runs), the memory rank 0 holds (the pair
results and the analysis, measured with tracemalloc in a separate run), the size of the JSON document,
and the precision and recall of the attribution against the planted faults.

The results come from tests.support.synthetic_fabric.SyntheticFabric — a named in-process FAKE with planted
faults (slow nodes, slow single rails, slow links, nodes that stop answering) and 2 % noise; nothing
here measures a network. Pairwise is analysed up to 1024 nodes with one rail (16384 nodes would be
134 million pairs x rails); its planning at 16384 nodes is timed over the first 200 rounds and scaled
to all 16383 (said so in the output), and each rank's own partner lookup is timed over every round.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ibdiag.sweep.attribution import analyse  # noqa: E402
from ibdiag.sweep.contention import ordered_first_pass  # noqa: E402
from ibdiag.sweep.followup import second_pass_plan  # noqa: E402
from ibdiag.sweep.nodes import make_fleet  # noqa: E402
from ibdiag.sweep.passes import run_round, run_sweep  # noqa: E402
from ibdiag.sweep.runner import PairSpec  # noqa: E402
from ibdiag.sweep.schedule import (  # noqa: E402
    Pattern,
    Phase,
    first_pass,
    pairwise_partner,
    round_count,
)
from tests.support.synthetic_fabric import (  # noqa: E402
    SyntheticFabric,
    plant_faults,
    score,
    synthetic_tree,
)

SPEC = PairSpec()


def plan_time(pattern: Pattern, n: int, limit_rounds: int | None = None) -> tuple[float, int, bool]:
    """Seconds to generate the first pass (scaled from ``limit_rounds`` rounds when given), pairs, scaled?"""
    total = round_count(pattern, n)
    t0 = time.perf_counter()
    pairs = 0
    for i, rnd in enumerate(first_pass(pattern, n, seed=1)):
        pairs += len(rnd)
        if limit_rounds is not None and i + 1 >= limit_rounds:
            break
    dt = time.perf_counter() - t0
    done = min(total, limit_rounds or total)
    return dt * total / done, pairs * total // done, done < total


def first_pass_results(nodes, pattern, faults, seed):
    fabric = SyntheticFabric(faults, noise=0.02, seed=seed)
    results, dead = [], set()
    for i, rnd in enumerate(first_pass(pattern, len(nodes), seed=seed)):
        results += run_round(fabric, nodes, i, Phase.FIRST, rnd, SPEC, dead)
    return results


def case(n: int, rails: int, pattern: Pattern, runs: int, per_leaf: int = 0) -> dict:
    nodes = make_fleet(
        [f"node{i:05d}" for i in range(n)], [f"mlx5_{k}" for k in range(rails)], rate_gbps=400
    )
    # --tree: the nodes on a 1:1 two-tier tree in shuffled rank order, tests sharing its links
    # (the contention model), the tree described to the sweep (its exact routes)
    tree = synthetic_tree(n, per_leaf, order="shuffled", seed=1) if per_leaf else None
    layout = tree.description(nodes).place(nodes) if tree is not None else None
    tested = [p for r in ordered_first_pass(pattern, nodes, layout, seed=1) for p in r]
    k = max(1, n // 100)
    faults = plant_faults(
        nodes, tested, slow_nodes=k, slow_ends=k, slow_links=k, dead=max(1, n // 400), seed=1
    )
    del tested
    t0 = time.perf_counter()
    fabric = SyntheticFabric(faults, noise=0.02, seed=1, tree=tree)
    result = run_sweep(nodes, fabric, pattern=pattern, seed=1, layout=layout)
    sweep_s = time.perf_counter() - t0
    settings, confirmation = result.settings, result.confirmation()
    s = score(faults, nodes, result.analysis)
    first = first_pass_results(nodes, pattern, faults, 1)
    second_s, analyse_s = [], []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        second_pass_plan(nodes, first)
        second_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        analyse(nodes, result.pairs, result.analysis.config)
        analyse_s.append(time.perf_counter() - t0)
    doc_bytes = len(json.dumps(result.to_json(), separators=(",", ":")))
    pairs = list(result.pairs)
    del result, first
    gc.collect()
    # Memory: what rank 0 holds — the pair results (rebuilt under tracemalloc) and the analysis of them.
    tracemalloc.start()
    held = [
        type(p)(
            p.round,
            p.phase,
            p.rail,
            p.a,
            p.b,
            None if p.bw_gbs is None else float(p.bw_gbs),
            p.lat_us,
            p.error,
            p.unreachable,
        )
        for p in pairs
    ]
    results_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    analysis = analyse(nodes, held)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "nodes": n,
        "rails": rails,
        "pattern": pattern.value,
        "tests": len(pairs),
        "sweep_s": sweep_s,
        "second_pass_plan_s": statistics.median(second_s),
        "analyse_s": statistics.median(analyse_s),
        "results_mib": results_bytes / 2**20,
        "bytes_per_test": results_bytes / max(1, len(pairs)),
        "analysis_mib": (current - results_bytes) / 2**20,
        "peak_mib": peak / 2**20,
        "json_mib": doc_bytes / 2**20,
        "precision": s.precision,
        "recall": s.recall,
        "faults": s.true_positives + s.false_negatives,
        "links": len(analysis.links),
        "rounds": f"{settings.first_pass_rounds}+{settings.second_pass_rounds}+{settings.confirm_rounds}",
        "confounded": confirmation["links_confounded"],
        "worst_load": fabric.worst_load,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="64,1024,16384")
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--tree",
        type=int,
        default=0,
        help="hosts per leaf of a synthetic two-tier tree described to the sweep (0: no tree)",
    )
    ap.add_argument("--patterns", default="ring,pairwise,random")
    args = ap.parse_args()
    sizes = [int(x) for x in args.nodes.split(",")]

    print("planning the first pass (every round generated):")
    for n in sizes:
        for pattern in Pattern:
            limit = 200 if pattern is Pattern.PAIRWISE and n > 1024 else None
            dt, pairs, scaled = plan_time(pattern, n, limit)
            note = " (scaled from the first 200 rounds)" if scaled else ""
            print(
                f"  {pattern.value:<9} {n:>6} nodes: {round_count(pattern, n):>6} rounds, {pairs:>10} pairs, {dt:9.3f} s{note}"
            )
        t0 = time.perf_counter()
        for r in range(round_count(Pattern.PAIRWISE, n)):
            pairwise_partner(n, r, n // 3)
        print(
            f"  pairwise  {n:>6} nodes: one rank's partners in every round: {(time.perf_counter() - t0) * 1e3:.1f} ms"
        )

    print("\nsweep through the synthetic fabric (FAKE), second-pass planning, analysis, memory:")
    header = f"  {'pattern':<9}{'nodes':>6}{'rails':>6}{'tests':>9}{'sweep s':>9}{'2nd pass s':>11}{'analyse s':>10}{'results MiB':>12}{'B/test':>7}{'analysis MiB':>13}{'JSON MiB':>9}{'precision':>10}{'recall':>7}{'faults':>7}{'rounds':>12}{'confounded':>11}{'load':>5}"
    print(header)
    for n in sizes:
        for pattern in (Pattern(p) for p in args.patterns.split(",")):
            rails = args.rails
            if pattern is Pattern.PAIRWISE:
                if n > 1024:
                    continue
                rails = 1
            r = case(n, rails, pattern, args.runs, args.tree)
            print(
                f"  {r['pattern']:<9}{r['nodes']:>6}{r['rails']:>6}{r['tests']:>9}{r['sweep_s']:>9.2f}{r['second_pass_plan_s']:>11.2f}{r['analyse_s']:>10.2f}"
                f"{r['results_mib']:>12.1f}{r['bytes_per_test']:>7.0f}{r['analysis_mib']:>13.1f}{r['json_mib']:>9.1f}{r['precision']:>10.3f}{r['recall']:>7.3f}{r['faults']:>7}{r['rounds']:>12}{r['confounded']:>11}{r['worst_load']:>5}"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
