"""``ibdiag sweep`` as a library, without the command line: :func:`ibdiag.sweep.command.run` and
:func:`~ibdiag.sweep.command.plan` called with a request, the launcher's environment handed in.

The two-rank sweep runs both ranks in this process (a thread each, rank 0 serving the rendezvous store
on loopback, TCP pair tests through ibdiag's own engine): the entry point needs no process of its own.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ibdiag.config import Config
from ibdiag.errors import UsageError
from ibdiag.output.outputs import TableLayout
from ibdiag.sweep import command, views
from ibdiag.sweep.command import SweepProgress, SweepRequest, SweepRunResult
from ibdiag.sweep.schedule import Pattern
from tests.support.sweep import free_port, slurm_env

NO_LAUNCHER: dict[str, str] = {}


def test_a_process_no_launcher_placed_is_told_how_to_launch_one():
    with pytest.raises(UsageError) as e:
        command.run(SweepRequest(environ=NO_LAUNCHER, transport="tcp"))
    assert "under the cluster's launcher" in e.value.message
    assert "srun -N 4 --ntasks-per-node 1" in (e.value.hint or "")


def test_the_options_are_checked_before_the_launcher_is_looked_for():
    with pytest.raises(UsageError, match="--rounds is for --pattern random, not ring"):
        command.run(SweepRequest(rounds=3, environ=NO_LAUNCHER))
    with pytest.raises(UsageError, match="names an adapter twice"):
        command.run(SweepRequest(rails="mlx5_0,mlx5_0", environ=NO_LAUNCHER))
    with pytest.raises(UsageError, match="--nodes and --pair-seconds are for --plan"):
        command.run(SweepRequest(nodes=4, environ=NO_LAUNCHER))


def test_plan_takes_config_defaults_and_the_launchers_world_size():
    cfg = Config(None, {"sweep": {"pattern": "pairwise", "duration_s": 2.0}})
    res = command.plan(SweepRequest(config=cfg, nodes=8))
    plan = res.report.data["plan"]
    assert res.report.command == "sweep-plan" and not res.rails_given
    assert plan["pattern"] == "pairwise" and plan["nodes"] == 8 and plan["rounds"] == 7
    assert plan["pair_s"] == 3.0  # [sweep] duration_s 2 + 1 s of set-up
    # no --nodes: the world size of the job the launcher describes
    torchrun = {"RANK": "0", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "head"}
    res = command.plan(SweepRequest(pattern=Pattern.RING, rails="mlx5_0,mlx5_1", environ=torchrun))
    assert res.report.data["plan"]["nodes"] == 6 and res.report.data["plan"]["rails"] == 2
    assert res.rails_given
    table = views.plan_outputs(res).table
    assert table is not None
    lines = list(table(TableLayout(strict=False, width=80)))
    assert lines[0].startswith("plan: ring, 6 nodes x 2 rails: 2 rounds")


@pytest.mark.parametrize(
    "request_, message",
    [
        (SweepRequest(nodes=8, output_format="csv"), "--plan prints a table or JSON, not csv"),
        (SweepRequest(nodes=8, save=Path("s.json")), "nothing to --save or --png"),
        (SweepRequest(), "--plan needs a node count"),
    ],
)
def test_plan_refuses_what_it_cannot_do(request_, message):
    with pytest.raises(UsageError, match=message):
        command.plan(request_)


@pytest.mark.slow
def test_two_ranks_in_one_process_sweep_their_pair_and_only_rank_0_has_the_result(tmp_path):
    port = free_port()
    progress: list[SweepProgress] = []
    logs: list[str] = []
    results: dict[int, SweepRunResult | None | BaseException] = {}

    def rank(r: int) -> None:
        req = SweepRequest(
            transport="tcp",
            sizes="64K",
            duration_s=0.2,
            timeout_s=5.0,
            save=tmp_path / "sweep.json",
            environ=slurm_env(r, 2, port),
            on_progress=progress.append,
            on_log=logs.append,
        )
        try:
            results[r] = command.run(req)
        except BaseException as e:  # handed to the test's thread
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    lead, other = results[0], results[1]
    assert other is None, other
    assert isinstance(lead, SweepRunResult), lead
    assert lead.report.command == "sweep" and lead.saved_to == tmp_path / "sweep.json"
    assert [n.rank for n in lead.sweep.nodes] == [0, 1]
    pairs = {(p.a, p.b) for p in lead.sweep.pairs}
    assert pairs == {(0, 1)} and all(p.bw_gbs and p.bw_gbs > 0 for p in lead.sweep.pairs)
    assert lead.report.data["sweep"]["transport"] == "tcp"
    # progress is rank 0's alone, one per round, in order
    assert progress and [p.done.round for p in progress] == sorted(p.done.round for p in progress)
    assert progress[0].line().startswith("sweep: round 1/")
    assert all(line.startswith(("rank 0: ", "rank 1: ")) for line in logs)
    # nothing was written: the writer (the command line) writes --save from the result
    assert not (tmp_path / "sweep.json").exists()
    out = views.outputs(lead)
    assert out.line is not None and out.line().startswith("sweep ")
    assert out.csv is not None and len(out.csv()[1]) == len(lead.sweep.pairs)
