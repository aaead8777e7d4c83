"""What a collective run was, beside its rows: the ``kind: collective`` fields of ``ibdiag.bench/1``.

A collective run's *meta*: its JSON description (not its *spec*, what the user asked, nor its *plan* or
*measurement*: :mod:`ibdiag.bench.collective`).

:class:`CollectiveMeta` holds what every collective run has (op, backend, ranks, hosts, average busbw)
and, depending on where the numbers come from, either :class:`CollectiveSetup` (measured by ``ibdiag
bench collective``: launcher, settings, per-rank timings, spread, stragglers) or :class:`NcclTestsLog`
(read from an nccl-tests log: its header's ranks and parameters, its footer). The JSON is flat (every
field at the top level of the document); ``from_json`` checks every field, because a saved file may
come from another node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ibdiag.bench.results.jsonfields import put
from ibdiag.jsonread import Fields, Scalar

#: Most ranks a run may have (a file claiming more is not a real run).
MAX_RANKS = 1 << 24
MAX_BYTES = 1 << 60
MAX_SECONDS = 1e7


@dataclass(frozen=True)
class MinMedMax:
    """min / median / max of one quantity over ranks (µs)."""

    min: float
    median: float
    max: float

    def to_json(self) -> dict[str, float]:
        return {"min": self.min, "median": self.median, "max": self.max}

    @classmethod
    def read(cls, f: Fields | None) -> MinMedMax:
        if f is None:
            raise ValueError("a min/median/max object is missing")
        lo, med, hi = (f.number(k, 0.0, required=True) for k in ("min", "median", "max"))
        return cls(lo, med, hi)


@dataclass(frozen=True)
class Spread:
    """One row's spread over ranks: loop time, in-collective time, hosts' medians, and the latest rank."""

    bytes: int
    in_place: bool
    time_us: MinMedMax
    coll_us: MinMedMax
    host_coll_us: MinMedMax
    latest_rank: int | None
    """The rank the others waited for most in this row."""
    latest_share: float | None
    """How long they waited for it, as a share of the row's time."""

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "in_place": self.in_place,
            "time_us": self.time_us.to_json(),
            "coll_us": self.coll_us.to_json(),
            "host_coll_us": self.host_coll_us.to_json(),
            "latest_rank": self.latest_rank,
            "latest_share": self.latest_share,
        }

    @classmethod
    def read(cls, f: Fields) -> Spread:
        return cls(
            bytes=f.integer("bytes", 0, MAX_BYTES, required=True),
            in_place=bool(f.flag("in_place")),
            time_us=MinMedMax.read(f.object("time_us")),
            coll_us=MinMedMax.read(f.object("coll_us")),
            host_coll_us=MinMedMax.read(f.object("host_coll_us")),
            latest_rank=f.integer("latest_rank", 0, MAX_RANKS),
            latest_share=f.number("latest_share"),
        )


@dataclass(frozen=True)
class RankTiming:
    """One rank: where it ran, its setup time, and per row its loop time, in-collective time and late share."""

    rank: int
    host: str
    local_rank: int | None
    pid: int | None
    device: str | None
    """``cpu`` or ``cuda:3 NVIDIA H100 80GB HBM3``."""
    setup_s: float | None
    time_us: tuple[float, ...] = ()
    coll_us: tuple[float, ...] = ()
    late_share: tuple[float, ...] = ()
    """Per row: how long the others waited for this rank, as a share of the row's time."""
    interface: str | None = None
    """The interface gloo's connections used on this rank and where that came from (``eth0 (GLOO_SOCKET_IFNAME)``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "local_rank": self.local_rank,
            "pid": self.pid,
            "device": self.device,
            "setup_s": self.setup_s,
            "time_us": list(self.time_us),
            "coll_us": list(self.coll_us),
            "late_share": list(self.late_share),
            "interface": self.interface,
        }

    @classmethod
    def read(cls, f: Fields) -> RankTiming:
        return cls(
            rank=f.integer("rank", 0, MAX_RANKS, required=True),
            host=f.text("host") or "?",
            local_rank=f.integer("local_rank", 0, MAX_RANKS),
            pid=f.integer("pid", 0, 2**31),
            device=f.text("device"),
            setup_s=f.number("setup_s", 0.0, MAX_SECONDS),
            time_us=f.numbers("time_us", 0.0),
            coll_us=f.numbers("coll_us", 0.0),
            late_share=f.numbers("late_share"),
            interface=f.text("interface"),
        )


@dataclass(frozen=True)
class Straggler:
    kind: str
    """``rank`` or ``host``."""
    host: str
    ranks: tuple[int, ...]
    """The rank (kind rank) or the host's ranks (kind host)."""
    share: float
    """The late share it reached in the required fraction of rows (the k-th largest, k = rows needed):
    the others waited at least this share of a collective in that many rows."""
    worst_share: float
    rows_late: int
    rows_judged: int

    @property
    def subject(self) -> str:
        if self.kind == "rank":
            return f"rank {self.ranks[0]} ({self.host})"
        return f"host {self.host}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "host": self.host,
            "ranks": list(self.ranks),
            "share": self.share,
            "worst_share": self.worst_share,
            "rows_late": self.rows_late,
            "rows_judged": self.rows_judged,
        }

    @classmethod
    def read(cls, f: Fields) -> Straggler:
        return cls(
            kind=f.text("kind", choices=("rank", "host"), required=True),
            host=f.text("host") or "?",
            ranks=f.integers("ranks", 0, MAX_RANKS),
            share=f.number("share", required=True),
            worst_share=f.number("worst_share", required=True),
            rows_late=f.integer("rows_late", required=True),
            rows_judged=f.integer("rows_judged", required=True),
        )


@dataclass(frozen=True)
class CollectiveSetup:
    """How ``ibdiag bench collective`` ran: launcher, loop, settings, setup times, and every rank's timings."""

    launcher: str | None = None
    iters: int | None = None
    warmup: int | None = None
    validation: bool | None = None
    timing: str | None = None
    """How time was taken, in words."""
    timeout_s: float | None = None
    torch_version: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    """Rank 0's ``NCCL_*``, ``TORCH_NCCL_*``, ``GLOO_*``, ``CUDA_VISIBLE_DEVICES`` and ``nccl_version``:
    a result is only comparable with its settings."""
    setup_s: float | None = None
    """The slowest rank's setup (rendezvous and first collective)."""
    setup_s_min: float | None = None
    setup_slowest_rank: int | None = None
    skipped_sizes: tuple[int, ...] = ()
    """Requested sizes that hold no element per rank."""
    spread: tuple[Spread, ...] = ()
    stragglers: tuple[Straggler, ...] = ()
    per_rank: tuple[RankTiming, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "launcher": self.launcher,
            "iters": self.iters,
            "warmup": self.warmup,
            "validation": self.validation,
            "timing": self.timing,
            "timeout_s": self.timeout_s,
            "torch_version": self.torch_version,
            "settings": dict(self.settings),
            "setup_s": self.setup_s,
            "setup_s_min": self.setup_s_min,
            "setup_slowest_rank": self.setup_slowest_rank,
            "skipped_sizes": list(self.skipped_sizes),
            "spread": [s.to_json() for s in self.spread],
            "stragglers": [s.to_json() for s in self.stragglers],
            "per_rank": [r.to_json() for r in self.per_rank],
        }

    @classmethod
    def read(cls, f: Fields) -> CollectiveSetup:
        settings = f.scalars("settings")
        return cls(
            launcher=f.text("launcher"),
            iters=f.integer("iters", 0),
            warmup=f.integer("warmup", 0),
            validation=f.flag("validation"),
            timing=f.text("timing"),
            timeout_s=f.number("timeout_s", 0.0, MAX_SECONDS),
            torch_version=f.text("torch_version"),
            settings={k: str(v) for k, v in settings.items()},
            setup_s=f.number("setup_s", 0.0, MAX_SECONDS),
            setup_s_min=f.number("setup_s_min", 0.0, MAX_SECONDS),
            setup_slowest_rank=f.integer("setup_slowest_rank", 0, MAX_RANKS),
            skipped_sizes=f.integers("skipped_sizes", 0, MAX_BYTES),
            spread=f.objects("spread", Spread.read),
            stragglers=f.objects("stragglers", Straggler.read),
            per_rank=f.objects("per_rank", RankTiming.read, MAX_RANKS),
        )


@dataclass(frozen=True)
class NcclRank:
    """One ``#  Rank  3 Group  0 Pid 1234 on node01 device  3 [0x1a] NVIDIA H100`` line of an nccl-tests header."""

    rank: int | None
    group: int | None
    pid: int | None
    host: str | None
    device: int | None
    bus_id: str | None
    gpu: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "group": self.group,
            "pid": self.pid,
            "host": self.host,
            "device": self.device,
            "bus_id": self.bus_id,
            "gpu": self.gpu,
        }

    @classmethod
    def read(cls, f: Fields) -> NcclRank:
        return cls(
            rank=f.integer("rank", 0, MAX_RANKS),
            group=f.integer("group", 0, MAX_RANKS),
            pid=f.integer("pid", 0, 2**31),
            host=f.text("host"),
            device=f.integer("device", 0, 1 << 16),
            bus_id=f.text("bus_id"),
            gpu=f.text("gpu"),
        )


@dataclass(frozen=True)
class CycleStats:
    """One size and placement over the cycles of an nccl-tests ``-N`` run: busbw and time spread."""

    bytes: int
    in_place: bool
    cycles: int
    busbw_gbs_min: float
    busbw_gbs_mean: float
    busbw_gbs_max: float
    time_us_min: float
    time_us_max: float

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "in_place": self.in_place,
            "cycles": self.cycles,
            "busbw_gbs_min": self.busbw_gbs_min,
            "busbw_gbs_mean": self.busbw_gbs_mean,
            "busbw_gbs_max": self.busbw_gbs_max,
            "time_us_min": self.time_us_min,
            "time_us_max": self.time_us_max,
        }

    @classmethod
    def read(cls, f: Fields) -> CycleStats:
        n = {
            k: f.number(k, 0.0, required=True)
            for k in (
                "busbw_gbs_min",
                "busbw_gbs_mean",
                "busbw_gbs_max",
                "time_us_min",
                "time_us_max",
            )
        }
        return cls(
            bytes=f.integer("bytes", 0, MAX_BYTES, required=True),
            in_place=bool(f.flag("in_place")),
            cycles=f.integer("cycles", 1, required=True),
            **n,
        )


@dataclass(frozen=True)
class NcclTestsLog:
    """What an nccl-tests log says about its run beyond the rows: header ranks and parameters, footer."""

    op_source: str | None = None
    """How the op was known: ``header``, ``option``, ``file name``, ``inferred from the table``, or None."""
    op_candidates: tuple[str, ...] = ()
    """The ops the table fits when it does not say (all_gather and alltoall print the same)."""
    gpus: tuple[str, ...] = ()
    ranks: tuple[NcclRank, ...] = ()
    params: Mapping[str, Scalar] = field(default_factory=dict)
    """The ``# nThread ... iters: 20 ...`` line (or ``-J``'s config) as read."""
    avg_busbw_gbs_reported: float | None = None
    """The footer's ``Avg bus bandwidth``."""
    out_of_bounds: int | None = None
    """The footer's ``Out of bounds values`` count."""
    complete: bool = False
    """The footer was seen: the run was not cut short."""
    header: str | None = None
    """None for a whole header; else what the paste lacked: ``cut: from the units line`` (it starts at
    ``#  (B) (elements)``) or ``cut: from the rows`` (the columns were told from the rows' shape)."""
    cycles: int | None = None
    """``-N``: how many times the table was printed; the rows are the first cycle's."""
    cycle_stats: tuple[CycleStats, ...] = ()
    """Per size and placement over every cycle (``-N`` > 1)."""
    avg_busbw_gbs_all_cycles: float | None = None
    """The mean busbw of every row of every cycle: what the footer's average is over."""
    per_iter_timing: bool | None = None
    """``-I 1``: rows carry the per-iteration min/max/p99/cv (``iter_us``)."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"op_source": self.op_source}
        put(doc, "header", self.header)
        put(doc, "cycles", self.cycles)
        put(doc, "cycle_stats", [c.to_json() for c in self.cycle_stats])
        put(doc, "avg_busbw_gbs_all_cycles", self.avg_busbw_gbs_all_cycles)
        put(doc, "per_iter_timing", self.per_iter_timing)
        put(doc, "op_candidates", self.op_candidates)
        doc.update(
            gpus=list(self.gpus),
            ranks=[r.to_json() for r in self.ranks],
            params=dict(self.params),
            avg_busbw_gbs_reported=self.avg_busbw_gbs_reported,
            out_of_bounds=self.out_of_bounds,
            complete=self.complete,
        )
        return doc

    @classmethod
    def read(cls, f: Fields) -> NcclTestsLog:
        return cls(
            op_source=f.text("op_source"),
            op_candidates=f.texts("op_candidates", 16),
            gpus=f.texts("gpus"),
            ranks=f.objects("ranks", NcclRank.read, MAX_RANKS),
            params=f.scalars("params"),
            avg_busbw_gbs_reported=f.number("avg_busbw_gbs_reported", 0.0),
            out_of_bounds=f.integer("out_of_bounds", 0),
            complete=bool(f.flag("complete")),
            header=f.text("header"),
            cycles=f.integer("cycles", 1),
            cycle_stats=f.objects("cycle_stats", CycleStats.read),
            avg_busbw_gbs_all_cycles=f.number("avg_busbw_gbs_all_cycles", 0.0),
            per_iter_timing=f.flag("per_iter_timing"),
        )


@dataclass(frozen=True)
class CollectiveMeta:
    """The ``kind: collective`` fields: the op and its ranks, and how it was measured or where it was read."""

    op: str | None
    """Canonical op name (``all_reduce``); None when an imported log does not say."""
    backend: str | None = None
    """``nccl`` or ``gloo``."""
    dtype: str | None = None
    """The element type in the source's own name: torch's (``float32``) measured, nccl-tests' (``float``) imported."""
    redop: str | None = None
    world_size: int | None = None
    ranks_per_node: int | None = None
    nodes: int | None = None
    hosts: tuple[str, ...] = ()
    blocking: bool | None = None
    avg_busbw_gbs: float | None = None
    """nccl-tests' "Avg bus bandwidth": the unweighted mean busbw over every row (computed from the rows)."""
    measured: CollectiveSetup | None = None
    """How ``ibdiag bench collective`` ran it (None for an imported log)."""
    nccl_tests: NcclTestsLog | None = None
    """What the nccl-tests log said (None for a measured run)."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "op": self.op,
            "backend": self.backend,
            "dtype": self.dtype,
            "redop": self.redop,
            "world_size": self.world_size,
            "ranks_per_node": self.ranks_per_node,
            "nodes": self.nodes,
            "hosts": list(self.hosts),
            "blocking": self.blocking,
            "avg_busbw_gbs": self.avg_busbw_gbs,
        }
        if self.nccl_tests is not None:
            doc.update(self.nccl_tests.to_json())
        if self.measured is not None:
            doc.update(self.measured.to_json())
        return doc

    @classmethod
    def read(cls, f: Fields, *, imported: bool) -> CollectiveMeta:
        return cls(
            op=f.text("op"),
            backend=f.text("backend"),
            dtype=f.text("dtype"),
            redop=f.text("redop"),
            world_size=f.integer("world_size", 1, MAX_RANKS),
            ranks_per_node=f.integer("ranks_per_node", 1, MAX_RANKS),
            nodes=f.integer("nodes", 1, MAX_RANKS),
            hosts=f.texts("hosts", MAX_RANKS),
            blocking=f.flag("blocking"),
            avg_busbw_gbs=f.number("avg_busbw_gbs", 0.0),
            measured=CollectiveSetup.read(f) if f.has("launcher") and not imported else None,
            nccl_tests=NcclTestsLog.read(f) if imported and f.has("complete") else None,
        )
