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
        "IBDIAG_HEALTHCHECK_CONF": "/dev/null",
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


def _updates(calls):
    return [c for c in calls("scontrol") if c[0] == "update"]


def test_slurm_wrapper_drains_with_the_line_on_a_failing_finding(stubs, ibdiag_exe):
    env, calls = stubs
    res = _wrapper(env, ibdiag_exe, FAULTY)
    assert res.returncode == 1, res.stderr
    (call,) = _updates(calls)
    assert call[:3] == ["update", "NodeName=gpu-node-07", "State=DRAIN"]
    reason = call[3]
    # the failing check first: sinfo -R shows the reason's first 20 characters
    assert reason.startswith("Reason=topo.pcie_width mlx5_6") and reason.endswith(" [ibdiag]")
    assert len(reason) <= len("Reason=") + 80 + len(" [ibdiag]") and reason.isascii()
    assert any("draining gpu-node-07" in " ".join(c) for c in calls("logger"))


def test_slurm_wrapper_leaves_a_healthy_node_alone(stubs, ibdiag_exe):
    env, calls = stubs
    res = _wrapper(env, ibdiag_exe, HEALTHY, checks="topo counters")
    assert res.returncode == 0, res.stderr
    assert _updates(calls) == []  # the stub says the node is not drained: nothing to resume


def test_slurm_wrapper_only_logs_when_ibdiag_cannot_run(stubs, ibdiag_exe, tmp_path):
    env, calls = stubs
    res = _wrapper(env, ibdiag_exe, NO_RDMA, checks="counters")  # no RDMA port: exit 3
    assert res.returncode == 0 and _updates(calls) == []
    (log,) = calls("logger")
    assert (
        "ibdiag counters could not judge gpu-node-07 (exit 3): UNKNOWN ibdiag: no RDMA port"
        in " ".join(log)
    )
    res = _wrapper(env, ibdiag_exe, tmp_path / "missing", checks="topo")  # usage error: exit 2
    assert res.returncode == 0 and _updates(calls) == [] and "(exit 2)" in res.stderr


# NHC is not packaged in Debian: its `die` and `log` helpers are emulated as NHC documents them (die
# records the message and NHC marks the node offline through scontrol; log writes the log file).
# NHC's own PATH, without /usr/local/bin; ibdiag's path comes from the config file.
NHC_PATH = "/sbin:/usr/sbin:/bin:/usr/bin"
NHC_HARNESS = """
set -u
die() {{ "{scontrol}" update NodeName=gpu-node-07 State=DRAIN "Reason=NHC: $2"; return "$1"; }}
log() {{ printf '%s\\n' "$*" >> "{log}"; }}
source "{script}"
check_ibdiag "$@"
"""


def _nhc(env, tmp_path, *args, ibdiag="", on_missing=""):
    conf = tmp_path / "healthcheck.conf"
    conf.write_text(f'IBDIAG="{ibdiag}"\nON_MISSING={on_missing}\n')
    harness = NHC_HARNESS.format(
        log=tmp_path / "nhc.log",
        script=CONTRIB / "nhc" / "ibdiag.nhc",
        scontrol=tmp_path / "bin" / "scontrol",
    )
    return subprocess.run(
        ["/bin/bash", "-c", harness, "nhc", *args],
        env={"PATH": NHC_PATH, "IBDIAG_HEALTHCHECK_CONF": str(conf)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_nhc_check_fails_with_the_line_and_only_logs_when_it_cannot_judge(
    stubs, ibdiag_exe, tmp_path
):
    env, calls = stubs
    res = _nhc(env, tmp_path, "topo", "--root", str(FAULTY), ibdiag=ibdiag_exe)
    assert res.returncode == 1, res.stderr
    (call,) = calls("scontrol")
    assert call[3].startswith("Reason=NHC: topo.pcie_width mlx5_6")  # the failing check first
    res = _nhc(env, tmp_path, "topo", "--root", str(HEALTHY), ibdiag=ibdiag_exe)
    assert res.returncode == 0 and len(calls("scontrol")) == 1
    res = _nhc(env, tmp_path, "counters", "--root", str(NO_RDMA), ibdiag=ibdiag_exe)
    assert res.returncode == 0 and len(calls("scontrol")) == 1
    assert (
        "could not judge the node (exit 3): UNKNOWN ibdiag:" in (tmp_path / "nhc.log").read_text()
    )


def test_nhc_check_fails_loudly_when_ibdiag_cannot_start(stubs, tmp_path):
    env, calls = stubs
    missing = str(tmp_path / "nowhere" / "ibdiag")
    res = _nhc(env, tmp_path, "topo", ibdiag=missing)
    assert res.returncode == 1
    (call,) = calls("scontrol")
    assert call[3] == f"Reason=NHC: ibdiag-missing: {missing} exit 127, set IBDIAG"
    res = _nhc(env, tmp_path, "topo", ibdiag=missing, on_missing="log")  # configured: only log
    assert res.returncode == 0 and len(calls("scontrol")) == 1
    assert "cannot run (exit 127)" in (tmp_path / "nhc.log").read_text()


def _crashing_ibdiag(tmp_path, ibdiag_exe):
    """The real console script with a dependency that fails to import (a half-done upgrade): Python's
    traceback on stderr, exit 1, nothing on stdout."""
    broken = tmp_path / "broken" / "typer"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("typer: half-upgraded")\n')
    script = tmp_path / "ibdiag-crashing"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{broken.parent}:{REPO}" exec "{ibdiag_exe}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_a_crash_is_could_not_judge_for_the_wrapper_and_nhc(stubs, ibdiag_exe, tmp_path):
    env, calls = stubs
    crashing = _crashing_ibdiag(tmp_path, ibdiag_exe)
    res = _wrapper(env, crashing, HEALTHY, checks="topo counters")
    assert res.returncode == 0 and _updates(calls) == [], res.stderr  # not a node fault
    assert (
        "ibdiag topo could not judge gpu-node-07 (exit 1 without a verdict, crashed?): "
        "ImportError: typer: half-upgraded" in res.stderr
    )
    res = _nhc(env, tmp_path, "topo", ibdiag=crashing)
    assert res.returncode == 0 and calls("scontrol") == []
    assert "exit 1 without a verdict" in (tmp_path / "nhc.log").read_text()


def test_slurm_wrapper_names_the_failing_checks_of_every_command_once(stubs, ibdiag_exe):
    env, calls = stubs
    res = _wrapper(env, ibdiag_exe, SYSFS_FIXTURES / "counters-faulty", checks="topo counters")
    assert res.returncode == 1
    (call,) = _updates(calls)
    # topo: port.state mlx5_2:1; counters: port.state mlx5_2:1 (again) and counters.errors mlx5_1:1
    assert call[3] == "Reason=port.state mlx5_2:1, counters.errors mlx5_1:1 [ibdiag]"


def test_slurm_wrapper_refuses_a_config_file_it_does_not_understand(stubs, ibdiag_exe, tmp_path):
    env, calls = stubs
    conf = tmp_path / "healthcheck.conf"
    conf.write_text("IBDIAG_ARGS=--strict\n")  # an environment variable's name, not a key
    res = subprocess.run(
        [str(CONTRIB / "slurm" / "ibdiag-healthcheck"), str(conf)],
        env={"SLURMD_NODENAME": "gpu-node-07", "PATH": env["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and f"{conf}:1: unknown key IBDIAG_ARGS" in res.stderr
    assert _updates(calls) == []


CRON_PATH = "/usr/bin:/bin"  # what cron gives a job


def _cron_jobs():
    """(environment, command) of each job of contrib/cron/ibdiag, as cron reads a cron.d file."""
    env, jobs = {"PATH": CRON_PATH, "SHELL": "/bin/sh", "HOME": "/root", "LOGNAME": "root"}, []
    for line in (CONTRIB / "cron" / "ibdiag").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if eq and " " not in name:
            env[name] = value
            continue
        fields = line.split(None, 6)
        assert fields[5] == "root" and fields[6].startswith("ibdiag ")
        jobs.append((dict(env), fields[6]))
    return jobs


def test_cron_file_finds_a_pip_installed_ibdiag_and_writes_the_metrics(ibdiag_exe, tmp_path):
    """cron itself is not run (a job waits for its minute): its environment and its /bin/sh are."""
    scripts = subprocess.run(
        ["/usr/bin/python3", "-c", "import sysconfig; print(sysconfig.get_path('scripts'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # where `pip install .` as root puts the console script (/usr/local/bin)
    install = tmp_path / "local-bin"  # stands in for it: this test does not write to /usr/local
    install.mkdir()
    (install / "ibdiag").symlink_to(ibdiag_exe)
    jobs = _cron_jobs()
    assert len(jobs) == 2
    for env, command in jobs:
        assert scripts in env["PATH"].split(":")
        env["PATH"] = env["PATH"].replace(scripts, str(install))
        command = command.replace("/var/lib/prometheus/node-exporter", str(tmp_path))
        command = command.replace("/etc/ibdiag/ibdiag.toml", str(CONTRIB / "etc" / "ibdiag.toml"))
        command = command.replace(" -o line", f" --root {FAULTY} -o line")
        res = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True)
        assert res.returncode == 1, res.stderr  # the faulty fixture's answer, not 127
        # the README's old line, without the file's PATH: never ran
        bare = subprocess.run(
            ["/bin/sh", "-c", command], env={**env, "PATH": CRON_PATH}, capture_output=True
        )
        assert bare.returncode == 127
    for name in ("ibdiag-topo.prom", "ibdiag-counters.prom"):
        assert "ibdiag_up" in (tmp_path / name).read_text()


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
