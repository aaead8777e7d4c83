"""The verdict's charts: the share of each step spent waiting for the network, per rank count — in the
terminal (bars, no library) and as a PNG (matplotlib, imported only when one is drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from ibdiag.errors import CannotRunError
from ibdiag.output.chart import hbar_chart
from ibdiag.output.chart import need_matplotlib as need_png
from ibdiag.verdict.judge import Verdict
from ibdiag.verdict.wording import gb, gbs


def chart_text(v: Verdict, width: int = 40) -> str:
    """Share of each step spent waiting for the network, per rank count, with the network-bound line."""
    rows = [
        (f"{r.ranks} ranks", None if r.comm_share is None else r.comm_share * 100)
        for r in v.scaling
    ]
    return hbar_chart(
        rows,
        unit="%",
        width=width,
        maximum=100.0,
        marker=v.config.network_bound_share * 100,
        marker_label="network-bound above this share of the step",
    )


def need_matplotlib() -> None:
    """The ``--chart`` check, before any work is done."""
    need_png("--chart", "drop --chart for the terminal chart")


def write_png(v: Verdict, path: Path | BinaryIO) -> None:
    """The scaling wall as a PNG: backward time per rank, all communication and exposed communication vs ranks."""
    need_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = [r for r in v.scaling if r.comm_s is not None]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        xs = [r.ranks for r in rows]
        ax.plot(xs, [r.compute_s for r in rows], marker="o", label="backward per rank (s)")
        ax.plot(
            xs,
            [r.comm_s for r in rows if r.comm_s is not None],
            marker="s",
            label="all collectives, no overlap (s)",
        )
        ax.plot(
            xs,
            [max(r.exposed_s or 0.0, 1e-9) for r in rows],
            marker="^",
            label="exposed communication (s)",
        )
        if v.wall_ranks is not None:
            ax.axvline(
                v.wall_ranks,
                color="red",
                linestyle="--",
                label=f"scaling wall: {v.wall_ranks} ranks",
            )
        ax.axvline(
            v.workload.ranks,
            color="grey",
            linestyle=":",
            label=f"this job: {v.workload.ranks} ranks",
        )
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _pos: f"{x:.0f}"))
        ax.set_yscale("log")
        ax.set_xlabel("ranks")
        ax.set_ylabel("seconds per step")
        ax.set_title(
            f"{gb(v.workload.grad_bytes)} gradients, {v.workload.strategy}, busbw {gbs(v.measured.busbw_gbs)}"
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        try:
            fig.savefig(path, format="png")
        except OSError as e:
            raise CannotRunError(
                f"--chart {path}: cannot write: {e.strerror or e}",
                hint="check the directory exists and is writable",
            ) from None
    finally:
        plt.close(fig)
