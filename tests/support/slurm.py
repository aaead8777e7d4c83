"""Real Slurm daemons for the tests: throw-away clusters on 127.0.0.1 (``auth/none``, ``cred/none``: no
munge key), each in its own directory, with ``scontrol(*args)`` against it and ``log`` of what the
daemons printed. Needs Debian's ``slurmctld``, ``slurmd`` and ``slurm-client`` (make system-deps); skips
(fails under IBDIAG_TEST_STRICT=1) without them.

* :class:`SlurmCtld` — ``slurmctld`` alone, ``TopologyPlugin=topology/tree`` reading a given
  ``topology.conf`` (the fabric's ``--slurm-topology``).
* :class:`SlurmNode` — ``slurmctld`` and ``slurmd`` for one node named ``gpu-node-07`` (not this host's
  name, so a wrapper that used ``hostname -s`` instead of ``$SLURMD_NODENAME`` would miss it), with a
  ``HealthCheckProgram`` that slurmd runs every ``interval`` seconds with its own empty environment.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.env import need_root, unavailable

NODE = "gpu-node-07"


def _need(tools: tuple[str, ...], packages: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        unavailable(
            f"Slurm is not installed ({', '.join(missing)}): apt-get install {packages} (make system-deps)"
        )


def need_slurm() -> None:
    _need(("slurmctld", "scontrol"), "slurmctld slurm-client")


def need_slurmd() -> None:
    need_root()
    _need(("slurmctld", "slurmd", "scontrol"), "slurmctld slurmd slurm-client")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _conf(workdir: Path, user: str, extra: list[str]) -> str:
    return "\n".join(
        [
            "ClusterName=ibdiagtest",
            f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/none",
            "CredType=cred/none",
            f"StateSaveLocation={workdir / 'state'}",
            f"SlurmdSpoolDir={workdir / 'spool'}",
            f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
            f"SlurmUser={user}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/linear",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            *extra,
            "PartitionName=all Nodes=ALL Default=YES",
            "",
        ]
    )


class _Cluster:
    """The daemons of one throw-away cluster: started in their own sessions, stopped in reverse."""

    def __init__(self, workdir: Path, user: str, extra: list[str]) -> None:
        self.dir = workdir
        for sub in ("state", "spool"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "slurm.conf"
        self.conf.write_text(_conf(workdir, user, extra))
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, argv: list[str]) -> None:
        with open(self.dir / f"{name}.out", "wb") as fh:
            self.procs.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    cwd=self.dir,
                    start_new_session=True,
                )
            )

    def _wait(self, ok: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ok():
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited ({p.returncode}):\n{self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not ready in {timeout_s} s:\n{self.log}")
            time.sleep(0.2)

    @property
    def log(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.dir.glob("*.out")
        )

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args],
            capture_output=True,
            text=True,
            timeout=10,
            env={**os.environ, "SLURM_CONF": str(self.conf)},
        )

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(5)

    def __enter__(self) -> _Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SlurmCtld(_Cluster):
    def __init__(
        self, workdir: Path, nodes: str, count: int, topology: str, timeout_s: float = 30
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "topology.conf").write_text(topology)
        user = "root" if os.geteuid() == 0 else os.environ.get("USER", "nobody")
        super().__init__(
            workdir,
            user,
            [
                "TopologyPlugin=topology/tree",
                f"NodeName={nodes} NodeAddr=127.0.0.[1-{count}] CPUs=1 State=UNKNOWN",
            ],
        )
        self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._wait(lambda: self.scontrol("ping").returncode == 0, timeout_s, "slurmctld ping")


class SlurmNode(_Cluster):
    def __init__(
        self, workdir: Path, health_check: Path, interval: int = 2, timeout_s: float = 30
    ) -> None:
        super().__init__(
            workdir,
            "root",
            [
                f"SlurmdPidFile={workdir / 'slurmd.pid'}",
                "SlurmdUser=root",
                "ReturnToService=2",
                f"HealthCheckProgram={health_check}",
                f"HealthCheckInterval={interval}",
                f"NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 "
                "CPUs=1 State=UNKNOWN",
            ],
        )
        self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._wait(lambda: self.scontrol("ping").returncode == 0, timeout_s, "slurmctld ping")
        self._start("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", NODE])
        self._wait(
            lambda: "IDLE" in self.node().get("State", "") or self.drained(), timeout_s, "slurmd"
        )

    def node(self) -> dict[str, str]:
        """The node's fields; ``Reason`` is the reason alone (without ``[user@time]``)."""
        out = self.scontrol("-o", "show", "node", NODE).stdout.strip()
        fields = dict(re.findall(r"(\w+)=(\S*)", out.split(" Reason=", 1)[0]))
        if " Reason=" in out:
            fields["Reason"] = re.sub(r" \[[^]]*@[^]]*\].*$", "", out.split(" Reason=", 1)[1])
        return fields

    def drained(self) -> bool:
        return "DRAIN" in self.node().get("State", "")

    def wait_for(
        self, ok: Callable[[dict[str, str]], bool], timeout_s: float = 60, what: str = "state"
    ) -> dict[str, str]:
        """Poll the node until ``ok(fields)``; returns the fields."""
        self._wait(lambda: ok(self.node()), timeout_s, f"{what} (node: {self.node()})")
        return self.node()
