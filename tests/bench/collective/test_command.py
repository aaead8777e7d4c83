"""``ibdiag bench collective`` as a library: ``run(CollectiveRequest(...))`` without the command line, as
the supervisor of local ranks (real processes) and as a rank of a one-rank job (in this process)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from ibdiag.bench import views
from ibdiag.bench.collective.command import CollectiveRequest, run
from ibdiag.bench.collective.spec import RunSpec
from ibdiag.errors import UsageError

LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "IBDIAG_COLLECTIVE_REPORT_DIR",
    "IBDIAG_TEST_HOOK",
)
SPEC = RunSpec("all_reduce", "gloo", "float32", (4096, 65536), iters=3, warmup=1, timeout_s=60.0)


def _environ(**extra: str) -> dict[str, str]:
    """This process's environment (PATH, PYTHONPATH for the ranks) without any launcher's variables."""
    return {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS} | extra


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_without_ranks_or_with_a_report_dir_but_no_rank_it_says_what_to_do():
    with pytest.raises(UsageError, match="no ranks to run") as e:
        run(CollectiveRequest(SPEC, environ=_environ()))
    assert e.value.hint is not None and "--nproc 4" in e.value.hint
    with pytest.raises(UsageError, match="is set but no rank environment"):
        run(CollectiveRequest(SPEC, environ=_environ(IBDIAG_COLLECTIVE_REPORT_DIR="/tmp")))
    with pytest.raises(UsageError, match="--nproc 0 is out of range"):
        run(CollectiveRequest(SPEC, nproc=0, environ=_environ()))


def test_importing_the_command_does_not_import_torch():
    code = (
        "import sys\nimport ibdiag.bench.collective.command\n"
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_local_ranks_started_and_supervised_by_the_library():
    pytest.importorskip("torch")
    steps: list[tuple[int, int, str]] = []
    outcome = run(
        CollectiveRequest(
            SPEC,
            nproc=2,
            environ=_environ(),
            on_progress=lambda done, total, label: steps.append((done, total, label)),
        )
    )
    assert outcome.result is not None and outcome.exit_status == 0
    (one,) = outcome.result.runs
    assert (one.kind, one.meta.op, one.meta.world_size) == ("collective", "all_reduce", 2)
    assert [r.bytes for r in one.collective_rows(in_place=True)] == [4096, 65536]
    assert all(r.wrong == 0 for r in one.collective_rows())
    assert steps and steps[-1][0] == steps[-1][1]  # rank 0's last step: all done
    assert outcome.result.report.data["world_size"] == 2
    assert views.outputs(outcome.result).prom is not None


@pytest.mark.slow
def test_this_process_as_rank_0_of_a_one_rank_job():
    pytest.importorskip("torch")
    environ = _environ(
        RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())
    )
    said: list[tuple[str, str | None]] = []
    outcome = run(
        CollectiveRequest(SPEC, environ=environ, on_error=lambda m, h: said.append((m, h)))
    )
    assert outcome.result is not None and said == []
    (one,) = outcome.result.runs
    assert one.meta.world_size == 1
    assert one.meta.measured is not None and one.meta.measured.launcher == "torchrun"
    assert {f.check for f in outcome.result.report.findings} >= {"collective.wrong"}
