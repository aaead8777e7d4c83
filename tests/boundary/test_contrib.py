"""contrib/ (#11): the NHC check, the Slurm HealthCheckProgram wrapper and the NPD plugin config, run
against the real ibdiag on fixtures. ``scontrol`` and ``logger`` are stubs (the scheduler and syslog
cannot exist here) that record their arguments; ibdiag itself is the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.env import REPO, SYSFS_FIXTURES

CONTRIB = REPO / "contrib"
FAULTY = SYSFS_FIXTURES / "dgx-h100-faulty"
HEALTHY = SYSFS_FIXTURES / "dgx-h100"
NO_RDMA = SYSFS_FIXTURES / "vm-no-rdma"
RECORDER = '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> "{log}"\nprintf "@@END@@\\n" >> "{log}"\n'


@pytest.fixture
def stubs(tmp_path):
    """A PATH directory with recording ``scontrol`` and ``logger``; returns (env, calls(name))."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "logger"):
        script = bin_dir / name
        script.write_text(RECORDER.format(log=tmp_path / f"{name}.log"))
        script.chmod(0o755)

    def calls(name: str) -> list[list[str]]:
        log = tmp_path / f"{name}.log"
        if not log.exists():
            return []
        return [
            chunk.strip("\n").split("\n")
            for chunk in log.read_text().split("@@END@@\n")
            if chunk.strip()
        ]

    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return env, calls


def _wrapper(env, ibdiag_exe, root, checks="topo"):
    run_env = {
        **env,
        "IBDIAG": ibdiag_exe,
        "IBDIAG_CHECKS": checks,
        "IBDIAG_ARGS": f"--root {root}",
        "IBDIAG_NODENAME": "gpu-node-07",
    }
    return subprocess.run(
        [str(CONTRIB / "slurm" / "ibdiag-healthcheck")],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_slurm_wrapper_drains_with_the_line_on_a_failing_finding(stubs, ibdiag_exe):
    env, calls = stubs
    res = _wrapper(env, ibdiag_exe, FAULTY)
    assert res.returncode == 1, res.stderr
    (call,) = calls("scontrol")
    assert call[:3] == ["update", "NodeName=gpu-node-07", "State=DRAIN"]
    reason = call[3]
    assert reason.startswith("Reason=ibdiag topo: FAIL topo.pcie_width mlx5_6")
    assert len(reason.split(": ", 1)[1]) <= 80 and reason.isascii()
    assert any("draining gpu-node-07" in " ".join(c) for c in calls("logger"))


def test_slurm_wrapper_leaves_a_healthy_node_alone(stubs, ibdiag_exe):
    env, calls = stubs
    res = _wrapper(env, ibdiag_exe, HEALTHY, checks="topo counters")
    assert res.returncode == 0, res.stderr
    assert calls("scontrol") == []


def test_slurm_wrapper_only_logs_when_ibdiag_cannot_run(stubs, ibdiag_exe, tmp_path):
    env, calls = stubs
    res = _wrapper(env, ibdiag_exe, NO_RDMA, checks="counters")  # no RDMA port: exit 3
    assert res.returncode == 0 and calls("scontrol") == []
    (log,) = calls("logger")
    assert (
        "ibdiag counters could not judge gpu-node-07 (exit 3): UNKNOWN ibdiag: no RDMA port"
        in " ".join(log)
    )
    res = _wrapper(env, ibdiag_exe, tmp_path / "missing", checks="topo")  # usage error: exit 2
    assert res.returncode == 0 and calls("scontrol") == [] and "(exit 2)" in res.stderr


# NHC is not packaged in Debian: its `die` and `log` helpers are emulated as NHC documents them (die
# records the message and NHC marks the node offline through scontrol; log writes the log file).
NHC_HARNESS = """
set -u
die() {{ scontrol update NodeName=gpu-node-07 State=DRAIN "Reason=NHC: $2"; return "$1"; }}
log() {{ printf '%s\\n' "$*" >> "{log}"; }}
source "{script}"
check_ibdiag "$@"
"""


def _nhc(env, ibdiag_exe, tmp_path, *args):
    harness = NHC_HARNESS.format(log=tmp_path / "nhc.log", script=CONTRIB / "nhc" / "ibdiag.nhc")
    return subprocess.run(
        ["bash", "-c", harness, "nhc", *args],
        env={**env, "IBDIAG": ibdiag_exe},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_nhc_check_fails_with_the_line_and_only_logs_when_it_cannot_run(
    stubs, ibdiag_exe, tmp_path
):
    env, calls = stubs
    res = _nhc(env, ibdiag_exe, tmp_path, "topo", "--root", str(FAULTY))
    assert res.returncode == 1
    (call,) = calls("scontrol")
    assert call[3].startswith("Reason=NHC: ibdiag: FAIL topo.pcie_width mlx5_6")
    res = _nhc(env, ibdiag_exe, tmp_path, "topo", "--root", str(HEALTHY))
    assert res.returncode == 0 and len(calls("scontrol")) == 1
    res = _nhc(env, ibdiag_exe, tmp_path, "counters", "--root", str(NO_RDMA))
    assert res.returncode == 0 and len(calls("scontrol")) == 1
    assert (
        "could not judge the node (exit 3): UNKNOWN ibdiag:" in (tmp_path / "nhc.log").read_text()
    )


def test_npd_config_is_a_valid_custom_plugin_monitor(ibdiag_exe):
    doc = json.loads((CONTRIB / "npd" / "ibdiag-plugin-monitor.json").read_text())
    assert doc["plugin"] == "custom" and doc["source"]
    cfg = doc["pluginConfig"]
    assert cfg["max_output_length"] == 80 and cfg["concurrency"] >= 1
    for key in ("invoke_interval", "timeout"):
        assert cfg[key].endswith("s") and float(cfg[key][:-1]) > 0
    conditions = {c["type"]: c for c in doc["conditions"]}
    assert all(c["reason"] and c["message"] for c in conditions.values())
    assert doc["rules"]
    for rule in doc["rules"]:
        assert (
            rule["type"] in ("temporary", "permanent")
            and rule["reason"]
            and rule["timeout"].endswith("s")
        )
        if rule["type"] == "permanent":
            assert rule["condition"] in conditions
        assert Path(rule["path"]).name == "ibdiag" and rule["args"][-2:] == ["-o", "line"]
        # what NPD would read: exit 0/1 with one line within max_output_length, on a failing fixture
        res = subprocess.run(
            [ibdiag_exe, *rule["args"], "--root", str(FAULTY)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            res.returncode == 1 and len(res.stdout.encode()) <= 81 and res.stdout.count("\n") == 1
        )
