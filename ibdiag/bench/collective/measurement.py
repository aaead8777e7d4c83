"""What a collective run measured, before any averaging: per-rank numbers for every row.

The run's *measurement*, as opposed to its *spec* (:mod:`.spec`), its *plan* (:mod:`.plan`) and its
*meta* (the JSON description, :mod:`ibdiag.bench.results.collective_meta`).

Filled by :mod:`ibdiag.bench.collective.runner` on rank 0 (after gathering every rank's timings) and
turned into the shared :class:`~ibdiag.bench.results.model.BenchRun` plus findings by
:mod:`ibdiag.bench.collective.analysis`. Frozen, no I/O, times in microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ibdiag.bench.collective.plan import SizePlan


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: str
    """Short host name (``socket.gethostname()``)."""
    local_rank: int
    pid: int
    device: str
    """``cpu`` or ``cuda:3 NVIDIA H100 80GB HBM3``."""
    setup_s: float
    """This rank's process-group setup: store connection, ``init_process_group`` and the first collective."""
    interface: str = ""
    """The network interface gloo's connections use on this rank, and where that came from (``netif``)."""


@dataclass(frozen=True)
class MeasuredRow:
    """One size and placement, every rank's view."""

    plan: SizePlan
    in_place: bool
    time_us: tuple[float, ...]
    """Per rank (index = rank): time per iteration of the timed loop, as nccl-tests measures it
    (barrier, launch every iteration, wait for the last; divided by the iterations)."""
    coll_us: tuple[float, ...]
    """Per rank: mean time from entering one collective to its completion on that rank (host timer
    around the call for gloo, CUDA events around it for NCCL). A rank that arrives late waits less,
    so its value is lower than the others' by the time they waited for it."""
    wrong: int | None
    """Wrong elements summed over ranks (nccl-tests' #wrong); None when validation was off."""
    coll_iter_us: tuple[tuple[float, ...], ...] | None = None
    """Per rank, per timed call: the in-collective time of that call (µs). Calls are aligned across
    ranks (call i is the same collective everywhere), so lateness can be judged call by call and one
    descheduled call does not make a rank late. Used for the analysis, not written to JSON."""

    def __post_init__(self) -> None:
        if len(self.time_us) != len(self.coll_us):
            raise ValueError("time_us and coll_us must have one value per rank")
        if self.coll_iter_us is not None and len(self.coll_iter_us) != len(self.coll_us):
            raise ValueError("coll_iter_us must have one sequence per rank")


@dataclass(frozen=True)
class Measurement:
    op: str
    backend: str
    """``nccl`` or ``gloo`` (after ``auto`` was resolved)."""
    dtype: str
    """torch's name: float32, bfloat16, float16."""
    world_size: int
    iters: int
    warmup: int
    blocking: bool
    check: bool
    launcher: str
    timing: str
    """How time was taken, in words (goes into the JSON for whoever reads it later)."""
    ranks: tuple[RankInfo, ...]
    rows: tuple[MeasuredRow, ...]
    skipped_sizes: tuple[int, ...] = ()
    """Requested sizes that hold no element per rank (nccl-tests would print them as 0 bytes)."""
    torch_version: str | None = None
    timeout_s: float | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    """Rank 0's environment variables that change what a collective does (``NCCL_*``, ``TORCH_NCCL_*``,
    ``GLOO_*``, ``CUDA_VISIBLE_DEVICES``) and the NCCL version: a result is only comparable with its settings."""

    @property
    def hosts(self) -> tuple[str, ...]:
        """Distinct hosts in rank order of first appearance."""
        seen: dict[str, None] = {}
        for r in self.ranks:
            seen.setdefault(r.host, None)
        return tuple(seen)

    @property
    def ranks_per_node(self) -> int:
        counts: dict[str, int] = {}
        for r in self.ranks:
            counts[r.host] = counts.get(r.host, 0) + 1
        return max(counts.values()) if counts else 0
