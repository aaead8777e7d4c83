"""The fixture fleet for the ``ibdiag report`` tests: per-node JSON written by ibdiag itself.

Each node of :data:`tests.sysfsgen.profiles.fleet_variants.VARIANTS` gets a sysfs tree, then
``ibdiag topo -o json`` and ``ibdiag counters -o json`` on it (in-process, the real commands). The
sweep file comes from :class:`tests.support.synthetic_fabric.SyntheticFabric` — a named in-process FAKE, since
the sweep's runtime is not built yet — over the same hosts with their topo's rails, and one planted
fault that matches the fleet: the narrow node's x8 adapter (mlx5_7) slow on its rail.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ibdiag.findings.model import Report, RunMeta
from ibdiag.output.jsonout import render_json
from ibdiag.sweep.checks import sweep_findings
from ibdiag.sweep.nodes import FleetNode, Rail, check_fleet
from ibdiag.sweep.passes import run_sweep
from tests.support.synthetic_fabric import PlantedFaults, SyntheticFabric


def variants() -> dict:
    """The variants (imported late: importing ``tests.sysfsgen.profiles`` at collection time would make
    ``tests.sysfsgen.profiles`` the subpackage instead of the function of that name for later importers)."""
    from tests.sysfsgen.profiles.fleet_variants import VARIANTS

    return VARIANTS


def host_of(variant: str) -> str:
    return f"dgx-{variant}"


def write_fleet(out: Path, cli: Callable, *, with_sweep: bool = True) -> Path:
    """Trees under ``out/trees``, JSON under ``out/json``; returns the JSON directory."""
    json_dir = out / "json"
    json_dir.mkdir(parents=True)
    rails: dict[str, list[str]] = {}
    from tests.sysfsgen.profiles.fleet_variants import build_variant

    for variant in variants():
        root = build_variant(out / "trees" / variant, variant, host_of(variant))
        for command in ("topo", "counters"):
            res = cli(command, "--root", root, "-o", "json")
            assert res.exit_code in (0, 1), (variant, command, res.stderr)
            (json_dir / f"{host_of(variant)}.{command}.json").write_text(res.stdout)
            if command == "topo":
                hca = json.loads(res.stdout)["nccl_ib_hca"]
                rails[host_of(variant)] = [
                    entry.split(":")[0] for entry in hca.lstrip("=").split(",")
                ]
    if with_sweep:
        hosts = sorted(rails)
        nodes = check_fleet(
            [
                FleetNode(
                    i,
                    h,
                    f"10.0.0.{i + 1}",
                    tuple(Rail(k, a, 1, 400.0) for k, a in enumerate(rails[h])),
                )
                for i, h in enumerate(hosts)
            ]
        )
        narrow = hosts.index(host_of("narrow"))
        faults = PlantedFaults(slow_ends={(narrow, rails[host_of("narrow")].index("mlx5_7")): 0.5})
        result = run_sweep(nodes, SyntheticFabric(faults, noise=0.01, seed=4))
        meta = RunMeta(host=hosts[0], version="0.1.0", generated_at="2026-12-01T12:00:00Z")
        (json_dir / "sweep.json").write_text(
            render_json(Report("sweep", result.to_json(), tuple(sweep_findings(result))), meta)
        )
    return json_dir


#: The mixed fleet: 9 DGX H100-like nodes mid-upgrade. gpu01-gpu05 as the fixture fleet's healthy node;
#: gpu06-gpu09 upgraded (kernel 5.15.0-1071-nvidia, DOCA-OFED's mlx5_core 24.10-1.1.4 on all 12
#: adapters, NVIDIA driver 535.183.01): 14 settings each; gpu02 also runs firmware 28.39.2048 on
#: mlx5_3, gpu04 trained mlx5_8 at 200 Gb/s. 4 x 14 + 2 = 58 node x setting differences, 5 of them
#: distinct: one configuration-outlier row each.
MIXED_UPGRADED = tuple(f"gpu{i:02d}" for i in range(6, 10))


def write_mixed_fleet(out: Path, cli: Callable) -> Path:
    """The mixed fleet's topo JSON (``ibdiag topo -o json`` on each tree) under ``out/json``."""
    from tests.sysfsgen.builder import Tree
    from tests.sysfsgen.profiles import dgx_h100

    json_dir = out / "json"
    json_dir.mkdir(parents=True)
    for i in range(1, 10):
        host = f"gpu{i:02d}"
        root = out / "trees" / host
        tree = Tree(root)
        dgx_h100.build(
            tree, frozenset({"slow_port"}) if host == "gpu04" else frozenset(), host=host
        )
        if host in MIXED_UPGRADED:
            tree.kernel("5.15.0-1071-nvidia")
            tree.module("mlx5_core", "24.10-1.1.4", "0B7D51E9A3C2F48E6D1A7C5")
            tree.file("module/nvidia/version", "535.183.01")
            tree.file("module/nvidia_peermem/version", "535.183.01")
        if host == "gpu02":
            tree.file("class/infiniband/mlx5_3/fw_ver", "28.39.2048")
        res = cli("topo", "--root", root, "-o", "json")
        assert res.exit_code in (0, 1), (host, res.stderr)
        (json_dir / f"{host}.topo.json").write_text(res.stdout)
    return json_dir


def write_sweep(out: Path, nodes: int, faults: PlantedFaults, *, rails: int = 2) -> Path:
    """A sweep of ``nodes`` made-up hosts (``node-000`` ...) with ``rails`` rails each, through the
    :class:`SyntheticFabric` FAKE with ``faults`` planted, as ``ibdiag sweep -o json`` writes it."""
    fleet = check_fleet(
        [
            FleetNode(
                i,
                f"node-{i:03d}",
                f"10.1.{i // 250}.{i % 250 + 1}",
                tuple(Rail(k, f"mlx5_{k}", 1, 400.0) for k in range(rails)),
            )
            for i in range(nodes)
        ]
    )
    result = run_sweep(fleet, SyntheticFabric(faults, noise=0.01, seed=4))
    meta = RunMeta(host="node-000", version="0.1.0", generated_at="2026-12-01T12:00:00Z")
    out.write_text(
        render_json(Report("sweep", result.to_json(), tuple(sweep_findings(result))), meta)
    )
    return out


@pytest.fixture(scope="session")
def fleet_dir(tmp_path_factory):
    """The fixture fleet's JSON directory, written once per test session (registered in conftest.py)."""
    from tests.support.cli import run_cli

    return write_fleet(tmp_path_factory.mktemp("fleet"), run_cli)
