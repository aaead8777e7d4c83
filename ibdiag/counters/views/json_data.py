"""``-o json``: the ``ibdiag.counters/1`` data of a reading or a span (the envelope is added by report.jsonout)."""

from __future__ import annotations

from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.model import PortCounters, PortDelta, Sample, SeriesStep, Span
from ibdiag.counters.wording import iso_utc


def _assumptions(cfg: CountersConfig) -> dict[str, Any]:
    return {
        "xmit_wait_bytes_per_count": cfg.xmit_wait_bytes_per_count,
        "xmit_wait_est_pct": "estimated: port_xmit_wait x bytes per count / (port rate x interval); the HCA tick is not in sysfs",
        "data_counters": "counters as sysfs prints them (port_xmit_data/port_rcv_data in 4-octet words); xmit_bytes/rcv_bytes = x 4",
        "extended_counters": cfg.extended_counters,
    }


def _delta_json(
    p: PortCounters, d: PortDelta, cfg: CountersConfig, *, series: bool
) -> dict[str, Any]:
    rate_gbps = p.info.rate_gbps if p.info else None
    doc: dict[str, Any] = {
        "interval_s": d.interval_s,
        "deltas": dict(d.deltas),
        "rates": dict(d.rates),
        "unknown": dict(d.unknown),
        "resets": list(d.resets),
    }
    if series:
        doc["peak_rates"] = dict(d.peak_rates)
    if p.port is not None:
        doc.update(
            figures(d, rate_gbps, xmit_wait_bytes_per_count=cfg.xmit_wait_bytes_per_count).to_json()
        )
    return doc


def snapshot_data(sample: Sample, cfg: CountersConfig) -> dict[str, Any]:
    """``ports`` and ``device_counters`` of one reading (``ibdiag.counters/1``, mode ``snapshot``)."""
    return {
        "mode": "snapshot",
        "sampled_at": iso_utc(sample.taken_at_s),
        "sampled_at_epoch_s": sample.taken_at_s,
        "interval_s": None,
        "assumptions": _assumptions(cfg),
        "ports": [p.to_json() for p in sample.ports if p.port is not None],
        "device_counters": [p.to_json() for p in sample.ports if p.port is None],
    }


def span_data(
    span: Span, cfg: CountersConfig, *, baseline: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The last reading with deltas and rates over the span; ``samples`` per step for a series."""
    series = span.samples_count > 1
    ports: list[dict[str, Any]] = []
    devices: list[dict[str, Any]] = []
    for p in span.last.ports:
        doc = p.to_json()
        d = span.total(p.key)
        if d is not None:
            doc.update(_delta_json(p, d, cfg, series=series))
        (ports if p.port is not None else devices).append(doc)
    data: dict[str, Any] = {
        "mode": span.mode,
        "sampled_at": iso_utc(span.last.taken_at_s),
        "sampled_at_epoch_s": span.last.taken_at_s,
        "first_sampled_at": iso_utc(span.first.taken_at_s),
        "interval_s": span.interval_s,
        "samples_count": span.samples_count,
        "assumptions": _assumptions(cfg),
        "ports": ports,
        "device_counters": devices,
    }
    if baseline is not None:
        data["baseline"] = baseline
    if span.missing:
        data["missing_ports"] = list(span.missing)
    if series and span.steps:
        data["samples"] = [step_json(s, cfg) for s in span.steps]
    return data


def step_json(step: SeriesStep, cfg: CountersConfig) -> dict[str, Any]:
    rows = []
    for d in step.deltas:
        p = step.sample.port(d.key)
        if p is None:
            continue
        doc: dict[str, Any] = {"adapter": d.adapter, "port": d.port}
        doc.update(_delta_json(p, d, cfg, series=False))
        rows.append(doc)
    return {
        "sample": step.index,
        "sampled_at": iso_utc(step.sample.taken_at_s),
        "elapsed_s": step.elapsed_s,
        "ports": rows,
    }
