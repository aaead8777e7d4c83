"""``ibdiag topo`` as a library: :func:`run` reads a node's tree (``--root``), maps GPUs, RDMA adapters,
PCIe paths and NUMA like ``nvidia-smi topo -m``, judges the layout and the configuration NCCL will use,
and returns the report with the model its views draw (:mod:`ibdiag.topo.views`)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ibdiag.config import Config, with_flags
from ibdiag.findings.model import Report, RunMeta
from ibdiag.node import dcb
from ibdiag.node.discover import discover
from ibdiag.node.model import Topology
from ibdiag.node.root import host_of, opened_root
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.output.outputs import Addition, with_additions
from ibdiag.ports.config import PortsConfig
from ibdiag.topo.checks import TopoConfig, check_topology
from ibdiag.topo.configuration import NodeConfig, check_configuration, read_configuration
from ibdiag.topo.nccl_env import NcclEnv, from_environ, read_env_file


@dataclass(frozen=True)
class TopoReading:
    """One reading of the node's topology, while its tree is open (what the history adds to)."""

    topology: Topology
    sysfs: SysfsRoot
    host: str


#: What another package adds to a topo reading (the history and the kernel log).
TopoExtra = Callable[[TopoReading], Addition]


@dataclass(frozen=True)
class TopoRequest:
    """What ``ibdiag topo`` is asked: the tree, the settings and what overrides them."""

    root: Path = Path("/")
    config: Config = field(default_factory=lambda: Config(None, {}))
    expect_adapters: int | None = None
    """``--expect-adapters``: overrides ``[topo] expect_adapters``."""
    expect_rate_gbps: float | None = None
    """``--expect-rate``: overrides ``[ports] expected_rate_gbps``."""
    nccl_env: Path | None = None
    """``--nccl-env FILE``: judge these NCCL_* settings instead of ``environ``'s."""
    environ: Mapping[str, str] = field(default_factory=dict)
    extras: Sequence[TopoExtra] = ()


@dataclass(frozen=True)
class TopoResult:
    report: Report
    meta: RunMeta
    topology: Topology
    nccl: NcclEnv
    additions: tuple[Addition, ...] = ()


def run(req: TopoRequest) -> TopoResult:
    """Read, judge and report the node's topology (``nvidia-smi topo -m`` and more)."""
    cfg = with_flags(
        req.config.section("topo", TopoConfig),
        {"expect_adapters": ("--expect-adapters", req.expect_adapters)},
    )
    ports = req.config.section("ports", PortsConfig).with_expected_rate(req.expect_rate_gbps)
    with opened_root(req.root) as directory:
        sysfs = SysfsRoot(directory, skip_adapters=ports.skip).check()
        topo = discover(sysfs, gdr_level=cfg.gdr_path_class)
        nccl = read_env_file(str(req.nccl_env)) if req.nccl_env else from_environ(req.environ)
        node_config = read_configuration(sysfs, topo, nccl, _dcb_reader(req, directory))
        # what the configuration reads could not read (a refused mtu, a malformed ecn flag) is reported
        # by topo.sysfs_value like every other value
        topo = dataclasses.replace(topo, problems=tuple(sysfs.problems))
        host = host_of(directory)
        findings = [*check_topology(topo, cfg, ports), *check_configuration(topo, node_config)]
        report = Report("topo", _data(topo, node_config), tuple(findings))
        # Inside the root: the history's record reads AER counts from it (a snapshot is unpacked here).
        reading = TopoReading(topo, sysfs, host)
        additions = tuple(extra(reading) for extra in req.extras)
    return TopoResult(with_additions(report, additions), RunMeta.now(host), topo, nccl, additions)


def _data(topo: Topology, node_config: NodeConfig) -> dict[str, object]:
    return {**topo.to_json(), **node_config.to_json()}


def _dcb_reader(req: TopoRequest, directory: Path) -> Callable[[str], dcb.DcbState]:
    """``dcb -j`` on the live node; the JSON saved beside sys/ (``dcb/<netdev>/``) in any other tree."""
    if str(req.root) == "/":
        # dcb lives in /usr/sbin (Debian, RHEL), which a user's PATH often lacks.
        path = os.pathsep.join([req.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
        return partial(dcb.read_live, shutil.which("dcb", path=path))
    return partial(dcb.read_saved, directory)
