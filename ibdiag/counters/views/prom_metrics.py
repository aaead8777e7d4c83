"""``-o prom``: port counters under node_exporter's infiniband names, and ibdiag's own rates and figures."""

from __future__ import annotations

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.model import PortCounters, Sample, Span
from ibdiag.counters.spec import IB_COUNTERS
from ibdiag.output.prom import Metric, PromSample


def prom_metrics(sample: Sample, cfg: CountersConfig, span: Span | None = None) -> list[Metric]:
    """Port counters under node_exporter's infiniband collector names (``node_infiniband_*``, labels
    ``device`` and ``port``; data counters in bytes) or, with ``prom_names = "ibdiag"``, the same names
    with the ``ibdiag_infiniband_`` prefix; plus ibdiag's own ``ibdiag_counters_*``."""
    prefix = "node_infiniband_" if cfg.prom_names == "node_exporter" else "ibdiag_infiniband_"
    ports = [p for p in sample.ports if p.port is not None]
    metrics = _port_metrics(ports, prefix) + _ibdiag_metrics(sample, ports)
    if span is not None:
        metrics.extend(_prom_rates(span, cfg))
    return metrics


def _lab(p: PortCounters, **extra: str) -> dict[str, str]:
    return {"device": p.adapter, "port": "" if p.port is None else str(p.port), **extra}


def _port_metrics(ports: list[PortCounters], prefix: str) -> list[Metric]:
    """The IBA counters, data octets, state, physical state and rate under ``prefix`` (node_exporter's
    infiniband collector names, or ibdiag's)."""
    metrics: list[Metric] = []
    for name, spec in IB_COUNTERS.items():
        if spec.prom is None:
            continue
        samples = tuple(
            PromSample(_lab(p), (p.counters or {})[name])  # type: ignore[arg-type]  # not None: the filter below checks it
            for p in ports
            if (p.counters or {}).get(name) is not None
        )
        if samples:
            metrics.append(
                Metric(
                    prefix + spec.prom,
                    f"{spec.iba}: {spec.meaning} (sysfs counters/{name}).",
                    "counter",
                    samples,
                )
            )
    for derived, prom, what in (
        ("xmit_bytes", "port_data_transmitted_bytes_total", "transmitted"),
        ("rcv_bytes", "port_data_received_bytes_total", "received"),
    ):
        samples = tuple(
            PromSample(_lab(p), getattr(p, derived))
            for p in ports
            if getattr(p, derived) is not None
        )
        if samples:
            metrics.append(
                Metric(
                    prefix + prom,
                    f"Data octets {what} (sysfs port_{'xmit' if what == 'transmitted' else 'rcv'}_data x 4).",
                    "counter",
                    samples,
                )
            )
    metrics.append(
        Metric(
            prefix + "state_id",
            "Port state (1 down, 2 init, 3 armed, 4 active, 5 active defer).",
            "gauge",
            tuple(
                PromSample(_lab(p), p.info.state_code)
                for p in ports
                if p.info and p.info.state_code is not None
            ),
        )
    )
    metrics.append(
        Metric(
            prefix + "physical_state_id",
            "Physical port state (2 polling, 3 disabled, 5 link up, ...).",
            "gauge",
            tuple(
                PromSample(_lab(p), p.info.phys_state_code)
                for p in ports
                if p.info and p.info.phys_state_code is not None
            ),
        )
    )
    metrics.append(
        Metric(
            prefix + "rate_bytes_per_second",
            "Port rate (sysfs rate) in bytes per second.",
            "gauge",
            tuple(
                PromSample(_lab(p), p.info.rate_gbps * 1e9 / 8)
                for p in ports
                if p.info and p.info.rate_gbps is not None
            ),
        )
    )
    return metrics


def _ibdiag_metrics(sample: Sample, ports: list[PortCounters]) -> list[Metric]:
    """ibdiag's own ``ibdiag_counters_*``: unknown counters, hw_counters, saturation, data counter width."""
    metrics: list[Metric] = []
    other = tuple(
        PromSample(_lab(p, counter=name), value)
        for p in ports
        for name, value in (p.counters or {}).items()
        if value is not None and (name not in IB_COUNTERS)
    )
    if other:
        metrics.append(
            Metric(
                "ibdiag_counters_port_other_total",
                "counters/ files ibdiag does not know (newer kernels), by name.",
                "counter",
                other,
            )
        )
    hw = tuple(
        PromSample(_lab(p, counter=name), value)
        for p in sample.ports
        for name, value in (p.hw_counters or {}).items()
        if value is not None
    )
    if hw:
        metrics.append(
            Metric(
                "ibdiag_counters_hw_total",
                'Driver hw_counters (port, or device-level with port=""), by name as sysfs spells it.',
                "counter",
                hw,
            )
        )
    sat = tuple(
        PromSample(_lab(p, counter=name), 1) for p in sample.ports for name in sorted(p.saturated)
    )
    metrics.append(
        Metric(
            "ibdiag_counters_saturated",
            "1 for each counter at its maximum (a lower bound; no rate can be computed across it).",
            "gauge",
            sat,
        )
    )
    bits = tuple(PromSample(_lab(p), p.data_bits) for p in ports if p.counters is not None)
    if bits:
        metrics.append(
            Metric(
                "ibdiag_counters_data_counter_bits",
                "Width of the data and packet counters (64 with extended counters).",
                "gauge",
                bits,
            )
        )
    return metrics


def _prom_rates(span: Span, cfg: CountersConfig) -> list[Metric]:
    rates: list[PromSample] = []
    tx: list[PromSample] = []
    rx: list[PromSample] = []
    txu: list[PromSample] = []
    rxu: list[PromSample] = []
    wait: list[PromSample] = []
    for p in span.last.ports:
        d = span.total(p.key)
        if d is None:
            continue
        labels = {"device": p.adapter, "port": "" if p.port is None else str(p.port)}
        for key, r in d.rates.items():
            if r is not None:
                rates.append(PromSample({**labels, "counter": key}, r))
        if p.port is None:
            continue
        fig = figures(
            d,
            p.info.rate_gbps if p.info else None,
            xmit_wait_bytes_per_count=cfg.xmit_wait_bytes_per_count,
        )
        for lst, v, scale in (
            (tx, fig.tx_gbps, 1e9 / 8),
            (rx, fig.rx_gbps, 1e9 / 8),
            (txu, fig.tx_util_pct, 0.01),
            (rxu, fig.rx_util_pct, 0.01),
            (wait, fig.xmit_wait_est_pct, 0.01),
        ):
            if v is not None:
                lst.append(
                    PromSample(labels, v * scale)
                )  # base units: Gb/s -> bytes/s, percentages -> 0-1 ratios
    return [
        Metric(
            "ibdiag_counters_interval_seconds",
            "Length of the interval the rates were measured over.",
            "gauge",
            (PromSample({}, span.interval_s),),
        ),
        Metric(
            "ibdiag_counters_rate_per_second",
            "Increase per second over the interval, by counter (xmit_bytes/rcv_bytes in bytes).",
            "gauge",
            tuple(rates),
        ),
        Metric(
            "ibdiag_counters_transmit_bytes_per_second",
            "Transmit throughput over the interval, bytes per second.",
            "gauge",
            tuple(tx),
        ),
        Metric(
            "ibdiag_counters_receive_bytes_per_second",
            "Receive throughput over the interval, bytes per second.",
            "gauge",
            tuple(rx),
        ),
        Metric(
            "ibdiag_counters_tx_utilization_ratio",
            "Transmit throughput over the port rate (0-1).",
            "gauge",
            tuple(txu),
        ),
        Metric(
            "ibdiag_counters_rx_utilization_ratio",
            "Receive throughput over the port rate (0-1).",
            "gauge",
            tuple(rxu),
        ),
        Metric(
            "ibdiag_counters_xmit_wait_estimated_ratio",
            "Estimated share of the interval the port waited for credits: xmit_wait x bytes per count / (rate x interval).",
            "gauge",
            tuple(wait),
        ),
    ]
