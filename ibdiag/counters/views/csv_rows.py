"""``-o csv``: long form, one row per sample x port x counter (``pandas.read_csv`` loads a series)."""

from __future__ import annotations

from typing import Any

from ibdiag.counters.model import PortDelta, Sample, SeriesStep
from ibdiag.counters.wording import iso_utc

CSV_HEADER = (
    "sample",
    "time",
    "elapsed_s",
    "interval_s",
    "adapter",
    "port",
    "link_layer",
    "source",
    "counter",
    "value",
    "delta",
    "rate_per_s",
    "saturated",
    "reset",
)


def csv_rows_snapshot(sample: Sample) -> list[dict[str, Any]]:
    """One row per port x counter, sample 0 (no delta)."""
    return _rows(0, sample, 0.0, None, {})


def csv_rows_step(step: SeriesStep) -> list[dict[str, Any]]:
    """One row per port x counter of one sample of a series (or the single interval)."""
    return _rows(
        step.index,
        step.sample,
        step.elapsed_s,
        step.deltas[0].interval_s if step.deltas else None,
        {d.key: d for d in step.deltas},
    )


def _rows(
    index: int,
    sample: Sample,
    elapsed_s: float,
    interval_s: float | None,
    deltas: dict[tuple[str, int | None], PortDelta],
) -> list[dict[str, Any]]:
    time_s = iso_utc(sample.taken_at_s)
    rows = []
    for p in sample.ports:
        d = deltas.get(p.key)
        sat = p.saturated_keys()
        sources = p.sources()
        for key, value in p.values().items():
            rows.append(
                {
                    "sample": index,
                    "time": time_s,
                    "elapsed_s": round(elapsed_s, 6),
                    "interval_s": None if interval_s is None else round(interval_s, 6),
                    "adapter": p.adapter,
                    "port": p.port,
                    "link_layer": p.info.link_layer if p.info else None,
                    "source": sources.get(key, ""),
                    "counter": key,
                    "value": value,
                    "delta": None if d is None else d.deltas.get(key),
                    "rate_per_s": _rounded(None if d is None else d.rates.get(key)),
                    "saturated": int(key in sat),
                    "reset": "" if d is None else int(key in d.resets),
                }
            )
    return rows


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
