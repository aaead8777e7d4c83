"""What ``ibdiag counters`` gives back (:mod:`ibdiag.counters.command` makes them, the views draw them):
the result of a reading or a span, the progress of a series, the frames of a live view.

Kept apart from the command: the views sit beside the sampler and the baseline in the package's layers
(pyproject.toml) and may not import what imports those; the command does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ibdiag.counters.checks import Judging
from ibdiag.counters.model import Sample, SeriesStep, Span
from ibdiag.findings.model import Report, RunMeta
from ibdiag.output.outputs import Addition


@dataclass(frozen=True)
class CountersResult:
    """One run of ``ibdiag counters``: the report and what its views draw."""

    report: Report
    meta: RunMeta
    judging: Judging
    """The settings the ports were judged with (``[counters]``, ``[ports]``, ``--expect-rate``)."""
    sample: Sample
    """The reading (of a span: its last one)."""
    span: Span | None = None
    """``--interval`` (a series with ``--count``) or ``--since``: the deltas; None for a snapshot."""
    interval_s: float | None = None
    """``--interval`` as asked (the span's own ``interval_s`` is the time measured)."""
    baseline: Mapping[str, object] | None = None
    """``--since``: the baseline file, its host and when it was taken."""
    additions: tuple[Addition, ...] = ()
    """What the hooks added (history, kernel log, far ends), in the order applied."""


@dataclass(frozen=True)
class SeriesProgress:
    """Where a series stands (``--interval``, ``--count``): after the baseline read (``step`` None), then
    after each sample with the step it makes (a streamed CSV writes its rows from it)."""

    ports: int
    """RDMA ports read (device-level counters not counted)."""
    count: int
    """Samples asked after the baseline read."""
    interval_s: float
    step: SeriesStep | None = None


@dataclass(frozen=True)
class WatchFrame:
    """One redraw of ``--watch``: the latest step's rates, error increases since the start, the judgement."""

    index: int
    """1-based sample number."""
    host: str
    interval_s: float
    step: SeriesStep
    span: Span
    report: Report
    judging: Judging


@dataclass(frozen=True)
class Watch:
    """A live reading under way (the tree open, the first sample taken): ``frames`` takes the next
    sample every ``interval_s`` seconds, for ``count`` samples or until the caller stops iterating."""

    host: str
    interval_s: float
    frames: Iterator[WatchFrame]
