"""The history as Prometheus metrics: flap counts and the time of the last flap, per port."""

from __future__ import annotations

from ibdiag.history.run import HistoryResult
from ibdiag.output.prom import Metric, PromSample


def prom_metrics(result: HistoryResult) -> list[Metric]:
    def labels(adapter: str, port: int) -> dict[str, str]:
        return {"device": adapter, "port": str(port)}

    flaps = tuple(
        PromSample(labels(s.adapter, s.port), float(s.flap_count)) for s in result.stories
    )
    last = tuple(
        PromSample(labels(s.adapter, s.port), s.last_flap_s)
        for s in result.stories
        if s.last_flap_s is not None
    )
    bursts = tuple(
        PromSample(labels(s.adapter, s.port), float(len(s.bursts))) for s in result.stories
    )
    return [
        Metric(
            "ibdiag_history_flaps",
            f"Link flaps in the history window ({result.window_s / 3600:g} h): link_downed increases, downs, rate changes",
            "gauge",
            flaps,
        ),
        Metric(
            "ibdiag_history_last_flap_timestamp_seconds",
            "Unix time of the record that showed the last flap",
            "gauge",
            last,
        ),
        Metric(
            "ibdiag_history_error_bursts",
            "Error counter bursts in the history window",
            "gauge",
            bursts,
        ),
    ]
