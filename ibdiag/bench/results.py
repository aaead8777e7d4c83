"""The results model shared by ``bench p2p``, ``bench collective`` and ``bench import`` (schema ``ibdiag.bench/1``).

A :class:`BenchRun` is what ``--save`` writes and what ``ibdiag verdict --bench`` reads back. Its
JSON is the envelope plus::

    {"kind": "p2p" | "collective", ...meta (transport, mode, peer | op, backend, world_size ...),
     "results": [ one object per P2PResult / CollectiveResult ]}

Units are in the field names: ``bytes``, ``bw_gbs`` (GB/s = 1e9 B/s), ``time_us``, ``lat_us``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ibdiag.errors import InputError
from ibdiag.report.jsonout import load_envelope

SCHEMA = "ibdiag.bench/1"


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
        return cls(
            min_us=_num(doc, "min"),
            p50_us=_num(doc, "p50"),
            p99_us=_num(doc, "p99"),
            p999_us=_num(doc, "p999"),
            max_us=_num(doc, "max"),
            avg_us=_num(doc, "avg", required=False),
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
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> P2PResult:
        lat = doc.get("lat_us")
        cpu = doc.get("cpu_s_per_gb") or {}
        if not isinstance(cpu, Mapping):
            raise ValueError("cpu_s_per_gb is not an object")
        return cls(
            bytes=_int(doc, "bytes"),
            iters=_int(doc, "iters"),
            bw_gbs=_num(doc, "bw_gbs", required=False),
            bw_peak_gbs=_num(doc, "bw_peak_gbs", required=False),
            msg_rate_mpps=_num(doc, "msg_rate_mpps", required=False),
            lat_us=None if lat is None else LatencyStats.from_json(_mapping(lat, "lat_us")),
            cpu_s_per_gb={str(k): (None if v is None else float(v)) for k, v in cpu.items()},
            elapsed_s=_num(doc, "elapsed_s", required=False),
            lat_iters=None if doc.get("lat_iters") is None else _int(doc, "lat_iters"),
            lat_avg_us=_num(doc, "lat_avg_us", required=False),
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
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> CollectiveResult:
        root = doc.get("root")
        wrong = doc.get("wrong")
        return cls(
            bytes=_int(doc, "bytes"),
            count=_int(doc, "count"),
            dtype=str(doc.get("type", "")),
            redop=None if doc.get("redop") is None else str(doc["redop"]),
            root=None if root is None else int(root),
            in_place=bool(doc.get("in_place", False)),
            time_us=_num(doc, "time_us"),
            algbw_gbs=_num(doc, "algbw_gbs"),
            busbw_gbs=_num(doc, "busbw_gbs"),
            wrong=None if wrong is None else int(wrong),
            time_us_min=_num(doc, "time_us_min", required=False),
            time_us_max=_num(doc, "time_us_max", required=False),
            max_error=_num(doc, "max_error", required=False),
        )


@dataclass(frozen=True)
class BenchRun:
    """A whole benchmark run: its kind, metadata (JSON-ready) and rows."""

    kind: str
    """``p2p`` or ``collective``."""
    results: tuple[P2PResult, ...] | tuple[CollectiveResult, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Top-level JSON keys beside kind/results: p2p ``transport``, ``mode``, ``peer``; collective ``op``,
    ``backend``, ``world_size``, ``ranks_per_node``, ``avg_busbw_gbs``, ``per_rank``; import ``source``."""

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        for k, v in self.meta.items():
            if k in ("kind", "results"):
                raise ValueError(f"meta key {k!r} is reserved")
            data[k] = v
        data["results"] = [r.to_json() for r in self.results]
        return data

    def collective_rows(self, *, in_place: bool | None = None) -> tuple[CollectiveResult, ...]:
        rows = tuple(r for r in self.results if isinstance(r, CollectiveResult))
        if in_place is None:
            return rows
        return tuple(r for r in rows if r.in_place is in_place)


def bench_run_from_json(doc: Mapping[str, Any], *, source: str = "bench JSON") -> BenchRun:
    """Rebuild a :class:`BenchRun` from its JSON document (envelope keys are ignored)."""
    kind = doc.get("kind")
    rows = doc.get("results")
    if kind not in ("p2p", "collective"):
        raise InputError(f"{source}: kind is {kind!r}, expected 'p2p' or 'collective'", hint="give a file written by ibdiag bench ... --save")
    if not isinstance(rows, list):
        raise InputError(f"{source}: no results list", hint="give a file written by ibdiag bench ... --save")
    row_cls = P2PResult if kind == "p2p" else CollectiveResult
    parsed = []
    for i, row in enumerate(rows):
        try:
            parsed.append(row_cls.from_json(_mapping(row, f"results[{i}]")))
        except (ValueError, TypeError, KeyError) as e:
            raise InputError(f"{source}: results[{i}] is malformed: {e}", hint="give a file written by ibdiag bench ... --save") from None
    envelope_keys = {"schema", "version", "host", "generated_at", "status", "findings", "kind", "results"}
    meta = {k: v for k, v in doc.items() if k not in envelope_keys}
    return BenchRun(kind=kind, results=tuple(parsed), meta=meta)  # type: ignore[arg-type]


def load_bench_file(path: str | Path) -> BenchRun:
    """Read a ``--save`` file (or ``bench import -o json`` output); InputError (exit 2) if it is not one."""
    doc = load_envelope(path, schema=SCHEMA)
    return bench_run_from_json(doc, source=str(path))


# --- small validators ------------------------------------------------------------------------------


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} is not an object")
    return value


def _num(doc: Mapping[str, Any], key: str, *, required: bool = True) -> Any:
    v = doc.get(key)
    if v is None:
        if required:
            raise ValueError(f"{key} is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{key} is not a number: {v!r}")
    return float(v)


def _int(doc: Mapping[str, Any], key: str) -> int:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{key} is not a non-negative integer: {v!r}")
    return v
