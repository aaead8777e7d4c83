"""``ibdiag verdict`` as a library: :func:`run` takes the job (model size, ranks, strategy, backward
time), the measured bus bandwidth (a number, a bench JSON or an nccl-tests log) and what bounds it
(rails x link rate, the node under ``root``, the fabric the job's nodes are on), and says whether the
network is the bottleneck: the 2xS all-reduce arithmetic, bucket overlap, the scaling wall, fabric
health. Its views (:mod:`ibdiag.verdict.views`) write the result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ibdiag.config import Config
from ibdiag.errors import UsageError
from ibdiag.findings.model import Finding, Report, RunMeta
from ibdiag.node.root import host_of, opened_root
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.outfile import check_output_path
from ibdiag.ports.config import PortsConfig
from ibdiag.verdict import inputs
from ibdiag.verdict.ceiling import Ceiling, ceiling
from ibdiag.verdict.chart import need_matplotlib
from ibdiag.verdict.checks import findings
from ibdiag.verdict.config import VerdictConfig
from ibdiag.verdict.inputs import Measured, Workload
from ibdiag.verdict.judge import Verdict, judge

if TYPE_CHECKING:  # fabric's placement and judgement: imported for --fabric only
    from ibdiag.fabric.placement import Placement
    from ibdiag.verdict.node import NodeFacts


@dataclass(frozen=True)
class VerdictRequest:
    """What ``ibdiag verdict`` is asked: the workload, one measured busbw source, and what bounds it.
    Sizes and counts are the command line's text (``8e9``, ``70B``, ``25MiB``), parsed and checked
    by :mod:`ibdiag.verdict.inputs`."""

    ranks: int
    """``--ranks``: ranks (GPUs) in the job."""
    compute_s: float
    """``--compute-s``: backward-pass time per step, seconds."""
    params: str | None = None
    dtype: str | None = None
    grad_bytes: str | None = None
    """``--grad-bytes``: the gradient size instead of ``params``/``dtype``."""
    ranks_per_node: int | None = None
    """``--ranks-per-node``; None: the GPUs under ``root``, else 1."""
    strategy: str = "ddp"
    forward_s: float | None = None
    bucket: str = "25MiB"
    busbw_gbs: float | None = None
    """``--busbw``, GB/s; or one of ``bench`` and ``nccl_tests``."""
    bench: Path | None = None
    nccl_tests: Path | None = None
    measured: inputs.MeasuredSource | None = None
    """A source another package supplies (``--inspector``: NCCL Inspector's busbw, ``ibdiag.job``)."""
    measured_flag: str = "--inspector"
    latency_us: float | None = None
    link_gbps: float | None = None
    rails_per_node: int | None = None
    root: Path | None = None
    """``--root``: also judge this node's health and read its rails (``/``, a fixture or snapshot)."""
    fabric: str | None = None
    """``--fabric``: ``live`` or an ``ibdiag fabric --save`` dump: the fabric's ceiling for the job."""
    nodes: str | None = None
    """``--nodes``: a Slurm host list; None: ``environ``'s ``SLURM_JOB_NODELIST``."""
    topo: Sequence[Path] = ()
    rank_order: str | None = None
    """``--rank-order``: a file of one host a line, or a host list."""
    chart: Path | None = None
    """``--chart``: where the caller writes the PNG (views' ``png``); checked here before any work."""
    config: Config = field(default_factory=lambda: Config(None, {}))
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VerdictResult:
    report: Report
    meta: RunMeta
    verdict: Verdict
    placement: Placement | None = None
    placement_lines: tuple[str, ...] = ()
    """The table's lines on the job's placement (``--fabric``)."""
    chart: Path | None = None


def run(req: VerdictRequest) -> VerdictResult:
    """Judge the job: the arithmetic, its findings and, with ``fabric``, where the job landed."""
    if req.chart is not None:
        need_matplotlib()
        check_output_path(req.chart, "--chart")
    cfg = req.config.section("verdict", VerdictConfig)
    other = None if req.measured is None else (req.measured_flag, req.measured)
    inputs.choose_source(req.busbw_gbs, req.bench, req.nccl_tests, other)
    _check_ceiling_flags(req)
    node, meta = _read_node(req)
    work = inputs.workload(
        params=req.params,
        dtype=req.dtype,
        grad_bytes=req.grad_bytes,
        ranks=req.ranks,
        ranks_per_node=req.ranks_per_node,
        gpus_under_root=node.gpus if node else None,
        strategy=req.strategy,
        compute_s=req.compute_s,
        forward_s=req.forward_s,
        bucket=req.bucket,
    )
    ceil = ceiling(
        link_gbps=req.link_gbps,
        rails_per_node=req.rails_per_node,
        ranks_per_node=work.ranks_per_node,
        rails=node.rails if node else None,
        payload_share=cfg.link_payload_share,
    )
    measured = _measured(req, work, ceil)
    inputs.check_positive("busbw", measured.busbw_gbs, maximum=inputs.MAX_GBS, unit="GB/s")
    v = judge(
        work,
        measured,
        ceil,
        health=node.health if node else None,
        config=cfg,
        latency_us=req.latency_us,
    )
    data, found = v.to_json(), list(findings(v))
    if (req.nodes or req.rank_order or req.topo) and req.fabric is None:
        raise UsageError(
            "--nodes, --rank-order and --topo place the job on a fabric",
            hint="add --fabric live or --fabric DUMP",
        )
    where: Placement | None = None
    lines: tuple[str, ...] = ()
    if req.fabric is not None:
        where, placed, lines = _on_fabric(req, req.fabric, v, cfg)
        data["placement"] = where.to_json()
        found += placed
    report = Report("verdict", data, tuple(found))
    return VerdictResult(report, meta, v, where, lines, req.chart)


def _check_ceiling_flags(req: VerdictRequest) -> None:
    inputs.check_positive(
        "--link-gbps", req.link_gbps, maximum=inputs.MAX_LINK_GBPS, unit="Gb/s", example="400"
    )
    inputs.check_positive(
        "--latency-us", req.latency_us, maximum=inputs.MAX_LATENCY_US, unit="µs", allow_zero=True
    )
    if req.rails_per_node is not None and not 1 <= req.rails_per_node <= inputs.MAX_RAILS:
        raise UsageError(
            f"--rails-per-node must be between 1 and {inputs.MAX_RAILS}, not {req.rails_per_node}",
            hint="the adapters per node that carry the job's traffic, e.g. 8 on a DGX H100",
        )


def _read_node(req: VerdictRequest) -> tuple[NodeFacts | None, RunMeta]:
    """``--root``: the node's GPUs, rails and health, and the run's host (the snapshot's)."""
    if req.root is None:
        return None, RunMeta.now(host_of(None))
    # lazy: topo's and counters' checks (~35 ms of imports), for --root only
    from ibdiag.verdict.node import read_node

    with opened_root(req.root) as directory:
        skip = req.config.section("ports", PortsConfig).skip
        node = read_node(SysfsRoot(directory, skip_adapters=skip).check(), req.config)
        return node, RunMeta.now(host_of(directory))


def _measured(req: VerdictRequest, work: Workload, ceil: Ceiling) -> Measured:
    """The busbw from the one source given (:func:`inputs.choose_source` refused none or two)."""
    if req.busbw_gbs is not None:
        return inputs.from_flag(req.busbw_gbs)
    if req.measured is not None:
        return req.measured(work.bucket_bytes, work.ranks)
    kw = {"bucket_bytes": work.bucket_bytes, "ranks": work.ranks, "rails_used": ceil.rails_used}
    if req.bench is not None:
        return inputs.load_bench(req.bench, **kw)
    if req.nccl_tests is not None:
        return inputs.load_nccl_tests(req.nccl_tests, **kw)
    raise UsageError(  # choose_source refused this before any work was done
        "no measured bandwidth", hint="give one of --busbw, --bench or --nccl-tests"
    )


def _on_fabric(
    req: VerdictRequest, fabric: str, v: Verdict, cfg: VerdictConfig
) -> tuple[Placement, tuple[Finding, ...], tuple[str, ...]]:
    """The job's nodes on the fabric: where they are, the finding on it and the table's lines."""
    # lazy: start-up time (fabric's collector, build and shape), for --fabric only
    from ibdiag.verdict.onfabric import job_placement, judge_placement

    ceil, work = v.ceiling, v.workload
    known = ceil.rails_source != "default"
    where = job_placement(
        fabric,
        req.nodes,
        req.rank_order,
        req.environ,
        topo=req.topo,
        rails_used=ceil.rails_used if known else work.ranks_per_node,
        payload_share=cfg.link_payload_share,
    )
    # verdict's rail ceiling where its rails are known (flags, --root), else the fabric's host links
    judged = judge_placement(where, ceil.busbw_gbs if known else None, v.measured.busbw_gbs)
    return where, judged.findings, judged.lines
