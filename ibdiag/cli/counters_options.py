"""The options of ``ibdiag counters`` (kept apart from the command: cli/counters.py is long enough)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ibdiag.parse import parse_decimal

DeviceOption = Annotated[
    list[str] | None,
    typer.Option(
        "--device",
        "-d",
        metavar="DEV[:PORT]",
        help="Only these ports: mlx5_3:1, mlx5_3 (all its ports), a pattern like 'mlx5_*'; repeat or separate with commas.",
    ),
]
IntervalOption = Annotated[
    float | None,
    typer.Option(
        "--interval",
        "-i",
        parser=parse_decimal,
        metavar="SECONDS",
        help="Read twice, SECONDS apart, and judge the deltas: errors/s, Gb/s, backpressure.",
    ),
]
CountOption = Annotated[
    int | None,
    typer.Option(
        "--count",
        "-c",
        metavar="N",
        help="With --interval: N samples (a series; csv/json rows per sample). With --watch: stop after N.",
    ),
]
WatchOption = Annotated[
    bool,
    typer.Option(
        "--watch",
        "-w",
        help="Live table refreshed every --interval (default 1 s) until Ctrl-C (exit 130).",
    ),
]
FarEndOption = Annotated[
    bool,
    typer.Option(
        "--far-end",
        help="Also read the switch port at the other end of each InfiniBand port's cable (infiniband-diags: smpquery, perfquery).",
    ),
]
SinceOption = Annotated[
    Path | None,
    typer.Option(
        "--since",
        metavar="BEFORE.json",
        help="Judge what the counters did since a saved `ibdiag counters -o json` of this node (e.g. across a job).",
    ),
]
