"""``ibdiag bench collective`` option checks and error paths that need no process group (fast)."""

from __future__ import annotations

import subprocess
import sys

import pytest

NO_LAUNCHER = {
    k: ""
    for k in (
        "RANK",
        "WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK",
        "PMI_SIZE",
        "SLURM_PROCID",
        "SLURM_STEP_ID",
        "SLURM_STEPID",
        "IBDIAG_COLLECTIVE_REPORT_DIR",
    )
}


def test_without_launcher_or_nproc_says_what_to_do(cli):
    res = cli("bench", "collective", env=NO_LAUNCHER)
    assert res.exit_code == 2 and res.exception is None
    assert "no ranks to run" in res.stderr and "--nproc 4" in res.stderr


def test_nproc_under_torchrun_is_refused(cli):
    env = {
        **NO_LAUNCHER,
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
    }
    res = cli("bench", "collective", "--nproc", "2", env=env)
    assert res.exit_code == 2 and "already rank 0 of a torchrun job of 2" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--op", "allscatter"], "unknown collective"),
        (["--dtype", "int7"], "unknown data type"),
        (["--sizes", "1M:1K"], "ends below its start"),
        (["--sizes", "4X"], "cannot read --sizes"),
        (["--sizes", "2P"], "absurdly large"),
        (["--iters", "0"], "--iters 0"),
        (["--warmup", "-1"], "--warmup -1"),
        (["--timeout", "0"], "--timeout 0"),
        (["--nproc", "0"], "--nproc 0"),
        (["--backend", "mpi"], "Invalid value"),
    ],
)
def test_bad_options_are_usage_errors(cli, args, message):
    res = (
        cli("bench", "collective", "--nproc", "2", *args, env=NO_LAUNCHER)
        if "--nproc" not in args
        else cli("bench", "collective", *args, env=NO_LAUNCHER)
    )
    assert res.exit_code == 2 and res.exception is None
    assert message in res.stderr


def test_unwritable_save_is_refused_before_running(cli, tmp_path):
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "2",
        "--save",
        tmp_path / "missing" / "run.json",
        env=NO_LAUNCHER,
    )
    assert res.exit_code == 2 and "does not exist" in res.stderr


def test_bad_config_is_refused(cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[collective]\nstraggler_share = 0\n")
    res = cli("bench", "collective", "--nproc", "2", "--config", cfg, env=NO_LAUNCHER)
    assert res.exit_code == 2 and "straggler_share" in res.stderr


def test_nccl_without_a_gpu_cannot_run(cli):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = {
        **NO_LAUNCHER,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29998",
    }
    res = cli("bench", "collective", "--backend", "nccl", env=env)
    assert res.exit_code == 3 and "no CUDA GPU" in res.stderr and "--backend gloo" in res.stderr


def test_sizes_too_small_for_every_rank(cli):
    pytest.importorskip("torch")
    env = {
        **NO_LAUNCHER,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29997",
    }
    res = cli(
        "bench", "collective", "--backend", "gloo", "--dtype", "bfloat16", "--sizes", "1", env=env
    )
    assert res.exit_code == 2 and "no size in --sizes holds an element" in res.stderr


def test_help_imports_no_heavy_module():
    code = (
        "import contextlib, io, sys\nfrom ibdiag.cli.main import main\n"
        "for args in (['bench', 'collective', '--help'], ['bench', 'import', '--help']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main(args) == 0\n"
        "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'pyverbs') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_rank_job_travels_as_json_not_as_a_rebuilt_command_line():
    from ibdiag.bench.collective.spec import JOB_ENV, RankJob, RunSpec
    from ibdiag.bench.results.collective_config import CollectiveConfig

    job = RankJob(
        RunSpec(
            "all_gather",
            "gloo",
            "bfloat16",
            (1024, 1 << 20),
            iters=3,
            warmup=0,
            blocking=True,
            check=False,
            timeout_s=7.5,
        ),
        CollectiveConfig(straggler_share=0.3, min_busbw_gbs=12.0),
    )
    assert RankJob.from_env({JOB_ENV: job.to_env()}) == job


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (None, "is not set"),
        ("{", "not a valid job"),
        ('{"spec": {"op": "all_reduce"}, "config": {}}', "not a valid job"),
        (
            '{"spec": {"op": "all_reduce", "backend": "gloo", "dtype": "float32", "sizes": [8], "iters": 0}, "config": {}}',
            "--iters 0",
        ),
    ],
)
def test_a_bad_rank_job_is_an_input_error(value, needle):
    from ibdiag.bench.collective.spec import JOB_ENV, RankJob
    from ibdiag.errors import InputError

    with pytest.raises(InputError) as e:
        RankJob.from_env({} if value is None else {JOB_ENV: value})
    assert needle in e.value.message and JOB_ENV in e.value.message


def test_a_supervised_rank_with_a_bad_job_reports_it_to_the_supervisor(cli, tmp_path):
    import json

    env = {
        **NO_LAUNCHER,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29996",
        "IBDIAG_COLLECTIVE_REPORT_DIR": str(tmp_path),
        "IBDIAG_COLLECTIVE_JOB": "[]",
    }
    res = cli("bench", "collective", env=env)
    assert res.exit_code == 2 and "IBDIAG_COLLECTIVE_JOB: not a valid job" in res.stderr
    doc = json.loads((tmp_path / "error.rank0.json").read_text())
    assert doc["status"] == 2 and "not a valid job" in doc["message"]
