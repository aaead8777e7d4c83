"""``ibdiag verdict --fabric ... --nodes ...``: the fabric's ceiling for this job where it landed, beside
the rails' ceiling, its arithmetic written out, the binding limit named, and the remedy when the
placement (rank order, leaves spanned) is the cause. The traffic model is :mod:`ibdiag.fabric.placement`'s.
"""

from __future__ import annotations

from ibdiag.fabric.placement import ALLTOALL, ASSUMPTION, RING, TREE_ALGO, Placement
from ibdiag.findings.model import Finding, Severity
from ibdiag.verdict.registry import CHECKS

#: The fabric caps the job when its ceiling is this share or more below the rails'.
CAP_TOL = 0.01


def rails_ceiling(p: Placement, rail_ceiling_gbs: float | None) -> tuple[float, str]:
    """The ceiling the fabric is compared with: verdict's (flags or --root), else the host links'."""
    if rail_ceiling_gbs is not None:
        return rail_ceiling_gbs, "the rails' ceiling"
    own = len(p.rails) * p.host_gbps / 8 * p.payload_share
    return own, "the host links' ceiling"


def _order_text(order: tuple[str, ...]) -> str:
    return ",".join(order[:6]) + (f",... ({len(order)} nodes)" if len(order) > 6 else "")


@CHECKS.check(
    "verdict.placement",
    "the fabric, with the job's nodes and rank order where they are, caps its all-reduce below the rails' ceiling: warn",
)
def placement(p: Placement, rail_ceiling_gbs: float | None, measured_gbs: float) -> Finding:
    ring, tree, a2a = p.ceilings[RING], p.ceilings[TREE_ALGO], p.ceilings[ALLTOALL]
    rail, rail_what = rails_ceiling(p, rail_ceiling_gbs)
    spanned = (
        f"{len(p.order)} nodes on {len(p.leaves)} {'leaf' if len(p.leaves) == 1 else 'leaves'}"
    )
    if ring.busbw_gbs >= rail * (1 - CAP_TOL):
        return Finding(
            "verdict.placement",
            Severity.OK,
            "placement",
            f"the fabric does not cap this job: {spanned}, ring {ring.busbw_gbs:.4g} GB/s, tree {tree.busbw_gbs:.4g} GB/s "
            f"against {rail_what} {rail:.4g} GB/s (all-to-all {a2a.busbw_gbs:.4g} GB/s)",
        )
    better = p.leaf_ordered
    if better is not None and better.busbw_gbs > ring.busbw_gbs * (1 + CAP_TOL):
        remedy = (
            f"placement is the cause: the same nodes in rank order leaf by leaf ({_order_text(p.leaf_order)}) "
            f"reach {better.busbw_gbs:.4g} GB/s on a ring: order the ranks that way (the host file, or Slurm's "
            "topology/tree with `ibdiag fabric --slurm-topology`)"
        )
    elif ring.binding in {x.name for x in ring.spines}:
        remedy = (
            f"the nodes span {p.pods} pods whose spines' uplinks to the cores cannot carry it: ask Slurm for "
            "nodes in fewer pods (topology/tree from `ibdiag fabric --slurm-topology`, `sbatch --switches=N`), "
            f"or fix {ring.binding}'s uplinks"
        )
    else:
        remedy = (
            f"the nodes span {len(p.leaves)} leaves whose uplinks cannot carry it: ask Slurm for fewer leaves "
            "(topology/tree from `ibdiag fabric --slurm-topology`, `sbatch --switches=N`), or fix the leaf's uplinks"
        )
    at = measured_gbs / ring.busbw_gbs if ring.busbw_gbs > 0 else 0.0
    measured = (
        f"; the measured {measured_gbs:.4g} GB/s is {at:.0%} of the ring's: the network, where this job landed, is the bottleneck"
        if at >= 0.9
        else f"; the measured {measured_gbs:.4g} GB/s is {at:.0%} of the ring's"
    )
    return Finding(
        "verdict.placement",
        Severity.WARN,
        "placement",
        f"the fabric caps this job's all-reduce below {rail_what} {rail:.4g} GB/s: ring {ring.busbw_gbs:.4g} GB/s "
        f"(bound by {ring.binding}), tree {tree.busbw_gbs:.4g} GB/s (bound by {tree.binding}); {spanned}"
        + measured,
        value=round(ring.busbw_gbs, 4),
        limit=round(rail, 4),
        unit="GB/s",
        hint=remedy,
    )


def placement_lines(p: Placement, rail_ceiling_gbs: float | None) -> list[str]:
    """The table's "Fabric placement" section: where the job is, each algorithm's arithmetic."""
    rail, rail_what = rails_ceiling(p, rail_ceiling_gbs)
    leaves = ", ".join(f"{n}: {k}" for n, k in p.leaves[:8]) + (
        f" and {len(p.leaves) - 8} more" if len(p.leaves) > 8 else ""
    )
    lines = [
        f"{len(p.order)} nodes on {len(p.leaves)} leaves ({leaves}) under {p.spines} spine(s)"
        + (f" in {p.pods} pod(s); " if p.pods else "; ")
        + f"rails {', '.join(str(r) for r in p.rails)}; host links {p.host_gbps:g} Gb/s; {rail_what} {rail:.4g} GB/s.",
        "Load on a leaf's uplinks in units of b, the busbw one rail carries (ring: 1 per edge leaving the leaf; "
        "tree: n/(4(n-1)) per crossing edge of NCCL's double binary tree; all-to-all: k(n-k)/(n-1))"
        + (
            "; the same per pod on its spines' uplinks to the cores, shared among the spines."
            if p.pods
            else "."
        ),
    ]
    for algo in (RING, TREE_ALGO, ALLTOALL):
        lines += [f"{algo}: {x}" for x in p.ceilings[algo].arithmetic]
    if p.leaf_ordered is not None:
        lines.append(
            f"ring with the ranks leaf by leaf: {p.leaf_ordered.arithmetic[-1].split(': ', 1)[-1]}"
        )
    lines.append(f"Assumed: {ASSUMPTION}.")
    return lines
