"""``--history DIR`` for ``counters`` and ``topo``: record this run's reading and judge the ports' past."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

HistoryOption = Annotated[
    Path | None,
    typer.Option(
        "--history",
        metavar="DIR",
        help="Record this reading in the port history DIR (e.g. /var/lib/ibdiag/history) and judge flaps, "
        "recoveries and error bursts over [history] window_hours. Nothing is written without it.",
    ),
]


@dataclasses.dataclass(frozen=True)
class HistorySetup:
    directory: Path
    cfg: Any
    """:class:`~ibdiag.history.config.HistoryConfig`."""


def history_setup(
    directory: Path | None, cfg_file: Any, *, watch: bool = False
) -> HistorySetup | None:
    """Checked before the run: the section of the config file and a writable store directory."""
    if directory is None:
        return None
    from ibdiag.errors import UsageError
    from ibdiag.history.config import HistoryConfig
    from ibdiag.history.store import check_store

    if watch:
        raise UsageError(
            "--history records one reading; it cannot be combined with --watch",
            hint="run it from cron or a timer",
        )
    cfg = cfg_file.section("history", HistoryConfig)
    return HistorySetup(check_store(directory), cfg)


def with_history(
    report: Any, setup: HistorySetup | None, record: Any, counters_cfg: Any = None
) -> tuple[Any, list[Any]]:
    """``report`` with the history's findings and ``history`` data added, and the history's metrics."""
    if setup is None:
        return report, []
    from ibdiag.history.run import record_and_judge
    from ibdiag.history.views import prom_metrics

    result = record_and_judge(setup.directory, record, setup.cfg, counters_cfg)
    data = {**report.data, "history": result.to_json()}
    out = dataclasses.replace(report, data=data, findings=(*report.findings, *result.findings))
    return out, prom_metrics(result)
