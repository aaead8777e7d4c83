"""A real ``slurmctld`` for the tests: a throw-away cluster on 127.0.0.1 that reads a topology.conf.

``SlurmCtld(workdir, nodes, topology)`` writes slurm.conf (``auth/none``: no munge key, no slurmd;
``TopologyPlugin=topology/tree``, the nodes at 127.0.0.x) beside ``topology.conf``, starts
``slurmctld -D`` on a free port and waits until ``scontrol`` answers; ``scontrol(*args)`` runs it
against this cluster; ``log`` is what slurmctld printed. Needs Debian's ``slurmctld`` and
``slurm-client`` (make system-deps); skips (fails under IBDIAG_TEST_STRICT=1) without them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.env import unavailable


def need_slurm() -> None:
    missing = [t for t in ("slurmctld", "scontrol") if shutil.which(t) is None]
    if missing:
        unavailable(
            f"Slurm is not installed ({', '.join(missing)}): apt-get install slurmctld slurm-client (make system-deps)"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmCtld:
    def __init__(
        self, workdir: Path, nodes: str, count: int, topology: str, timeout_s: float = 30
    ) -> None:
        self.dir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "state").mkdir(exist_ok=True)
        (workdir / "spool").mkdir(exist_ok=True)
        (workdir / "topology.conf").write_text(topology)
        port = _free_port()
        self.conf = workdir / "slurm.conf"
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=ibdiagtest",
                    f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
                    f"SlurmctldPort={port}",
                    f"SlurmdPort={_free_port()}",
                    "AuthType=auth/none",
                    "CredType=cred/none",
                    f"StateSaveLocation={workdir / 'state'}",
                    f"SlurmdSpoolDir={workdir / 'spool'}",
                    f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
                    f"SlurmUser={'root' if os.geteuid() == 0 else os.environ.get('USER', 'nobody')}",
                    "TopologyPlugin=topology/tree",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SchedulerType=sched/builtin",
                    "SelectType=select/linear",
                    "MpiDefault=none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    f"NodeName={nodes} NodeAddr=127.0.0.[1-{count}] CPUs=1 State=UNKNOWN",
                    "PartitionName=all Nodes=ALL Default=YES",
                    "",
                ]
            )
        )
        self.out = workdir / "slurmctld.out"
        with open(self.out, "wb") as fh:
            self.proc = subprocess.Popen(
                ["slurmctld", "-D", "-f", str(self.conf)],
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"slurmctld exited ({self.proc.returncode}):\n{self.log[-3000:]}"
                )
            if self.scontrol("ping").returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"slurmctld did not answer in {timeout_s} s:\n{self.log[-3000:]}"
                )
            time.sleep(0.2)

    @property
    def log(self) -> str:
        return self.out.read_text(errors="replace")

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args],
            capture_output=True,
            text=True,
            timeout=10,
            env={**os.environ, "SLURM_CONF": str(self.conf)},
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def __enter__(self) -> SlurmCtld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
