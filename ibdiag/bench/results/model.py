"""The results model shared by ``bench p2p``, ``bench collective`` and ``bench import`` (schema ``ibdiag.bench/1``).

A :class:`BenchRun` is what ``--save`` writes and what ``ibdiag verdict --bench`` reads back: its rows,
what was run (:class:`~ibdiag.bench.results.p2p_meta.P2PMeta` or
:class:`~ibdiag.bench.results.collective_meta.CollectiveMeta`) and where the numbers come from
(:class:`~ibdiag.bench.results.provenance.Provenance`). Its JSON is the envelope plus, flat::

    {"kind": "p2p" | "collective", ...meta (transport, mode, peer | op, backend, world_size ...),
     ...provenance (tool, source, nccl_version ...), "results": [ one object per P2PResult / CollectiveResult ]}

Units are in the field names: ``bytes``, ``bw_gbs`` (GB/s = 1e9 B/s), ``time_us``, ``lat_us``. A
result kind is one entry of :data:`KINDS` (its metadata class and its row class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ibdiag.bench.results.collective_meta import CollectiveMeta
from ibdiag.bench.results.p2p_meta import P2PMeta
from ibdiag.bench.results.provenance import Provenance
from ibdiag.errors import InputError
from ibdiag.jsonread import Fields
from ibdiag.output.jsonout import load_envelope

SCHEMA = "ibdiag.bench/1"

#: Largest message size a saved row may claim (bytes).
MAX_BYTES = 1 << 60


@dataclass(frozen=True)
class LatencyStats:
    """One-way latency percentiles in microseconds (perftest's t_min, typical, 99%, 99.9%, t_max columns)."""

    min_us: float
    p50_us: float
    p99_us: float
    p999_us: float
    max_us: float
    avg_us: float | None = None

    def to_json(self) -> dict[str, float | None]:
        doc: dict[str, float | None] = {
            "min": self.min_us,
            "p50": self.p50_us,
            "p99": self.p99_us,
            "p999": self.p999_us,
            "max": self.max_us,
        }
        if self.avg_us is not None:
            doc["avg"] = self.avg_us
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LatencyStats:
        return cls.read(Fields(doc, "lat_us"))

    @classmethod
    def read(cls, f: Fields) -> LatencyStats:
        need = {k: f.number(k, 0.0, required=True) for k in ("min", "p50", "p99", "p999", "max")}
        return cls(
            need["min"], need["p50"], need["p99"], need["p999"], need["max"], f.number("avg", 0.0)
        )


@dataclass(frozen=True)
class IterStats:
    """nccl-tests' per-iteration summary of one row half (``-I 1``: i_min, i_max, i_p99, i_cv%), µs and %."""

    min_us: float
    max_us: float
    p99_us: float
    cv_pct: float
    """Standard deviation over the mean of the iterations' times, percent."""

    def to_json(self) -> dict[str, float]:
        return {"min": self.min_us, "max": self.max_us, "p99": self.p99_us, "cv_pct": self.cv_pct}

    @classmethod
    def read(cls, f: Fields) -> IterStats:
        v = {k: f.number(k, 0.0, required=True) for k in ("min", "max", "p99", "cv_pct")}
        return cls(v["min"], v["max"], v["p99"], v["cv_pct"])


@dataclass(frozen=True)
class StreamFigure:
    """One TCP stream of a bandwidth phase (``--streams N``), as its receiver saw it."""

    bytes: int
    seconds: float

    @property
    def bw_gbs(self) -> float | None:
        """GB/s (1e9 B/s); None when no time passed."""
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "seconds": self.seconds, "bw_gbs": self.bw_gbs}

    @classmethod
    def read(cls, f: Fields) -> StreamFigure:
        return cls(
            f.integer("bytes", 0, MAX_BYTES, required=True),
            f.number("seconds", 0.0, 1e7, required=True),
        )


@dataclass(frozen=True)
class P2PResult:
    """Point-to-point result for one message size."""

    bytes: int
    iters: int
    bw_gbs: float | None = None
    """Average bandwidth, GB/s (1e9 B/s)."""
    bw_peak_gbs: float | None = None
    msg_rate_mpps: float | None = None
    """Messages per second / 1e6 (perftest's MsgRate[Mpps])."""
    lat_us: LatencyStats | None = None
    cpu_s_per_gb: Mapping[str, float | None] = field(default_factory=dict)
    """CPU seconds (user + system) per GB moved, by side: ``{"client": ..., "server": ...}``."""
    elapsed_s: float | None = None
    lat_iters: int | None = None
    """Ping-pong iterations behind ``lat_us``; ``iters`` counts the bandwidth messages when both were measured."""
    lat_avg_us: float | None = None
    """Mean latency (µs) when it is all that is known (perftest's duration mode, ``-D``, prints only t_avg)."""
    per_stream: tuple[StreamFigure, ...] = ()
    """TCP bandwidth with several streams: each stream's bytes and time as its receiver saw them."""
    stream_senders: str | None = None
    """With several TCP streams: ``processes`` (one sender process per stream on the client) or
    ``threads`` (one sender thread each: ``--bidir``, the iperf3 engine says ``threads`` for its one
    thread of 3.12)."""
    lat_busy_poll: Mapping[str, bool] | None = None
    """TCP latency by ibdiag's loops: ``{"client": ..., "server": ...}``, whether each side busy-polled
    through the measured round trips (False: it blocked in ``recv``)."""

    @property
    def bw_gbps(self) -> float | None:
        return None if self.bw_gbs is None else self.bw_gbs * 8.0

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "iters": self.iters,
            "bw_gbs": self.bw_gbs,
            "bw_gbps": self.bw_gbps,
            "bw_peak_gbs": self.bw_peak_gbs,
            "msg_rate_mpps": self.msg_rate_mpps,
            "lat_us": None if self.lat_us is None else self.lat_us.to_json(),
            "cpu_s_per_gb": dict(self.cpu_s_per_gb),
            "elapsed_s": self.elapsed_s,
            "lat_iters": self.lat_iters,
            **({"lat_avg_us": self.lat_avg_us} if self.lat_avg_us is not None else {}),
            **({"per_stream": [x.to_json() for x in self.per_stream]} if self.per_stream else {}),
            **({"stream_senders": self.stream_senders} if self.stream_senders else {}),
            **(
                {"lat_busy_poll": dict(self.lat_busy_poll)}
                if self.lat_busy_poll is not None
                else {}
            ),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> P2PResult:
        f = Fields(doc, "")
        lat = f.object("lat_us")
        cpu = f.object("cpu_s_per_gb")
        spin = f.object("lat_busy_poll")
        return cls(
            bytes=f.integer("bytes", 0, MAX_BYTES, required=True),
            iters=f.integer("iters", required=True),
            bw_gbs=f.number("bw_gbs", 0.0),
            bw_peak_gbs=f.number("bw_peak_gbs", 0.0),
            msg_rate_mpps=f.number("msg_rate_mpps", 0.0),
            lat_us=None if lat is None else LatencyStats.read(lat),
            cpu_s_per_gb={}
            if cpu is None
            else {side: cpu.number(side, 0.0) for side in cpu.doc if side in ("client", "server")},
            elapsed_s=f.number("elapsed_s", 0.0),
            lat_iters=f.integer("lat_iters"),
            lat_avg_us=f.number("lat_avg_us", 0.0),
            per_stream=f.objects("per_stream", StreamFigure.read, max_items=4096),
            stream_senders=f.text("stream_senders", choices=("processes", "threads")),
            lat_busy_poll=None
            if spin is None
            else {k: bool(spin.flag(k)) for k in ("client", "server") if spin.has(k)},
        )


@dataclass(frozen=True)
class CollectiveResult:
    """One row half of nccl-tests' table: one size, out-of-place or in-place."""

    bytes: int
    """Size as nccl-tests prints it (per-rank buffer for all_reduce; total for all_gather/reduce_scatter)."""
    count: int
    """Elements."""
    dtype: str
    redop: str | None
    root: int | None
    in_place: bool
    time_us: float
    """Average time per collective, averaged across ranks (µs)."""
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None
    """Wrong elements found by validation (nccl-tests' #wrong); None when not checked."""
    time_us_min: float | None = None
    """Fastest rank's time (µs), when per-rank timings were gathered."""
    time_us_max: float | None = None
    """Slowest rank's time (µs)."""
    max_error: float | None = None
    """Largest absolute error, which nccl-tests printed instead of #wrong before 2022 (``error`` column)."""
    iter_us: IterStats | None = None
    """nccl-tests ``-I 1``: the per-iteration times' min, max, p99 and cv of this row half."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "bytes": self.bytes,
            "count": self.count,
            "type": self.dtype,
            "redop": self.redop,
            "root": self.root,
            "in_place": self.in_place,
            "time_us": self.time_us,
            "algbw_gbs": self.algbw_gbs,
            "busbw_gbs": self.busbw_gbs,
            "wrong": self.wrong,
            "time_us_min": self.time_us_min,
            "time_us_max": self.time_us_max,
        }
        if self.max_error is not None:
            doc["max_error"] = self.max_error
        if self.iter_us is not None:
            doc["iter_us"] = self.iter_us.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> CollectiveResult:
        f = Fields(doc, "")
        return cls(
            bytes=f.integer("bytes", 0, MAX_BYTES, required=True),
            count=f.integer("count", required=True),
            dtype=f.text("type") or "",
            redop=f.text("redop"),
            root=f.integer("root", 0, 1 << 24),
            in_place=bool(f.flag("in_place")),
            time_us=f.number("time_us", 0.0, required=True),
            algbw_gbs=f.number("algbw_gbs", 0.0, required=True),
            busbw_gbs=f.number("busbw_gbs", 0.0, required=True),
            wrong=f.integer("wrong"),
            time_us_min=f.number("time_us_min", 0.0),
            time_us_max=f.number("time_us_max", 0.0),
            max_error=f.number("max_error", 0.0),
            iter_us=None if f.object("iter_us") is None else IterStats.read(f.object("iter_us")),  # type: ignore[arg-type]  # not None: checked first
        )


@dataclass(frozen=True)
class BenchRun:
    """A whole benchmark run: what was run, its rows, and where the numbers come from."""

    meta: P2PMeta | CollectiveMeta
    results: tuple[P2PResult, ...] | tuple[CollectiveResult, ...]
    provenance: Provenance = field(default_factory=Provenance)

    @property
    def kind(self) -> str:
        """``p2p`` or ``collective`` (the JSON's ``kind``)."""
        return next(k for k, (meta_cls, _) in KINDS.items() if isinstance(self.meta, meta_cls))

    @property
    def imported(self) -> bool:
        return self.provenance.imported is not None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            **self.provenance.to_json(),
            **self.meta.to_json(),
        }
        data["results"] = [r.to_json() for r in self.results]
        return data

    def collective_rows(self, *, in_place: bool | None = None) -> tuple[CollectiveResult, ...]:
        rows = tuple(r for r in self.results if isinstance(r, CollectiveResult))
        if in_place is None:
            return rows
        return tuple(r for r in rows if r.in_place is in_place)

    def p2p_rows(self) -> tuple[P2PResult, ...]:
        return tuple(r for r in self.results if isinstance(r, P2PResult))


#: The result kinds: ``kind`` -> (its metadata class, its row class). A new kind (issue 14's fleet
#: results) is one entry here, one ``read`` on its metadata class, and one view in ``ibdiag.bench.views``.
KINDS: dict[str, tuple[Any, Any]] = {
    "p2p": (P2PMeta, P2PResult),
    "collective": (CollectiveMeta, CollectiveResult),
}

_HINT = "give a file written by ibdiag bench ... --save"


def bench_run_from_json(doc: Mapping[str, Any], *, source: str = "bench JSON") -> BenchRun:
    """Rebuild a :class:`BenchRun` from its JSON document (envelope keys are ignored); InputError when
    any field has the wrong type or an impossible value (a saved file may come from another node)."""
    kind = doc.get("kind")
    rows = doc.get("results")
    if kind not in KINDS:
        raise InputError(
            f"{source}: kind is {kind!r}, expected {' or '.join(repr(k) for k in KINDS)}",
            hint=_HINT,
        )
    if not isinstance(rows, list):
        raise InputError(f"{source}: no results list", hint=_HINT)
    meta_cls, row_cls = KINDS[kind]
    parsed = []
    for i, row in enumerate(rows):
        try:
            parsed.append(row_cls.from_json(Fields(row, f"results[{i}]").doc))
        except ValueError as e:
            raise InputError(f"{source}: results[{i}] is malformed: {e}", hint=_HINT) from None
    try:
        f = Fields(doc, "")
        provenance = Provenance.read(f)
        meta = meta_cls.read(f, imported=provenance.imported is not None)
    except ValueError as e:
        raise InputError(f"{source}: {e}", hint=_HINT) from None
    return BenchRun(meta=meta, results=tuple(parsed), provenance=provenance)


def load_bench_file(path: str | Path) -> BenchRun:
    """Read a ``--save`` file (or ``bench import -o json`` output); InputError (exit 2) if it is not one."""
    doc = load_envelope(path, schema=SCHEMA)
    return bench_run_from_json(doc, source=str(path))
