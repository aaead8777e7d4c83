"""One view per result kind: what ``-o table``, ``-o csv`` and ``-o prom`` print for a :class:`BenchRun`.

``bench p2p``, ``bench collective`` and ``bench import`` print a run through :func:`view_for`, so a
measured run and an imported one of the same kind look the same in every format. A view is pure
functions of the run (``ibdiag.bench.p2p.render``, ``ibdiag.bench.collective.render``); a format a
kind has no builder for (``prom`` for p2p) is refused by the CLI as a usage error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.bench.collective import render as collective_render
from ibdiag.bench.p2p import render as p2p_render
from ibdiag.bench.results.model import BenchRun


@dataclass(frozen=True)
class View:
    table: Callable[[BenchRun], list[Any]]
    """Rich renderables printed before the findings."""
    csv: Callable[[BenchRun], tuple[Sequence[str], list[dict[str, Any]]]]
    """(header, rows) of the long-form CSV."""
    prom: Callable[[BenchRun], list[Any]] | None = None
    """Prometheus metrics; None when the kind has none (a p2p benchmark is not a node metric)."""


def _p2p() -> View:
    return View(
        table=p2p_render.table_items,
        csv=lambda run: (p2p_render.CSV_HEADER, p2p_render.csv_rows(run)),
    )


def _collective() -> View:
    return View(
        table=collective_render.table_items,
        csv=lambda run: (collective_render.CSV_HEADER, collective_render.csv_rows(run)),
        prom=collective_render.prom_metrics,
    )


#: ``kind`` -> its view (rich, which the renderers' tables need, is imported only when they build one).
VIEWS: dict[str, Callable[[], View]] = {"p2p": _p2p, "collective": _collective}


def view_for(run: BenchRun) -> View:
    return VIEWS[run.kind]()
