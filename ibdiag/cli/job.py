"""``ibdiag job``: the running job's own view — NCCL's RAS status and Inspector's logs — with every rank
a finding names placed on its node, GPU, NIC and leaf port."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Annotated

import typer

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.cli.app import app
from ibdiag.cli.common import env, handle_errors, read_config
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    StrictOption,
    TimeoutOption,
)
from ibdiag.config import with_flags
from ibdiag.counters.config import CountersConfig
from ibdiag.errors import UsageError
from ibdiag.fabric.config import FabricConfig
from ibdiag.job import views
from ibdiag.job.command import JobRequest, RasFile, RasLive, RasStream, run
from ibdiag.job.config import JobConfig
from ibdiag.job.rasclient import RasAddress, parse_address
from ibdiag.parse import parse_decimal

RasOption = Annotated[
    str | None,
    typer.Option(
        "--ras",
        metavar="live[:ADDR]|FILE|-",
        help="NCCL's RAS status: live asks the job's RAS service ($NCCL_RAS_ADDR, else localhost:28028; "
        "live:HOST:PORT another), FILE a saved `ncclras` output (text or JSON), - standard input.",
    ),
]
RasEarlierOption = Annotated[
    str | None,
    typer.Option(
        "--ras-earlier",
        metavar="FILE|-",
        help="An earlier RAS reading of the same job: counts that did not move are a stuck communicator.",
    ),
]
AgainOption = Annotated[
    float | None,
    typer.Option(
        "--again",
        parser=parse_decimal,
        metavar="SECONDS",
        help="With --ras live: ask twice, SECONDS apart, and tell a stuck communicator from a busy one.",
    ),
]
InspectorOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--inspector",
        metavar="PATH",
        help="NCCL Inspector's JSONL files, or directories of them (repeat): per-rank bus bandwidth and stragglers.",
    ),
]
TopoFilesOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--topo",
        metavar="TOPO.json",
        help="`ibdiag topo -o json` of the job's nodes, files or a directory of them (repeat): each rank's GPU's nearest NIC.",
    ),
]
FabricDumpOption = Annotated[
    Path | None,
    typer.Option(
        "--fabric",
        metavar="DUMP",
        help="A saved fabric (`ibdiag fabric --save`): each NIC's leaf port and the fabric's findings on it.",
    ),
]
HostsFileOption = Annotated[
    Path | None,
    typer.Option(
        "--hosts",
        metavar="FILE",
        help="Addresses to names (/etc/hosts form): RAS names processes by address.",
    ),
]
RankMapOption = Annotated[
    Path | None,
    typer.Option(
        "--rank-map",
        metavar="FILE",
        help="`RANK: HOST` lines of the job's world (srun -l hostname): places ranks RAS does not list.",
    ),
]
MinBusbwOption = Annotated[
    float | None,
    typer.Option(
        "--min-busbw",
        parser=parse_decimal,
        metavar="GB/S",
        help="A communicator's busbw below this warns (overrides [job] min_busbw_gbs; e.g. verdict's ceiling).",
    ),
]


@app.command("job")
@handle_errors
def job_command(
    ras: RasOption = None,
    ras_earlier: RasEarlierOption = None,
    again: AgainOption = None,
    ras_text: Annotated[
        bool, typer.Option("--ras-text", help="Ask the live RAS service for its text report.")
    ] = False,
    verbose_ras: Annotated[
        bool, typer.Option("--verbose-ras", help="VERBOSE STATUS: RAS names more ranks per group.")
    ] = False,
    ras_collect_timeout: Annotated[
        int | None,
        typer.Option(
            "--ras-collect-timeout",
            metavar="SECONDS",
            help="How long RAS waits for the other processes (ncclras -t; default RAS's 5 s).",
        ),
    ] = None,
    inspector: InspectorOption = None,
    topo: TopoFilesOption = None,
    fabric: FabricDumpOption = None,
    hosts: HostsFileOption = None,
    rank_map: RankMapOption = None,
    min_busbw: MinBusbwOption = None,
    timeout: TimeoutOption = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """The job's own view: NCCL's RAS status and Inspector's logs, each rank placed on node, GPU, NIC and leaf port.

    \b
    Examples:
      ibdiag job --ras live --topo topo/*.json --hosts /etc/hosts --fabric fabric.tar.gz
      ibdiag job --ras live --again 10          # stuck, or only slow?
      ncclras -f json | ibdiag job --ras - -o json
      ibdiag job --inspector $NCCL_INSPECTOR_DUMP_DIR --min-busbw 40
    """
    cfg = read_config(config)
    job_cfg = with_flags(
        cfg.section("job", JobConfig),
        {"ras_timeout_s": ("--timeout", timeout), "min_busbw_gbs": ("--min-busbw", min_busbw)},
    )
    live = _live(ras, env().environ, json=not ras_text, verbose=verbose_ras)
    if again is not None and live is None:
        raise UsageError("--again asks the live RAS service twice", hint="use it with --ras live")
    if live is not None:
        live = RasLive(live.address, live.json, live.verbose, ras_collect_timeout, again)
    if _live(ras_earlier, {}, json=True, verbose=False) is not None:
        raise UsageError(
            "--ras-earlier is a saved reading (a file or -)",
            hint="for two live readings use --ras live --again SECONDS",
        )
    limit = job_cfg.max_ras_bytes
    request = JobRequest(
        ras=live or _saved(ras, limit),
        ras_earlier=_saved(ras_earlier, limit),
        inspector=tuple(inspector or ()),
        topo=tuple(topo or ()),
        fabric=fabric,
        hosts_file=hosts,
        rank_map=rank_map,
        config=job_cfg,
        collective=cfg.section("collective", CollectiveConfig),
        counters=cfg.section("counters", CountersConfig),
        fabric_config=cfg.section("fabric", FabricConfig),
    )
    return emit(views.outputs(run(request)), fmt, strict=strict)


def _live(
    text: str | None, environ: Mapping[str, str], *, json: bool, verbose: bool
) -> RasLive | None:
    """``--ras live`` (``$NCCL_RAS_ADDR`` or localhost:28028) or ``live:ADDR``; None for a file or -."""
    if text is None or not (text == "live" or text.startswith("live:")):
        return None
    given = text.removeprefix("live").removeprefix(":") or environ.get("NCCL_RAS_ADDR", "")
    address = parse_address(given) if given else RasAddress()
    return RasLive(address, json=json, verbose=verbose)


def _saved(text: str | None, limit: int) -> RasFile | RasStream | None:
    """A saved RAS output: a file, or ``-`` for standard input (read up to ``limit`` bytes and one more)."""
    if text is None or text == "live" or text.startswith("live:"):
        return None
    if text == "-":
        return RasStream(_stdin_bytes(limit))
    return RasFile(Path(text))


def _stdin_bytes(limit: int) -> IO[bytes]:
    stdin = env().stdin
    buffer: IO[bytes] | None = getattr(stdin, "buffer", None)
    if buffer is not None:
        return buffer
    # a text stream handed in (a test's): its first limit + 1 characters, so an oversized one is still refused
    return io.BytesIO(stdin.read(limit + 1).encode("utf-8", "surrogateescape"))
