"""contrib/slurm/ibdiag-healthcheck run by a real slurmd (issue #27): slurmd starts it every 2 s as
``HealthCheckProgram`` with no PATH and only ``$SLURMD_NODENAME``, so its settings come from the
config file beside it and ibdiag is found without PATH; the node's state is read back from a real
slurmctld. Each phase rewrites the config file and waits for the node to get there."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.env import REPO, SYSFS_FIXTURES
from tests.support.slurm import SlurmNode, need_slurmd

pytestmark = pytest.mark.slow

WRAPPER = REPO / "contrib" / "slurm" / "ibdiag-healthcheck"
FAULTY = SYSFS_FIXTURES / "dgx-h100-faulty"
HEALTHY = SYSFS_FIXTURES / "dgx-h100"


def _configure(bin_dir: Path, slurm_conf: Path, **keys: str) -> None:
    lines = [f"SLURM_CONF={slurm_conf}", "CHECKS=topo"]
    lines += [f'{k}="{v}"' for k, v in keys.items()]
    tmp = bin_dir / "healthcheck.conf.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, bin_dir / "healthcheck.conf")


def _runs_after(stamp: Path, n: int, timeout_s: float = 60) -> None:
    """Wait until the wrapper has run ibdiag ``n`` more times (each run rewrites ``stamp``)."""
    seen, last = 0, stamp.stat().st_mtime_ns if stamp.exists() else 0
    deadline = time.monotonic() + timeout_s
    while seen < n:
        assert time.monotonic() < deadline, "slurmd stopped running the health check"
        now = stamp.stat().st_mtime_ns if stamp.exists() else 0
        if now != last:
            seen, last = seen + 1, now
        time.sleep(0.1)


def test_slurmd_drains_keeps_an_admin_reason_and_resumes_what_ibdiag_drained(tmp_path, ibdiag_exe):
    need_slurmd()
    bin_dir = tmp_path / "bin"  # as installed: the wrapper beside the console script and its config
    bin_dir.mkdir()
    (bin_dir / "ibdiag-healthcheck").symlink_to(WRAPPER)
    (bin_dir / "ibdiag").symlink_to(ibdiag_exe)
    stamp = tmp_path / "topo.prom"
    conf = tmp_path / "slurm" / "slurm.conf"
    args = f"--textfile {stamp} --root"
    _configure(bin_dir, conf, ARGS=f"{args} {FAULTY}")  # no IBDIAG=: found beside the wrapper
    with SlurmNode(tmp_path / "slurm", bin_dir / "ibdiag-healthcheck") as slurm:
        # a faulty node drains, the failing check first (sinfo -R shows 20 characters)
        node = slurm.wait_for(lambda n: "DRAIN" in n["State"], what="drain on a faulty fixture")
        assert node["Reason"].startswith("topo.pcie_width mlx5"), node
        assert node["Reason"].endswith("[ibdiag]") and "FAIL" not in node["Reason"]

        # healthy again: resumed, because ibdiag drained it
        _configure(bin_dir, conf, ARGS=f"{args} {HEALTHY}")
        slurm.wait_for(lambda n: "DRAIN" not in n["State"], what="resume on a healthy fixture")

        # an administrator's drain is left alone, by a failing run and by a passing one
        assert (
            slurm.scontrol(
                "update", "NodeName=gpu-node-07", "State=DRAIN", "Reason=bad DIMM"
            ).returncode
            == 0
        )
        _runs_after(stamp, 2)
        assert slurm.node()["Reason"] == "bad DIMM"
        _configure(bin_dir, conf, ARGS=f"{args} {FAULTY}")
        _runs_after(stamp, 2)
        node = slurm.node()
        assert node["Reason"] == "bad DIMM" and "DRAIN" in node["State"], node

        # ibdiag cannot be started at all: drains loudly, with the reason first
        assert slurm.scontrol("update", "NodeName=gpu-node-07", "State=RESUME").returncode == 0
        _configure(bin_dir, conf, IBDIAG=str(tmp_path / "nowhere" / "ibdiag"))
        node = slurm.wait_for(
            lambda n: n.get("Reason", "").startswith("ibdiag-missing"), what="ibdiag missing"
        )
        assert "exit 127" in node["Reason"] and "DRAIN" in node["State"]

        # the configured absolute path works with no PATH, and clears the drain it caused
        _configure(bin_dir, conf, IBDIAG=ibdiag_exe, ARGS=f"--root {HEALTHY}")
        slurm.wait_for(lambda n: "DRAIN" not in n["State"], what="resume with IBDIAG=")


NO_MLX5 = SYSFS_FIXTURES / "gpu-no-mlx5"
COUNTERS_FAULTY = SYSFS_FIXTURES / "counters-faulty"
SHIPPED_TOML = REPO / "contrib" / "etc" / "ibdiag.toml"


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def _ibdiag_of_this_tree(path: Path, ibdiag_exe: str, stamp: Path, pythonpath: str = "") -> Path:
    """The console script on the tree under test (slurmd passes no PYTHONPATH); each run touches
    ``stamp``. ``pythonpath`` goes first: a directory with a broken dependency makes it crash."""
    return _script(
        path,
        f'touch "{stamp}"\nPYTHONPATH="{pythonpath}{REPO}" exec "{ibdiag_exe}" "$@"',
    )


def test_slurmd_drains_a_gpu_node_without_its_fabric_names_every_command_and_tells_a_crash(
    tmp_path, ibdiag_exe
):
    """Issue 38: the shipped config (healthcheck.conf's ARGS with contrib/etc/ibdiag.toml) drains a
    GPU node whose mlx5 driver did not load; the reason lists the failing checks of topo *and*
    counters; an ibdiag that crashes (a real Python traceback from the real entry point: a dependency
    that fails to import, as after a partial upgrade) is "could not judge", not a node fault."""
    need_slurmd()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ibdiag-healthcheck").symlink_to(WRAPPER)
    stamp = tmp_path / "ran"
    _ibdiag_of_this_tree(bin_dir / "ibdiag", ibdiag_exe, stamp)
    toml = tmp_path / "ibdiag.toml"
    toml.write_text(SHIPPED_TOML.read_text())
    shipped_args = next(
        line.split("=", 1)[1].strip('"')
        for line in (REPO / "contrib/etc/healthcheck.conf").read_text().splitlines()
        if line.startswith("ARGS=")
    )
    assert shipped_args == "--config /etc/ibdiag/ibdiag.toml"
    args = shipped_args.replace("/etc/ibdiag/ibdiag.toml", str(toml))
    conf = tmp_path / "slurm" / "slurm.conf"

    def configure(root: Path, checks: str = "topo counters", **keys: str) -> None:
        _configure(bin_dir, conf, ARGS=f"{args} --root {root}", **keys)
        # _configure writes CHECKS=topo first; a later line wins
        with open(bin_dir / "healthcheck.conf", "a") as fh:
            fh.write(f'CHECKS="{checks}"\n')

    configure(NO_MLX5)
    with SlurmNode(tmp_path / "slurm", bin_dir / "ibdiag-healthcheck") as slurm:
        node = slurm.wait_for(lambda n: "DRAIN" in n["State"], what="drain without mlx5")
        assert node["Reason"] == "topo.adapters node [ibdiag]", node

        # both commands fail: one reason with both (port.state judged by both, named once)
        configure(COUNTERS_FAULTY)
        node = slurm.wait_for(
            lambda n: "counters.errors" in n.get("Reason", ""), what="both commands' checks"
        )
        assert node["Reason"] == "port.state mlx5_2:1, counters.errors mlx5_1:1 [ibdiag]", node

        configure(HEALTHY)
        slurm.wait_for(lambda n: "DRAIN" not in n["State"], what="resume when healthy")

        # ibdiag crashes (exit 1, a traceback, no verdict line): logged, the node stays in service
        broken = tmp_path / "broken" / "typer"
        broken.mkdir(parents=True)
        (broken / "__init__.py").write_text('raise ImportError("typer: half-upgraded")\n')
        _ibdiag_of_this_tree(bin_dir / "ibdiag", ibdiag_exe, stamp, f"{broken.parent}:")
        _runs_after(stamp, 4)
        node = slurm.node()
        assert "DRAIN" not in node["State"] and not node.get("Reason"), node

        # ... and with ON_UNKNOWN=drain its reason says ibdiag could not judge, and why
        configure(HEALTHY, ON_UNKNOWN="drain")
        node = slurm.wait_for(lambda n: "DRAIN" in n["State"], what="drain on a crash")
        assert node["Reason"].startswith("ibdiag-unknown topo exit 1 without a verdict"), node
        assert "ImportError: typer: half-upgraded" in node["Reason"], node
