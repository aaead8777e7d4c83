"""``ibdiag counters`` as a library: is any RDMA port erroring, flapping or backpressured — now, over an
interval, or across a job?

:func:`run` reads the node's port counters once (a snapshot), on a schedule (``--interval``, a series
with ``--count``) or against a reading saved before (``--since``), judges them and returns the report
with what its views draw (:mod:`ibdiag.counters.views.outputs`). A series tells its progress through
``on_progress`` (a streamed CSV writes its rows from it). :func:`watching` is the source of the live
view (``--watch``): frame after frame, for the caller to draw. Nothing here prints.

Packages above this one add to a reading through hooks (:data:`CountersExtra`): the history and the
kernel log (:mod:`ibdiag.history.attach`), the far ends of the cables (:mod:`ibdiag.fabric.attach`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.config import Config
from ibdiag.counters.baseline import check_comparable, load_baseline
from ibdiag.counters.checks import Judging
from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import Accumulator, build_span
from ibdiag.counters.model import Sample, Span
from ibdiag.counters.read import (
    PortLayout,
    discover_layout,
    parse_device_filter,
    read_sample,
    selected,
)
from ibdiag.counters.result import CountersResult, SeriesProgress, Watch, WatchFrame
from ibdiag.counters.sampler import Sampler, run_series
from ibdiag.counters.views import json_data
from ibdiag.errors import CannotRunError, UsageError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.node.root import host_of, opened_root
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.output.outputs import Addition, with_additions

#: Shortest --interval: mlx5 caches hw_counters for ``lifespan`` ms (10-12 ms by default), and
#: every counters/ read is a MAD to the adapter's firmware on a live node.
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 86400.0
MAX_COUNT = 1_000_000
#: ``--watch`` without ``--interval``: a redraw a second.
WATCH_INTERVAL_S = 1.0


@dataclass(frozen=True)
class CountersReading:
    """One reading of the node's counters, while its tree is open."""

    sample: Sample
    sysfs: SysfsRoot
    host: str
    counters_cfg: CountersConfig


#: What another package adds to a counters reading (history, kernel log, far ends).
CountersExtra = Callable[[CountersReading], Addition]


@dataclass(frozen=True)
class CountersRequest:
    """What ``ibdiag counters`` is asked: the tree, the ports, the mode, the settings, the hooks."""

    root: Path = Path("/")
    config: Config = field(default_factory=lambda: Config(None, {}))
    devices: Sequence[str] = ()
    """``--device``: ``mlx5_3:1``, ``mlx5_3`` (all its ports), shell patterns; commas separate several."""
    interval_s: float | None = None
    """``--interval``: read twice (or ``count`` + 1 times), this far apart, and judge the deltas."""
    count: int | None = None
    """``--count``: samples after the first (a series), or the frames of ``--watch``."""
    watch: bool = False
    """``--watch``: a live view, read through :func:`watching` (``run`` refuses it)."""
    since: Path | None = None
    """``--since BEFORE.json``: judge what the counters did since that saved reading of this node."""
    expect_rate_gbps: float | None = None
    """``--expect-rate``: overrides ``[ports] expected_rate_gbps``."""
    keep_steps: bool = True
    """A series keeps every step (the JSON's ``samples``, the CSV's rows); False: constant memory
    however long the series (the CSV streamed from ``on_progress``, a table of totals)."""
    extras: Sequence[CountersExtra] = ()
    """Hooks applied to the reading, in order: their data, findings, metrics and tables are added."""
    far_end: CountersExtra | None = None
    """``--far-end``: the hook that reads the far ends of the cables, once, with a snapshot."""
    on_progress: Callable[[SeriesProgress], None] | None = None
    """A series: called after the baseline read, then after each sample."""
    on_warning: Callable[[str], None] | None = None
    """What a person should know that the report has no place for (a path refused under ``--root``)."""


@dataclass(frozen=True)
class _Node:
    """The tree opened and its ports laid out: what every mode reads from."""

    sysfs: SysfsRoot
    layout: tuple[PortLayout, ...]
    judging: Judging
    host: str
    patterns: list[str]


def check(req: CountersRequest) -> None:
    """Refuse values and combinations that mean nothing (exit 2, with a hint); :func:`run` and
    :func:`watching` check first."""
    interval, count = req.interval_s, req.count
    if interval is not None and not (MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S):
        raise UsageError(
            f"--interval {interval:g} is out of range",
            hint=f"give seconds between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g}: below {MIN_INTERVAL_S:g} s the driver's counter cache (hw_counters/lifespan) dominates",
        )
    if count is not None:
        if count < 1 or count > MAX_COUNT:
            raise UsageError(
                f"--count {count} is out of range", hint=f"give 1 to {MAX_COUNT} samples"
            )
        if interval is None and not req.watch:
            raise UsageError(
                "--count needs --interval (or --watch)",
                hint="e.g. ibdiag counters --interval 1 --count 60 -o csv",
            )
    if req.since is not None and (interval is not None or req.watch or count is not None):
        raise UsageError(
            "--since cannot be combined with --interval, --count or --watch",
            hint="--since compares a saved reading with one reading now",
        )
    if req.far_end is not None and (req.watch or req.since is not None or interval is not None):
        raise UsageError(
            "--far-end reads the far ends once, with a snapshot",
            hint="for rates of switch ports, fabric-wide: ibdiag fabric --interval 10",
        )


def run(req: CountersRequest) -> CountersResult:
    """Read and judge the node's port counters: a snapshot, an interval or a series, or since a
    saved reading. ``--watch`` is :func:`watching`'s."""
    check(req)
    if req.watch:
        raise UsageError(
            "--watch is a live view, not one result",
            hint="ibdiag.counters.command.watching(request) yields its frames",
        )
    with _opened(req) as node:
        if req.since is not None:
            return _since(req, node, req.since)
        if req.interval_s is not None:
            return _series(req, node, req.interval_s)
        return _snapshot(req, node)


@contextmanager
def watching(req: CountersRequest) -> Iterator[Watch]:
    """``--watch``: the tree opened and the first sample taken; the :class:`Watch` it yields reads the
    next sample every interval while it is iterated (inside this block: the tree closes after it)."""
    check(req)
    with _opened(req) as node:
        interval = req.interval_s or WATCH_INTERVAL_S
        sampler = Sampler(
            node.sysfs, node.layout, interval_s=interval, data_bits=node.judging.cfg.data_bits
        )
        acc = Accumulator(sampler.first(), mode="interval", keep_steps=False)
        yield Watch(node.host, interval, _frames(node, sampler, acc, req.count))


def _frames(
    node: _Node, sampler: Sampler, acc: Accumulator, count: int | None
) -> Iterator[WatchFrame]:
    i = 0
    while count is None or i < count:
        i += 1
        step = acc.add(sampler.next())
        span = acc.span()
        report = Report("counters", {}, tuple(node.judging.span(span)))
        yield WatchFrame(i, node.host, sampler.interval_s, step, span, report, node.judging)


@contextmanager
def _opened(req: CountersRequest) -> Iterator[_Node]:
    """The tree (``--root``) opened, its ports laid out (``--device``), refused paths told."""
    judging = Judging.from_config(req.config).with_expected_rate(req.expect_rate_gbps)
    patterns = parse_device_filter(req.devices)
    with opened_root(req.root) as directory:
        sysfs = SysfsRoot(directory, skip_adapters=judging.ports.skip).check()
        host = host_of(directory)
        layout = discover_layout(sysfs, patterns)
        _tell_refused(sysfs, req.on_warning)
        if not any(item.port is not None for item in layout):
            raise CannotRunError(
                "no RDMA port to read counters from (/sys/class/infiniband is empty or absent)",
                hint="this node has no RDMA adapter, or its driver is not loaded: check `lsmod | grep -E 'mlx5_ib|ib_core'` and `ibv_devices`",
            )
        if patterns:
            judging = judging.with_node_peers(sysfs)
        yield _Node(sysfs, layout, judging, host, patterns)


def _tell_refused(sysfs: SysfsRoot, on_warning: Callable[[str], None] | None) -> None:
    """Each path under ``--root`` that was refused (outside the root, not a regular file), once: the
    counters' findings list ports, not trees."""
    if on_warning is None:
        return
    seen: set[str] = set()
    for p in sysfs.problems:
        if p.kind == "refused" and p.path not in seen:
            seen.add(p.path)
            on_warning(f"/sys/{p.path}: {p.detail}")


def _snapshot(req: CountersRequest, node: _Node) -> CountersResult:
    cfg = node.judging.cfg
    sample = read_sample(node.sysfs, node.layout, data_bits=cfg.data_bits)
    data = json_data.snapshot_data(sample, cfg)
    report = Report("counters", data, tuple(node.judging.snapshot(sample)))
    hooks = [*req.extras, *([] if req.far_end is None else [req.far_end])]
    return _result(node, report, sample, hooks)


def _series(req: CountersRequest, node: _Node, interval: float) -> CountersResult:
    count = req.count or 1
    sampler = Sampler(
        node.sysfs, node.layout, interval_s=interval, data_bits=node.judging.cfg.data_bits
    )
    first = sampler.first()
    progress = SeriesProgress(sum(1 for p in first.ports if p.port is not None), count, interval)
    tell = req.on_progress
    if tell is not None:
        tell(progress)
    span = run_series(
        sampler,
        count,
        mode="series" if count > 1 else "interval",
        keep_steps=req.keep_steps,
        on_step=None
        if tell is None
        else (lambda step: tell(dataclasses.replace(progress, step=step))),
        first=first,
    )
    return _span_result(req, node, span, interval_s=interval)


def _since(req: CountersRequest, node: _Node, since: Path) -> CountersResult:
    before, info = load_baseline(since, host=node.host)
    now = read_sample(node.sysfs, node.layout, data_bits=node.judging.cfg.data_bits)
    if node.patterns:
        # --device narrows both sides: baseline ports outside it are not "gone".
        ports = tuple(p for p in before.ports if selected(p.adapter, p.port, node.patterns))
        before = dataclasses.replace(before, ports=ports)
    check_comparable(since, before, now)
    span = build_span([before, now], mode="since")
    return _span_result(req, node, span, baseline=info)


def _span_result(
    req: CountersRequest,
    node: _Node,
    span: Span,
    *,
    interval_s: float | None = None,
    baseline: dict[str, object] | None = None,
) -> CountersResult:
    data = json_data.span_data(span, node.judging.cfg, baseline=baseline)
    report = Report("counters", data, tuple(node.judging.span(span)))
    return _result(
        node, report, span.last, req.extras, span=span, interval_s=interval_s, baseline=baseline
    )


def _result(
    node: _Node,
    report: Report,
    sample: Sample,
    hooks: Sequence[CountersExtra],
    *,
    span: Span | None = None,
    interval_s: float | None = None,
    baseline: Mapping[str, object] | None = None,
) -> CountersResult:
    """The hooks applied to the reading while the tree is open (the history's record reads AER
    counts from it), their additions put in the report."""
    reading = CountersReading(sample, node.sysfs, node.host, node.judging.cfg)
    additions = tuple(hook(reading) for hook in hooks)
    return CountersResult(
        with_additions(report, additions),
        RunMeta.now(node.host),
        node.judging,
        sample,
        span,
        interval_s,
        baseline,
        additions,
    )
