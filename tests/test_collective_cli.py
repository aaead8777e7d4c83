"""``ibdiag bench collective`` option checks and error paths that need no process group (fast)."""

from __future__ import annotations

import subprocess
import sys

import pytest

NO_LAUNCHER = {k: "" for k in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_STEPID", "IBDIAG_COLLECTIVE_REPORT_DIR")}


def test_without_launcher_or_nproc_says_what_to_do(cli):
    res = cli("bench", "collective", env=NO_LAUNCHER)
    assert res.exit_code == 2 and res.exception is None
    assert "no ranks to run" in res.stderr and "--nproc 4" in res.stderr


def test_nproc_under_torchrun_is_refused(cli):
    env = {**NO_LAUNCHER, "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
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
    res = cli("bench", "collective", "--nproc", "2", *args, env=NO_LAUNCHER) if "--nproc" not in args else cli("bench", "collective", *args, env=NO_LAUNCHER)
    assert res.exit_code == 2 and res.exception is None
    assert message in res.stderr


def test_unwritable_save_is_refused_before_running(cli, tmp_path):
    res = cli("bench", "collective", "--nproc", "2", "--save", tmp_path / "missing" / "run.json", env=NO_LAUNCHER)
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
    env = {**NO_LAUNCHER, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29998"}
    res = cli("bench", "collective", "--backend", "nccl", env=env)
    assert res.exit_code == 3 and "no CUDA GPU" in res.stderr and "--backend gloo" in res.stderr


def test_sizes_too_small_for_every_rank(cli):
    pytest.importorskip("torch")
    env = {**NO_LAUNCHER, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29997"}
    res = cli("bench", "collective", "--backend", "gloo", "--dtype", "bfloat16", "--sizes", "1", env=env)
    assert res.exit_code == 2 and "no size in --sizes holds an element" in res.stderr


def test_help_imports_no_heavy_module():
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom ibdiag.cli import app\n"
        "for args in (['bench', 'collective', '--help'], ['bench', 'import', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0\n"
        "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'pyverbs') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
