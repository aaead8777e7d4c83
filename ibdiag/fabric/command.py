"""``ibdiag fabric`` as a library: :func:`run` reads the InfiniBand subnet — live through
infiniband-diags (``ibnetdiscover`` + ``iblinkinfo`` + ``ibqueryerrors`` + ``sminfo``), or a saved
dump (``--from``) — judges the subnet manager, links, switch-side counters and the fabric's shape, and
returns the report with the judged fabric its views draw (:mod:`ibdiag.fabric.views`).

Start-up: a live run imports the judging modules (some 40 of them, the cost of a small fabric's
judgement), and the views its caller names (:attr:`FabricRequest.preload`), while the tools wait on
the subnet (:func:`_collect_while_loading`); so those imports are inside functions here, not at the top
(benchmarks/fabric_scale.py measures the whole run). The tools' runner (:mod:`.collect`, with its
subprocess and thread pool) is imported by a live run alone: a saved fabric (``--from``) runs no tool."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ibdiag.config import Config
from ibdiag.counters.config import CountersConfig
from ibdiag.errors import UsageError
from ibdiag.fabric import dump, namemap
from ibdiag.fabric.capture import Capture, ToolRun
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.hosts import HostEnd, read_topo
from ibdiag.fabric.linkinfo import parse_linkinfo
from ibdiag.fabric.namemap import NodeNameMap
from ibdiag.fabric.netdiscover import parse_netdiscover
from ibdiag.findings.model import Report, RunMeta
from ibdiag.infile import read_text_file
from ibdiag.node.root import host_of
from ibdiag.outfile import atomic_output, check_output_path
from ibdiag.text import safe_path

if TYPE_CHECKING:  # imported while the tools run (see the module's docstring)
    from ibdiag.fabric.collect import Collector
    from ibdiag.fabric.judge import Judged
    from ibdiag.fabric.plan import Plan

#: ``--interval`` above this is refused (a day).
MAX_INTERVAL_S = 86400.0
#: ``--timeout`` of each tool, seconds, when none is given; more than :data:`MAX_TIMEOUT_S` is refused.
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0

#: What a live run imports while the tools run, whatever the caller writes.
JUDGING_MODULES = ("ibdiag.fabric.build", "ibdiag.fabric.judge", "ibdiag.fabric.views.json_data")


@dataclass(frozen=True)
class FabricRequest:
    """What ``ibdiag fabric`` is asked: where the fabric comes from, what to judge it against, what
    else to write."""

    config: Config = field(default_factory=lambda: Config(None, {}))
    source: Path | None = None
    """``--from DUMP``: a saved fabric (a ``save`` directory or .tar.gz, or ibnetdiscover output);
    None reads the live one."""
    save: Path | None = None
    """``--save DIR|FILE.tar.gz``: also save what the tools printed (a dump, not the JSON result)."""
    since: Path | None = None
    """``--since DUMP``: judge against an earlier dump: links lost since, counter deltas."""
    interval_s: float | None = None
    """``--interval``: read the live counters twice, this many seconds apart."""
    ca: str | None = None
    """``--ca``/``-C``: this node's adapter the tools use."""
    port: int | None = None
    """``--port``/``-P``: its port."""
    topo: Sequence[Path] = ()
    """``--topo``: ``ibdiag topo -o json`` files naming host ports by node, NIC index and GPUs."""
    expect: Path | None = None
    """``--expect PLAN``: diff the cabling against a plan (CSV, TOML or a saved fabric)."""
    slurm_topology: Path | None = None
    """``--slurm-topology FILE``: also write Slurm's topology.conf (topology/tree) there."""
    hosts: Path | None = None
    """``--hosts FILE``: with ``slurm_topology``, Slurm's node names (``<host or GUID> <name>`` lines)."""
    node_name_map: Path | None = None
    """``--node-name-map FILE``: names by node GUID, as ibnetdiscover and opensm read them
    (``0x<GUID> "name"``; ``H-<GUID> name`` too): adapters with a default description named, switches
    renamed, in every finding and view (:mod:`ibdiag.fabric.namemap`)."""
    timeout_s: float | None = None
    """``--timeout``: the time limit of each tool (None: :data:`DEFAULT_TIMEOUT_S`)."""
    routes: bool = False
    """``--routes``: also read each switch's forwarding table (``ibroute``)."""
    data_counters: bool = False
    """``--data-counters``: also read every switch port's data and packet counters
    (``ibqueryerrors --counters --switch``, :mod:`ibdiag.fabric.datacounters`): the exporters'
    bandwidth series. The command line turns it on for ``-o prom`` and ``--textfile``."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """The environment the tools run with (PATH, and ibsim's preload in tests)."""
    preload: Sequence[str] = ()
    """Modules the caller imports after the run (the views of its output format): a live run imports
    them while the tools run."""


@dataclass(frozen=True)
class FabricResult:
    report: Report
    meta: RunMeta
    judged: Judged


def run(req: FabricRequest) -> FabricResult:
    """Read (or load), judge and report the fabric; save the dump and write topology.conf when asked.
    The cyclic garbage collector is paused meanwhile (:func:`collector_paused`)."""
    with collector_paused():
        return _run(req)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused, and restored after. A fabric's model is one set of
    long-lived objects with no cycles (100k ports: half a million objects), built in one go: each
    collection the allocations trigger would only walk it again (15 % of the Selene-size run). The
    command line keeps it paused while the result is written too."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run(req: FabricRequest) -> FabricResult:
    timeout_s = _check(req)
    counters_cfg = req.config.section("counters", CountersConfig)
    fabric_cfg = req.config.section("fabric", FabricConfig)
    if req.save is not None and dump.is_archive(req.save):
        check_output_path(req.save, "--save")
    hosts: dict[str, HostEnd] = {}
    for f in req.topo:
        hosts.update(read_topo(f))
    plan = _plan(req.expect, hosts)
    if req.hosts is not None and req.slurm_topology is None:
        raise UsageError(
            "--hosts names Slurm's nodes in --slurm-topology's file",
            hint="add --slurm-topology FILE",
        )
    rename = read_hosts_map(req.hosts) if req.hosts is not None else None
    name_map = read_node_name_map(req.node_name_map) if req.node_name_map is not None else None
    if req.slurm_topology is not None:
        check_output_path(req.slurm_topology, "--slurm-topology")
    if req.source is not None:
        cap = dump.load(req.source)
    else:
        # lazy: start-up time; the tools' runner (subprocess, threads) only for a live fabric
        from ibdiag.fabric.collect import Collector, Limits

        lim = Limits(timeout_s, timeout_s, min(timeout_s, 10.0), min(timeout_s, 10.0))
        collector = Collector(
            req.environ,
            ca=req.ca,
            port=req.port,
            limits=lim,
            early=_parse_early,
            routes=req.routes,
            data_counters=req.data_counters,
        )
        cap = _collect_while_loading(collector, req.interval_s, req.preload)
    if req.save is not None:
        dump.save(cap, req.save)
    judged = _judge(req, cap, hosts, plan, cfg=counters_cfg, fcfg=fabric_cfg, name_map=name_map)
    if req.slurm_topology is not None:
        write_slurm_topology(judged, req.slurm_topology, rename)
    # lazy: start-up time; loaded while the tools ran (JUDGING_MODULES)
    from ibdiag.fabric.views.json_data import fabric_data

    report = Report("fabric", fabric_data(judged), judged.findings)
    return FabricResult(report, RunMeta.now(host_of(None)), judged)


def _check(req: FabricRequest) -> float:
    """The request's values and combinations that mean nothing (exit 2); the tools' time limit."""
    interval, timeout = req.interval_s, req.timeout_s
    if interval is not None and not 0 < interval <= MAX_INTERVAL_S:
        raise UsageError(
            f"--interval {interval:g} is outside (0, {MAX_INTERVAL_S:g}] seconds",
            hint="e.g. --interval 10",
        )
    if interval is not None and req.source is not None:
        raise UsageError(
            "--interval reads the live fabric twice; it cannot judge a saved one (--from)",
            hint="use --since EARLIER with --from LATER",
        )
    if req.routes and req.source is not None:
        raise UsageError(
            "--routes reads the live fabric's forwarding tables; a saved one (--from) has them when it was saved with --routes",
            hint="drop --routes, or run `ibdiag fabric --routes --save DUMP` on the live fabric",
        )
    if req.data_counters and req.source is not None:
        raise UsageError(
            "--data-counters reads the live fabric's counters; a saved one (--from) has them when it was saved with them",
            hint="drop --data-counters, or run `ibdiag fabric --data-counters --save DUMP` on the live fabric",
        )
    timeout_s = DEFAULT_TIMEOUT_S if timeout is None else timeout
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise UsageError(
            f"--timeout {timeout_s:g} is outside (0, {MAX_TIMEOUT_S:g}] seconds",
            hint="e.g. --timeout 60",
        )
    if req.port is not None and not 0 < req.port < 255:
        raise UsageError(
            f"--port {req.port} is not a port number", hint="1 for a single-port adapter"
        )
    return timeout_s


def _plan(expect: Path | None, hosts: dict[str, HostEnd]) -> Plan | None:
    if expect is None:
        return None
    # Without --expect, a live run loads the build behind the plan's reader while the tools run.
    # lazy: --expect's reader (and the build behind it), only with the flag
    from ibdiag.fabric.plan import load_plan

    return load_plan(expect, hosts)


def _judge(
    req: FabricRequest,
    cap: Capture,
    hosts: dict[str, HostEnd],
    plan: Plan | None,
    *,
    cfg: CountersConfig,
    fcfg: FabricConfig,
    name_map: NodeNameMap | None = None,
) -> Judged:
    """The fabric built from the capture and judged: against its own first counters read
    (``--interval``) or an earlier dump (``--since``)."""
    # lazy: start-up time (the judgement's modules); a live run imported them while the tools ran
    from ibdiag.fabric.build import build_fabric, origin
    from ibdiag.fabric.judge import judge  # lazy: as above

    fab = build_fabric(cap)
    earlier = reference = None
    mode = "interval"
    if req.interval_s is not None:
        earlier, fab = fab, build_fabric(cap, counters_run="ibqueryerrors-1")
    elif req.since is not None:
        reference = earlier = build_fabric(dump.load(req.since))
        mode = "since"
    return judge(
        fab,
        hosts=hosts,
        cfg=cfg,
        fcfg=fcfg,
        origin=origin(cap),
        earlier=earlier,
        reference=reference,
        mode=mode,
        plan=plan,
        name_map=name_map,
    )


def _collect_while_loading(
    collector: Collector, interval_s: float | None, preload: Sequence[str]
) -> Capture:
    """The tools' run (0.3-0.5 s on a 4096-port fabric, mostly waiting on the subnet's answers) and,
    meanwhile, loading what judges and writes the fabric (about 0.1 s of imports on a small VM)."""
    # lazy: start-up time (a live run only, as above)
    from concurrent.futures import ThreadPoolExecutor

    from ibdiag.fabric.collect import collect  # lazy: as above

    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(collect, collector, interval_s=interval_s)
        for module in (*JUDGING_MODULES, *preload):
            importlib.import_module(module)
        return running.result()


def _parse_early(run: ToolRun) -> None:
    """ibnetdiscover's and iblinkinfo's outputs parsed while the other tools run (the parsers keep
    their last answers for the build)."""
    if run.rc == 0 and run.name == "ibnetdiscover":
        parse_netdiscover(run.stdout)
    elif run.rc == 0 and run.name == "iblinkinfo":
        parse_linkinfo(run.stdout)


def read_hosts_map(path: Path) -> dict[str, str]:
    """``--hosts FILE``: host (or adapter GUID) -> Slurm node name."""
    # lazy: start-up time (slurm.py stands on the switch graph): loaded for --hosts only, as before
    from ibdiag.fabric.slurm import MAP_HINT, MAX_MAP_BYTES, parse_hosts_map

    where = f"--hosts {safe_path(path)}"
    text = read_text_file(path, MAX_MAP_BYTES, where, MAP_HINT, utf8_only=False)
    return parse_hosts_map(text, where)


def read_node_name_map(path: Path) -> NodeNameMap:
    """``--node-name-map FILE``: node GUID -> name, in the IB tools' format."""
    where = f"--node-name-map {safe_path(path)}"
    text = read_text_file(path, namemap.MAX_MAP_BYTES, where, namemap.HINT, utf8_only=False)
    return namemap.parse_node_name_map(text, where)


def write_slurm_topology(judged: Judged, path: Path, rename: dict[str, str] | None) -> None:
    """``--slurm-topology FILE``: topology.conf for Slurm's topology/tree plugin, written atomically."""
    # lazy: as read_hosts_map
    from ibdiag.fabric.slurm import topology_conf

    text = topology_conf(judged.fabric, judged.names, judged.shape, rename)
    check_output_path(path, "--slurm-topology")
    with atomic_output(path, "--slurm-topology") as fh:
        fh.write(text.encode())
