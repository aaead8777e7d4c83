"""``ibdiag sweep`` on the command line: --plan, [sweep] config, and the errors before anything runs.

The sweep running across real processes and namespaces is tests/sweep/test_netns.py.
"""

from __future__ import annotations

import json

import pytest

NO_LAUNCHER = {
    "RANK": "",
    "WORLD_SIZE": "",
    "SLURM_PROCID": "",
    "OMPI_COMM_WORLD_RANK": "",
    "PMI_RANK": "",
}


def test_running_without_a_launcher_is_a_usage_error_that_says_how_to_launch(cli):
    res = cli("sweep", env=NO_LAUNCHER)
    assert res.exit_code == 2
    assert "ibdiag sweep runs as one process per node under the cluster's launcher" in res.stderr
    assert "hint: srun -N 4 --ntasks-per-node 1 ibdiag sweep" in res.stderr
    assert res.stdout == ""


def test_a_one_rank_job_is_not_a_sweep(cli):
    res = cli(
        "sweep",
        "--transport",
        "tcp",
        env={**NO_LAUNCHER, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
    )
    assert res.exit_code == 2
    assert "a sweep needs at least 2 nodes; this job has 1 rank" in res.stderr


def test_test_collective_measures_bandwidth_only(cli):
    res = cli("sweep", "--test", "collective", "--mode", "lat", env=NO_LAUNCHER)
    assert res.exit_code == 2
    assert "--test collective measures bandwidth only, not --mode lat" in res.stderr


def test_sweep_config_gives_defaults_and_is_checked(cli, tmp_path):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text('[sweep]\npattern = "pairwise"\nduration_s = 2\n')
    res = cli("sweep", "--plan", "--nodes", "8", "--config", cfg, "-o", "json", env=NO_LAUNCHER)
    assert res.exit_code == 0, res.stderr
    plan = json.loads(res.stdout)["plan"]
    assert plan["pattern"] == "pairwise" and plan["pair_s"] == 3.0  # duration 2 s + 1 s of set-up
    assert (
        json.loads(
            cli(
                "sweep",
                "--plan",
                "--nodes",
                "8",
                "--config",
                cfg,
                "--pattern",
                "ring",
                "-o",
                "json",
            ).stdout
        )["plan"]["pattern"]
        == "ring"
    )
    for text, message in (
        (
            '[sweep]\npattern = "star"\n',
            "config [sweep] pattern 'star' is not one of ring, pairwise, random",
        ),
        ("[sweep]\ntimeout_s = 0\n", "[sweep] timeout_s = 0 must be above 0"),
        ("[sweep]\nz_limit = 0.1\n", "[sweep] z_limit = 0.1 must be at least 0.5"),
        ("[sweep]\nconfirm_partners = 1.5\n", "confirm_partners must be a whole number"),
        ("[sweep]\nzlimit = 3\n", "unknown key zlimit"),
        ('[sweep]\nsizes = "lots"\n', "cannot read config [sweep] sizes"),
    ):
        cfg.write_text(text)
        res = cli("sweep", "--plan", "--nodes", "8", "--config", cfg, env=NO_LAUNCHER)
        assert res.exit_code == 2 and message in res.stderr, (text, res.stderr)


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
    res = cli("sweep", *args, env=NO_LAUNCHER)
    assert res.exit_code == 2, res.stderr
    assert message in res.stderr


def test_plan_prints_the_schedule_and_every_patterns_cost(cli):
    res = cli(
        "sweep", "--plan", "--nodes", "1024", "--rails", ",".join(f"mlx5_{k}" for k in range(8))
    )
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "plan: ring, 1024 nodes x 8 rails: 2 rounds, 1024 pair tests (8192 rail tests)" in out
    assert "round 1: 0-1 2-3 4-5" in out and "(512 pairs)" in out
    # the coordination per round as measured (benchmarks/sweep_store.py): 0.32 s poll + rank 0 reading
    # 1024 reports of 8 rails (60 us + 8 x 50 us each)
    assert "(2 + 2) rounds x (2 s per pair test + 0.79 s per round) = 11 s" in out
    assert "collisions: no fabric given" in out
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split() and line.split()[0] in ("ring", "pairwise", "random")
    }
    assert rows["pairwise"][1:3] == ["1025", "523776"] and rows["pairwise"][3:] == ["47.7", "min"]


def test_plan_json_lists_the_rounds_and_takes_the_world_size_from_the_launcher(cli):
    env = {
        "RANK": "0",
        "WORLD_SIZE": "6",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "head",
    }
    res = cli(
        "sweep",
        "--plan",
        "--pattern",
        "random",
        "--rounds",
        "3",
        "--seed",
        "5",
        "-o",
        "json",
        env=env,
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "ibdiag.sweep-plan/1"
    assert doc["plan"]["nodes"] == 6 and doc["plan"]["rounds"] == 3 and doc["plan"]["seed"] == 5
    assert len(doc["rounds"]) == 3 and all(len(r) == 3 for r in doc["rounds"])
    again = json.loads(
        cli(
            "sweep",
            "--plan",
            "--pattern",
            "random",
            "--rounds",
            "3",
            "--seed",
            "5",
            "-o",
            "json",
            env=env,
        ).stdout
    )
    assert again["rounds"] == doc["rounds"]  # every rank plans the same pairs
    big = json.loads(
        cli("sweep", "--plan", "--nodes", "16384", "--pattern", "pairwise", "-o", "json").stdout
    )
    assert (
        big["rounds"] is None
        and len(big["first_rounds"]) == 3
        and big["plan"]["pairs"] == 16384 * 16383 // 2
    )


def test_a_sweep_without_torch_says_it_needs_it(cli, monkeypatch):
    """Issue 38: after a plain install `srun ... ibdiag sweep` failed naming `bench collective`. Without
    torch (blocked from importing here) the sweep says it needs torch.distributed, and where to get it."""
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29599"}
    res = cli("sweep", "--timeout", "2", env=env)
    assert res.exit_code == 3, res.stderr
    assert "ibdiag sweep runs its collectives through it" in res.stderr
    assert "bench collective" not in res.stderr
    assert "pip install 'ibdiag[collective]'" in res.stderr
