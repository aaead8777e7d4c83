"""The history as Prometheus metrics: flap counts and the time of the last flap, per port."""

from __future__ import annotations

from ibdiag.history.run import HistoryResult
from ibdiag.node.aer import AER_FILES
from ibdiag.output.prom import Metric, PromSample


def prom_metrics(result: HistoryResult) -> list[Metric]:
    def labels(adapter: str, port: int) -> dict[str, str]:
        return {"device": adapter, "port": str(port)}

    flaps = tuple(PromSample(labels(s.adapter, s.port), s.flap_count) for s in result.stories)
    last = tuple(
        PromSample(labels(s.adapter, s.port), s.last_flap_s)
        for s in result.stories
        if s.last_flap_s is not None
    )
    bursts = tuple(PromSample(labels(s.adapter, s.port), len(s.bursts)) for s in result.stories)
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
        Metric(
            "ibdiag_history_aer_errors",
            "PCIe AER errors counted between records in the history window, per kind",
            "gauge",
            tuple(
                PromSample({"pci": a.device, "kind": kind}, a.increase.get(kind, 0))
                for a in result.aer
                for kind in AER_FILES
            ),
        ),
        Metric(
            "ibdiag_pcie_aer_errors_since_boot",
            "PCIe AER errors since boot (aer_dev_*), per kind",
            "gauge",
            tuple(
                PromSample({"pci": a.device, "kind": kind}, a.now.total(kind) or 0)
                for a in result.aer
                if a.now is not None
                for kind in AER_FILES
            ),
        ),
    ]
