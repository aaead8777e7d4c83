"""What ``ibdiag verdict`` is told: the workload (--params/--dtype/--grad-bytes, ranks, strategy, times)
and the measured bandwidth (--busbw, an ibdiag bench JSON, or an nccl-tests log through the importer).

Everything here raises :class:`UsageError` / :class:`InputError` (exit 2) with a hint for a value a
person could not have meant; nothing prints.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ibdiag.bench import importers
from ibdiag.bench.importers.checks import socket_fallback
from ibdiag.bench.results.model import CollectiveResult, P2PResult, load_bench_file
from ibdiag.collectives import OPS, find_dtype, find_op, find_strategy, placement
from ibdiag.errors import InputError, UsageError
from ibdiag.units import format_bytes, parse_size

# Bounds beyond which a value is surely a typo (exit 2 rather than a silent nonsense answer).
MAX_PARAMS = 1e15
"""A quadrillion parameters: 100x beyond the largest published dense models."""
MAX_RANKS = 2**20
MAX_RANKS_PER_NODE = 1024
MAX_SECONDS = 86400.0
"""A day for one backward pass."""
MAX_GBS = 100_000.0
"""100 TB/s of bus bandwidth per rank: far above any link."""
MAX_LINK_GBPS = 100_000.0
MAX_RAILS = 64
MAX_LATENCY_US = 1e6

#: Matched against the stripped text (no two runs of spaces side by side: linear).
_PARAMS_RE = re.compile(
    r"(?P<num>\d{1,64}(?:\.\d{0,64})?(?:[eE][+-]?\d{1,4})?|\.\d{1,64}(?:[eE][+-]?\d{1,4})?)\s{0,8}(?P<suffix>[kKmMbBgGtT]?)"
)
_PARAM_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_params(text: str) -> float:
    """``8e9``, ``8B``, ``70B``, ``1.5T``, ``350M`` -> parameter count (decimal: B = billion, not bytes)."""
    m = _PARAMS_RE.fullmatch(str(text).strip())
    if not m:
        raise UsageError(
            f"cannot read --params {text!r}",
            hint="write a parameter count like 8e9, 8B, 70B, 1.5T or 350M (B = billion)",
        )
    value = float(m.group("num")) * _PARAM_SCALE[m.group("suffix").upper()]
    if not math.isfinite(value) or value < 1:
        raise UsageError(
            f"--params {text!r} is not a positive parameter count", hint="e.g. --params 8e9"
        )
    if value > MAX_PARAMS:
        raise UsageError(
            f"--params {text!r} is absurdly large ({value:.3g} parameters)",
            hint="counts above 1e15 are refused; B means billion (8B = 8e9)",
        )
    return value


def parse_dtype(text: str) -> tuple[str, int]:
    """``bf16`` -> (``bf16``, 2): a gradient type of :data:`ibdiag.collectives.DTYPES`. UsageError naming them."""
    d = find_dtype(text)
    if d is None or not d.gradient:
        raise UsageError(
            f"unknown --dtype {text!r}",
            hint="the gradient's element type: fp32, bf16, fp16 or fp8 (aliases float32, tf32, bfloat16, float16, half, e4m3, e5m2)",
        )
    return d.short, d.size


def parse_strategy(text: str) -> str:
    strategy = find_strategy(text)
    if strategy is None:
        raise UsageError(
            f"unknown --strategy {text!r}",
            hint="ddp, zero1 or zero2 (traffic 2(n-1)/n x S per rank) or fsdp/zero3 (3(n-1)/n x S)",
        )
    return strategy.name


#: Smallest positive value of a flag (1 ns, 1e-9 GB/s): below it no number means anything, and a
#: subnormal one (1e-310) overflowed the overlap model to infinity.
MIN_POSITIVE = 1e-9


def check_positive(
    name: str,
    value: float | None,
    *,
    maximum: float,
    unit: str,
    allow_zero: bool = False,
    example: str = "",
) -> None:
    """UsageError unless ``value`` is finite, positive (or zero when allowed) and at most ``maximum``."""
    if value is None:
        return
    hint = f"give {name} in {unit}" + (f", e.g. {name} {example}" if example else "")
    if not math.isfinite(value):
        raise UsageError(f"{name} {value} is not a number", hint=hint)
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(
            f"{name} must be {'zero or more' if allow_zero else 'positive'}, not {value:g}",
            hint=hint,
        )
    if 0 < value < MIN_POSITIVE:  # subnormal numbers end as infinities in the model
        raise UsageError(
            f"{name} {value:g} {unit} is absurdly small",
            hint=f"values below {MIN_POSITIVE:g} {unit} are refused; check the unit ({unit})",
        )
    if value > maximum:
        raise UsageError(
            f"{name} {value:g} {unit} is absurdly large",
            hint=f"values above {maximum:g} {unit} are refused; check the unit ({unit})",
        )


@dataclass(frozen=True)
class Workload:
    """The job: gradient size, ranks and layout, strategy, times per step, bucket size."""

    grad_bytes: int
    params: float | None
    dtype: str | None
    bytes_per_param: int | None
    ranks: int
    ranks_per_node: int
    ranks_per_node_source: str
    """``--ranks-per-node``, ``GPUs under --root`` or ``default``."""
    strategy: str
    backward_s: float
    forward_s: float
    bucket_bytes: int

    @property
    def nodes(self) -> int:
        return self.ranks // self.ranks_per_node

    def to_json(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "dtype": self.dtype,
            "bytes_per_param": self.bytes_per_param,
            "grad_bytes": self.grad_bytes,
            "ranks": self.ranks,
            "ranks_per_node": self.ranks_per_node,
            "ranks_per_node_source": self.ranks_per_node_source,
            "nodes": self.nodes,
            "strategy": self.strategy,
            "compute_s": self.backward_s,
            "forward_s": self.forward_s,
            "bucket_bytes": self.bucket_bytes,
        }


def grad_size(
    params: str | None, dtype: str | None, grad_bytes: str | None
) -> tuple[int, float | None, str | None, int | None]:
    """S from ``--params x --dtype`` or ``--grad-bytes`` (exactly one way): (bytes, params, dtype, bytes/param)."""
    if params is not None and grad_bytes is not None:
        raise UsageError(
            "give either --params (with --dtype) or --grad-bytes, not both",
            hint="--grad-bytes 16GB is the same as --params 8e9 --dtype bf16",
        )
    if params is None and grad_bytes is None:
        raise UsageError(
            "the gradient size is missing",
            hint="give --params 8e9 --dtype bf16, or --grad-bytes 16GB",
        )
    if grad_bytes is not None:
        if dtype is not None:
            raise UsageError(
                "--dtype goes with --params, not with --grad-bytes",
                hint="--grad-bytes is already in bytes; drop --dtype",
            )
        size = parse_size(grad_bytes, what="--grad-bytes")
        if size < 1:
            raise UsageError(
                "--grad-bytes must be at least 1 byte",
                hint="e.g. --grad-bytes 16GB (decimal) or 15GiB (binary)",
            )
        return size, None, None, None
    count = parse_params(params)  # type: ignore[arg-type]  # not None: without it the checks above returned or raised
    if dtype is None:
        raise UsageError(
            "--params needs --dtype (the type of the gradients the collective moves)",
            hint="e.g. --dtype bf16; with torch.amp autocast the parameters, and so DDP's gradients, stay fp32",
        )
    name, nbytes = parse_dtype(dtype)
    size = int(round(count * nbytes))
    if size > 2**50:
        raise UsageError(
            f"--params {params} x {nbytes} B is {format_bytes(size)}: absurdly large",
            hint="gradient sizes above 1 PiB are refused",
        )
    return size, count, name, nbytes


def _ranks_per_node(
    ranks: int, ranks_per_node: int | None, gpus_under_root: int | None
) -> tuple[int, str]:
    """Ranks per node and where the number comes from; the job must span nodes evenly."""
    if ranks_per_node is not None:
        rpn, rpn_source = ranks_per_node, "--ranks-per-node"
    elif gpus_under_root:
        rpn, rpn_source = gpus_under_root, "GPUs under --root"
    else:
        rpn, rpn_source = 1, "default"
    if rpn < 1:
        raise UsageError(
            f"--ranks-per-node must be positive, not {rpn}",
            hint="ranks (GPUs) per node, e.g. --ranks-per-node 8",
        )
    if rpn > MAX_RANKS_PER_NODE:
        raise UsageError(
            f"--ranks-per-node {rpn} is absurdly large", hint=f"at most {MAX_RANKS_PER_NODE}"
        )
    if ranks % rpn:
        down, up = ranks - ranks % rpn, ranks - ranks % rpn + rpn
        raise UsageError(
            f"--ranks {ranks} is not a multiple of ranks per node {rpn} ({rpn_source})",
            hint=f"every node runs the same number of ranks: e.g. --ranks {down if down >= 2 * rpn else up}, or the --ranks-per-node the job uses",
        )
    if ranks == rpn:
        raise UsageError(
            f"--ranks {ranks} on {rpn} rank(s) per node is a single node: its collectives do not cross the scale-out fabric",
            hint="the verdict is about the network between nodes: give the multi-node job's --ranks",
        )
    return rpn, rpn_source


def workload(
    *,
    params: str | None,
    dtype: str | None,
    grad_bytes: str | None,
    ranks: int,
    ranks_per_node: int | None,
    gpus_under_root: int | None,
    strategy: str,
    compute_s: float,
    forward_s: float | None,
    bucket: str,
) -> Workload:
    size, count, dtype_name, per = grad_size(params, dtype, grad_bytes)
    if ranks < 1:
        raise UsageError(
            f"--ranks must be a positive number of ranks, not {ranks}",
            hint="the job's total ranks (GPUs), e.g. --ranks 512",
        )
    if ranks > MAX_RANKS:
        raise UsageError(f"--ranks {ranks} is absurdly large", hint=f"at most {MAX_RANKS} ranks")
    rpn, rpn_source = _ranks_per_node(ranks, ranks_per_node, gpus_under_root)
    strategy_name = parse_strategy(strategy)
    check_positive(
        "--compute-s",
        compute_s,
        maximum=MAX_SECONDS,
        unit="seconds (the backward pass per step)",
        example="0.5",
    )
    check_positive(
        "--forward-s",
        forward_s,
        maximum=MAX_SECONDS,
        unit="seconds (the forward pass per step)",
        allow_zero=True,
        example="0.25",
    )
    bucket_bytes = parse_size(bucket, what="--bucket")
    if bucket_bytes < 1:
        raise UsageError(
            "--bucket must be at least 1 byte", hint="DDP's default is 25MiB (bucket_cap_mb=25)"
        )
    return Workload(
        grad_bytes=size,
        params=count,
        dtype=dtype_name,
        bytes_per_param=per,
        ranks=ranks,
        ranks_per_node=rpn,
        ranks_per_node_source=rpn_source,
        strategy=strategy_name,
        backward_s=float(compute_s),
        forward_s=float(forward_s or 0.0),
        bucket_bytes=bucket_bytes,
    )


# --- measured bandwidth --------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """The bus bandwidth and per-collective latency the verdict uses, and where they came from."""

    busbw_gbs: float
    latency_s: float | None
    """Per-collective latency from the source; None when it gives none (the config default applies)."""
    source: str
    """``--busbw``, ``bench`` (an ibdiag bench JSON) or ``nccl-tests``."""
    path: str | None = None
    size_bytes: int | None = None
    """The message size whose busbw was taken."""
    how: str = ""
    """One sentence: how the busbw was derived."""
    latency_how: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    fabric_findings: tuple[Any, ...] = field(default_factory=tuple)
    """Findings of the source itself that make the fabric unhealthy (an nccl-tests log whose NCCL fell
    back to NET/Socket across nodes: ``import.socket_fallback``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "path": self.path,
            "size_bytes": self.size_bytes,
            "busbw_gbs": self.busbw_gbs,
            "how": self.how,
        }


def choose_source(
    busbw: float | None,
    bench: Path | None,
    nccl_tests: Path | None,
    other: tuple[str, object] | None = None,
) -> str:
    """The one measured source given (``other``: a source another package supplies, by its flag)."""
    flags = [("--busbw", busbw), ("--bench", bench), ("--nccl-tests", nccl_tests), other]
    given = [f[0] for f in flags if f is not None and f[1] is not None]
    if not given:
        raise UsageError(
            "no measured bandwidth: give one of --busbw, --bench, --nccl-tests or --inspector",
            hint="--busbw 50 (GB/s, nccl-tests' busbw), --bench run.json (ibdiag bench ... --save), --nccl-tests all_reduce.log, or --inspector DIR (NCCL Inspector's logs)",
        )
    if len(given) > 1:
        raise UsageError(
            f"give one measured bandwidth, not {' and '.join(given)}",
            hint="pick the one that ran at the job's scale",
        )
    return given[0]


def closest_size(sizes: list[int], target: int) -> int:
    # Closest on a log scale (message sizes double); on a tie the larger size.
    return min(sizes, key=lambda s: (abs(math.log(s / target)) if s > 0 else math.inf, -s))


def _check_file(path: Path, flag: str) -> None:
    if not path.exists():
        raise InputError(f"{flag} {path}: no such file", hint="check the path")
    if path.is_dir():
        raise InputError(
            f"{flag} {path}: is a directory, not a file", hint=f"give the file itself to {flag}"
        )


def from_bench_run(
    run: Any, *, bucket_bytes: int, ranks: int, rails_used: int, source: str, path: str
) -> Measured:
    """busbw (at the size closest to the bucket) and per-collective latency (smallest size) from a BenchRun."""
    rows = list(run.results)
    if not rows:
        raise InputError(
            f"{path}: the run has no results",
            hint="give a run that measured at least one message size",
        )
    if run.kind == "collective":
        return _from_collective(rows, run.meta, bucket_bytes, ranks, source, path)
    if run.kind == "p2p":
        return _from_p2p(rows, bucket_bytes, ranks, rails_used, source, path)
    raise InputError(
        f"{path}: unknown run kind {run.kind!r}",
        hint="give a file written by ibdiag bench ... --save",
    )


def _from_collective(
    rows: list[Any], meta: Any, bucket_bytes: int, ranks: int, source: str, path: str
) -> Measured:
    """A collective run: the mean busbw at the size closest to the bucket, the smallest size's time."""
    notes: list[str] = []
    coll = [r for r in rows if isinstance(r, CollectiveResult) and r.bytes > 0]
    if not coll:
        raise InputError(
            f"{path}: no collective rows with a size above 0 bytes",
            hint="measure sizes around the bucket size (e.g. -b 1M -e 256M)",
        )
    size = closest_size(sorted({r.bytes for r in coll}), bucket_bytes)
    at = [r for r in coll if r.bytes == size]
    busbw = sum(r.busbw_gbs for r in at) / len(at)
    if busbw <= 0 or not math.isfinite(busbw):
        raise InputError(
            f"{path}: busbw at {format_bytes(size)} is {busbw:g} GB/s",
            hint="the run measured nothing useful at that size; rerun it",
        )
    smallest = min(r.bytes for r in coll)
    small = [r for r in coll if r.bytes == smallest]
    lat_s = sum(r.time_us for r in small) / len(small) * 1e-6
    halves = " and ".join(sorted({placement(r.in_place) for r in at}))
    op = meta.op
    how = f"busbw {busbw:.4g} GB/s at {format_bytes(size)} (the size closest to the bucket, mean of {halves})"
    latency_how = f"the smallest size's time ({format_bytes(smallest)}: {lat_s * 1e6:.3g} µs)"
    if smallest > 64 * 1024:
        notes.append(
            f"the smallest size measured is {format_bytes(smallest)}: its time includes transfer, so the per-collective latency is overestimated"
        )
    if op and find_op(op) is not OPS["all_reduce"]:
        notes.append(
            f"the run measured {op}, not all_reduce; busbw is normalised per collective, so it is used as is"
        )
    world = meta.world_size
    per_node = meta.ranks_per_node
    if world is not None and per_node is not None and per_node >= world:
        notes.append(f"the run had {world} rank(s) on one node: its busbw did not cross the fabric")
    elif world is not None and world < ranks:
        notes.append(
            f"the run had {world} ranks, the job {ranks}: busbw at the job's scale may be lower (more hops, congestion)"
        )
    return Measured(busbw, lat_s, source, path, size, how, latency_how, tuple(notes))


def _from_p2p(
    rows: list[Any], bucket_bytes: int, ranks: int, rails_used: int, source: str, path: str
) -> Measured:
    """A point-to-point run: its bandwidth per rail as busbw, its latency over a tree's hops."""
    notes: list[str] = []
    p2p = [
        r
        for r in rows
        if isinstance(r, P2PResult) and r.bw_gbs is not None and r.bw_gbs > 0 and r.bytes > 0
    ]
    if not p2p:
        raise InputError(
            f"{path}: the p2p run has no bandwidth results",
            hint="give a bandwidth run (ibdiag bench p2p --mode bw --save FILE)",
        )
    size = closest_size(sorted({r.bytes for r in p2p}), bucket_bytes)
    bw = max(r.bw_gbs for r in p2p if r.bytes == size and r.bw_gbs is not None)
    busbw = bw * rails_used
    rails = f" x {rails_used} rails" if rails_used > 1 else ""
    how = (
        f"point-to-point {bw:.4g} GB/s at {format_bytes(size)}{rails}: a ring all-reduce sends to one neighbour per rail, "
        "so its busbw approaches the point-to-point bandwidth of the rail(s)"
    )
    lat_rows = [r for r in rows if isinstance(r, P2PResult) and r.lat_us is not None]
    lat_s = None
    latency_how = ""
    if lat_rows:
        smallest = min(lat_rows, key=lambda r: r.bytes)
        assert smallest.lat_us is not None  # lat_rows keeps only rows with a latency
        hops = 2 * max(1, math.ceil(math.log2(ranks)))
        lat_s = smallest.lat_us.p50_us * 1e-6 * hops
        latency_how = (
            f"{hops} x the one-way p2p latency ({smallest.lat_us.p50_us:.3g} µs at {format_bytes(smallest.bytes)}): "
            f"a tree reduce then broadcast over {ranks} ranks, NCCL's choice for small messages"
        )
    notes.append(
        "busbw derived from a point-to-point run; a collective run (ibdiag bench collective, nccl-tests) at the job's scale is more faithful"
    )
    return Measured(busbw, lat_s, source, path, size, how, latency_how, tuple(notes))


def load_bench(path: Path, **kw: Any) -> Measured:
    """``--bench FILE``: an ibdiag bench JSON (schema ibdiag.bench/1), p2p or collective."""
    _check_file(path, "--bench")
    run = load_bench_file(path)
    return from_bench_run(run, source="bench", path=str(path), **kw)


def load_nccl_tests(path: Path, **kw: Any) -> Measured:
    """``--nccl-tests FILE``: an nccl-tests log (all_reduce_perf ...) read by ``ibdiag.bench.importers.load``."""
    _check_file(path, "--nccl-tests")
    run = importers.load(path)
    if run.kind != "collective":
        raise InputError(
            f"--nccl-tests {path}: not a collective run ({run.kind!r})",
            hint="give an nccl-tests log such as all_reduce_perf's output",
        )
    measured = from_bench_run(run, source="nccl-tests", path=str(path), **kw)
    path_findings = tuple(socket_fallback(run))
    return replace(measured, fabric_findings=path_findings) if path_findings else measured


#: A measured source another package supplies (``verdict --inspector``: NCCL Inspector's busbw, read by
#: ``ibdiag.job``): called with the job's bucket size (bytes) and ranks, once the workload is known.
MeasuredSource = Callable[[int, int], Measured]


def from_flag(busbw: float) -> Measured:
    check_positive("--busbw", busbw, maximum=MAX_GBS, unit="GB/s", example="50")
    return Measured(float(busbw), None, "--busbw")
