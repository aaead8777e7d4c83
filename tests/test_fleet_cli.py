"""``ibdiag sweep`` on the command line: --plan works, running says "not supported" (exit 3), bad options exit 2."""

from __future__ import annotations

import json

import pytest


def test_running_a_sweep_is_not_supported_yet(cli):
    res = cli("sweep")
    assert res.exit_code == 3
    assert "ibdiag: error: ibdiag sweep cannot run sweeps yet" in res.stderr and "hint: plan one with `ibdiag sweep --plan" in res.stderr
    assert res.stdout == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rounds", "3"], "--rounds is for --pattern random"),
        (["--transport", "ib"], "--transport 'ib'"),
        (["--sizes", "huge"], "cannot read --sizes"),
        (["--timeout", "0"], "--timeout 0"),
        (["--rails", "mlx5_0,mlx5 1"], "give adapter names"),
        (["--rails", "mlx5_0,mlx5_0"], "names an adapter twice"),
        (["--nodes", "8"], "--nodes and --pair-seconds are for --plan"),
        (["--plan", "--nodes", "8", "-o", "prom"], "--plan prints a table or JSON"),
        (["--plan", "--nodes", "1"], "at least 2 nodes"),
        (["--plan"], "--plan needs a node count"),
        (["--pattern", "star"], "Invalid value"),
    ],
)
def test_bad_options_are_usage_errors_before_anything_runs(cli, args, message):
    res = cli("sweep", *args, env={"RANK": "", "WORLD_SIZE": "", "SLURM_PROCID": "", "OMPI_COMM_WORLD_RANK": "", "PMI_RANK": ""})
    assert res.exit_code == 2, res.stderr
    assert message in res.stderr


def test_plan_prints_the_schedule_and_every_patterns_cost(cli):
    res = cli("sweep", "--plan", "--nodes", "1024", "--rails", ",".join(f"mlx5_{k}" for k in range(8)))
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "plan: ring, 1024 nodes x 8 rails: 2 rounds, 1024 pair tests (8192 rail tests)" in out
    assert "round 1: 0-1 2-3 4-5" in out and "(512 pairs)" in out
    assert "(2 + 2) rounds x (2 s per pair test + 0.5 s per round) = 10 s" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and line.split()[0] in ("ring", "pairwise", "random")}
    assert rows["pairwise"][1:3] == ["1025", "523776"] and rows["pairwise"][3:] == ["42.7", "min"]


def test_plan_json_lists_the_rounds_and_takes_the_world_size_from_the_launcher(cli):
    env = {"RANK": "0", "WORLD_SIZE": "6", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "head"}
    res = cli("sweep", "--plan", "--pattern", "random", "--rounds", "3", "--seed", "5", "-o", "json", env=env)
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "ibdiag.sweep-plan/1"
    assert doc["plan"]["nodes"] == 6 and doc["plan"]["rounds"] == 3 and doc["plan"]["seed"] == 5
    assert len(doc["rounds"]) == 3 and all(len(r) == 3 for r in doc["rounds"])
    again = json.loads(cli("sweep", "--plan", "--pattern", "random", "--rounds", "3", "--seed", "5", "-o", "json", env=env).stdout)
    assert again["rounds"] == doc["rounds"]  # every rank plans the same pairs
    big = json.loads(cli("sweep", "--plan", "--nodes", "16384", "--pattern", "pairwise", "-o", "json").stdout)
    assert big["rounds"] is None and len(big["first_rounds"]) == 3 and big["plan"]["pairs"] == 16384 * 16383 // 2
